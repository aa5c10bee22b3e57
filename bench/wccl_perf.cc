// wccl-perf: the all-reduce benchmark in the style of nccl-tests (DESIGN §8).
//
//   wccl-perf --local N [flags]              a coordinator and N peers on 127.0.0.1, started here,
//                                            with TLS through throwaway certificates (--tls off:
//                                            plaintext); the README's main job
//   wccl-perf --coordinator HOST:PORT [...]  one peer of a real job (every other setting, such as
//                                            the TLS files, from the WCCL_* environment)
//
// Measurement, the same as bench/compare's Gloo and MPI programs so that compare.py can set
// them side by side: for each size S in b, b*f, ... <= e: if checking, one untimed all-reduce of
// freshly filled data whose wrong elements are counted (summed over ranks); then fill, `-w`
// warmup all-reduces, fill again, barrier, and `-n` back-to-back in-place all-reduces timed on
// each rank; time = elapsed / n, reported as the maximum over ranks. algbw = S / time, busbw =
// algbw * 2(N-1)/N, GB = 1e9 bytes. "wire" is the payload bytes one peer sent for one operation.
// Element i of rank r holds (r + 1) * (i % m + 1) with m = 251 (7 for 16-bit floats and 8-bit
// integers), so SUM results are exact whatever the order. With --wire other than native, algbw
// still counts F32 bytes, and #wrong counts elements beyond the codec's documented bound.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "certgen.h"
#include "codec/half.h"
#include "codec/reduce.h"
#include "wccl/wccl.h"

extern char **environ;

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int local = 0;             // --local N: launcher
  bool peer = false;         // a peer (started by --local, or --coordinator)
  std::string coordinator;
  size_t min_bytes = 32u << 20, max_bytes = 32u << 20, factor = 2;
  int iters = 20, warmup = 5;
  bool check = true, json = false, tls = true;
  int dtype = WCCL_F32, op = WCCL_SUM, algo = WCCL_ALGO_AUTO;
  std::vector<int> wires = {WCCL_WIRE_NATIVE};  // --wire: each size is measured with each, in turn
  std::vector<int> compress = {WCCL_COMPRESS_OFF};  // --compress: likewise, within each wire
  bool weights = false;  // --data weights: weight-like F32 values instead of the checked pattern
  int timeout_s = 900;
};

const char kUsage[] =
    "usage: wccl-perf (--local N | --coordinator HOST:PORT) [options]\n"
    "  --local N          start a coordinator and N peers on 127.0.0.1 (TLS with throwaway certificates)\n"
    "  --coordinator H:P  be one peer of a job whose coordinator is at H:P (settings from WCCL_* variables)\n"
    "  -b SIZE -e SIZE    smallest and largest buffer in bytes (suffixes K, M, G = 2^10..); default 32M\n"
    "  -f FACTOR          size multiplier of the sweep (default 2)\n"
    "  -n ITERS -w WARMUP timed and warmup iterations per size (default 20, 5)\n"
    "  -c 0|1             check the results (default 1; counts wrong elements, SUM only)\n"
    "  -d TYPE            f32 f64 f16 bf16 i8 u8 i32 i64 (default f32)\n"
    "  -o OP              sum avg min max prod (default sum)\n"
    "  -a ALGO            auto ring tree (default auto)\n"
    "  --wire W[,W...]    native fp16 bf16 int8 (default native); several: each size with each in turn\n"
    "  --compress C[,C..] off zstd auto (default off); several: each wire with each in turn\n"
    "  --data D           pattern (default: exact sums, checked; compresses extremely well) or weights\n"
    "                     (f32 only, unchecked: about normal, deviation 0.02, as model weights; for --compress)\n"
    "  --tls on|off       with --local: TLS (default on) or plaintext\n"
    "  --timeout-s S      with --local: give up on the peers after S seconds (default 900)\n"
    "  --json             print one JSON object instead of the table\n";

