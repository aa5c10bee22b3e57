#include "sim/simulate.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <set>
#include <thread>

#include "codec/wire.h"
#include "sim/driver.h"
#include "sim/world.h"

namespace wccl::sim {

double Report::mean() const {
  return seconds.empty() ? 0
                         : std::accumulate(seconds.begin(), seconds.end(), 0.0) /
                               static_cast<double>(seconds.size());
}

namespace {

// INVALID_ARGUMENT naming what the workload asks that cannot be simulated.
Status check(const Topology &topo, const std::vector<int> &ranks, const Workload &work) {
  const int n = static_cast<int>(ranks.size());
  if (n < 2) return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "sim: at least 2 peers are needed");
  if (work.data &&
      (work.op.dtype != codec::Dtype::kF32 || work.op.kind != algo::Kind::kAllreduce)) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "sim: data is carried for F32 all-reduces only");
  }
  const int all =
      n + static_cast<int>(work.joins.size());  // the first epoch's peers and the joiners
  std::set<int> faulty;
  for (const Fault &f : work.faults) {
    if (f.rank < 0 || f.rank >= all || f.at < 0 || !faulty.insert(f.rank).second) {
      return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                        "sim: a fault names rank %d at %.3f s: each fault needs a "
                        "rank of its own below %d (the peers, then the joiners) and a time from 0",
                        f.rank, seconds(f.at), all);
    }
  }
  const auto first_faulty =
      static_cast<int>(std::count_if(faulty.begin(), faulty.end(), [n](int r) { return r < n; }));
  if (first_faulty > n - 2) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "sim: %d faults leave fewer than 2 of %d peers",
                      first_faulty, n);
  }
  if (work.heartbeat <= 0 || work.peer_timeout <= 0) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                      "sim: the heartbeat and peer_timeout must be positive");
  }
  std::set<int> hosts(ranks.begin(), ranks.end());
  for (const Join &j : work.joins) {
    if (j.host < 0 || j.host >= static_cast<int>(topo.hosts.size()) || j.at < 0 ||
        work.state_bytes == 0 || !hosts.insert(j.host).second) {
      return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                        "sim: a joiner on host %d at %.3f s: it needs a host of "
                        "the topology without another peer, a time from 0 and a state to receive "
                        "(state_bytes)",
                        j.host, seconds(j.at));
    }
  }
  return Status();
}

