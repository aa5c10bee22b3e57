// gloo-allreduce: fp32 SUM all-reduce with Gloo over TCP on 127.0.0.1, for comparison with wccl.
//
//   gloo-allreduce --local N [--algo ring_chunked|halving_doubling] [--timeout-s S] [sweep flags]
//   gloo-allreduce --rank R --size N --store DIR [--host IP] [--algo A] [--timeout-s S]
//                  [sweep flags]
//
// With --local, the program forks N ranks itself. They meet through a gloo::rendezvous::FileStore
// in a fresh temporary directory and connect a full mesh of TCP pairs (gloo::transport::tcp)
// bound to 127.0.0.1. The parent only waits: it fails if any rank fails, kills the other ranks
// then, and kills them all if the run takes longer than --timeout-s. With --rank, the program is
// that one rank of N, bound to --host, meeting the others through the FileStore in DIR (a
// directory they all see: bench/wan/wan_perf.py runs one per emulated host). The measurement is
// in ../perf/sweep.cc.
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "perf/sweep.h"

namespace {

constexpr char kProg[] = "gloo-allreduce";

struct Flags {
  sweep::Options opt;
  int local = 0;
  int rank = -1, size = 0;  // --rank, --size: one rank of a job started elsewhere
  std::string store, host = "127.0.0.1";
  std::string algo = "ring_chunked";
  int timeout_s = 600;
};

void Usage(FILE *out) {
  std::fprintf(out,
               "usage: %s --local N [options]\n"
               "  --local N     fork N ranks on this machine\n"
               "  --rank R --size N --store DIR [--host IP]\n"
               "                or be rank R of N, meeting the others in DIR, bound to IP (default "
               "127.0.0.1)\n"
               "  --algo A      ring_chunked (default) or halving_doubling\n"
               "  --timeout-s S kill the ranks and fail after S seconds (default 600)\n"
               "%s",
               kProg, sweep::kCommonUsage);
}

// Returns 0 to run, 1 after --help, 2 on a bad command line.
int ParseFlags(int argc, char **argv, Flags *flags) {
  for (int i = 1; i < argc; ++i) {
    std::string error;
    const int common = sweep::ParseCommonFlag(argc, argv, &i, &flags->opt, &error);
    if (common == 1) continue;
    const std::string flag = argv[i];
    if (common == 0 && flag == "--help") {
      Usage(stdout);
      return 1;
    }
    if (common == 0 &&
        (flag == "--local" || flag == "--algo" || flag == "--timeout-s" || flag == "--rank" ||
         flag == "--size" || flag == "--store" || flag == "--host")) {
      if (i + 1 >= argc) {
        error = flag + " needs a value";
      } else {
        const std::string value = argv[++i];
        bool ok = true;
        if (flag == "--local") {
          ok = sweep::ParseInt(value, &flags->local);
        } else if (flag == "--timeout-s") {
          ok = sweep::ParseInt(value, &flags->timeout_s);
        } else if (flag == "--rank") {
          ok = sweep::ParseInt(value, &flags->rank);
        } else if (flag == "--size") {
          ok = sweep::ParseInt(value, &flags->size);
        } else if (flag == "--store") {
          flags->store = value;
        } else if (flag == "--host") {
          flags->host = value;
        } else {
          flags->algo = value;
        }
        if (!ok) error = "bad value for " + flag + ": '" + value + "'";
      }
    } else if (common == 0) {
      error = "unknown flag '" + flag + "'";
    }
    if (!error.empty()) {
      std::fprintf(stderr, "%s: %s\n", kProg, error.c_str());
      Usage(stderr);
      return 2;
    }
  }
  std::string error = sweep::ValidateOptions(flags->opt, INT_MAX);
  const bool one_rank = flags->rank >= 0 && flags->rank < flags->size && !flags->store.empty();
  if ((flags->local >= 1) == one_rank)
    error = "give --local N, or --rank R --size N --store DIR (R < N)";
  if (flags->algo != "ring_chunked" && flags->algo != "halving_doubling") {
    error = "--algo must be ring_chunked or halving_doubling";
  }
  if (flags->timeout_s < 1) error = "--timeout-s must be at least 1";
  if (!error.empty()) {
    std::fprintf(stderr, "%s: %s\n", kProg, error.c_str());
    return 2;
  }
  return 0;
}

class GlooCollective : public sweep::Collective {
 public:
  GlooCollective(std::shared_ptr<gloo::Context> context, std::string algo)
      : context_(std::move(context)), algo_(std::move(algo)) {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }

  // Gloo's algorithm objects are bound to their buffers at construction (they register them with
  // the pairs and allocate their inboxes), so one is built per size, outside the timed region.
  void Bind(void *buf, size_t count, const sweep::Case & /*f32 sum*/) override {
    algorithm_.reset();  // free the previous inboxes before allocating new ones
    const std::vector<float *> ptrs = {static_cast<float *>(buf)};
    const int n = static_cast<int>(count);  // ValidateOptions keeps count within an int
    if (algo_ == "ring_chunked") {
      algorithm_ = std::make_unique<gloo::AllreduceRingChunked<float>>(context_, ptrs, n);
    } else {
      algorithm_ = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(context_, ptrs, n);
    }
  }
  void Unbind() override { algorithm_.reset(); }

  void AllReduce() override { algorithm_->run(); }

  void Barrier() override { gloo::BarrierAllToAll(context_).run(); }

  double MaxOverRanks(double value) override {
    gloo::AllreduceRing<double>(context_, {&value}, 1, gloo::ReductionFunction<double>::max).run();
    return value;
  }