bool parse_size(const std::string &s, size_t *out) {
  char *end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str()) return false;
  int shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10;
  if (*end == 'M' || *end == 'm') shift = 20;
  if (*end == 'G' || *end == 'g') shift = 30;
  if (shift != 0) ++end;
  if (*end != '\0' || v > (SIZE_MAX >> shift)) return false;
  *out = static_cast<size_t>(v) << shift;
  return true;
}

int find(const char *const *names, int count, const std::string &s) {
  for (int i = 0; i < count; ++i) {
    if (s == names[i]) return i;
  }
  return -1;
}

const char *const kTypes[] = {"f32", "f64", "f16", "bf16", "i8", "u8", "i32", "i64"};
const char *const kOps[] = {"sum", "avg", "min", "max", "prod"};
const char *const kAlgos[] = {"auto", "ring", "tree"};
const char *const kWires[] = {"native", "fp16", "bf16", "int8"};
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
    const std::string f = argv[i];
    auto value = [&](std::string *v) {
      if (i + 1 >= argc) return false;
      *v = argv[++i];
      return true;
    };
    std::string v;
    bool ok = true;
    if (f == "--peer") {
      o->peer = true;
    } else if (f == "--json") {
      o->json = true;
    } else if (!value(&v)) {
      std::fprintf(stderr, "wccl-perf: %s needs a value\n%s", f.c_str(), kUsage);
      return false;
    } else if (f == "--local") {
      o->local = std::atoi(v.c_str());
      ok = o->local >= 1 && o->local <= 64;
    } else if (f == "--coordinator") {
      o->coordinator = v;
      o->peer = true;
    } else if (f == "-b") {
      ok = parse_size(v, &o->min_bytes);
    } else if (f == "-e") {
      ok = parse_size(v, &o->max_bytes);
    } else if (f == "-f") {
      ok = parse_size(v, &o->factor) && o->factor >= 2;
    } else if (f == "-n") {
      o->iters = std::atoi(v.c_str());
      ok = o->iters >= 1;
    } else if (f == "-w") {
      o->warmup = std::atoi(v.c_str());
      ok = o->warmup >= 0;
    } else if (f == "-c") {
      ok = v == "0" || v == "1";
      o->check = v == "1";
    } else if (f == "-d") {
      o->dtype = find(kTypes, 8, v);
      ok = o->dtype >= 0;
    } else if (f == "-o") {
      o->op = find(kOps, 5, v);
      ok = o->op >= 0;
    } else if (f == "-a") {
      o->algo = find(kAlgos, 3, v);
      ok = o->algo >= 0;
    } else if (f == "--wire") {
      ok = find_list(kWires, 4, v, &o->wires);
    } else if (f == "--data") {
      ok = v == "pattern" || v == "weights";
      o->weights = v == "weights";
    } else if (f == "--compress") {
      ok = find_list(kCompress, 3, v, &o->compress);
    } else if (f == "--tls") {
      ok = v == "on" || v == "off";
      o->tls = v == "on";
    } else if (f == "--timeout-s") {
      o->timeout_s = std::atoi(v.c_str());
      ok = o->timeout_s >= 1;
    } else {
      std::fprintf(stderr, "wccl-perf: unknown flag %s\n%s", f.c_str(), kUsage);
      return false;
    }
    if (!ok) {
      std::fprintf(stderr, "wccl-perf: bad value for %s: '%s'\n", f.c_str(), v.c_str());
      return false;
    }
  }
  if ((o->local > 0) == o->peer) {
    std::fprintf(stderr, "wccl-perf: give exactly one of --local and --coordinator\n%s", kUsage);
    return false;
  }
  if (o->weights && o->dtype != WCCL_F32) {
    std::fprintf(stderr, "wccl-perf: --data weights is f32 only\n");
    return false;
  }
  if (o->weights) o->check = false;
  for (int w : o->wires) {
    if (w != WCCL_WIRE_NATIVE && o->dtype != WCCL_F32) {
      std::fprintf(stderr, "wccl-perf: --wire %s carries f32 only\n", kWires[w]);
      return false;
    }
  }
  if (o->min_bytes > o->max_bytes) {
    std::fprintf(stderr, "wccl-perf: -b is larger than -e\n");
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

using wccl::codec::Dtype;

int modulus(int dtype) {
  const auto t = static_cast<Dtype>(dtype);
  return t == Dtype::kF16 || t == Dtype::kBF16 || t == Dtype::kI8 || t == Dtype::kU8 ? 7 : 251;
}

void store(int dtype, void *buf, size_t i, int64_t v) {
  switch (static_cast<Dtype>(dtype)) {
    case Dtype::kF32: static_cast<float *>(buf)[i] = static_cast<float>(v); break;
    case Dtype::kF64: static_cast<double *>(buf)[i] = static_cast<double>(v); break;
    case Dtype::kF16: static_cast<uint16_t *>(buf)[i] = wccl::codec::float_to_half(static_cast<float>(v)); break;
    case Dtype::kBF16: static_cast<uint16_t *>(buf)[i] = wccl::codec::float_to_bf16(static_cast<float>(v)); break;
    case Dtype::kI8: static_cast<int8_t *>(buf)[i] = static_cast<int8_t>(v); break;
    case Dtype::kU8: static_cast<uint8_t *>(buf)[i] = static_cast<uint8_t>(v); break;
    case Dtype::kI32: static_cast<int32_t *>(buf)[i] = static_cast<int32_t>(v); break;
    case Dtype::kI64: static_cast<int64_t *>(buf)[i] = v; break;
  }
}

void fill(const Options &o, void *buf, size_t count, int rank) {
  if (o.weights) {  // a sum of four uniforms (xorshift64, seeded by the rank), deviation 0.02
    uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(rank + 1);
    auto uniform = [&x] {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      return static_cast<float>(x >> 40) * (1.0f / 16777216.0f);
    };
    for (size_t i = 0; i < count; ++i) {
      static_cast<float *>(buf)[i] = (uniform() + uniform() + uniform() + uniform() - 2.0f) * 0.0346f;
    }
    return;
  }
  const int m = modulus(o.dtype);
  for (size_t i = 0; i < count; ++i) store(o.dtype, buf, i, static_cast<int64_t>(rank + 1) * static_cast<int64_t>(i % m + 1));
}

// How far a SUM over `size` ranks may be from the exact one on a lossy wire (docs/algorithms.md:
// `size` encodings, each within E of its value).
double tolerance(int wire, int size) {
  const double m = 251, ranks = static_cast<double>(size) * (size + 1) / 2;
  const double range = ranks * (m - 1), mag = ranks * m;  // sums over the peers' inputs
  switch (wire) {
    case WCCL_WIRE_INT8: return size * (range / 510 + mag * std::ldexp(1.0, -20));
    case WCCL_WIRE_FP16: return size * mag * std::ldexp(1.0, -11);
    case WCCL_WIRE_BF16: return size * mag * std::ldexp(1.0, -8);
    default: return 0;
  }
}

// Elements that differ from the exact SUM over `size` ranks (beyond the wire's tolerance).
int64_t wrong(const Options &o, int wire, const void *buf, size_t count, int size) {
  const size_t es = wccl::codec::dtype_size(static_cast<Dtype>(o.dtype));
  if (wire != WCCL_WIRE_NATIVE) {
    const double tol = tolerance(wire, size);
    const int m = modulus(o.dtype);
    int64_t bad = 0;
    for (size_t i = 0; i < count; ++i) {
      const double want = static_cast<double>(size) * (size + 1) / 2 * static_cast<double>(i % m + 1);
      bad += !(std::fabs(static_cast<const float *>(buf)[i] - want) <= tol);
    }
    return bad;
  }
  std::vector<uint8_t> want(es);
  const int m = modulus(o.dtype);
  int64_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    store(o.dtype, want.data(), 0, static_cast<int64_t>(size) * (size + 1) / 2 * static_cast<int64_t>(i % m + 1));
    bad += std::memcmp(static_cast<const uint8_t *>(buf) + i * es, want.data(), es) != 0;
  }
  return bad;
}

