// The fixture of the communicator tests: a coordinator in this process, peers as threads
// (Communicator objects) or as processes (the member helper, driven through its stdin).
#pragma once

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <set>
#include <thread>

#include "comm/communicator.h"
#include "coord/coordinator.h"
#include "support.h"

extern char **environ;

namespace wccl::comm {

using namespace std::chrono_literals;
using test::make_config;
using Clock = std::chrono::steady_clock;

// Whether `holds` becomes true within `within`, asked every 10 ms: for a state that another
// process or thread reaches in its own time, where no event of the API says when.
template <typename Predicate>
bool eventually(Predicate holds, std::chrono::milliseconds within) {
  const auto deadline = Clock::now() + within;
  while (!holds()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// An F32 all-reduce of count elements.
inline algo::Collective allreduce(const void *in, void *out, size_t count,
                                  algo::Algo a = algo::Algo::kAuto) {
  algo::Collective c;
  c.kind = algo::Kind::kAllreduce;
  c.count = count;
  c.in = in;
  c.out = out;
  c.algo = a;
  return c;
}

// Submits c on comm and waits for its outcome.
inline Status run_op(Communicator *comm, const algo::Collective &c, OpStats *stats = nullptr) {
  auto op = comm->submit(c, 0ms);
  if (!op.ok()) return op.status();
  return comm->wait(op.value(), stats);
}

inline std::vector<Communicator *> raw(const std::vector<std::unique_ptr<Communicator>> &v) {
  std::vector<Communicator *> out;
  for (auto &c : v) out.push_back(c.get());
  return out;
}

class CommTest : public testing::Test {
 public:
  // A silent peer is lost after this long. 800 ms once declared an in-process member lost that a
  // loaded CI machine (two cores) had not scheduled in time, mid-test; frozen peers are still found
  // within a few seconds.
  static constexpr std::chrono::milliseconds kPeerTimeout{2000};

 protected:
  void SetUp() override {
    coord_files_ = pki_.node("coordinator");
    start_coordinator("127.0.0.1:0");
  }
  void start_coordinator(const std::string &listen) {
    Config cfg = make_config("coordinator", &coord_files_);
    ASSERT_TRUE(cfg.set("listen", listen).ok());
    ASSERT_TRUE(cfg.set("settle_ms", "150").ok());
    ASSERT_TRUE(cfg.set("heartbeat_ms", "100").ok());
    ASSERT_TRUE(cfg.set("peer_timeout_ms", std::to_string(kPeerTimeout.count())).ok());
    ASSERT_TRUE(cfg.set("min_peers", std::to_string(min_peers_)).ok());
    auto c = coord::Coordinator::start(cfg);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    coord_ = std::move(c).value();
    port_ = coord_->port();
  }
  Config peer_config(const std::string &name, const std::string &group = "g") {
    auto files = pki_.node(name);
    Config cfg = make_config(name, &files);
    EXPECT_TRUE(cfg.set("coordinator", "127.0.0.1:" + std::to_string(port_)).ok());
    EXPECT_TRUE(cfg.set("listen", "127.0.0.1:0").ok());
    EXPECT_TRUE(cfg.set("group", group).ok());
    EXPECT_TRUE(cfg.set("heartbeat_ms", "100").ok());
    EXPECT_TRUE(cfg.set("join_timeout_ms", "20000").ok());
    EXPECT_TRUE(cfg.set("op_timeout_ms", "20000").ok());
    for (const auto &[key, value] : extra_config_) EXPECT_TRUE(cfg.set(key, value).ok()) << key;
    return cfg;
  }
  // A coordinator of its own whose first epoch forms with n members, and those n members.
  std::vector<std::unique_ptr<Communicator>> group_of(int n) {
    min_peers_ = n;
    coord_.reset();
    start_coordinator("127.0.0.1:0");
    return join_all(n);
  }
  // n communicators joining at once (they form one epoch when min_peers allows).
  std::vector<std::unique_ptr<Communicator>> join_all(int n, int first = 0) {
    std::vector<std::future<Result<std::unique_ptr<Communicator>>>> joining;
    for (int i = 0; i < n; ++i) {
      Config cfg = peer_config("peer" + std::to_string(first + i));
      joining.push_back(std::async(std::launch::async, [cfg] { return Communicator::join(cfg); }));
    }
    std::vector<std::unique_ptr<Communicator>> out;
    for (auto &j : joining) {
      auto c = j.get();
      EXPECT_TRUE(c.ok()) << c.status().to_string();
      if (c.ok()) out.push_back(std::move(c).value());
    }
    return out;
  }

 public:
  static std::vector<Status> update_all(std::vector<Communicator *> comms) {
    std::vector<std::future<Status>> f;
    for (Communicator *c : comms)
      f.push_back(std::async(std::launch::async, [c] { return c->update(); }));
    std::vector<Status> out;
    for (auto &x : f) out.push_back(x.get());
    return out;
  }
  // Every member agrees on (epoch, size), ranks are 0..n-1, and each ring link carries a message
  // from a rank to the next.
  static void expect_agreed_ring(const std::vector<Communicator *> &comms, uint64_t epoch) {
    std::set<int> ranks;
    for (Communicator *c : comms) {
      EXPECT_EQ(c->epoch(), epoch);
      EXPECT_EQ(c->size(), static_cast<int>(comms.size()));
      ranks.insert(c->rank());
    }
    EXPECT_EQ(ranks.size(), comms.size());
    EXPECT_EQ(*ranks.begin(), 0);
    if (comms.size() < 2) return;
    std::vector<Communicator *> by_rank(comms.size());
    for (Communicator *c : comms) by_rank[static_cast<size_t>(c->rank())] = c;
    const int n = static_cast<int>(by_rank.size());
    for (int r = 0; r < n; ++r) {
      std::map<int, std::shared_ptr<net::Link>> mine, theirs;
      const int next_rank = (r + 1) % n;
      ASSERT_TRUE(by_rank[static_cast<size_t>(r)]->links(10s, &mine).ok());
      ASSERT_TRUE(by_rank[static_cast<size_t>(next_rank)]->links(10s, &theirs).ok());
      ASSERT_EQ(mine.count(next_rank), 1u);
      ASSERT_EQ(theirs.count(r), 1u);
      std::shared_ptr<net::Link> next = mine[next_rank], prev_of_next = theirs[r];
      uint64_t sent = epoch * 1000 + r, got = 0;
      ASSERT_TRUE(net::send_sync(*next, {epoch, 1, static_cast<uint32_t>(r)}, &sent, 8, 10s).ok());
      ASSERT_TRUE(
          net::recv_sync(*prev_of_next, {epoch, 1, static_cast<uint32_t>(r)}, &got, 8, 10s).ok());
      EXPECT_EQ(got, sent) << "rank " << r << " to rank " << next_rank;
    }
  }

 protected:
  std::vector<std::string> daemon_flags(const std::string &listen) {
    return {"--listen",          listen,
            "--tls-cert",        coord_files_.cert,
            "--tls-key",         coord_files_.key,
            "--tls-ca",          coord_files_.ca,
            "--min-peers",       "2",
            "--settle-ms",       "150",
            "--heartbeat-ms",    "100",
            "--peer-timeout-ms", std::to_string(kPeerTimeout.count())};
  }
  int min_peers_ = 1;
  std::map<std::string, std::string> extra_config_;  // more keys for every peer_config
  test::Pki pki_;
  devkit::NodeFiles coord_files_;
  std::unique_ptr<coord::Coordinator> coord_;
  int port_ = 0;
};

// What a training loop does while the coordinator is away: retry update with a pause.
inline Status update_until_reconnected(Communicator *c) {
  Status st;
  const auto deadline = Clock::now() + 15s;
  do {
    st = c->update();
    if (st.code() == WCCL_ERR_COORDINATOR_UNREACHABLE) std::this_thread::sleep_for(100ms);
  } while (st.code() == WCCL_ERR_COORDINATOR_UNREACHABLE && Clock::now() < deadline);
  return st;
}

class CommFourTest : public CommTest {
 protected:
  void SetUp() override {
    min_peers_ = 4;
    CommTest::SetUp();
  }
};

// A member in another process, killed or frozen while the others wait.
class MemberProcess {
 public:
  explicit MemberProcess(int port, const devkit::NodeFiles &files,
                         const std::string &name = "victim") {
    const char *bin = std::getenv("WCCL_TEST_MEMBER");
    if (bin == nullptr) {
      ADD_FAILURE() << "WCCL_TEST_MEMBER is not set; run through meson test";
      return;
    }
    spawn(bin, {},
          {"WCCL_COORDINATOR=127.0.0.1:" + std::to_string(port), "WCCL_LISTEN=127.0.0.1:0",
           "WCCL_GROUP=g", "WCCL_NAME=" + name, "WCCL_HEARTBEAT_MS=100",
           "WCCL_TLS_CERT=" + files.cert, "WCCL_TLS_KEY=" + files.key, "WCCL_TLS_CA=" + files.ca});
  }
  // Any program (bin, with args), with `env` before this process's environment.
  MemberProcess(const std::string &bin, const std::vector<std::string> &args,
                const std::vector<std::string> &env) {
    spawn(bin, args, env);
  }

  ~MemberProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(stdin_);
    close(stdout_);
  }
  // Sends one command line to the helper (see member_helper.c).
  void command(const std::string &line) {
    const std::string l = line + "\n";
    EXPECT_EQ(write(stdin_, l.data(), l.size()), static_cast<ssize_t>(l.size()));
  }
  // Its next output line ("joined ...", or a command's answer), or "" if none within the timeout.
  std::string line(std::chrono::milliseconds timeout) {
    std::string line;
    pollfd pfd{stdout_, POLLIN, 0};
    char c = 0;
    const auto deadline = Clock::now() + timeout;
    while (line.find('\n') == std::string::npos) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0 || poll(&pfd, 1, static_cast<int>(left)) != 1 || read(stdout_, &c, 1) != 1)
        break;
      line += c;
    }
    return line;
  }
  void signal(int sig) { kill(pid_, sig); }
  // Waits for the process to end: its exit status (128 + the signal that ended it).
  int wait() {
    int status = 0;
    if (pid_ <= 0 || waitpid(pid_, &status, 0) != pid_) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  void spawn(const std::string &bin, const std::vector<std::string> &args,
             std::vector<std::string> env) {
    for (char **e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    std::vector<char *> envp;
    for (auto &s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    int in[2], out[2];
    EXPECT_EQ(pipe(in), 0);
    EXPECT_EQ(pipe(out), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, in[1]);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    std::vector<std::string> words = {bin};
    words.insert(words.end(), args.begin(), args.end());
    std::vector<char *> argv;
    for (auto &w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, bin.c_str(), &actions, nullptr, argv.data(), envp.data()), 0);
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }

  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1;
};

}  // namespace wccl::comm
