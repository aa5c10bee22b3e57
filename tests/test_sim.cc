// wccl-sim's physics on cases with a closed-form answer, and the project's algorithms run over the
// virtual-time channel with their results checked (lib/sim, docs/sim.md).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>

#include "sim/network.h"
#include "sim/simulate.h"

namespace wccl::sim {
namespace {

constexpr double kMss = 9000 - 52;
constexpr double kGoodput = 1e9 / 8 * kMss / 9000;  // bytes/s of a 1 Gbit/s link at MTU 9000

TEST(SimEngine, VirtualTimeMovesOnlyWhileEveryThreadWaits) {
  Engine e(2);
  Time woke[2] = {-1, -1};
  const auto start = std::chrono::steady_clock::now();
  std::thread a([&] {
    EXPECT_TRUE(e.sleep(0, 100 * kSecond));
    woke[0] = e.now();
    e.finished();
  });
  std::thread b([&] {
    EXPECT_TRUE(e.sleep(1, 30 * kSecond));
    woke[1] = e.now();
    e.finished();
  });
  a.join();
  b.join();
  EXPECT_EQ(woke[0], 100 * kSecond);
  EXPECT_EQ(woke[1], 30 * kSecond);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));  // not real time
}

TEST(SimEngine, ThreadsThatCanNeverRunAreReleasedNotHung) {
  // Both wait for something no event will ever do: a deadlock, which each wait reports.
  Engine e(2);
  bool released[2] = {false, false};
  std::thread a([&] {
    released[0] = !e.block(0, [] { return false; });
    e.finished();
  });
  std::thread b([&] {
    released[1] = !e.block(1, [] { return false; });
    e.finished();
  });
  a.join();
  b.join();
  EXPECT_TRUE(released[0] && released[1]);
}

Topology pair(const std::string &rate = "1gbit", const std::string &one_way = "25ms") {
  return parse_topology_text("host a up=" + rate + "\nhost b up=" + rate + "\ndelay a b " +
                                 one_way + "\nmtu 9000\nqueue 4M\n",
                             "pair");
}

struct Timing {
  double sent = -1, arrived = -1;  // seconds after the send
};

// Sends one message of len bytes from a to b and runs the network until it has arrived.
Timing send_one(Engine &e, Network &net, size_t len) {
  const Time t0 = e.now();
  Time sent = -1, arrived = -1;
  net.send(
      0, 1, len, [&] { sent = e.now(); }, [&] { arrived = e.now(); });
  e.run(t0 + 1000 * kSecond);
  return {static_cast<double>(sent - t0) * 1e-9, static_cast<double>(arrived - t0) * 1e-9};
}

TEST(SimNetwork, AMessageWithinTheWindowCrossesAtTheLinkRatePlusThePath) {
  const Topology t = pair();
  Engine e(0);
  TcpOptions o;
  o.streams = 1;
  Network net(e, t, o);
  const size_t len = 64 << 10;  // below the initial window of 10 segments
  const Timing got = send_one(e, net, len);
  EXPECT_NEAR(got.sent, len / kGoodput, 1e-6);
  EXPECT_NEAR(got.arrived, len / kGoodput + 0.025, 1e-6);
}

TEST(SimNetwork, SlowStartDoublesTheWindowEachRoundTrip) {
  const Topology t = pair("10gbit");
  Engine e(0);
  TcpOptions o;
  o.streams = 1;
  o.frame_bytes = 16 << 20;
  Network net(e, t, o);
  const double iw = 10 * kMss;
  // 7 initial windows: rounds of 1, 2 and 4 windows; the last leaves at 2 round trips.
  const auto len = static_cast<size_t>(7 * iw);
  const Timing got = send_one(e, net, len);
  const double rate = 10e9 / 8 * kMss / 9000;
  EXPECT_NEAR(got.sent, 2 * 0.05 + 4 * iw / rate, 1e-4);
  EXPECT_NEAR(got.arrived, got.sent + 0.025, 1e-6);
  EXPECT_NEAR(net.cwnd(0, 1, 0), 8 * iw, 1);  // grown by every byte acknowledged
}

