// wccl-perf: the all-reduce benchmark in the style of nccl-tests (DESIGN §8).
//
//   wccl-perf --local N [flags]              a coordinator and N peers on 127.0.0.1, started here,
//                                            with TLS through throwaway certificates (--tls off:
//                                            plaintext); the README's main job
//   wccl-perf --coordinator HOST:PORT [...]  one peer of a real job (every other setting, such as
//                                            the TLS files, from the WCCL_* environment)
//
// The measurement is sweep.h's, shared with the Gloo and MPI programs of bench/compare. "wire" is
// the payload bytes one peer sent for one operation. With --wire other than native, algbw still
// counts F32 bytes, and #wrong counts elements beyond the codec's documented bound.
//
// wccl-perf is a client of libwccl.so's C API only, as a user's program is; the throwaway
// certificates of --local come from tools/devkit, which needs nothing but OpenSSL.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "devkit/certgen.h"
#include "perf/sweep.h"
#include "wccl/wccl.h"

extern char **environ;

namespace {

struct Options {
  sweep::Options sweep;
  int local = 0;  // --local N: the launcher
  std::string coordinator;
  bool tls = true;
  int dtype = WCCL_F32, op = WCCL_SUM, algo = WCCL_ALGO_AUTO;
  std::vector<int> wires = {WCCL_WIRE_NATIVE};  // --wire: each size is measured with each, in turn
  std::vector<int> compress = {WCCL_COMPRESS_OFF};  // --compress: likewise, within each wire
  int topk_keep = 0;     // --topk-keep: TOPK's elements kept per block of 256 (0: its default 8)
  bool weights = false;  // --data weights: weight-like F32 values instead of the checked pattern
  int timeout_s = 900;
};

const char kUsage[] =
    "usage: wccl-perf (--local N | --coordinator HOST:PORT) [options]\n"
    "  --local N          start a coordinator and N peers on 127.0.0.1 (TLS with throwaway "
    "certificates)\n"
    "  --coordinator H:P  be one peer of a job whose coordinator is at H:P (settings from WCCL_* "
    "variables)\n"
    "  -d TYPE            f32 f64 f16 bf16 i8 u8 i32 i64 (default f32)\n"
    "  -o OP              sum avg min max prod (default sum; results are checked for sum only)\n"
    "  -a ALGO            auto ring tree allgather (default auto)\n"
    "  --wire W[,W...]    native fp16 bf16 int8 int4 fp8 int2 topk (default native); several: each "
    "size with each in turn\n"
    "  --compress C[,C..] off zstd auto (default off); several: each wire with each in turn\n"
    "  --topk-keep K      elements the topk wire keeps of each block of 256, 1..64 (default 8)\n"
    "  --data D           pattern (default: exact sums, checked; compresses extremely well) or "
    "weights\n"
    "                     (f32 only, unchecked: about normal, deviation 0.02, as model weights; "
    "for --compress)\n"
    "  --tls on|off       with --local: TLS (default on) or plaintext\n"
    "  --timeout-s S      with --local: give up on the peers after S seconds (default 900)\n";

int find(const char *const *names, int count, const std::string &s) {
  for (int i = 0; i < count; ++i) {
    if (s == names[i]) return i;
  }
  return -1;
}

const char *const kOps[] = {"sum", "avg", "min", "max", "prod"};
const char *const kAlgos[] = {"auto", "ring", "tree", "allgather"};
const char *const kWires[] = {"native", "fp16", "bf16", "int8", "int4", "fp8", "int2", "topk"};
constexpr int kWireCount = 8;
const char *const kCompress[] = {"off", "zstd", "auto"};

// A comma-separated list of names, as their indices; false if one is unknown.
bool find_list(const char *const *names, int count, const std::string &s, std::vector<int> *out) {
  out->clear();
  for (size_t at = 0; at <= s.size();) {
    const size_t comma = std::min(s.find(',', at), s.size());
    const int i = find(names, count, s.substr(at, comma - at));
    if (i < 0) return false;
    out->push_back(i);
    at = comma + 1;
  }
  return true;
}

bool parse(int argc, char **argv, Options *o) {
  for (int i = 1; i < argc; ++i) {
    std::string error;
    const int common = sweep::ParseCommonFlag(argc, argv, &i, &o->sweep, &error);
    if (common < 0) {
      std::fprintf(stderr, "wccl-perf: %s\n", error.c_str());
      return false;
    }
    if (common > 0) continue;
    const std::string f = argv[i];
    if (f == "--help") {
      std::printf("%s%s", kUsage, sweep::kCommonUsage);
      std::exit(0);
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "wccl-perf: unknown flag or missing value: %s\n%s%s", f.c_str(), kUsage,
                   sweep::kCommonUsage);
      return false;
    }
    const std::string v = argv[++i];
    bool ok = true;
    if (f == "--local") {
      ok = sweep::ParseInt(v, &o->local) && o->local >= 1 && o->local <= 64;
    } else if (f == "--coordinator") {
      o->coordinator = v;
    } else if (f == "-d") {
      o->dtype = find(sweep::kTypeNames, 8, v);
      ok = o->dtype >= 0;
    } else if (f == "-o") {
      o->op = find(kOps, 5, v);
      ok = o->op >= 0;
    } else if (f == "-a") {
      o->algo = find(kAlgos, 4, v);
      ok = o->algo >= 0;
    } else if (f == "--wire") {
      ok = find_list(kWires, kWireCount, v, &o->wires);
    } else if (f == "--data") {
      ok = v == "pattern" || v == "weights";
      o->weights = v == "weights";
    } else if (f == "--compress") {
      ok = find_list(kCompress, 3, v, &o->compress);
    } else if (f == "--topk-keep") {
      ok = sweep::ParseInt(v, &o->topk_keep) && o->topk_keep >= 1 && o->topk_keep <= 64;
    } else if (f == "--tls") {
      ok = v == "on" || v == "off";
      o->tls = v == "on";
    } else if (f == "--timeout-s") {
      ok = sweep::ParseInt(v, &o->timeout_s) && o->timeout_s >= 1;
    } else {
      std::fprintf(stderr, "wccl-perf: unknown flag %s\n%s%s", f.c_str(), kUsage,
                   sweep::kCommonUsage);
      return false;
    }
    if (!ok) {
      std::fprintf(stderr, "wccl-perf: bad value for %s: '%s'\n", f.c_str(), v.c_str());
      return false;
    }
  }
  if ((o->local > 0) == !o->coordinator.empty()) {
    std::fprintf(stderr, "wccl-perf: give exactly one of --local and --coordinator\n%s%s", kUsage,
                 sweep::kCommonUsage);
    return false;
  }
  if (o->weights && o->dtype != WCCL_F32) {
    std::fprintf(stderr, "wccl-perf: --data weights is f32 only\n");
    return false;
  }
  for (int w : o->wires) {
    if (w != WCCL_WIRE_NATIVE && o->dtype != WCCL_F32) {
      std::fprintf(stderr, "wccl-perf: --wire %s carries f32 only\n", kWires[w]);
      return false;
    }
  }
  if (o->topk_keep != 0 &&
      std::find(o->wires.begin(), o->wires.end(), WCCL_WIRE_TOPK) == o->wires.end()) {
    std::fprintf(stderr, "wccl-perf: --topk-keep is for --wire topk\n");
    return false;
  }
  const std::string error = sweep::ValidateOptions(o->sweep, SIZE_MAX);
  if (!error.empty()) {
    std::fprintf(stderr, "wccl-perf: %s\n", error.c_str());
    return false;
  }
  return true;
}

