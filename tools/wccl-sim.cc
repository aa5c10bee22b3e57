// wccl-sim: how long wccl's collectives take on a WAN that is described, not owned (docs/sim.md).
//
//   wccl-sim TOPOLOGY [options]
//
// TOPOLOGY is a WAN emulator file (lib/sim/topology.h; tools/wan/topologies/). Peer r runs on the
// r-th host of the file (or of --hosts). Prints one row per size, as wccl-perf does, then each
// host's share of its uplink; --json prints the same as one JSON object.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "codec/wire.h"
#include "sim/simulate.h"

namespace {

using namespace wccl;

const char kUsage[] =
    "usage: wccl-sim TOPOLOGY [options]\n"
    "  -b, --min-bytes N     smallest size (default 64M; suffixes K M G, powers of 2)\n"
    "  -e, --max-bytes N     largest size (default: the smallest)\n"
    "  -f, --factor N        size multiplier between rows (default 4)\n"
    "  --peers N             the first N hosts (default: every host)\n"
    "  --hosts A,B,...       these hosts, in ring order (default: the file's order)\n"
    "  --op allreduce|broadcast|allgather|reducescatter   (default allreduce; sizes as "
    "nccl-tests':\n"
    "                        the whole buffer, all peers' parts together for allgather and "
    "reducescatter)\n"
    "  --algo ring|tree|allgather  allreduce's algorithm (default ring; the others run their one)\n"
    "  --wire native|int8|int4|int2|topk|fp8|fp16|bf16   (default native; F32 only for the "
    "codecs)\n"
    "  --topk-keep K         elements the topk wire keeps of each block of 256, 1..64 (default 8)\n"
    "  --dtype f32|f16|bf16|f64|i32|...   (default f32)\n"
    "  --streams N           TCP connections per link (default 4)\n"
    "  --chunk N             pipelining unit (default 1M)\n"
    "  --frame N             frame size on the wire (default 1M)\n"
    "  --window N            a TCP stream's largest window (default 3M)\n"
    "  --cc cubic|reno       congestion control (default cubic)\n"
    "  --no-slow-start-after-idle   as net.ipv4.tcp_slow_start_after_idle=0\n"
    "  -n, --iters N         timed operations per size (default 3)\n"
    "  -w, --warmup N        untimed operations first (default 1)\n"
    "  --gap SECONDS         compute between operations (default 0)\n"
    "  --coordinator HOST    where the coordinator runs (default: the first peer's host; none: no "
    "commit)\n"
    "  --cpu NAME=GB/s,...   kernel rates: reduce, encode, decode, decode_reduce, copy, hash "
    "(defaults: docs/sim.md)\n"
    "  --kill RANK@SECONDS   the peer of that rank dies at that virtual time (repeatable; ranks "
    "past the\n"
    "                        peers name the joiners, in --join's order)\n"
    "  --freeze RANK@SECONDS its process stops (SIGSTOP) at that time (repeatable)\n"
    "  --join HOST@SECONDS   a new peer on that host asks to join at that virtual time "
    "(repeatable): admitted at\n"
    "                        the members' next update, it receives the state through state sync\n"
    "  --state N             what a joiner receives (default: twice the largest size, the outer "
    "parameters\n"
    "                        and momentum of an F32 model whose pseudo-gradient the all-reduce "
    "carries)\n"
    "  --heartbeat MS        heartbeat_ms (default 1000)\n"
    "  --peer-timeout MS     peer_timeout_ms (default 5000)\n"
    "  --data                carry the bytes and check the result (small sizes)\n"
    "  --json                one JSON object instead of the table\n";

// A bad command line: main prints it with the usage and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void usage_error(const std::string &why) { throw UsageError(why); }

size_t parse_size(const std::string &text) {
  char *end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string unit = end;
  double mult = 1;
  if (unit == "K")
    mult = 1024.0;
  else if (unit == "M")
    mult = 1024.0 * 1024;
  else if (unit == "G")
    mult = 1024.0 * 1024 * 1024;
  else if (!unit.empty())
    usage_error("bad size '" + text + "'");
  if (end == text.c_str() || !(v > 0) || v * mult > 1e15) usage_error("bad size '" + text + "'");
  return static_cast<size_t>(v * mult);
}

int parse_int(const std::string &text, int lo, int hi) {
  char *end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v < lo || v > hi) {
    usage_error("bad number '" + text + "' (" + std::to_string(lo) + ".." + std::to_string(hi) +
                ")");
  }
  return static_cast<int>(v);
}