TEST(SimNetwork, AWindowLimitedStreamCarriesAWindowPerRoundTrip) {
  const Topology t = pair("10gbit");
  Engine e(0);
  TcpOptions o;
  o.streams = 1;
  o.window_bytes = 1 << 20;
  Network net(e, t, o);
  (void)send_one(e, net, 64 << 20);  // out of slow start, up to the window
  const size_t len = 100 << 20;
  const Timing got = send_one(e, net, len);
  const double per_rtt = static_cast<double>(o.window_bytes) / 0.05;
  EXPECT_NEAR(got.sent, len / per_rtt, 0.02 * len / per_rtt);
}

TEST(SimNetwork, StreamsMultiplyAWindowLimitedLink) {
  const Topology t = pair("10gbit");
  double seconds[2] = {0, 0};
  for (int streams : {1, 4}) {
    Engine e(0);
    TcpOptions o;
    o.streams = streams;
    o.window_bytes = 1 << 20;
    Network net(e, t, o);
    (void)send_one(e, net, 64 << 20);
    seconds[streams == 4] = send_one(e, net, 100 << 20).sent;
  }
  EXPECT_NEAR(seconds[0] / seconds[1], 4.0, 0.15);
}

TEST(SimNetwork, ABandwidthLimitedLinkRunsAtItsGoodput) {
  const Topology t = pair();
  Engine e(0);
  TcpOptions o;
  o.window_bytes = 64 << 20;
  Network net(e, t, o);
  (void)send_one(e, net, 64 << 20);
  const size_t len = 256 << 20;
  const Timing got = send_one(e, net, len);
  EXPECT_NEAR(got.sent, len / kGoodput, 0.03 * len / kGoodput)
      << "losses " << net.losses() << " cwnd " << net.cwnd(0, 1, 0) << " " << net.cwnd(0, 1, 1);
  EXPECT_EQ(net.link_bytes(0, 1), (64u << 20) + len);
}

TEST(SimNetwork, AnIdleStreamRestartsFromTheInitialWindow) {
  const Topology t = pair();
  for (bool restart : {true, false}) {
    Engine e(0);
    TcpOptions o;
    o.streams = 1;
    o.slow_start_after_idle = restart;
    Network net(e, t, o);
    (void)send_one(e, net, 16 << 20);
    const double grown = net.cwnd(0, 1, 0);
    ASSERT_GT(grown, 20 * kMss);
    e.at(e.now() + 10 * kSecond, -1, [] {});  // idle for many retransmission timeouts
    e.run(e.now() + 10 * kSecond);
    (void)send_one(e, net, 1000);
    EXPECT_EQ(net.cwnd(0, 1, 0) <= 10 * kMss + 1000, restart) << grown;
  }
}

TEST(SimNetwork, StartingWindowsThatOverflowTheQueueLoseTheirTail) {
  // 10 Gbit/s and 50 ms: the path holds 62 MB, so only a burst can overflow the queue. Four
  // streams grown to 2 MiB windows go idle, then a 12 MiB message starts them all at once. Idle
  // for two round trips (everything they sent acknowledged), 8 MiB of windows go into the queue:
  // into 4 MiB, each gets its quarter in and loses the rest, its first round carries 1 MiB, its
  // window halves (Reno), and the message takes three round trips' starts; into 16 MiB, nothing is
  // lost: two. Idle for a fifth of a round trip, the rest of each window is still in flight and
  // only a fifth goes at once (1.6 MiB in all): nothing is lost, and the windows stay.
  const double rate = 10e9 / 8 * kMss / 9000;
  struct Case {
    size_t queue;
    Time idle;
    bool lost;
  };
  for (const Case c :
       {Case{size_t{4} << 20, kSecond / 10, true}, Case{size_t{16} << 20, kSecond / 10, false},
        Case{size_t{4} << 20, kSecond / 100, false}}) {
    Topology t = pair("10gbit");
    t.queue_bytes = c.queue;
    Engine e(0);
    TcpOptions o;
    o.window_bytes = 2 << 20;
    o.cc = TcpOptions::Cc::kReno;
    Network net(e, t, o);
    // The second message goes c.idle after the first one's last byte left.
    uint64_t before = 0;
    Time start = -1, sent = -1;
    net.send(
        0, 1, 64 << 20,
        [&] {
          e.at(e.now() + c.idle, -1, [&] {
            for (int k = 0; k < 4; ++k) EXPECT_NEAR(net.cwnd(0, 1, k), 2 << 20, 1);
            before = net.losses();
            start = e.now();
            net.send(
                0, 1, 12 << 20, [&] { sent = e.now(); }, [] {});
          });
        },
        [] {});
    e.run(1000 * kSecond);
    ASSERT_GT(sent, start);
    const Timing got{static_cast<double>(sent - start) * 1e-9};
    if (c.lost) {
      EXPECT_EQ(net.losses() - before, 4u);
      // Each window grows by a segment per window acknowledged (Reno): round two carries one more
      // each, and the three rounds leave 1 MiB and three segments.
      EXPECT_NEAR(got.sent, 2 * 0.05 + ((4 << 20) - 4 * kMss) / rate, 1e-5);
      for (int k = 0; k < 4; ++k) EXPECT_NEAR(net.cwnd(0, 1, k), (1 << 20) + 3 * kMss, 0.1 * kMss);
    } else {
      EXPECT_EQ(net.losses(), before);
      EXPECT_NEAR(got.sent, 0.05 + (4 << 20) / rate, 1e-5);
      for (int k = 0; k < 4; ++k) EXPECT_NEAR(net.cwnd(0, 1, k), 2 << 20, 1);
    }
  }
}