// --- one peer -----------------------------------------------------------------------------------

[[noreturn]] void die(const char *what, wccl_result_t r) {
  std::fprintf(stderr, "wccl-perf: %s: %s (%s)\n", what, wccl_result_name(r), wccl_last_error());
  std::exit(1);
}

void must(const char *what, wccl_result_t r) {
  if (r != WCCL_OK) die(what, r);
}

// How far a SUM over `size` ranks of the pattern (period 251) may be from the exact one on a lossy
// wire (docs/algorithms.md: `size` encodings, each within E of its value).
double tolerance(int wire, int size) {
  const double m = 251, ranks = static_cast<double>(size) * (size + 1) / 2;
  const double range = ranks * (m - 1), mag = ranks * m;  // sums over the peers' inputs
  switch (wire) {
    case WCCL_WIRE_INT8:
      return size * (range / 510 + mag * std::ldexp(1.0, -20));
    case WCCL_WIRE_INT4:
      return size * (range / 30 + mag * std::ldexp(1.0, -20));
    case WCCL_WIRE_INT2:
      return size * (range / 6 + mag * std::ldexp(1.0, -20));  // the ring's; ALLGATHER's is below
    case WCCL_WIRE_TOPK:
      return mag;  // a dropped element is off by its own magnitude, each input encoded once
    case WCCL_WIRE_FP8:
      return size * (mag / 16 + mag / 229376);
    case WCCL_WIRE_FP16:
      return size * mag * std::ldexp(1.0, -11);
    case WCCL_WIRE_BF16:
      return size * mag * std::ldexp(1.0, -8);
    default:
      return 0;
  }
}

