// The coordinator's CPU at scale (issue 58, item 4; docs/sim.md "The coordinator at 1,024
// members"): the job's rules (coord::Job, as wccl-coord runs them) for one group of N members,
// fed the members' messages and with every notice turned into its wire frame (to_message and
// encode, the part of the coordinator's shell that grows with N; the TLS and the socket writes
// are not counted). Per iteration:
//   Commit     one operation: every member's DONE in, every member's COMMIT out.
//   Barrier    one update barrier that admits nobody: every member's UPDATE in; the BARRIER the
//              first arrival sends every other member, and the EPOCH answering every member's
//              call, each with the ring of N members.
//   EpochChange one barrier that admits a joiner: as Barrier, with the new epoch's ring (N + 1;
//              20 iterations, so the group grows from N to N + 20).
//   Heartbeats one second of heartbeats (one per member) and the coordinator's timer.
#include <benchmark/benchmark.h>

#include <chrono>
#include <string>
#include <vector>

#include "coord/job.h"
#include "coord/messages.h"

namespace {

using wccl::coord::Clock;
using wccl::coord::ControlMessage;
using wccl::coord::Job;
using wccl::coord::MessageType;
using wccl::coord::PeerId;

const char *const kGroup = "g";
bool g_failed = false;  // a benchmark found the rules not doing what it measures: exit 1

void fail(benchmark::State &state, const char *why) {
  g_failed = true;
  state.SkipWithError(why);
}

wccl::coord::Membership::Options options(int n) {
  wccl::coord::Membership::Options o;
  o.min_peers = n;  // the first epoch holds them all
  o.settle = std::chrono::milliseconds(0);
  o.peer_timeout = std::chrono::hours(1);  // no loss while the benchmark runs
  o.measured_order = false;
  return o;
}

// A job of n members in one group, formed, and the bytes its notices encode to.
class Group {
 public:
  explicit Group(int n) : job_(options(n)) {
    for (int i = 0; i < n; ++i) join(Member(i));
    now_ += std::chrono::milliseconds(1);
    job_.tick(now_);
    drain();
    bytes_ = 0;
  }

  static PeerId Member(int i) { return static_cast<PeerId>(i) + 1; }

  void join(PeerId id) {
    ControlMessage m;
    m.type = MessageType::kJoin;
    m.peer = id;
    m.group = kGroup;
    m.info.name = "member" + std::to_string(id);
    m.info.address = "10.0." + std::to_string(id / 256) + "." + std::to_string(id % 256) + ":7000";
    send(m);
  }
  void send(const ControlMessage &m) {
    bool drop = false;
    (void)job_.on_message(kGroup, m, now_, &drop);
  }
  // Every notice as its frame, as the coordinator's shell sends it; returns how many.
  size_t drain() {
    size_t n = 0;
    for (const Job::Addressed &a : job_.take_notices()) {
      bytes_ += wccl::coord::encode(wccl::coord::to_message(a.notice)).size();
      ++n;
    }
    return n;
  }
  const wccl::coord::Membership &group() const { return *job_.group(kGroup); }
  Clock::time_point &now() { return now_; }
  Job &job() { return job_; }
  size_t bytes() const { return bytes_; }

 private:
  Job job_;
  Clock::time_point now_{};
  size_t bytes_ = 0;
};

void report(benchmark::State &state, const Group &g, size_t notices) {
  state.counters["notices"] =
      benchmark::Counter(static_cast<double>(notices), benchmark::Counter::kAvgIterations);
  state.counters["frame_bytes"] =
      benchmark::Counter(static_cast<double>(g.bytes()), benchmark::Counter::kAvgIterations);
}

void BM_Commit(benchmark::State &state) {
  const int n = static_cast<int>(state.range(0));
  Group g(n);
  size_t notices = 0;
  for (auto _ : state) {
    // The next operation of the epoch: each member submits it (UPDATE-free) and reports it done.
    const uint64_t seq = g.group().committed() + 1;
    for (int i = 0; i < n; ++i) {
      ControlMessage d;
      d.type = MessageType::kDone;
      d.peer = Group::Member(i);
      d.epoch = g.group().epoch();
      d.seq = seq;
      g.send(d);
    }
    notices += g.drain();
  }
  if (g.group().ring().size() != static_cast<size_t>(n) || g.group().committed() == 0)
    fail(state, "nothing committed");
  report(state, g, notices);
}

// One update barrier of every member; `admit`: a joiner waits and enters.
void barrier(benchmark::State &state, bool admit) {
  const int n = static_cast<int>(state.range(0));
  Group g(n);
  size_t notices = 0;
  PeerId next_joiner = static_cast<PeerId>(n) + 1;
  std::vector<PeerId> members;
  members.reserve(static_cast<size_t>(n) + 32);
  for (int i = 0; i < n; ++i) members.push_back(Group::Member(i));
  uint32_t call = 0;
  for (auto _ : state) {
    state.PauseTiming();
    if (admit) {  // a joiner registers before the barrier (its JOIN is not the barrier's cost)
      g.join(next_joiner);
      members.push_back(next_joiner++);
      (void)g.job().take_notices();
    }
    const uint64_t epoch = g.group().epoch();
    state.ResumeTiming();
    ++call;
    for (PeerId id : members) {
      if (!g.group().is_member(id)) continue;  // the joiner: admitted by the barrier
      ControlMessage u;
      u.type = MessageType::kUpdate;
      u.peer = id;
      u.epoch = epoch;
      u.seq = g.group().committed();
      u.count = call;
      g.send(u);
    }
    notices += g.drain();
    if (admit && g.group().epoch() == epoch) fail(state, "the joiner was not admitted");
  }
  report(state, g, notices);
}

void BM_Barrier(benchmark::State &state) { barrier(state, false); }
void BM_EpochChange(benchmark::State &state) { barrier(state, true); }

void BM_Heartbeats(benchmark::State &state) {
  const int n = static_cast<int>(state.range(0));
  Group g(n);
  size_t notices = 0;
  for (auto _ : state) {
    g.now() += std::chrono::seconds(1);
    for (int i = 0; i < n; ++i) {
      ControlMessage h;
      h.type = MessageType::kHeartbeat;
      h.peer = Group::Member(i);
      g.send(h);
    }
    g.job().tick(g.now());
    notices += g.drain();
  }
  report(state, g, notices);
}

BENCHMARK(BM_Commit)->RangeMultiplier(4)->Range(16, 1024)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Barrier)->RangeMultiplier(4)->Range(16, 1024)->Unit(benchmark::kMicrosecond);
// Each iteration admits one more member: 20 of them, so the group is N to N + 20.
BENCHMARK(BM_EpochChange)
    ->RangeMultiplier(4)
    ->Range(16, 1024)
    ->Iterations(20)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Heartbeats)->RangeMultiplier(4)->Range(16, 1024)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char **argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return g_failed ? 1 : 0;
}