Workload allreduce(size_t bytes, algo::Algo a, codec::Wire w, bool data) {
  Workload work;
  work.op.count = bytes / 4;
  work.op.algo = a;
  work.op.wire = w;
  work.data = data;
  work.warmup = 0;
  work.iters = 1;
  return work;
}

Topology four(const std::string &one_way) {
  return parse_topology_text(
      "host h region=x up=1gbit count=4\ndelay x x " + one_way + "\nmtu 9000\nqueue 4M\n", "four");
}

TEST(Simulate, TheAlgorithmsRunUnchangedAndAgree) {
  const Topology t = four("25ms");
  for (algo::Algo a : {algo::Algo::kRing, algo::Algo::kTree}) {
    for (codec::Wire w : {codec::WireKind::kNative, codec::WireKind::kInt8}) {
      const Report r =
          simulate(t, {0, 1, 2, 3}, TcpOptions(), CpuModel(), allreduce(1 << 20, a, w, true));
      ASSERT_TRUE(r.status.ok()) << r.status.to_string();
      EXPECT_TRUE(r.checked) << algo::algo_name(a) << " " << codec::wire_name(w);
      EXPECT_GT(r.mean(), 0.15);  // at least the ring's or trees' path delays
    }
  }
}

TEST(Simulate, ARingSendsTwoNMinusOneOverNOfTheBuffer) {
  const Topology t = four("25ms");
  const size_t bytes = 64 << 20;
  const Report r = simulate(t, {0, 1, 2, 3}, TcpOptions(), CpuModel(),
                            allreduce(bytes, algo::Algo::kRing, codec::WireKind::kNative, false));
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  for (const HostTraffic &h : r.traffic) EXPECT_EQ(h.sent, bytes / 4 * 2 * 3);
}

TEST(Simulate, TheOtherKindsSendWhatTheirAlgorithmsMust) {
  const Topology t = four("25ms");
  const size_t count = 1 << 20;  // floats: per peer for all-gather and reduce-scatter
  Workload work = allreduce(count * 4, algo::Algo::kRing, codec::WireKind::kNative, false);
  work.op.kind =
      algo::Kind::kBroadcast;  // a chain from rank 0: every host but the last forwards it
  Report r = simulate(t, {0, 1, 2, 3}, TcpOptions(), CpuModel(), work);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  for (size_t h = 0; h < 4; ++h) EXPECT_EQ(r.traffic[h].sent, h < 3 ? count * 4 : 0) << h;
  for (algo::Kind k :
       {algo::Kind::kAllgather, algo::Kind::kReduceScatter}) {  // rings: n - 1 parts each
    work.op.kind = k;
    r = simulate(t, {0, 1, 2, 3}, TcpOptions(), CpuModel(), work);
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    for (const HostTraffic &h : r.traffic) EXPECT_EQ(h.sent, 3 * count * 4) << algo::kind_name(k);
  }
}