// The value named `text` among `names`; a usage error naming `option`'s choices otherwise.
template <typename T>
T pick(const std::string &option, const std::string &text,
       const std::vector<std::pair<std::string, T>> &names) {
  std::string choices;
  for (const auto &[name, v] : names) {
    if (name == text) return v;
    choices += (choices.empty() ? "" : ", ") + name;
  }
  usage_error(option + " is one of " + choices + ", not '" + text + "'");
}

std::vector<std::string> split(const std::string &s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, sep);) out.push_back(part);
  return out;
}

// WHO@SECONDS (--kill, --freeze, --join): WHO, and the virtual time.
std::pair<std::string, sim::Time> parse_at(const std::string &option, const std::string &text,
                                           const char *who) {
  const std::vector<std::string> at = split(text, '@');
  const double t = at.size() == 2 ? std::atof(at[1].c_str()) : -1;
  if (at.size() != 2 || !(t >= 0) || t > 1e6) usage_error(option + " takes " + who + "@SECONDS");
  return {at[0], static_cast<sim::Time>(t * 1e9)};
}

// The kernels' rates on the project's 2-core development machine: `python3 bench/sim/cpu_rates.py`
// (bench_codec, the best tier, 64 MiB buffers), one run on 2026-11-25, and the hash's from another
// that day (docs/sim.md).
sim::CpuModel default_cpu() {
  sim::CpuModel cpu;
  cpu.reduce = 6.18e9;
  cpu.encode = 5.39e9;
  cpu.decode = 9.46e9;
  cpu.decode_reduce = 9.01e9;
  cpu.copy = 5.55e9;
  cpu.hash = 8.04e9;
  return cpu;
}

int run(int argc, char **argv);

}  // namespace

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError &e) {
    std::fprintf(stderr, "wccl-sim: %s\n%s", e.what(), kUsage);
    return 2;
  }
}