  int64_t SumOverRanks(int64_t value) override {
    gloo::AllreduceRing<int64_t>(context_, {&value}, 1).run();
    return value;
  }

  std::string Algorithm() const override { return algo_; }

 private:
  std::shared_ptr<gloo::Context> context_;
  std::string algo_;
  std::unique_ptr<gloo::Algorithm> algorithm_;
};

// One rank, in a child process. Returns its exit status.
int RunRank(const Flags &flags, int rank, int size, const std::string &store_dir) {
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = flags.host;
    attr.ai_family = AF_INET;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    // Gloo's default is 30 s per operation; the parent's --timeout-s bounds the whole run instead.
    context->setTimeout(std::chrono::seconds(flags.timeout_s));
    gloo::rendezvous::FileStore store(store_dir);
    context->connectFullMesh(store, device);

    GlooCollective coll(context, flags.algo);
    sweep::RunSweep(flags.opt, {sweep::Case{}}, sweep::Run{"gloo-" + flags.algo, false}, &coll);

    // Exit barrier through the store, not through Gloo: a rank that leaves closes its sockets, and
    // a peer still inside its last collective (even a Gloo barrier, which the leaving rank may
    // finish first) then fails with "Connection closed by peer". Once a rank has set its key it
    // makes no more Gloo calls, so closing sockets after everyone's key is there is harmless.
    store.set("exit_" + std::to_string(rank), {'1'});
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back("exit_" + std::to_string(r));
    store.wait(keys, std::chrono::seconds(flags.timeout_s));
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: rank %d: %s\n", kProg, rank, e.what());
    return 1;
  }
}

volatile sig_atomic_t g_stop_signal = 0;

void OnStopSignal(int sig) { g_stop_signal = sig; }

void KillAll(const std::vector<pid_t> &pids, const std::vector<bool> &done) {
  for (size_t r = 0; r < pids.size(); ++r) {
    if (!done[r]) kill(pids[r], SIGKILL);
  }
}

std::string DescribeStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "stopped with wait status " + std::to_string(status);
}

// Reaps every rank. The first rank to fail, the deadline, or SIGINT/SIGTERM to this process
// makes it SIGKILL the ranks still running; waiting for SIGKILLed children is then bounded.
// Returns the program's exit status.
int WaitForRanks(const std::vector<pid_t> &pids, int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  std::vector<bool> done(pids.size(), false);
  size_t running = pids.size();
  bool killed = false;
  int rc = 0;
  while (running > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "%s: waitpid: %s\n", kProg, std::strerror(errno));
      return 1;
    }
    if (pid == 0) {
      if (!killed && g_stop_signal != 0) {
        std::fprintf(stderr, "%s: got signal %d; killing the ranks\n", kProg, g_stop_signal);
        KillAll(pids, done);
        killed = true;
        rc = 128 + g_stop_signal;
      } else if (!killed && std::chrono::steady_clock::now() >= deadline) {
        std::fprintf(stderr,
                     "%s: timed out after %d s (--timeout-s); killing %zu running rank(s)\n", kProg,
                     timeout_s, running);
        KillAll(pids, done);
        killed = true;
        rc = 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    size_t r = 0;
    while (r < pids.size() && pids[r] != pid) ++r;
    if (r == pids.size()) continue;  // not one of ours
    done[r] = true;
    --running;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && !killed) {
      std::fprintf(stderr, "%s: rank %zu (pid %d) %s; killing the other ranks\n", kProg, r,
                   static_cast<int>(pid), DescribeStatus(status).c_str());
      KillAll(pids, done);
      killed = true;
      rc = 1;
    }
  }
  return rc;
}

int RunLocal(const Flags &flags) {
  const char *tmp = std::getenv("TMPDIR");
  std::string dir_template =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/" + kProg + ".XXXXXX";
  std::vector<char> dir(dir_template.begin(), dir_template.end());
  dir.push_back('\0');
  if (mkdtemp(dir.data()) == nullptr) {
    std::fprintf(stderr, "%s: mkdtemp %s: %s\n", kProg, dir_template.c_str(), std::strerror(errno));
    return 1;
  }
  const std::string store_dir = dir.data();

  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  std::fflush(stdout);  // nothing buffered may be written twice by the children
  std::fflush(stderr);
  const pid_t parent = getpid();
  std::vector<pid_t> pids;
  int rc = 0;
  for (int rank = 0; rank < flags.local; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::fprintf(stderr, "%s: fork: %s\n", kProg, std::strerror(errno));
      for (pid_t p : pids) kill(p, SIGKILL);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      rc = 1;
      break;
    }
    if (pid == 0) {
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      // A rank must not outlive the parent that bounds its run time.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      const int status = RunRank(flags, rank, flags.local, store_dir);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(status);  // not exit(): the parent's atexit handlers and statics are not ours to run
    }
    pids.push_back(pid);
  }
  if (rc == 0) rc = WaitForRanks(pids, flags.timeout_s);

  std::error_code ec;
  std::filesystem::remove_all(store_dir, ec);
  if (ec) {
    std::fprintf(stderr, "%s: removing %s: %s\n", kProg, store_dir.c_str(), ec.message().c_str());
  }
  return rc;
}

}  // namespace

int main(int argc, char **argv) {
  Flags flags;
  const int parsed = ParseFlags(argc, argv, &flags);
  if (parsed != 0) return parsed == 1 ? 0 : 2;
  return flags.local >= 1 ? RunLocal(flags) : RunRank(flags, flags.rank, flags.size, flags.store);
}