TEST(Simulate, ABandwidthBoundRingTakesItsBytesOverTheLink) {
  // Windows large enough that the link is the bound: 2(n-1)/n S / B, plus 2(n-1) path delays and
  // the commit's round trip, within 5%.
  const Topology t = four("5ms");
  TcpOptions o;
  o.window_bytes = 16 << 20;
  Workload work = allreduce(256 << 20, algo::Algo::kRing, codec::WireKind::kNative, false);
  work.warmup = 1;
  const Report r = simulate(t, {0, 1, 2, 3}, o, CpuModel(), work);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  const double expect = 1.5 * (256 << 20) / kGoodput + 6 * 0.005 + 0.01;
  EXPECT_NEAR(r.mean(), expect, 0.05 * expect);
}

TEST(Simulate, CpuWorkTakesItsModelledTime) {
  const Topology t = four("5ms");
  CpuModel cpu;
  cpu.reduce = 1e7;  // slow enough to dominate
  const Report fast =
      simulate(t, {0, 1, 2, 3}, TcpOptions(), CpuModel(),
               allreduce(16 << 20, algo::Algo::kRing, codec::WireKind::kNative, false));
  const Report slow =
      simulate(t, {0, 1, 2, 3}, TcpOptions(), cpu,
               allreduce(16 << 20, algo::Algo::kRing, codec::WireKind::kNative, false));
  ASSERT_TRUE(fast.status.ok() && slow.status.ok());
  // Each member reduces (n-1)/n of the buffer, 12 MiB at 10 MB/s, one chunk after another; the
  // network's part overlaps it (the pipeline's window).
  const double reduce_s = 12.0 * (1 << 20) / 1e7;
  EXPECT_GT(slow.mean(), reduce_s);
  EXPECT_LT(slow.mean(), reduce_s + fast.mean());
}

// Four hosts 25 ms apart (50 ms round trips), the coordinator on the first: a 4 MiB ring
// all-reduce with data, and one fault at 0.1 s, in the middle of it.
Report with_fault(Fault::Kind kind) {
  Workload work = allreduce(4 << 20, algo::Algo::kRing, codec::WireKind::kNative, true);
  Fault f;
  f.kind = kind;
  f.rank = 2;
  f.at = kSecond / 10;
  work.faults = {f};
  return simulate(four("25ms"), {0, 1, 2, 3}, TcpOptions(), CpuModel(), work);
}

TEST(SimFaults, AKilledPeerIsRevokedAtOnceAndTheOperationRunsAgainWithoutIt) {
  const Report r = with_fault(Fault::Kind::kKill);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.survivors, 3);
  EXPECT_TRUE(r.checked) << "every survivor holds the exact sum of ranks 0, 1 and 3";
  ASSERT_EQ(r.recoveries.size(), 1u);
  const Recovery &v = r.recoveries[0];
  // Its control link closes: the coordinator hears it one path delay later.
  EXPECT_NEAR(v.revoked, 0.125, 1e-6);
  // The survivors' links to it close as its control link does, so their data phases fail a path
  // delay after the kill: each member's rules (comm::Member) report OP_FAILED and leave the
  // outcome to the coordinator's REVOKED (the same for every member: fault-tolerance.md), which
  // reaches ranks 1 and 3 a path delay after the revocation. Their UPDATEs arrive a path delay
  // later and complete the barrier.
  EXPECT_NEAR(v.epoch, 0.175, 1e-6);
  // Rank 1 hears of the epoch 25 ms later and connects to rank 2: TCP, TLS 1.3 and both hellos
  // take 3 round trips.
  EXPECT_NEAR(v.links, 0.175 + 0.025 + 0.15, 1e-6);
  // The operation then runs again from the start: at least its ring's 4 path delays, and its
  // commit's.
  EXPECT_GT(v.committed, v.links + 0.15);
  ASSERT_EQ(r.seconds.size(), 1u);
  EXPECT_GT(r.seconds[0], v.committed - 0.001) << "the operation's time includes its recovery";
}