namespace {

int run(int argc, char **argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  sim::Topology topo;
  try {
    topo = sim::parse_topology(argv[1]);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "wccl-sim: %s\n", e.what());
    return 1;
  }
  size_t min_bytes = size_t{64} << 20, max_bytes = 0;
  int factor = 4, peers = 0;
  std::vector<std::string> host_names;
  sim::TcpOptions tcp;
  sim::Workload work;
  work.iters = 3;
  sim::CpuModel cpu = default_cpu();
  std::string coordinator;
  std::vector<std::string> join_hosts;
  bool json = false;
  codec::Dtype dtype = codec::Dtype::kF32;
  size_t topk_keep = 0;  // --topk-keep: 0 leaves the wire's default
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "-b" || a == "--min-bytes")
      min_bytes = parse_size(value());
    else if (a == "-e" || a == "--max-bytes")
      max_bytes = parse_size(value());
    else if (a == "-f" || a == "--factor")
      factor = parse_int(value(), 2, 1024);
    else if (a == "--peers")
      peers = parse_int(value(), 2, 1 << 16);
    else if (a == "--hosts")
      host_names = split(value(), ',');
    else if (a == "--op") {
      work.op.kind = pick<algo::Kind>(a, value(),
                                      {{"allreduce", algo::Kind::kAllreduce},
                                       {"broadcast", algo::Kind::kBroadcast},
                                       {"allgather", algo::Kind::kAllgather},
                                       {"reducescatter", algo::Kind::kReduceScatter}});
    } else if (a == "--algo") {
      work.op.algo = pick<algo::Algo>(a, value(),
                                      {{"ring", algo::Algo::kRing},
                                       {"tree", algo::Algo::kTree},
                                       {"allgather", algo::Algo::kAllgather}});
    } else if (a == "--wire") {
      work.op.wire = pick<codec::Wire>(a, value(),
                                       {{"native", codec::WireKind::kNative},
                                        {"int8", codec::WireKind::kInt8},
                                        {"int4", codec::WireKind::kInt4},
                                        {"int2", codec::WireKind::kInt2},
                                        {"topk", codec::WireKind::kTopk},
                                        {"fp8", codec::WireKind::kFp8},
                                        {"fp16", codec::WireKind::kF16},
                                        {"bf16", codec::WireKind::kBF16}});
    } else if (a == "--topk-keep") {
      topk_keep = static_cast<size_t>(parse_int(value(), 1, codec::kTopkMaxKeep));
    } else if (a == "--dtype") {
      dtype = pick<codec::Dtype>(a, value(),
                                 {{"f32", codec::Dtype::kF32},
                                  {"f64", codec::Dtype::kF64},
                                  {"f16", codec::Dtype::kF16},
                                  {"bf16", codec::Dtype::kBF16},
                                  {"i8", codec::Dtype::kI8},
                                  {"u8", codec::Dtype::kU8},
                                  {"i32", codec::Dtype::kI32},
                                  {"i64", codec::Dtype::kI64}});
    } else if (a == "--streams")
      tcp.streams = parse_int(value(), 1, 64);
    else if (a == "--chunk")
      work.op.chunk_bytes = parse_size(value());
    else if (a == "--frame")
      tcp.frame_bytes = parse_size(value());
    else if (a == "--window")
      tcp.window_bytes = parse_size(value());
    else if (a == "--cc") {
      tcp.cc = pick<sim::TcpOptions::Cc>(
          a, value(),
          {{"cubic", sim::TcpOptions::Cc::kCubic}, {"reno", sim::TcpOptions::Cc::kReno}});
    } else if (a == "--no-slow-start-after-idle")
      tcp.slow_start_after_idle = false;
    else if (a == "-n" || a == "--iters")
      work.iters = parse_int(value(), 1, 1000);
    else if (a == "-w" || a == "--warmup")
      work.warmup = parse_int(value(), 0, 1000);
    else if (a == "--gap") {
      const double s = std::atof(value().c_str());
      if (!(s >= 0) || s > 1e6) usage_error("bad --gap");
      work.gap = static_cast<sim::Time>(s * 1e9);
    } else if (a == "--coordinator")
      coordinator = value();
    else if (a == "--cpu") {
      for (const std::string &kv : split(value(), ',')) {
        const size_t eq = kv.find('=');
        const double gbs = eq == std::string::npos ? -1 : std::atof(kv.c_str() + eq + 1);
        const std::string key = kv.substr(0, eq);
        double *slot = key == "reduce"          ? &cpu.reduce
                       : key == "encode"        ? &cpu.encode
                       : key == "decode"        ? &cpu.decode
                       : key == "decode_reduce" ? &cpu.decode_reduce
                       : key == "copy"          ? &cpu.copy
                       : key == "hash"          ? &cpu.hash
                                                : nullptr;
        if (slot == nullptr || !(gbs >= 0)) usage_error("bad --cpu entry '" + kv + "'");
        *slot = gbs * 1e9;
      }
    } else if (a == "--kill" || a == "--freeze") {
      const auto [rank, at] = parse_at(a, value(), "RANK");
      sim::Fault f;
      f.kind = a == "--kill" ? sim::Fault::Kind::kKill : sim::Fault::Kind::kFreeze;
      f.rank = parse_int(rank, 0, 1 << 16);
      f.at = at;
      work.faults.push_back(f);
    } else if (a == "--join") {
      const auto [host, at] = parse_at(a, value(), "HOST");
      join_hosts.push_back(host);
      work.joins.push_back({0, at});
    } else if (a == "--state")
      work.state_bytes = parse_size(value());
    else if (a == "--heartbeat")
      work.heartbeat = sim::Time{parse_int(value(), 10, 3600000)} * 1000000;
    else if (a == "--peer-timeout")
      work.peer_timeout = sim::Time{parse_int(value(), 10, 3600000)} * 1000000;
    else if (a == "--data")
      work.data = true;
    else if (a == "--json")
      json = true;
    else
      usage_error("unknown option '" + a + "'");
  }
  if (max_bytes == 0) max_bytes = min_bytes;
  if (max_bytes < min_bytes) usage_error("--max-bytes is below --min-bytes");
  std::vector<int> ranks;
  if (!host_names.empty()) {
    for (const std::string &h : host_names) {
      const int k = topo.index(h);
      if (k < 0) usage_error("no host '" + h + "' in " + argv[1]);
      ranks.push_back(k);
    }
  } else {
    const int n = peers > 0 ? peers : static_cast<int>(topo.hosts.size());
    if (n > static_cast<int>(topo.hosts.size())) usage_error("--peers exceeds the file's hosts");
    for (int k = 0; k < n; ++k) ranks.push_back(k);
  }
  if (ranks.size() < 2) usage_error("at least 2 peers are needed");
  if (coordinator == "none") {
    work.coordinator = -1;
  } else if (!coordinator.empty()) {
    work.coordinator = topo.index(coordinator);
    if (work.coordinator < 0) usage_error("no host '" + coordinator + "' in " + argv[1]);
  } else {
    work.coordinator = ranks[0];
  }
  for (size_t j = 0; j < join_hosts.size(); ++j) {
    work.joins[j].host = topo.index(join_hosts[j]);
    if (work.joins[j].host < 0) usage_error("no host '" + join_hosts[j] + "' in " + argv[1]);
  }
  if (work.state_bytes == 0 && !work.joins.empty()) work.state_bytes = 2 * max_bytes;
  if (work.op.wire.kind != codec::WireKind::kNative && dtype != codec::Dtype::kF32)
    usage_error("a wire codec needs --dtype f32");
  if (topk_keep != 0) {
    if (work.op.wire.kind != codec::WireKind::kTopk) usage_error("--topk-keep is for --wire topk");
    work.op.wire = codec::Wire::topk(topk_keep);
  }
  if (work.op.kind != algo::Kind::kAllreduce && work.op.algo != algo::Algo::kRing)
    usage_error("--algo tree and allgather are allreduce's");
  if (work.data && work.op.kind != algo::Kind::kAllreduce)
    usage_error("--data checks allreduce only");
  work.op.dtype = dtype;
  const int n = static_cast<int>(ranks.size());
  const size_t es = codec::dtype_size(dtype);
  // nccl-tests' sizes and bus bandwidth: the bytes each peer's link must carry at the algorithm's
  // best, as a multiple of the size over the time.
  const bool per_peer =
      work.op.kind == algo::Kind::kAllgather || work.op.kind == algo::Kind::kReduceScatter;
  const double bus_factor = work.op.kind == algo::Kind::kAllreduce ? 2.0 * (n - 1) / n
                            : work.op.kind == algo::Kind::kBroadcast
                                ? 1.0
                                : static_cast<double>(n - 1) / n;
  const std::string wire = codec::wire_label(work.op.wire);
  if (json) {
    std::printf(
        "{\"topology\": \"%s\", \"peers\": %d, \"op\": \"%s\", \"algo\": \"%s\", \"wire\": \"%s\", "
        "\"streams\": %d, \"rows\": [",
        argv[1], n, algo::kind_name(work.op.kind), algo::algo_name(work.op.algo), wire.c_str(),
        tcp.streams);
  } else {
    std::printf(
        "# wccl-sim %s: %d peers, %s%s%s, wire %s, %d stream%s per link, window %zu, %s%s\n",
        argv[1], n, algo::kind_name(work.op.kind),
        work.op.kind == algo::Kind::kAllreduce ? " " : "",
        work.op.kind == algo::Kind::kAllreduce ? algo::algo_name(work.op.algo) : "", wire.c_str(),
        tcp.streams, tcp.streams == 1 ? "" : "s", tcp.window_bytes,
        tcp.cc == sim::TcpOptions::Cc::kCubic ? "cubic" : "reno",
        tcp.slow_start_after_idle ? "" : ", no slow start after idle");
    std::printf("%14s %12s %10s %10s %10s %10s %9s\n", "size(B)", "count", "time(ms)", "data(ms)",
                "algbw(GB/s)", "busbw(GB/s)", "losses");
  }
  // The hosts with a peer: the ranks', then the joiners' (each on a host of its own, or the
  // simulation refuses them).
  std::vector<int> peer_hosts = ranks;
  for (const sim::Join &j : work.joins) peer_hosts.push_back(j.host);
  bool first = true;
  int rc = 0;
  sim::Report last;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= static_cast<size_t>(factor)) {
    work.op.count = bytes / es / (per_peer ? static_cast<size_t>(n) : 1);
    if (work.op.count == 0) usage_error("a size smaller than one element per peer");
    const size_t size = work.op.count * es * (per_peer ? static_cast<size_t>(n) : 1);
    const sim::Report r = sim::simulate(topo, ranks, tcp, cpu, work);
    if (!r.status.ok()) {
      std::fprintf(stderr, "wccl-sim: %zu bytes: %s\n", bytes, r.status.to_string().c_str());
      rc = 1;
      break;
    }
    const double t = r.mean();
    const double algbw = static_cast<double>(size) / t / 1e9;
    const double busbw = algbw * bus_factor;
    if (json) {
      std::printf(
          "%s\n {\"bytes\": %zu, \"count\": %zu, \"seconds\": %.6f, \"data_phase_seconds\": %.6f, "
          "\"timed_seconds\": %.6f, \"algbw\": %.4f, \"busbw\": %.4f, \"losses\": %llu, "
          "\"events\": %llu%s, "
          "\"hosts\": [",
          first ? "" : ",", size, work.op.count, t, r.data_phase, r.timed_s, algbw, busbw,
          static_cast<unsigned long long>(r.losses), static_cast<unsigned long long>(r.events),
          work.data ? (r.checked ? ", \"checked\": true" : ", \"checked\": false") : "");
      for (size_t h = 0; h < peer_hosts.size(); ++h) {
        const int k = peer_hosts[h];
        const sim::HostTraffic &tr = r.traffic[static_cast<size_t>(k)];
        std::printf(
            "%s{\"host\": \"%s\", \"sent\": %llu, \"received\": %llu, \"uplink_share\": %.4f}",
            h ? ", " : "", topo.hosts[static_cast<size_t>(k)].name.c_str(),
            static_cast<unsigned long long>(tr.sent), static_cast<unsigned long long>(tr.received),
            static_cast<double>(tr.sent) * 8 /
                (topo.hosts[static_cast<size_t>(k)].up_bps * r.timed_s));
      }
      std::printf("], \"survivors\": %d, \"recoveries\": [", r.survivors);
      for (size_t k = 0; k < r.recoveries.size(); ++k) {
        const sim::Recovery &v = r.recoveries[k];
        std::printf(
            "%s{\"fault\": \"%s\", \"rank\": %d, \"at\": %.6f, \"revoked\": %.6f, \"epoch\": %.6f, "
            "\"links\": %.6f, \"committed\": %.6f}",
            k ? ", " : "", v.fault.kind == sim::Fault::Kind::kKill ? "kill" : "freeze",
            v.fault.rank, sim::seconds(v.fault.at), v.revoked, v.epoch, v.links, v.committed);
      }
      std::printf("], \"admissions\": [");
      for (size_t k = 0; k < r.admissions.size(); ++k) {
        const sim::Admission &v = r.admissions[k];
        std::printf(
            "%s{\"host\": \"%s\", \"at\": %.6f, \"admitted\": %.6f, \"links\": %.6f, \"synced\": "
            "%.6f, "
            "\"committed\": %.6f}",
            k ? ", " : "", topo.hosts[static_cast<size_t>(v.join.host)].name.c_str(),
            sim::seconds(v.join.at), v.admitted, v.links, v.synced, v.committed);
      }
      std::printf("]}");
    } else {
      std::printf("%14zu %12zu %10.2f %10.2f %10.4f %10.4f %9llu%s\n", size, work.op.count, t * 1e3,
                  r.data_phase * 1e3, algbw, busbw, static_cast<unsigned long long>(r.losses),
                  work.data ? (r.checked ? "  checked" : "  WRONG") : "");
    }
    if (!json) {
      auto after = [](double at, double when) {
        return when < 0 ? std::string("never")
                        : "+" + std::to_string(when - at).substr(0, 6) + " s";
      };
      // How the group got over each fault, and how each joiner got in, from its time.
      for (const sim::Recovery &v : r.recoveries) {
        const double at = sim::seconds(v.fault.at);
        std::printf(
            "#   %s rank %d at %.3f s: revoked %s, next epoch %s, its links open %s, its first "
            "operation "
            "committed %s\n",
            v.fault.kind == sim::Fault::Kind::kKill ? "kill" : "freeze", v.fault.rank, at,
            after(at, v.revoked).c_str(), after(at, v.epoch).c_str(), after(at, v.links).c_str(),
            after(at, v.committed).c_str());
      }
      for (const sim::Admission &v : r.admissions) {
        const double at = sim::seconds(v.join.at);
        std::printf(
            "#   join on %s at %.3f s: admitted %s, its links open %s, its state synced %s, its "
            "first operation "
            "committed %s\n",
            topo.hosts[static_cast<size_t>(v.join.host)].name.c_str(), at,
            after(at, v.admitted).c_str(), after(at, v.links).c_str(), after(at, v.synced).c_str(),
            after(at, v.committed).c_str());
      }
    }
    if (work.data && !r.checked) rc = 1;
    first = false;
    last = r;
    if (bytes > max_bytes / static_cast<size_t>(factor)) break;
  }
  if (json) {
    std::printf("]}\n");
  } else if (!last.traffic.empty()) {
    // What each host's links did in the largest size's timed operations.
    std::printf(
        "# per host, largest size: payload sent and received, uplink use (sent / (up rate x "
        "time)), uplink busy\n");
    std::printf("%-12s %14s %14s %10s %10s\n", "host", "sent(B)", "received(B)", "uplink", "busy");
    // Many hosts: the 8 with the least-used uplinks (the ones holding the others up) and the most.
    std::vector<int> shown = peer_hosts;
    auto use = [&](int k) {
      return static_cast<double>(last.traffic[static_cast<size_t>(k)].sent) /
             topo.hosts[static_cast<size_t>(k)].up_bps;
    };
    if (shown.size() > 16) {
      std::sort(shown.begin(), shown.end(),
                [&](int a, int b) { return use(a) != use(b) ? use(a) < use(b) : a < b; });
      shown.erase(shown.begin() + 8, shown.end() - 8);
      std::printf("# (%zu hosts: the 8 least and the 8 most used uplinks)\n", peer_hosts.size());
    }
    for (int k : shown) {
      const sim::HostTraffic &tr = last.traffic[static_cast<size_t>(k)];
      const sim::Host &h = topo.hosts[static_cast<size_t>(k)];
      std::printf("%-12s %14llu %14llu %9.1f%% %9.1f%%\n", h.name.c_str(),
                  static_cast<unsigned long long>(tr.sent),
                  static_cast<unsigned long long>(tr.received),
                  100.0 * static_cast<double>(tr.sent) * 8 / (h.up_bps * last.timed_s),
                  100.0 * static_cast<double>(tr.up_busy) * 1e-9 / last.timed_s);
    }
  }
  return rc;
}

}  // namespace