// What the members did: the first failure, or each timed operation's time, the traffic, and the
// recoveries and admissions the world recorded.
Report summarize(World &w, const Driver &d, const algo::Collective &base) {
  Report report;
  const Workload &work = w.work;
  const int all = static_cast<int>(w.peers.size());
  const int ops = work.warmup + work.iters;
  constexpr Time kNever = Driver::kNever;
  // The first failure in virtual time: the others are often its consequences.
  const auto failed =
      std::min_element(d.failures.begin(), d.failures.end(), [](const auto &a, const auto &b) {
        return !a.second.ok() && (b.second.ok() || a.first < b.first);
      });
  if (!failed->second.ok()) {
    report.status = failed->second;
    return report;
  }
  report.recoveries = w.recoveries;
  report.admissions = w.admissions;
  for (const coord::Member &x : w.group().ring())
    report.survivors += !w.peer(World::index(x.id)).stopped;
  for (int k = work.warmup; k < ops; ++k) {
    Time slowest = 0, phase = 0;
    for (int r = 0; r < all; ++r) {
      const Time start = d.started[static_cast<size_t>(k)][static_cast<size_t>(r)];
      if (d.committed[static_cast<size_t>(k)][static_cast<size_t>(r)] == kNever)
        continue;  // stopped before
      slowest =
          std::max(slowest, d.committed[static_cast<size_t>(k)][static_cast<size_t>(r)] - start);
      phase = std::max(phase, d.data_done[static_cast<size_t>(k)][static_cast<size_t>(r)] - start);
    }
    report.seconds.push_back(seconds(slowest));
    report.data_phase += seconds(phase) / work.iters;
  }
  if (work.iters > 0) {
    Time first = std::numeric_limits<Time>::max(), last = 0;
    for (int r = 0; r < all; ++r) {
      if (d.committed[static_cast<size_t>(ops - 1)][static_cast<size_t>(r)] == kNever) continue;
      const Time start = d.started[static_cast<size_t>(work.warmup)][static_cast<size_t>(r)];
      if (start != kNever) first = std::min(first, start);  // kNever: a joiner admitted later
      last = std::max(last, d.committed[static_cast<size_t>(ops - 1)][static_cast<size_t>(r)]);
    }
    report.timed_s = seconds(last - first);
  }
  report.traffic = w.net.traffic();
  if (!w.traffic_before.empty()) {
    for (size_t h = 0; h < report.traffic.size(); ++h) {
      report.traffic[h].sent -= w.traffic_before[h].sent;
      report.traffic[h].received -= w.traffic_before[h].received;
      report.traffic[h].up_busy -= w.traffic_before[h].up_busy;
    }
  }
  report.events = w.engine.events();
  report.losses = w.net.losses();
  if (work.data) {
    // Every member that finished holds the last operation's result over that operation's ring.
    report.checked = true;
    int reference = -1;
    for (int r = 0; r < all && report.checked; ++r) {
      if (d.committed[static_cast<size_t>(ops - 1)][static_cast<size_t>(r)] == kNever) continue;
      const auto &b = d.buffers[static_cast<size_t>(r)];
      if (reference < 0) reference = r;
      const auto &ref = d.buffers[static_cast<size_t>(reference)];
      if (b.size() != ref.size() ||
          std::memcmp(b.data(), ref.data(), b.size() * sizeof(float)) != 0)
        report.checked = false;
      if (base.wire.kind == codec::WireKind::kNative && base.op == codec::RedOp::kSum) {
        double sum_ranks = 0;
        for (int m : d.last_ring[static_cast<size_t>(r)]) sum_ranks += m + 1;
        for (size_t i = 0; i < b.size() && report.checked; ++i) {
          report.checked = b[i] == static_cast<float>(sum_ranks * static_cast<double>(i % 251 + 1));
        }
      }
    }
    report.checked = report.checked && reference >= 0;
    // Every joiner that got in holds the first epoch's peers' state.
    for (int r = w.first_peers; r < static_cast<int>(d.state.size()) && report.checked; ++r) {
      if (w.peer(r).has_state) report.checked = d.state[static_cast<size_t>(r)] == d.state[0];
    }
  }
  return report;
}

}  // namespace

Report simulate(const Topology &topo, const std::vector<int> &ranks, const TcpOptions &tcp,
                const CpuModel &cpu, const Workload &work) {
  Report report;
  report.status = check(topo, ranks, work);
  if (!report.status.ok()) return report;
  const int n = static_cast<int>(ranks.size());
  const int all =
      n + static_cast<int>(work.joins.size());  // the first epoch's peers and the joiners
  algo::Collective base = work.op;
  if (base.algo == algo::Algo::kAuto)
    base.algo = algo::choose(base, n, algo::Crossovers{});  // the ring, or INT2's all-gather
  std::unique_ptr<Void> space;
  if (!work.data) {
    const size_t in_bytes = algo::in_count(base, all) * codec::dtype_size(base.dtype);
    const size_t out_bytes = algo::out_count(base, all) * codec::dtype_size(base.dtype);
    space = std::make_unique<Void>(std::max({in_bytes, out_bytes, work.state_bytes}) * 2 +
                                   (size_t{64} << 20));
    if (space->base() == nullptr) {
      report.status = WCCL_ERROR(WCCL_ERR_NO_MEMORY,
                                 "sim: cannot reserve address space for the elided buffers");
      return report;
    }
  }
  World w(topo, ranks, tcp, work);
  Driver driver(w, cpu, base, space.get());
  w.active = n;
  for (const Fault &f : work.faults) w.recoveries.push_back({f});
  w.start();
  for (const Fault &f : work.faults) {
    w.engine.at(f.at, -1, [&w, f] { w.fault(f); });
  }
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(all));
  for (int r = 0; r < all; ++r) threads.emplace_back([&driver, r] { driver.run(r); });
  for (auto &t : threads) t.join();
  return summarize(w, driver, base);
}

}  // namespace wccl::sim