TEST(SimFaults, AFrozenPeerIsLostOnlyAfterPeerTimeoutWithoutAHeartbeat) {
  const Report r = with_fault(Fault::Kind::kFreeze);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.survivors, 3);
  EXPECT_TRUE(r.checked);
  ASSERT_EQ(r.recoveries.size(), 1u);
  // Its last heartbeat left at 0 and arrived 25 ms later; the coordinator's timer (every 100 ms
  // here) finds it silent for peer_timeout (5 s) at its first tick from 5.025 s.
  EXPECT_GE(r.recoveries[0].revoked, 5.025);
  EXPECT_LE(r.recoveries[0].revoked, 5.125 + 1e-6);
  EXPECT_NEAR(r.recoveries[0].epoch, r.recoveries[0].revoked + 0.05, 1e-6);
}

TEST(SimFaults, WithoutAFaultNoTimerRuns) {
  // Heartbeats and the coordinator's timer decide nothing until a peer stops, so an hour of
  // compute between two operations costs no events (a heartbeat a second would be 14,400).
  Workload work = allreduce(64 << 10, algo::Algo::kRing, codec::WireKind::kNative, false);
  work.iters = 2;
  work.gap = 3600 * kSecond;
  const Report r = simulate(four("25ms"), {0, 1, 2, 3}, TcpOptions(), CpuModel(), work);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_GT(r.timed_s, 3600);
  EXPECT_LT(r.events, 1000u);
}

TEST(SimFaults, BadFaultsAreRefused) {
  Workload work = allreduce(1 << 20, algo::Algo::kRing, codec::WireKind::kNative, false);
  work.faults = {{Fault::Kind::kKill, 4, 0}};
  EXPECT_EQ(simulate(four("25ms"), {0, 1, 2, 3}, TcpOptions(), CpuModel(), work).status.code(),
            WCCL_ERR_INVALID_ARGUMENT)
      << "no rank 4";
  work.faults = {
      {Fault::Kind::kKill, 1, 0}, {Fault::Kind::kFreeze, 2, 0}, {Fault::Kind::kKill, 3, 0}};
  EXPECT_EQ(simulate(four("25ms"), {0, 1, 2, 3}, TcpOptions(), CpuModel(), work).status.code(),
            WCCL_ERR_INVALID_ARGUMENT)
      << "a single survivor";
}

// Three peers on hosts 25 ms apart, the coordinator on the first, three 4 MiB all-reduces with
// data, and a fourth peer (host 3) asking to join at 0.1 s, in the middle of the first.
Workload with_joiner() {
  Workload work = allreduce(4 << 20, algo::Algo::kRing, codec::WireKind::kNative, true);
  work.iters = 3;
  work.joins = {{3, kSecond / 10}};
  work.state_bytes = 8 << 20;
  return work;
}

TEST(SimJoins, AJoinerIsAdmittedAtTheNextBoundaryAndReceivesTheState) {
  Workload alone = with_joiner();
  alone.joins.clear();
  const Report before = simulate(four("25ms"), {0, 1, 2}, TcpOptions(), CpuModel(), alone);
  const Report r = simulate(four("25ms"), {0, 1, 2}, TcpOptions(), CpuModel(), with_joiner());
  ASSERT_TRUE(before.status.ok() && r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.survivors, 4);
  EXPECT_TRUE(r.checked)
      << "the joiner holds the others' state, and every member the exact sum of all four";
  ASSERT_EQ(r.admissions.size(), 1u);
  const Admission &a = r.admissions[0];
  // The members heard that it waits during the first operation and update at its end: the epoch
  // forms when the last update arrives, one path delay after the last member heard the commit
  // (the first operation's time, as without the joiner).
  EXPECT_NEAR(a.admitted, before.seconds[0] + 0.025, 1e-6);
  // Ranks 1 and 2 hear of it 25 ms later and connect: 3 round trips.
  EXPECT_NEAR(a.links, a.admitted + 0.025 + 0.15, 1e-6);
  // Then the two all-gathers of the descriptions (3 path steps each) and the state itself over
  // the joiner's downlink.
  EXPECT_GT(a.synced, a.links + 2 * 0.075 + (8 << 20) / kGoodput);
  EXPECT_GT(a.committed, a.synced + 0.075);
  EXPECT_GE(r.traffic[3].received, size_t{8} << 20);
}