// wccl through its C API. Every all-reduce is wccl_iallreduce + wccl_wait, which is what
// wccl_allreduce does, so that the row can say what the operation chose and sent.
class WcclCollective : public sweep::Collective {
 public:
  WcclCollective(wccl_comm_t *comm, int algo, int topk_keep) : comm_(comm), topk_keep_(topk_keep) {
    opts_ = wccl_opts_default();
    opts_.algo = algo;
  }
  int rank() const override { return wccl_comm_rank(comm_); }
  int size() const override { return wccl_comm_size(comm_); }

  void Bind(void *buf, size_t count, const sweep::Case &c) override {
    buf_ = buf;
    count_ = count;
    dtype_ = static_cast<wccl_dtype_t>(c.type);
    op_ = static_cast<wccl_redop_t>(find(kOps, 5, c.redop));
    opts_.wire = find(kWires, kWireCount, c.wire);
    opts_.topk_keep = opts_.wire == WCCL_WIRE_TOPK ? topk_keep_ : 0;
    opts_.compress = find(kCompress, 3, c.compress);
  }

  void AllReduce() override {
    wccl_request_t *req = nullptr;
    stats_.size = sizeof(stats_);
    must("iallreduce", wccl_iallreduce(&req, buf_, buf_, count_, dtype_, op_, comm_, &opts_));
    must("allreduce", wccl_wait(req, &stats_));
    wccl_request_free(req);
  }
  void Barrier() override { must("barrier", wccl_barrier(comm_, nullptr)); }
  double MaxOverRanks(double value) override {
    must("allreduce (max)", wccl_allreduce(&value, &value, 1, WCCL_F64, WCCL_MAX, comm_, nullptr));
    return value;
  }
  int64_t SumOverRanks(int64_t value) override {
    must("allreduce (sum)", wccl_allreduce(&value, &value, 1, WCCL_I64, WCCL_SUM, comm_, nullptr));
    return value;
  }
  std::string Algorithm() const override { return kAlgos[stats_.algo]; }
  int64_t WireBytes() const override { return static_cast<int64_t>(stats_.bytes_sent); }

 private:
  wccl_comm_t *comm_;
  int topk_keep_;
  wccl_opts_t opts_;
  void *buf_ = nullptr;
  size_t count_ = 0;
  wccl_dtype_t dtype_ = WCCL_F32;
  wccl_redop_t op_ = WCCL_SUM;
  wccl_op_stats_t stats_{};
};

int run_peer(const Options &o) {
  wccl_config_t *cfg = nullptr;
  must("config", wccl_config_create(&cfg));
  must("config coordinator", wccl_config_set(cfg, "coordinator", o.coordinator.c_str()));
  wccl_comm_t *comm = nullptr;
  must("join", wccl_comm_join(&comm, cfg));
  char tls[16] = "on";
  size_t tls_len = 0;
  (void)wccl_config_get(cfg, "tls", tls, sizeof(tls), &tls_len);
  wccl_config_destroy(cfg);
  // As a trainer's first outer step would: the epoch's links open (a barrier waits for them) and
  // measure their round trips, a ring all-reduce of the sweep's largest size keeps them busy long
  // enough to measure their rates, and the update lets the coordinator re-form the ring in the
  // order those round trips favour (order_ring_by_rtt) and compute algo=AUTO's crossover from
  // them (measured_crossover; docs/algorithms.md).
  must("barrier", wccl_barrier(comm, nullptr));
  {
    std::vector<float> warm(std::max<size_t>(o.sweep.max_bytes / sizeof(float), 1), 1.0f);
    wccl_opts_t ring = wccl_opts_default();
    ring.algo = WCCL_ALGO_RING;
    must("allreduce (links)",
         wccl_allreduce(warm.data(), warm.data(), warm.size(), WCCL_F32, WCCL_SUM, comm, &ring));
  }
  must("update", wccl_comm_update(comm));

  WcclCollective coll(comm, o.algo, o.topk_keep);
  std::vector<sweep::Case> cases;
  for (int wire : o.wires) {
    for (int z : o.compress) {
      sweep::Case c;
      c.type = static_cast<sweep::Type>(o.dtype);
      c.redop = kOps[o.op];
      c.wire = kWires[wire];
      c.compress = kCompress[z];
      c.tolerance = tolerance(wire, coll.size());
      c.weights = o.weights;
      cases.push_back(c);
    }
  }
  const sweep::Run run{std::string("wccl-") + kAlgos[o.algo], std::strcmp(tls, "off") != 0};
  const std::vector<sweep::Result> results = sweep::RunSweep(o.sweep, cases, run, &coll);
  must("leave", wccl_comm_leave(comm));
  wccl_comm_destroy(comm);
  for (const sweep::Result &r : results) {
    if (r.wrong > 0) return 2;
  }
  return 0;
}