struct Row {
  int codec = WCCL_WIRE_NATIVE;  // the wccl_wire_t it ran with
  int compress = WCCL_COMPRESS_OFF;
  size_t bytes = 0, count = 0;
  double time_us = 0, algbw = 0, busbw = 0;
  uint64_t wire = 0;
  int64_t wrong = -1;
};

int run_peer(const Options &o) {
  wccl_config_t *cfg = nullptr;
  must("config", wccl_config_create(&cfg));
  if (!o.coordinator.empty()) must("config coordinator", wccl_config_set(cfg, "coordinator", o.coordinator.c_str()));
  wccl_comm_t *comm = nullptr;
  must("join", wccl_comm_join(&comm, cfg));
  wccl_config_destroy(cfg);
  const int rank = wccl_comm_rank(comm), size = wccl_comm_size(comm);
  const auto dtype = static_cast<wccl_dtype_t>(o.dtype);
  const auto op = static_cast<wccl_redop_t>(o.op);
  const size_t es = wccl::codec::dtype_size(static_cast<Dtype>(o.dtype));
  wccl_opts_t opts = wccl_opts_default();
  opts.algo = o.algo;
  const bool print = rank == 0;
  if (print && !o.json) {
    std::printf("# wccl-perf: allreduce, %d peers, algo %s, iters %d, warmup %d, check %s\n", size, kAlgos[o.algo],
                o.iters, o.warmup, o.check && o.op == WCCL_SUM ? "on" : "off");
    std::printf("# %10s %12s %6s %6s %6s %4s %6s %12s %12s %12s %12s %8s\n", "size", "count", "type", "redop", "wire",
                "zstd", "algo", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "wire(B)", "#wrong");
    std::fflush(stdout);
  }
  std::vector<Row> rows;
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes;) {
   for (int wire : o.wires) {
   for (int z : o.compress) {
    opts.wire = wire;
    opts.compress = z;
    Row row;
    row.codec = wire;
    row.compress = z;
    row.count = bytes / es;
    row.bytes = row.count * es;
    std::unique_ptr<uint8_t[]> buf(new uint8_t[row.bytes + 1]);
    // The checked iteration also reports what one operation puts on the wire.
    fill(o, buf.get(), row.count, rank);
    wccl_request_t *req = nullptr;
    wccl_op_stats_t stats;
    stats.size = sizeof(stats);
    must("iallreduce", wccl_iallreduce(&req, buf.get(), buf.get(), row.count, dtype, op, comm, &opts));
    must("allreduce", wccl_wait(req, &stats));
    wccl_request_free(req);
    row.wire = stats.bytes_sent;
    const char *algo = kAlgos[stats.algo];
    if (o.check && o.op == WCCL_SUM) {
      int64_t bad = wrong(o, wire, buf.get(), row.count, size);
      must("allreduce (#wrong)", wccl_allreduce(&bad, &bad, 1, WCCL_I64, WCCL_SUM, comm, nullptr));
      row.wrong = bad;
    }
    fill(o, buf.get(), row.count, rank);
    for (int i = 0; i < o.warmup; ++i) must("allreduce", wccl_allreduce(buf.get(), buf.get(), row.count, dtype, op, comm, &opts));
    fill(o, buf.get(), row.count, rank);
    must("barrier", wccl_barrier(comm, nullptr));
    const auto t0 = Clock::now();
    for (int i = 0; i < o.iters; ++i) must("allreduce", wccl_allreduce(buf.get(), buf.get(), row.count, dtype, op, comm, &opts));
    double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / o.iters;
    must("allreduce (time)", wccl_allreduce(&us, &us, 1, WCCL_F64, WCCL_MAX, comm, nullptr));
    row.time_us = us;
    row.algbw = static_cast<double>(row.bytes) / (us * 1e3);
    row.busbw = row.algbw * 2.0 * (size - 1) / size;
    rows.push_back(row);
    if (print && !o.json) {
      char w[32];
      if (row.wrong < 0) {
        std::snprintf(w, sizeof(w), "N/A");
      } else {
        std::snprintf(w, sizeof(w), "%" PRId64, row.wrong);
      }
      std::printf("  %10zu %12zu %6s %6s %6s %4s %6s %12.1f %12.3f %12.3f %12" PRIu64 " %8s\n", row.bytes, row.count,
                  kTypes[o.dtype], kOps[o.op], kWires[wire], kCompress[z], algo, row.time_us, row.algbw, row.busbw,
                  row.wire, w);
      std::fflush(stdout);
    }
   }
   }
    if (bytes > o.max_bytes / o.factor) break;
    bytes *= o.factor;
  }
  if (print && o.json) {
    char tls[16] = "on";
    (void)wccl_config_create(&cfg);
    size_t tls_len = 0;
    (void)wccl_config_get(cfg, "tls", tls, sizeof(tls), &tls_len);
    wccl_config_destroy(cfg);
    std::printf("{\"tool\": \"wccl\", \"peers\": %d, \"tls\": %s, \"algo\": \"%s\", \"results\": [", size,
                std::strcmp(tls, "off") == 0 ? "false" : "true", kAlgos[o.algo]);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row &r = rows[i];
      char w[32];
      if (r.wrong < 0) {
        std::snprintf(w, sizeof(w), "null");
      } else {
        std::snprintf(w, sizeof(w), "%" PRId64, r.wrong);
      }
      std::printf("%s{\"bytes\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", \"wire\": \"%s\", "
                  "\"compress\": \"%s\", \"time_us\": %.3f, \"algbw\": %.6g, \"busbw\": %.6g, \"wire_bytes\": %" PRIu64
                  ", \"wrong\": %s}",
                  i == 0 ? "" : ", ", r.bytes, r.count, kTypes[o.dtype], kOps[o.op], kWires[r.codec], kCompress[r.compress],
                  r.time_us, r.algbw, r.busbw, r.wire, w);
    }
    std::printf("]}\n");
    std::fflush(stdout);
  }
  must("leave", wccl_comm_leave(comm));
  wccl_comm_destroy(comm);
  for (const Row &r : rows) {
    if (r.wrong > 0) return 2;
  }
  return 0;
}