TEST(SimJoins, AKillDuringTheStateSyncIsRecoveredFromTheSurvivors) {
  Workload work = with_joiner();
  const Report calm = simulate(four("25ms"), {0, 1, 2}, TcpOptions(), CpuModel(), work);
  ASSERT_TRUE(calm.status.ok()) << calm.status.to_string();
  const Time kill_at = 8 * kSecond / 10;
  ASSERT_LT(calm.admissions[0].links + 0.3, seconds(kill_at))
      << "past the descriptions' all-gathers";
  ASSERT_GT(calm.admissions[0].synced, seconds(kill_at)) << "before the state sync's commit";
  work.faults = {{Fault::Kind::kKill, 1, kill_at}};
  const Report r = simulate(four("25ms"), {0, 1, 2}, TcpOptions(), CpuModel(), work);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.survivors, 3);
  EXPECT_TRUE(r.checked) << "the joiner got the state from ranks 0 and 2, then summed with them";
  EXPECT_GT(r.admissions[0].synced, r.recoveries[0].links)
      << "the sync ran again in the next epoch";
}

TEST(SimJoins, ElidedStateIsHashedOnceByEachSideAndAKillDuringTheHashIsRecoveredFrom) {
  // Elided, as the large runs are: the state is the untouched address space, and its hash is
  // charged, each member's description before the all-gathers and the joiner's check after.
  Workload work = with_joiner();
  work.data = false;
  CpuModel cpu;
  cpu.hash = 16e6;  // 8 MiB in 0.52 s
  const double hash_s = (8 << 20) / cpu.hash;
  const Report free = simulate(four("25ms"), {0, 1, 2}, TcpOptions(), CpuModel(), work);
  const Report hashed = simulate(four("25ms"), {0, 1, 2}, TcpOptions(), cpu, work);
  ASSERT_TRUE(free.status.ok() && hashed.status.ok()) << hashed.status.to_string();
  EXPECT_EQ(hashed.survivors, 4);
  const double cost = hashed.admissions[0].synced - free.admissions[0].synced;
  EXPECT_GT(cost, 1.5 * hash_s) << "both hashes are charged (the first overlaps the links' skew)";
  EXPECT_LE(cost, 2 * hash_s + 1e-6);
  // A kill while every member hashes: the revocation finds no operation running, and the next
  // operation must not start in the revoked epoch: the sync re-forms and finishes, hashing no more.
  const Time kill_at = 7 * kSecond / 10;
  ASSERT_GT(seconds(kill_at), hashed.admissions[0].links);
  ASSERT_LT(seconds(kill_at) + 0.05, hashed.admissions[0].links + hash_s);
  work.faults = {{Fault::Kind::kKill, 1, kill_at}};
  const Report r = simulate(four("25ms"), {0, 1, 2}, TcpOptions(), cpu, work);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.survivors, 3);
  EXPECT_GT(r.recoveries[0].epoch, hashed.admissions[0].links + hash_s)
      << "re-formed once the hash was done";
  EXPECT_LT(r.admissions[0].synced, r.recoveries[0].links + hash_s + 0.8)
      << "no second description hash";
  EXPECT_GT(r.admissions[0].synced, r.recoveries[0].links + hash_s) << "the joiner's check";
}

TEST(SimJoins, AJoinerWaitingWhileADonorIsLostInAStateSyncIsAdmittedAfterIt) {
  // The state sync re-forms the survivors (admitting nobody) and finishes first; the second joiner,
  // which asked during it, is admitted at the next boundary and gets the state in its own sync.
  Workload work = with_joiner();
  work.joins.push_back({4, 7 * kSecond / 10});
  work.faults = {{Fault::Kind::kKill, 1, 8 * kSecond / 10}};
  const Topology six = parse_topology_text(
      "host h region=x up=1gbit count=6\ndelay x x 25ms\nmtu 9000\nqueue 4M\n", "six");
  const Report r = simulate(six, {0, 1, 2}, TcpOptions(), CpuModel(), work);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  ASSERT_EQ(r.recoveries.size(), 1u);
  ASSERT_LT(r.admissions[0].links, 0.8) << "the kill lands in the first joiner's state sync";
  EXPECT_EQ(r.survivors, 4);
  EXPECT_TRUE(r.checked);
  ASSERT_EQ(r.admissions.size(), 2u);
  EXPECT_GT(r.admissions[0].synced, r.recoveries[0].links);
  EXPECT_GT(r.admissions[1].admitted, r.admissions[0].synced);
  EXPECT_GT(r.admissions[1].synced, r.admissions[1].links);
}