// --- the launcher -------------------------------------------------------------------------------

int run_local(const Options &o, int argc, char **argv) {
  devkit::TempDir dir("wccl-perf");
  devkit::NodeFiles coord_files;
  std::vector<devkit::NodeFiles> peer_files(static_cast<size_t>(o.local));
  if (o.tls) {
    devkit::Authority ca(dir.path(), "wccl-perf CA");
    coord_files = ca.issue("coordinator");
    for (int k = 0; k < o.local; ++k)
      peer_files[static_cast<size_t>(k)] = ca.issue("peer" + std::to_string(k));
  }
  wccl_config_t *cfg = nullptr;
  must("config", wccl_config_create(&cfg));
  must("config", wccl_config_set(cfg, "name", "coordinator"));
  must("config", wccl_config_set(cfg, "listen", "127.0.0.1:0"));
  must("config", wccl_config_set(cfg, "min_peers", std::to_string(o.local).c_str()));
  must("config", wccl_config_set(cfg, "settle_ms", "50"));
  must("config", wccl_config_set(cfg, "tls", o.tls ? "on" : "off"));
  if (o.tls) {
    must("config", wccl_config_set(cfg, "tls_cert", coord_files.cert.c_str()));
    must("config", wccl_config_set(cfg, "tls_key", coord_files.key.c_str()));
    must("config", wccl_config_set(cfg, "tls_ca", coord_files.ca.c_str()));
  }
  wccl_coord_t *coord = nullptr;
  must("coordinator", wccl_coord_start(&coord, cfg));
  wccl_config_destroy(cfg);
  const std::string address = "127.0.0.1:" + std::to_string(wccl_coord_port(coord));

  // The peers are this program again, as peers of the local job; they inherit stdout.
  std::vector<std::string> args = {"/proc/self/exe", "--coordinator", address};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--local" || a == "--tls" || a == "--timeout-s") {
      ++i;
      continue;
    }
    args.push_back(a);
  }
  std::vector<pid_t> pids;
  for (int k = 0; k < o.local; ++k) {
    std::vector<std::string> env;
    for (char **e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "WCCL_", 5) != 0 || std::strncmp(*e, "WCCL_LOG_LEVEL=", 15) == 0)
        env.emplace_back(*e);
    }
    env.push_back("WCCL_NAME=peer" + std::to_string(k));
    env.push_back("WCCL_LISTEN=127.0.0.1:0");
    env.push_back(std::string("WCCL_TLS=") + (o.tls ? "on" : "off"));
    if (o.tls) {
      const auto &f = peer_files[static_cast<size_t>(k)];
      env.push_back("WCCL_TLS_CERT=" + f.cert);
      env.push_back("WCCL_TLS_KEY=" + f.key);
      env.push_back("WCCL_TLS_CA=" + f.ca);
    }
    std::vector<char *> argp, envp;
    for (auto &a : args) argp.push_back(a.data());
    argp.push_back(nullptr);
    for (auto &e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argp.data(), envp.data()) != 0) {
      std::fprintf(stderr, "wccl-perf: cannot start peer %d: %s\n", k, std::strerror(errno));
      for (pid_t p : pids) kill(p, SIGKILL);
      break;
    }
    pids.push_back(pid);
  }
  // Wait for every peer, each on its own thread, up to the timeout; then stop the stragglers.
  std::mutex mu;
  std::condition_variable cv;
  int exited = 0, failed = pids.size() == static_cast<size_t>(o.local) ? 0 : 1;
  std::vector<std::thread> waiters;
  for (pid_t pid : pids) {
    waiters.emplace_back([&, pid] {
      int status = 0;
      waitpid(pid, &status, 0);
      std::lock_guard<std::mutex> lock(mu);
      ++exited;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    const bool done = cv.wait_for(lock, std::chrono::seconds(o.timeout_s),
                                  [&] { return exited == static_cast<int>(pids.size()); });
    if (!done) {
      std::fprintf(stderr, "wccl-perf: the peers did not finish within %d s; stopping them\n",
                   o.timeout_s);
      for (pid_t p : pids) kill(p, SIGKILL);
      ++failed;
    }
  }
  for (auto &t : waiters) t.join();
  wccl_coord_stop(coord);
  if (failed != 0) std::fprintf(stderr, "wccl-perf: %d peer(s) failed\n", failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  if (!parse(argc, argv, &o)) return 2;
  try {
    return o.local > 0 ? run_local(o, argc, argv) : run_peer(o);
  } catch (const std::exception &e) {  // from devkit: the throwaway certificates
    std::fprintf(stderr, "wccl-perf: %s\n", e.what());
    return 1;
  }
}