// --- the launcher -------------------------------------------------------------------------------

int run_local(const Options &o, int argc, char **argv) {
  auto dir = wccl::devkit::TempDir::create("wccl-perf");
  if (!dir.ok()) {
    std::fprintf(stderr, "wccl-perf: %s\n", dir.status().to_string().c_str());
    return 1;
  }
  wccl::devkit::NodeFiles coord_files;
  std::vector<wccl::devkit::NodeFiles> peer_files(static_cast<size_t>(o.local));
  if (o.tls) {
    auto ca = wccl::devkit::Authority::create(dir.value()->path(), "wccl-perf CA");
    if (!ca.ok()) {
      std::fprintf(stderr, "wccl-perf: %s\n", ca.status().to_string().c_str());
      return 1;
    }
    auto c = ca.value()->issue("coordinator");
    if (!c.ok()) return 1;
    coord_files = c.value();
    for (int k = 0; k < o.local; ++k) {
      auto p = ca.value()->issue("peer" + std::to_string(k));
      if (!p.ok()) return 1;
      peer_files[static_cast<size_t>(k)] = p.value();
    }
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
      if (std::strncmp(*e, "WCCL_", 5) != 0 || std::strncmp(*e, "WCCL_LOG_LEVEL=", 15) == 0) env.emplace_back(*e);
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
    const bool done = cv.wait_for(lock, std::chrono::seconds(o.timeout_s), [&] { return exited == static_cast<int>(pids.size()); });
    if (!done) {
      std::fprintf(stderr, "wccl-perf: the peers did not finish within %d s; stopping them\n", o.timeout_s);
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
  return o.local > 0 ? run_local(o, argc, argv) : run_peer(o);
}