TEST(SimJoins, AJoinerKilledInItsStateSyncIsDroppedAndTheOthersGoOn) {
  Workload work = with_joiner();
  work.faults = {{Fault::Kind::kKill, 3, 8 * kSecond / 10}};  // rank 3: the joiner
  const Report r = simulate(four("25ms"), {0, 1, 2}, TcpOptions(), CpuModel(), work);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.survivors, 3);
  EXPECT_TRUE(r.checked) << "the first three end with their exact sum";
  EXPECT_NEAR(r.recoveries[0].revoked, 0.825, 1e-6)
      << "its control link closes: a path delay to the coordinator";
  EXPECT_LT(r.admissions[0].synced, 0) << "it never held the state";
}

TEST(SimJoins, AJoinerFrozenBeforeItsJoinArrivedIsAdmittedThenLostAfterPeerTimeout) {
  // Frozen at 0.11 s, its JOIN (sent at 0.1 s) still on its way: the coordinator registers it at
  // 0.125 s and the members admit it at their next boundary; it never answers, so the state sync
  // waits until the coordinator finds it silent for peer_timeout and revokes the epoch.
  Workload work = with_joiner();
  work.faults = {{Fault::Kind::kFreeze, 3, 11 * kSecond / 100}};
  const Report r = simulate(four("25ms"), {0, 1, 2}, TcpOptions(), CpuModel(), work);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.survivors, 3);
  EXPECT_TRUE(r.checked);
  EXPECT_GT(r.admissions[0].admitted, 0.125);
  EXPECT_GE(r.recoveries[0].revoked, 5.125);
  EXPECT_LE(r.recoveries[0].revoked, 5.225 + 1e-6);
  EXPECT_LT(r.admissions[0].synced, 0);
}

TEST(SimJoins, AWaitingJoinerKilledIsForgottenAndItsFaultRevokesNothing) {
  // Killed at 0.11 s: its JOIN arrives at 0.125 s, its closed connection just after, so it is
  // never admitted; the kill of rank 1 later is the one revocation, credited to rank 1's fault.
  Workload work = with_joiner();
  work.faults = {{Fault::Kind::kKill, 3, 11 * kSecond / 100}, {Fault::Kind::kKill, 1, kSecond / 2}};
  const Report r = simulate(four("25ms"), {0, 1, 2}, TcpOptions(), CpuModel(), work);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.survivors, 2);
  EXPECT_TRUE(r.checked);
  EXPECT_LT(r.admissions[0].admitted, 0);
  ASSERT_EQ(r.recoveries.size(), 2u);
  EXPECT_LT(r.recoveries[0].revoked, 0) << "a joiner's loss revokes no epoch";
  EXPECT_NEAR(r.recoveries[1].revoked, 0.525, 1e-6);
}

TEST(SimJoins, AJoinerAfterTheLastOperationIsNeverAdmitted) {
  Workload work = with_joiner();
  work.joins[0].at = 30 * kSecond;
  const Report r = simulate(four("25ms"), {0, 1, 2}, TcpOptions(), CpuModel(), work);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.survivors, 3);
  EXPECT_TRUE(r.checked);
  ASSERT_EQ(r.admissions.size(), 1u);
  EXPECT_LT(r.admissions[0].admitted, 0);
}

TEST(SimJoins, BadJoinsAreRefused) {
  Workload work = with_joiner();
  work.joins[0].host = 4;
  EXPECT_EQ(simulate(four("25ms"), {0, 1, 2}, TcpOptions(), CpuModel(), work).status.code(),
            WCCL_ERR_INVALID_ARGUMENT)
      << "no host 4";
  work = with_joiner();
  work.joins[0].host = 2;
  EXPECT_EQ(simulate(four("25ms"), {0, 1, 2}, TcpOptions(), CpuModel(), work).status.code(),
            WCCL_ERR_INVALID_ARGUMENT)
      << "host 2 has a peer";
  work = with_joiner();
  work.state_bytes = 0;
  EXPECT_EQ(simulate(four("25ms"), {0, 1, 2}, TcpOptions(), CpuModel(), work).status.code(),
            WCCL_ERR_INVALID_ARGUMENT)
      << "no state to receive";
}

}  // namespace
}  // namespace wccl::sim
