// Collectives through communicators over TLS on 127.0.0.1, with a real coordinator: every kind
// agrees bit for bit; a member process killed or frozen in the middle of a 256 MiB all-reduce
// makes every survivor return PEER_LOST with its buffers as they were, and the same call succeeds
// after update; concurrent operations with one failing; timeouts; the barrier.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "comm/state_sync.h"
#include "comm_fixture.h"
#include "emulated_device.h"

namespace wccl::comm {
namespace {

using algo::Collective;
using algo::Kind;

// F32 elements of the large all-reduce: 256 MiB, or less under WCCL_TEST_LARGE_BYTES.
const size_t kBig = test::large_bytes(size_t{256} << 20) / sizeof(float);

float pattern(int multiplier, size_t i) {
  return static_cast<float>(multiplier * static_cast<int>(i % 251 + 1));
}

std::vector<float> filled(size_t count, int multiplier) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = pattern(multiplier, i);
  return v;
}

// The communicators in rank order.
std::vector<Communicator *> by_rank_of(const std::vector<std::unique_ptr<Communicator>> &comms) {
  std::vector<Communicator *> by_rank(comms.size());
  for (auto &c : comms) by_rank[static_cast<size_t>(c->rank())] = c.get();
  return by_rank;
}

// Payload bytes this communicator has received on its links of the current epoch.
uint64_t received(Communicator *c) {
  std::map<int, std::shared_ptr<net::Link>> links;
  if (!c->links(1s, &links).ok()) return 0;
  uint64_t sum = 0;
  for (auto &[rank, l] : links) sum += l->stats().bytes_received;
  return sum;
}

// Waits (bounded) until c has received `bytes` in this epoch: the operation is mid-flight.
bool wait_received(Communicator *c, uint64_t bytes) {
  const auto deadline = Clock::now() + 30s;
  while (received(c) < bytes) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

class CollectivesTest : public CommFourTest {};

struct KindCase {
  Kind kind;
  algo::Algo a;
  size_t count;
};

// Each case run on every member at once (broadcast from rank 2): every member ends with the same
// result, the one the inputs make.
void expect_every_kind_agrees(const std::vector<Communicator *> &by_rank,
                              const std::vector<KindCase> &cases) {
  const int n = static_cast<int>(by_rank.size());
  for (const KindCase &k : cases) {
    SCOPED_TRACE(std::string(algo::kind_name(k.kind)) + " " + algo::algo_name(k.a) + " " +
                 std::to_string(k.count));
    std::vector<std::vector<float>> in(n), out(n);
    std::vector<Status> st(n);
    std::vector<OpStats> stats(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      Collective c = allreduce(nullptr, nullptr, k.count, k.a);
      c.kind = k.kind;
      c.root = 2;
      in[r] = filled(algo::in_count(c, n), r + 1);
      out[r].assign(algo::out_count(c, n), -1.0f);
      c.in = in[r].data();
      c.out = out[r].data();
      threads.emplace_back([&, r, c] { st[r] = run_op(by_rank[r], c, &stats[r]); });
    }
    for (auto &t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
      EXPECT_EQ(stats[r].world_size, n);
      if (k.kind != Kind::kReduceScatter) {
        EXPECT_TRUE(out[r] == out[0]) << "rank " << r << " differs from rank 0";
      }
      const std::vector<float> &o = out[r];
      for (size_t i = 0; i < o.size(); ++i) {
        float want = 0;
        switch (k.kind) {
          case Kind::kAllreduce:
            want = pattern(n * (n + 1) / 2, i);
            break;
          case Kind::kBroadcast:
            want = pattern(3, i);
            break;
          case Kind::kAllgather:
            want = pattern(static_cast<int>(i / k.count) + 1, i % k.count);
            break;
          case Kind::kReduceScatter:
            want = pattern(n * (n + 1) / 2, static_cast<size_t>(r) * k.count + i);
            break;  // block r
          case Kind::kBarrier:
          case Kind::kStateSync:
            break;
        }
        ASSERT_EQ(o[i], want) << "rank " << r << " element " << i;
      }
    }
    if (k.kind == Kind::kAllreduce && k.count > 0) {
      EXPECT_EQ(stats[0].algo, k.a == algo::Algo::kAuto ? algo::Algo::kTree : k.a)
          << "algo=AUTO with no measured crossover: the tree";
      EXPECT_GT(stats[0].bytes_sent, 0u);
    }
  }
}

TEST_F(CollectivesTest, EveryKindAgreesBitForBitOnFourPeers) {
  auto comms = join_all(4);
  ASSERT_EQ(comms.size(), 4u);
  expect_every_kind_agrees(by_rank_of(comms), {{Kind::kAllreduce, algo::Algo::kRing, 1000003},
                                               {Kind::kAllreduce, algo::Algo::kTree, 1000003},
                                               {Kind::kAllreduce, algo::Algo::kAuto, 1024},
                                               {Kind::kAllreduce, algo::Algo::kRing, 3},
                                               {Kind::kAllreduce, algo::Algo::kRing, 0},
                                               {Kind::kBroadcast, algo::Algo::kAuto, 300007},
                                               {Kind::kAllgather, algo::Algo::kAuto, 100003},
                                               {Kind::kReduceScatter, algo::Algo::kAuto, 100003},
                                               {Kind::kBarrier, algo::Algo::kAuto, 0}});
}

// algo=AUTO by the measured crossovers: once the links of two members have carried large messages
// and an update has passed, the EPOCH carries crossovers, and both members take the all-gather
// schedule for an all-reduce (a message delay fewer than the ring, the same bytes at n = 2). Before
// that they take the ring (no measurement: no all-gather; two members: no tree).
TEST_F(CommTest, TwoMembersTakeTheAllgatherOnceTheirLinksAreMeasured) {
  auto comms = group_of(2);
  ASSERT_EQ(comms.size(), 2u);
  std::vector<Communicator *> by_rank = by_rank_of(comms);
  auto allreduce_on_both = [&](size_t count, std::vector<algo::Algo> *algos) {
    std::vector<std::vector<float>> io(2);
    std::vector<Status> st(2);
    std::vector<OpStats> stats(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      io[r] = filled(count, r + 1);
      threads.emplace_back([&, r] {
        st[r] = run_op(by_rank[r], allreduce(io[r].data(), io[r].data(), count), &stats[r]);
      });
    }
    for (auto &t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r].to_string();
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(io[r][i], pattern(3, i)) << "rank " << r;
      if (algos != nullptr) algos->push_back(stats[r].algo);
    }
  };
  // Large all-reduces until each link has a delivery rate (sampled every 100 ms while a large
  // message goes out) and a round trip.
  auto measured = [&] {
    for (Communicator *c : by_rank) {
      std::map<int, std::shared_ptr<net::Link>> links;
      if (!c->links(1s, &links).ok() || links.empty()) return false;
      for (auto &[rank, l] : links) {
        if (l->delivery_rate() == 0 || l->min_rtt_us() == 0) return false;
      }
    }
    return true;
  };
  std::vector<algo::Algo> before;
  allreduce_on_both(1000, &before);
  EXPECT_EQ(before, std::vector<algo::Algo>(2, algo::Algo::kRing));
  const auto deadline = Clock::now() + 30s;
  while (!measured() && Clock::now() < deadline) allreduce_on_both(size_t{4} << 20, nullptr);
  ASSERT_TRUE(measured()) << "the links measured no rate in 30 s of 16 MiB all-reduces";
  for (const Status &st : update_all(by_rank)) ASSERT_TRUE(st.ok()) << st.to_string();
  std::vector<algo::Algo> after;
  allreduce_on_both(1000, &after);
  allreduce_on_both(size_t{1} << 20, &after);
  EXPECT_EQ(after, std::vector<algo::Algo>(4, algo::Algo::kAllgather));
}

// max_link_rate caps what each link sends, per operation: a paced 4 MiB all-reduce takes most of
// its bytes over the rate (the kernel paces every stream; an unpaced one takes milliseconds on
// loopback), the result is the same, and the next unpaced operation on the same links is not
// held back. A paced operation measures no link rate (it would measure the cap).
TEST_F(CommTest, APacedOperationSendsNoFasterThanItsRate) {
  auto comms = group_of(2);
  ASSERT_EQ(comms.size(), 2u);
  std::vector<Communicator *> by_rank = by_rank_of(comms);
  const size_t count = size_t{1} << 20;  // 4 MiB
  constexpr uint64_t kRate = 2'000'000;  // bytes per second
  // Both members' times and bytes sent, the slower member's time.
  auto allreduce_on_both = [&](uint64_t rate, double *seconds, uint64_t *sent) {
    std::vector<std::vector<float>> io(2);
    std::vector<Status> st(2);
    std::vector<OpStats> stats(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) io[r] = filled(count, r + 1);
    const auto start = Clock::now();
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        algo::Collective c = allreduce(io[r].data(), io[r].data(), count, algo::Algo::kRing);
        c.max_link_rate = rate;
        st[r] = run_op(by_rank[r], c, &stats[r]);
      });
    }
    for (auto &t : threads) t.join();
    *seconds = std::chrono::duration<double>(Clock::now() - start).count();
    *sent = std::max(stats[0].bytes_sent, stats[1].bytes_sent);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r].to_string();
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(io[r][i], pattern(3, i)) << "rank " << r;
    }
  };
  double paced = 0, unpaced = 0;
  uint64_t sent = 0, unpaced_sent = 0;
  allreduce_on_both(kRate, &paced, &sent);
  ASSERT_GE(sent, count * sizeof(float));  // a ring of two sends the whole buffer once
  // The kernel paces whole packets (up to 128 KiB on loopback, each followed by its gap) and a
  // stream's last packet ends its transfer, so a few gaps of the 1 s are not waited for.
  EXPECT_GE(paced, 0.5 * static_cast<double>(sent) / kRate)
      << sent << " bytes went faster than " << kRate << " bytes/s allows";
  for (Communicator *c : by_rank) {
    std::map<int, std::shared_ptr<net::Link>> links;
    ASSERT_TRUE(c->links(1s, &links).ok());
    for (auto &[rank, l] : links) EXPECT_EQ(l->delivery_rate(), 0u) << "measured the cap";
  }
  allreduce_on_both(0, &unpaced, &unpaced_sent);
  EXPECT_EQ(unpaced_sent, sent);
  EXPECT_LT(unpaced, paced / 2) << "the next, unpaced operation was still paced";
}

// F32 all-reduces on the lossy wires over real links: bit-identical everywhere, within the
// documented bound, INT8 at about a quarter of the native bytes; then a NaN on the INT8 wire
// fails the operation everywhere, named on the member that holds it, with buffers untouched.
TEST_F(CollectivesTest, WireCodecsOverTheTransport) {
  auto comms = join_all(4);
  ASSERT_EQ(comms.size(), 4u);
  std::vector<Communicator *> by_rank = by_rank_of(comms);
  const int n = 4;
  const size_t count = 1000003;
  auto run_all = [&](codec::Wire w, algo::Algo a, std::vector<std::vector<float>> &io,
                     std::vector<Status> &st, std::vector<OpStats> &stats) {
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      Collective c = allreduce(io[r].data(), io[r].data(), count, a);
      c.wire = w;
      threads.emplace_back([&, r, c] { st[r] = run_op(by_rank[r], c, &stats[r]); });
    }
    for (auto &t : threads) t.join();
  };
  uint64_t native_bytes = 0;
  for (codec::Wire w : {codec::WireKind::kNative, codec::WireKind::kInt8, codec::WireKind::kF16,
                        codec::WireKind::kBF16, codec::WireKind::kInt4, codec::WireKind::kFp8,
                        codec::WireKind::kInt2}) {
    for (algo::Algo a : {algo::Algo::kRing, algo::Algo::kTree}) {
      SCOPED_TRACE(std::string(codec::wire_name(w)) + " " + algo::algo_name(a));
      std::vector<std::vector<float>> io(n);
      for (int r = 0; r < n; ++r) io[r] = filled(count, r + 1);
      std::vector<Status> st(n);
      std::vector<OpStats> stats(n);
      run_all(w, a, io, st, stats);
      // Sums of (r + 1) * (i % 251 + 1): inputs span 250 (r + 1), so R = 2500 and M = 2510.
      const double e = w.kind == codec::WireKind::kInt8 ? 2500.0 / 510 + 2510 * std::ldexp(1.0, -20)
                       : w.kind == codec::WireKind::kInt4
                           ? 2500.0 / 30 + 2510 * std::ldexp(1.0, -20)
                       : w.kind == codec::WireKind::kInt2 ? 2500.0 / 6 + 2510 * std::ldexp(1.0, -20)
                       : w.kind == codec::WireKind::kFp8  ? 2510.0 / 16 + 2510.0 / 229376
                       : w.kind == codec::WireKind::kF16  ? 2510 * std::ldexp(1.0, -11)
                       : w.kind == codec::WireKind::kBF16 ? 2510 * std::ldexp(1.0, -8)
                                                          : 0;
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
        ASSERT_TRUE(io[r] == io[0]) << "rank " << r << " differs from rank 0";
      }
      for (size_t i = 0; i < count; ++i)
        ASSERT_LE(std::fabs(io[0][i] - pattern(10, i)), n * e) << "element " << i;
      if (w.kind == codec::WireKind::kNative && a == algo::Algo::kRing)
        native_bytes = stats[0].bytes_sent;
      if (a == algo::Algo::kRing && codec::block_format(w) != nullptr) {
        // Each wire's size against F32's, plus a little for the blocks cut short at segment ends.
        const double want = w.kind == codec::WireKind::kInt8   ? 0.25 * 1032 / 1024
                            : w.kind == codec::WireKind::kInt4 ? 72.0 / 512
                            : w.kind == codec::WireKind::kInt2 ? 40.0 / 512
                                                               : 1028.0 / 4096;
        EXPECT_NEAR(static_cast<double>(stats[0].bytes_sent) / static_cast<double>(native_bytes),
                    want, 0.002);
      }
    }
  }
  std::vector<std::vector<float>> io(n);
  for (int r = 0; r < n; ++r) io[r] = filled(count, r + 1);
  io[2][777777] = std::nanf("");
  const std::vector<std::vector<float>> before = io;
  std::vector<Status> st(n);
  std::vector<OpStats> stats(n);
  run_all(codec::WireKind::kInt8, algo::Algo::kRing, io, st, stats);
  for (int r = 0; r < n; ++r) {
    if (r == 2) {
      EXPECT_EQ(st[r].code(), WCCL_ERR_INVALID_ARGUMENT) << st[r].to_string();
      EXPECT_NE(st[r].message().find("element 777777 is NaN"), std::string::npos)
          << st[r].to_string();
    } else {
      EXPECT_EQ(st[r].code(), WCCL_ERR_PEER_LOST) << "rank " << r << ": " << st[r].to_string();
    }
    EXPECT_EQ(std::memcmp(io[r].data(), before[r].data(), count * 4), 0)
        << "rank " << r << " buffer changed";
  }
}

// F16 and BF16 data on the coded wires: each member widens its input to F32 exactly, the F32
// collective runs, and the committed result is rounded once into its output. So a half collective
// equals the same F32 collective on the widened inputs, rounded, bit for bit on every member; a
// NaN on a block wire fails it everywhere with buffers untouched.
TEST_F(CollectivesTest, HalfPrecisionDataTravelsOnTheCodedWiresAsF32Would) {
  auto comms = join_all(4);
  ASSERT_EQ(comms.size(), 4u);
  std::vector<Communicator *> by_rank = by_rank_of(comms);
  const int n = 4;
  // Runs c on every member with in[r] and out[r] (bytes), returning each member's status.
  auto run_all = [&](Collective c, std::vector<std::vector<uint8_t>> &in,
                     std::vector<std::vector<uint8_t>> &out) {
    std::vector<Status> st(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      c.in = in[r].data();
      c.out = out[r].data();
      threads.emplace_back([&, r, c] { st[r] = run_op(by_rank[r], c); });
    }
    for (auto &t : threads) t.join();
    return st;
  };
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-3.0f, 2.0f);
  struct Case {
    Kind kind;
    algo::Algo a;
    codec::RedOp op;
  };
  const Case cases[] = {{Kind::kAllreduce, algo::Algo::kRing, codec::RedOp::kSum},
                        {Kind::kAllreduce, algo::Algo::kTree, codec::RedOp::kAvg},
                        {Kind::kAllreduce, algo::Algo::kRing, codec::RedOp::kMax},
                        {Kind::kAllgather, algo::Algo::kAuto, codec::RedOp::kSum},
                        {Kind::kReduceScatter, algo::Algo::kAuto, codec::RedOp::kSum},
                        {Kind::kBroadcast, algo::Algo::kAuto, codec::RedOp::kSum}};
  const size_t count = 70001;
  for (codec::Dtype t : {codec::Dtype::kBF16, codec::Dtype::kF16}) {
    for (codec::Wire w : {codec::WireKind::kInt8, codec::WireKind::kInt4, codec::WireKind::kInt2,
                          codec::WireKind::kFp8, codec::WireKind::kBF16, codec::WireKind::kF16}) {
      for (const Case &k : cases) {
        SCOPED_TRACE(std::string(codec::dtype_name(t)) + " on " + codec::wire_name(w) + ": " +
                     algo::kind_name(k.kind) + " " + algo::algo_name(k.a));
        Collective c = allreduce(nullptr, nullptr, count, k.a);
        c.kind = k.kind;
        c.op = k.op;
        c.root = 1;
        c.wire = w;
        const size_t nin = algo::in_count(c, n), nout = algo::out_count(c, n);
        std::vector<std::vector<uint8_t>> in(n), out(n), in32(n), out32(n);
        for (int r = 0; r < n; ++r) {
          std::vector<float> x(nin);
          for (float &v : x) v = d(rng);
          in[r].resize(nin * 2);
          ASSERT_TRUE(codec::encode(codec::half_wire(t), x.data(), nin, in[r].data()).ok());
          in32[r].resize(nin * 4);  // the same values, widened
          ASSERT_TRUE(codec::decode(codec::half_wire(t), in[r].data(), in[r].size(), nin,
                                    reinterpret_cast<float *>(in32[r].data()))
                          .ok());
          out[r].assign(nout * 2, 0x5a);
          out32[r].assign(nout * 4, 0);
        }
        c.dtype = t;
        for (const Status &st : run_all(c, in, out)) ASSERT_TRUE(st.ok()) << st.to_string();
        c.dtype = codec::Dtype::kF32;
        for (const Status &st : run_all(c, in32, out32)) ASSERT_TRUE(st.ok()) << st.to_string();
        for (int r = 0; r < n; ++r) {
          std::vector<uint8_t> want(nout * 2);
          ASSERT_TRUE(codec::encode(codec::half_wire(t),
                                    reinterpret_cast<const float *>(out32[r].data()), nout,
                                    want.data())
                          .ok());
          ASSERT_TRUE(out[r] == want)
              << "rank " << r << ": not the F32 collective's result, rounded";
          if (k.kind != Kind::kReduceScatter) {
            ASSERT_TRUE(out[r] == out[0]) << "rank " << r << " differs from rank 0";
          }
        }
      }
    }
  }
  // A NaN that a block wire cannot carry: named on its member, PEER_LOST elsewhere, nothing
  // written.
  Collective c = allreduce(nullptr, nullptr, count, algo::Algo::kRing);
  c.dtype = codec::Dtype::kBF16;
  c.wire = codec::WireKind::kInt8;
  std::vector<std::vector<uint8_t>> in(n, std::vector<uint8_t>(count * 2, 0x3f)),
      out(n, std::vector<uint8_t>(count * 2, 7));
  in[3][2 * 4321] = 0xc0;  // BF16 0x7fc0: NaN
  in[3][2 * 4321 + 1] = 0x7f;
  const auto before = out;
  const std::vector<Status> st = run_all(c, in, out);
  for (int r = 0; r < n; ++r) {
    if (r == 3) {
      EXPECT_EQ(st[r].code(), WCCL_ERR_INVALID_ARGUMENT) << st[r].to_string();
      EXPECT_NE(st[r].message().find("element 4321 is NaN"), std::string::npos)
          << st[r].to_string();
    } else {
      EXPECT_EQ(st[r].code(), WCCL_ERR_PEER_LOST) << "rank " << r << ": " << st[r].to_string();
    }
    EXPECT_TRUE(out[r] == before[r]) << "rank " << r << " output changed";
  }
}

enum class Fault { kKill, kStop };

// Three members in this process, one in its own process that is killed or frozen while the large
// all-reduce (kBig elements) is under way.
void fault_mid_allreduce(CollectivesTest &t, Fault fault, bool in_place,
                         std::vector<std::unique_ptr<Communicator>> &comms, MemberProcess &victim) {
  ASSERT_EQ(comms.size(), 3u);
  // In the same epoch as the others (its number is the coordinator's clock: "epoch 1" matched it
  // only as a prefix, until 2033).
  const std::string joined = victim.line(20s);
  ASSERT_NE(joined.find("size 4 epoch " + std::to_string(comms[0]->epoch()) + "\n"),
            std::string::npos)
      << joined;
  std::vector<std::vector<float>> send(3), recv(3), send_before(3), recv_before(3);
  std::vector<int> multiplier(3);
  for (size_t k = 0; k < 3; ++k) {
    multiplier[k] = comms[k]->rank() + 1;
    send[k] = filled(kBig, multiplier[k]);
    if (!in_place) recv[k].assign(kBig, 12345.0f);
    send_before[k] = send[k];
    recv_before[k] = recv[k];
  }
  victim.command("allreduce " + std::to_string(kBig));
  std::vector<std::future<Status>> running;
  for (size_t k = 0; k < 3; ++k) {
    void *out = in_place ? static_cast<void *>(send[k].data()) : recv[k].data();
    running.push_back(
        std::async(std::launch::async, [c = comms[k].get(), in = send[k].data(), out] {
          return run_op(c, allreduce(in, out, kBig, algo::Algo::kRing));
        }));
  }
  ASSERT_TRUE(wait_received(comms[0].get(), kBig / 2)) << "the all-reduce did not get under way";
  victim.signal(fault == Fault::kKill ? SIGKILL : SIGSTOP);
  for (size_t k = 0; k < 3; ++k) {
    ASSERT_EQ(running[k].wait_for(20s), std::future_status::ready);
    const Status st = running[k].get();
    EXPECT_EQ(st.code(), WCCL_ERR_PEER_LOST) << st.to_string();
    EXPECT_TRUE(send[k] == send_before[k]) << "survivor " << k << ": the send buffer changed";
    EXPECT_TRUE(recv[k] == recv_before[k]) << "survivor " << k << ": the receive buffer changed";
  }
  for (const Status &st : CommTest::update_all(raw(comms))) ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(comms[0]->size(), 3);
  // The same call again, on the same buffers.
  for (size_t k = 0; k < 3; ++k) {
    void *out = in_place ? static_cast<void *>(send[k].data()) : recv[k].data();
    running[k] = std::async(std::launch::async, [c = comms[k].get(), in = send[k].data(), out] {
      return run_op(c, allreduce(in, out, kBig, algo::Algo::kRing));
    });
  }
  const int total = multiplier[0] + multiplier[1] + multiplier[2];
  for (size_t k = 0; k < 3; ++k) {
    const Status st = running[k].get();
    ASSERT_TRUE(st.ok()) << st.to_string();
    const std::vector<float> &out = in_place ? send[k] : recv[k];
    size_t wrong = 0;
    for (size_t i = 0; i < kBig; ++i) wrong += out[i] != pattern(total, i);
    EXPECT_EQ(wrong, 0u) << "survivor " << k;
  }
}

class FaultTest : public CollectivesTest,
                  public testing::WithParamInterface<std::tuple<Fault, bool>> {};

TEST_P(FaultTest, SurvivorsReturnPeerLostWithBuffersIntactAndTheRetrySucceeds) {
  const auto [fault, in_place] = GetParam();
  MemberProcess victim(port_, pki_.node("victim"));
  auto comms = join_all(3);
  fault_mid_allreduce(*this, fault, in_place, comms, victim);
}

INSTANTIATE_TEST_SUITE_P(Faults, FaultTest,
                         testing::Combine(testing::Values(Fault::kKill, Fault::kStop),
                                          testing::Bool()),
                         [](const auto &p) {
                           return std::string(std::get<0>(p.param) == Fault::kKill ? "Killed"
                                                                                   : "Frozen") +
                                  (std::get<1>(p.param) ? "InPlace" : "OutOfPlace");
                         });

// Three operations in flight; the member dies during the second: the first committed everywhere,
// the second and third fail everywhere, and their buffers are untouched.
TEST_F(CollectivesTest, ConcurrentOperationsWithOneFailing) {
  MemberProcess victim(port_, pki_.node("victim"));
  auto comms = join_all(3);
  ASSERT_EQ(comms.size(), 3u);
  // In the same epoch as the others (its number is the coordinator's clock: "epoch 1" matched it
  // only as a prefix, until 2033).
  const std::string joined = victim.line(20s);
  ASSERT_NE(joined.find("size 4 epoch " + std::to_string(comms[0]->epoch()) + "\n"),
            std::string::npos)
      << joined;
  const size_t counts[3] = {4096, kBig / 4, 4096};
  victim.command("batch " + std::to_string(counts[0]) + " " + std::to_string(counts[1]) + " " +
                 std::to_string(counts[2]));
  std::vector<std::vector<std::vector<float>>> buf(3);
  std::vector<std::vector<std::shared_ptr<Op>>> ops(3);
  for (size_t k = 0; k < 3; ++k) {
    for (size_t j = 0; j < 3; ++j) {
      buf[k].push_back(filled(counts[j], comms[k]->rank() + 1));
      auto op = comms[k]->submit(allreduce(buf[k][j].data(), buf[k][j].data(), counts[j]),
                                 0ms);  // AUTO, as the helper
      ASSERT_TRUE(op.ok()) << op.status().to_string();
      ops[k].push_back(op.value());
    }
  }
  for (size_t k = 0; k < 3; ++k) {
    const Status first = comms[k]->wait(ops[k][0], nullptr);
    ASSERT_TRUE(first.ok()) << first.to_string();
    for (size_t i = 0; i < counts[0]; ++i) ASSERT_EQ(buf[k][0][i], pattern(10, i));
  }
  ASSERT_TRUE(wait_received(comms[0].get(), kBig / 8));
  victim.signal(SIGKILL);
  for (size_t k = 0; k < 3; ++k) {
    // Waited in reverse order: any order works.
    for (size_t j : {2, 1}) {
      const Status st = comms[k]->wait(ops[k][j], nullptr);
      EXPECT_EQ(st.code(), WCCL_ERR_PEER_LOST) << "op " << j << ": " << st.to_string();
      EXPECT_TRUE(buf[k][j] == filled(counts[j], comms[k]->rank() + 1))
          << "op " << j << " changed its buffer";
    }
  }
}

// One member's call differs from the others' in one field (docs/fault-tolerance.md, "Calls that
// differ"): every member fails the operation with MISMATCH naming that field, well before the
// operation's timeout, with its buffer as it was, and nobody is lost: after an update the same
// call on every member succeeds. Without the call check, the same-width cases (another dtype of 4
// bytes, another reduce op) returned OK with results that differ, and the others failed a link
// as if a live neighbour had broken it.
struct Differing {
  const char *name;
  const char *field;  // named in every member's error
  Kind kind;          // everyone's call: 8 F32 elements, summed on the ring (a broadcast: root 0)
  std::function<void(Collective &)> change;  // rank 2's call instead
};

class MismatchTest : public CollectivesTest, public testing::WithParamInterface<Differing> {};

TEST_P(MismatchTest, EveryMemberFailsWithMismatchNamingTheFieldAndTheRetrySucceeds) {
  const Differing &d = GetParam();
  auto comms = join_all(4);
  ASSERT_EQ(comms.size(), 4u);
  constexpr size_t kCount = 8;
  auto call_of = [&](Communicator *c, void *buf, bool differ) {
    Collective op = allreduce(buf, buf, kCount, algo::Algo::kRing);
    op.kind = d.kind;
    if (differ) d.change(op);
    return op;
  };
  // Room for 8 F64 elements; the F32 view holds rank + 1 in every element.
  std::vector<std::vector<double>> buf(4, std::vector<double>(kCount));
  std::vector<std::vector<double>> before(4);
  for (size_t k = 0; k < 4; ++k) {
    auto *f = reinterpret_cast<float *>(buf[k].data());
    for (size_t i = 0; i < 2 * kCount; ++i) f[i] = static_cast<float>(comms[k]->rank() + 1);
    before[k] = buf[k];
  }
  const auto t0 = Clock::now();
  std::vector<std::future<Status>> calls;
  for (size_t k = 0; k < 4; ++k) {
    calls.push_back(std::async(std::launch::async, [&, k] {
      Communicator *c = comms[k].get();
      return run_op(c, call_of(c, buf[k].data(), c->rank() == 2));
    }));
  }
  for (size_t k = 0; k < 4; ++k) {
    const Status st = calls[k].get();
    EXPECT_EQ(st.code(), WCCL_ERR_MISMATCH)
        << "rank " << comms[k]->rank() << ": " << st.to_string();
    EXPECT_NE(st.message().find(std::string("calls differ in ") + d.field), std::string::npos)
        << st.to_string();
    EXPECT_NE(st.message().find("rank 2"), std::string::npos) << st.to_string();
    EXPECT_TRUE(buf[k] == before[k]) << "rank " << comms[k]->rank() << "'s buffer changed";
  }
  EXPECT_LT(Clock::now() - t0, 10s) << "not the operation's timeout (20 s)";
  for (const Status &st : CommTest::update_all(raw(comms))) ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(comms[0]->size(), 4) << "a mismatch loses nobody";
  calls.clear();
  for (size_t k = 0; k < 4; ++k) {
    calls.push_back(std::async(std::launch::async, [&, k] {
      Communicator *c = comms[k].get();
      return run_op(c, call_of(c, buf[k].data(), false));
    }));
  }
  for (size_t k = 0; k < 4; ++k) {
    const Status st = calls[k].get();
    ASSERT_TRUE(st.ok()) << st.to_string();
    const float want = d.kind == Kind::kBroadcast ? 1.0F : 1.0F + 2 + 3 + 4;  // root 0: rank 0's
    EXPECT_EQ(reinterpret_cast<float *>(buf[k].data())[kCount - 1], want);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fields, MismatchTest,
    testing::Values(Differing{"DtypeOfTheSameWidth", "dtype", Kind::kAllreduce,
                              [](Collective &c) { c.dtype = codec::Dtype::kI32; }},
                    Differing{"WiderDtype", "dtype", Kind::kAllreduce,
                              [](Collective &c) { c.dtype = codec::Dtype::kF64; }},
                    Differing{"Count", "count", Kind::kAllreduce,
                              [](Collective &c) { c.count = 7; }},
                    Differing{"ReduceOp", "reduce op", Kind::kAllreduce,
                              [](Collective &c) { c.op = codec::RedOp::kMax; }},
                    Differing{"Wire", "wire", Kind::kAllreduce,
                              [](Collective &c) { c.wire = codec::WireKind::kInt8; }},
                    Differing{"Algo", "algo", Kind::kAllreduce,
                              [](Collective &c) { c.algo = algo::Algo::kTree; }},
                    Differing{"Compress", "compress", Kind::kAllreduce,
                              [](Collective &c) { c.compress = algo::Compress::kAlways; }},
                    Differing{"Collective", "collective", Kind::kAllreduce,
                              [](Collective &c) { c.kind = Kind::kBroadcast; }},
                    Differing{"Root", "root", Kind::kBroadcast, [](Collective &c) { c.root = 1; }}),
    [](const testing::TestParamInfo<Differing> &p) { return std::string(p.param.name); });

TEST_F(CollectivesTest, APeerThatNeverCallsMakesTheOthersTimeOutAndRevokesTheEpoch) {
  auto comms = join_all(4);
  ASSERT_EQ(comms.size(), 4u);
  std::vector<float> v = filled(1000, 1), before = v;
  const auto t0 = Clock::now();
  std::vector<std::future<Status>> calls;
  for (size_t k = 0; k < 3; ++k) {  // the fourth never calls
    calls.push_back(std::async(std::launch::async, [c = comms[k].get()] {
      std::vector<float> mine = filled(1000, 1);
      auto op = c->submit(allreduce(mine.data(), mine.data(), 1000), 500ms);
      return op.ok() ? c->wait(op.value(), nullptr) : op.status();
    }));
  }
  for (auto &f : calls) {
    const Status st = f.get();
    EXPECT_TRUE(st.code() == WCCL_ERR_TIMEOUT || st.code() == WCCL_ERR_PEER_LOST) << st.to_string();
  }
  EXPECT_LT(Clock::now() - t0, 5s);
  ASSERT_TRUE(comms[3]->wait_revoked(5s)) << "the silent member hears that the epoch is revoked";
  EXPECT_EQ(run_op(comms[3].get(), allreduce(v.data(), v.data(), 1000)).code(), WCCL_ERR_PEER_LOST);
  EXPECT_TRUE(v == before);
  for (const Status &st : CommTest::update_all(raw(comms))) ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(comms[0]->size(), 4) << "a timeout loses nobody";
}

// Device buffers on an (emulated) GPU through communicators over TLS: each member's input reaches
// the device on its own stream, which the operation waits for (opts.cuda_stream), and the result
// lands in device memory, bit-identical to host memory's; a GPU fault on one member fails the
// operation there with the CUDA error and PEER_LOST elsewhere, every recvbuf untouched, and the
// retry after update succeeds.
// Four members whose device buffers live on an emulated GPU (installed first, gone last).
class DeviceCollectivesTest : public CollectivesTest {
 protected:
  void SetUp() override {
    CollectivesTest::SetUp();
    gpu.install();
    comms = join_all(n);
    ASSERT_EQ(comms.size(), static_cast<size_t>(n));
    by_rank = by_rank_of(comms);
  }
  static constexpr int n = 4;
  test::EmulatedGpu gpu;
  std::vector<std::unique_ptr<Communicator>>
      comms;  // they keep device scratch: destroyed before the GPU
  std::vector<Communicator *> by_rank;
};

TEST_F(DeviceCollectivesTest, DeviceBuffersOnAGpu) {
  const size_t count = 300007;
  std::vector<std::vector<float>> in(n);
  std::vector<void *> din(n), dout(n);
  std::vector<gpu::Stream> streams(n);
  const std::vector<float> untouched(count, -1.0f);
  for (int r = 0; r < n; ++r) {
    in[r] = filled(count, r + 1);
    const std::vector<float> garbage(count, 1e30f);
    din[r] = gpu.alloc_copy(garbage.data(), count * 4);
    dout[r] = gpu.alloc_copy(untouched.data(), count * 4);
    ASSERT_TRUE(gpu.create_stream(&streams[r]).ok());
  }
  // Submits on every member, then (fault_after >= 0) arms a fault, then waits for every outcome.
  auto run_all_ranks = [&](codec::Wire wire, long fault_after) {
    std::vector<Status> st(n);
    std::vector<std::shared_ptr<Op>> ops(n);
    for (int r = 0; r < n; ++r) {
      // The input reaches the device on the caller's stream, not yet run when the call is made.
      EXPECT_TRUE(gpu.copy(din[r], in[r].data(), count * 4, streams[r]).ok());
      Collective c = allreduce(din[r], dout[r], count, algo::Algo::kRing);
      c.wire = wire;
      c.device = &gpu;
      c.after = streams[r];
      auto op = by_rank[r]->submit(c, 0ms);
      if (op.ok()) ops[r] = op.value();
      st[r] = op.status();
    }
    if (fault_after >= 0) gpu.fail_after(fault_after);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      if (ops[r]) threads.emplace_back([&, r] { st[r] = by_rank[r]->wait(ops[r], nullptr); });
    }
    for (auto &t : threads) t.join();
    return st;
  };
  std::vector<float> host_int8;
  for (codec::Wire wire : {codec::WireKind::kNative, codec::WireKind::kInt8}) {
    SCOPED_TRACE(codec::wire_name(wire));
    const std::vector<Status> st = run_all_ranks(wire, -1);
    std::vector<std::vector<uint8_t>> got(n);
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
      got[r] = gpu.read(dout[r], count * 4);
      EXPECT_EQ(got[r], got[0]) << "rank " << r << " differs from rank 0";
    }
    std::vector<float> out(count);
    std::memcpy(out.data(), got[0].data(), count * 4);
    for (size_t i = 0; i < count; ++i) {
      const float want = pattern(1 + 2 + 3 + 4, i);
      if (wire.kind == codec::WireKind::kNative) {
        ASSERT_EQ(out[i], want) << "element " << i;
      } else {
        ASSERT_NEAR(out[i], want, 4 * 4 * 250.0 / 510 + 1e-3) << "element " << i;
      }
    }
  }
  // A fault on some member's GPU, somewhere in the operation.
  for (int r = 0; r < n; ++r) gpu.write(dout[r], untouched.data(), count * 4);
  const std::vector<Status> st = run_all_ranks(codec::WireKind::kInt8, 10);
  int own = 0;
  for (int r = 0; r < n; ++r) {
    EXPECT_FALSE(st[r].ok()) << "rank " << r;
    own += st[r].code() == WCCL_ERR_CUDA;
    if (st[r].code() != WCCL_ERR_CUDA) {
      EXPECT_EQ(st[r].code(), WCCL_ERR_PEER_LOST) << st[r].to_string();
    }
    EXPECT_EQ(gpu.read(dout[r], count * 4),
              std::vector<uint8_t>(reinterpret_cast<const uint8_t *>(untouched.data()),
                                   reinterpret_cast<const uint8_t *>(untouched.data()) + count * 4))
        << "rank " << r << "'s recvbuf changed";
  }
  EXPECT_EQ(own, 1);
  for (const Status &u : update_all(raw(comms))) ASSERT_TRUE(u.ok()) << u.to_string();
  by_rank = by_rank_of(comms);
  for (const Status &s : run_all_ranks(codec::WireKind::kInt8, -1))
    EXPECT_TRUE(s.ok()) << s.to_string();
  comms.clear();
  for (int r = 0; r < n; ++r) {
    gpu.free(din[r]);
    gpu.free(dout[r]);
    gpu.destroy_stream(streams[r]);
  }
  EXPECT_EQ(gpu.live_allocations(), 0u) << "the communicators freed their device memory";
}

// BF16 device buffers on the INT8 wire (an emulated GPU): widened and rounded by the GPU, after
// the caller's stream, bit for bit what host buffers give.
TEST_F(DeviceCollectivesTest, HalfPrecisionDeviceBuffersAreWidenedOnTheGpu) {
  const size_t count = 100003;
  std::vector<std::vector<uint8_t>> in(n), host_out(n, std::vector<uint8_t>(count * 2));
  std::vector<void *> dbuf(n);
  std::vector<gpu::Stream> streams(n);
  for (int r = 0; r < n; ++r) {
    const std::vector<float> x = filled(count, r + 1);
    in[r].resize(count * 2);
    ASSERT_TRUE(codec::encode(codec::WireKind::kBF16, x.data(), count, in[r].data()).ok());
    const std::vector<uint8_t> garbage(count * 2, 0x7f);
    dbuf[r] = gpu.alloc_copy(garbage.data(), garbage.size());
    ASSERT_TRUE(gpu.create_stream(&streams[r]).ok());
    ASSERT_TRUE(gpu.copy(dbuf[r], in[r].data(), count * 2, streams[r]).ok());  // not run yet
  }
  std::vector<Status> st(2 * n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    Collective c = allreduce(in[r].data(), host_out[r].data(), count, algo::Algo::kRing);
    c.dtype = codec::Dtype::kBF16;
    c.wire = codec::WireKind::kInt8;
    threads.emplace_back([&, r, c] { st[r] = run_op(by_rank[r], c); });
  }
  for (auto &t : threads) t.join();
  threads.clear();
  for (int r = 0; r < n; ++r) {
    Collective c = allreduce(dbuf[r], dbuf[r], count, algo::Algo::kRing);  // in place
    c.dtype = codec::Dtype::kBF16;
    c.wire = codec::WireKind::kInt8;
    c.device = &gpu;
    c.after = streams[r];
    threads.emplace_back([&, r, c] { st[n + r] = run_op(by_rank[r], c); });
  }
  for (auto &t : threads) t.join();
  for (int r = 0; r < 2 * n; ++r) ASSERT_TRUE(st[r].ok()) << r << ": " << st[r].to_string();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(host_out[r], host_out[0]) << "rank " << r;
    EXPECT_EQ(gpu.read(dbuf[r], count * 2), host_out[r])
        << "rank " << r << ": device and host results differ";
  }
  comms.clear();
  for (int r = 0; r < n; ++r) {
    gpu.free(dbuf[r]);
    gpu.destroy_stream(streams[r]);
  }
  EXPECT_EQ(gpu.live_allocations(), 0u);
}

TEST_F(CollectivesTest, BarrierReturnsOnlyOnceEveryoneCalledIt) {
  auto comms = join_all(4);
  ASSERT_EQ(comms.size(), 4u);
  Collective barrier;
  barrier.kind = Kind::kBarrier;
  std::vector<std::future<Status>> early;
  for (size_t k = 0; k < 3; ++k) {
    early.push_back(std::async(std::launch::async,
                               [c = comms[k].get(), barrier] { return run_op(c, barrier); }));
  }
  EXPECT_EQ(early[0].wait_for(300ms), std::future_status::timeout)
      << "returned before the last member called";
  EXPECT_TRUE(run_op(comms[3].get(), barrier).ok());
  for (auto &f : early) EXPECT_TRUE(f.get().ok());
}

TEST_F(CollectivesTest, UpdateWithAnOperationInFlightIsRefused) {
  auto comms = join_all(4);
  ASSERT_EQ(comms.size(), 4u);
  std::vector<float> v = filled(16, 1);
  auto op = comms[0]->submit(allreduce(v.data(), v.data(), 16), 0ms);
  ASSERT_TRUE(op.ok());
  EXPECT_EQ(comms[0]->update().code(), WCCL_ERR_INVALID_USAGE);
  comms[0]->abort();
  EXPECT_EQ(comms[0]->wait(op.value(), nullptr).code(), WCCL_ERR_ABORTED);
  EXPECT_EQ(v, filled(16, 1));
}

}  // namespace
}  // namespace wccl::comm

namespace wccl::comm {
namespace {

// The slow soak: 500 all-reduces while member processes are killed at random moments and new ones
// join. Every member's outcome of every operation must agree (all OK or all PEER_LOST), every OK
// result must be exact, and nothing may hang (every wait is bounded).
// --- state sync --------------------------------------------------------------------------------

// Four tensors of kBig F32 elements in all, one member's state.
struct State {
  std::vector<std::vector<float>> t;
  explicit State(bool filled_in) {
    for (size_t count : {kBig / 2, kBig / 4, kBig / 4 - 3, size_t{3}}) {
      t.push_back(filled_in ? filled(count, static_cast<int>(t.size()) + 1)
                            : std::vector<float>(count, 0.0f));
    }
  }
  std::vector<SyncTensor> tensors() {
    std::vector<SyncTensor> out;
    for (size_t i = 0; i < t.size(); ++i)
      out.push_back({"layer" + std::to_string(i), t[i].data(), codec::Dtype::kF32, t[i].size()});
    return out;
  }
};

struct SyncCall {
  Status status;
  uint64_t revision;
  SyncStats stats;
};

// state_sync on every communicator at once; revisions[i] is comms[i]'s.
std::vector<SyncCall> sync_all(const std::vector<Communicator *> &comms, std::vector<State> &states,
                               std::vector<uint64_t> revisions,
                               std::vector<std::vector<SyncTensor>> lists = {}) {
  std::vector<std::future<SyncCall>> f;
  for (size_t i = 0; i < comms.size(); ++i) {
    std::vector<SyncTensor> list = lists.empty() ? states[i].tensors() : lists[i];
    f.push_back(std::async(std::launch::async, [c = comms[i], list, rev = revisions[i]] {
      SyncCall call{Status(), rev, SyncStats()};
      call.status = state_sync(*c, list, &call.revision, algo::SyncMode::kPopular, &call.stats);
      return call;
    }));
  }
  std::vector<SyncCall> out;
  for (auto &x : f) out.push_back(x.get());
  return out;
}

TEST_F(CollectivesTest, StateSyncJoinerCatchesUpFromThreeDonors) {
  extra_config_["sync_compress"] = "off";  // byte counts below are exact
  auto comms = join_all(4);
  ASSERT_EQ(comms.size(), 4u);
  std::vector<State> states = {State(true), State(true), State(true),
                               State(false)};  // comms[3] joined late
  auto calls = sync_all(raw(comms), states, {7, 7, 7, 0});
  const State want(true);
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(calls[i].status.ok()) << "member " << i << ": " << calls[i].status.to_string();
    EXPECT_EQ(calls[i].revision, 7u);
    EXPECT_TRUE(states[i].t == want.t) << "member " << i << " holds the elected tensors";
    EXPECT_EQ(calls[i].stats.world_size, 4);
  }
  EXPECT_EQ(calls[3].stats.sources, 3u) << "striped over all three donors";
  EXPECT_EQ(calls[3].stats.tensors_received, 4u);
  EXPECT_EQ(calls[3].stats.bytes_received, kBig * sizeof(float))
      << "sync_compress=off: every byte as it is";
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(calls[i].stats.bytes_received, 0u);
    EXPECT_GT(calls[i].stats.bytes_sent, kBig * sizeof(float) / 4)
        << "donor " << i << " sent a third";
  }

  // In sync: nothing moves. Then one member's tensor 3 drifts: only those 12 bytes move, to it.
  calls = sync_all(raw(comms), states, {7, 7, 7, 7});
  for (auto &c : calls) {
    ASSERT_TRUE(c.status.ok()) << c.status.to_string();
    EXPECT_EQ(c.stats.bytes_received + c.stats.bytes_sent, 0u);
  }
  states[1].t[3][2] = -1.0f;
  calls = sync_all(raw(comms), states, {8, 7, 8, 8});
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(calls[i].status.ok()) << calls[i].status.to_string();
    EXPECT_EQ(calls[i].revision, 8u);
    EXPECT_EQ(calls[i].stats.bytes_received, i == 1 ? 12u : 0u);
    EXPECT_EQ(calls[i].stats.tensors_received, i == 1 ? 1u : 0u);
  }
  EXPECT_TRUE(states[1].t == want.t);
}

// With sync_compress on (the default), whether a donor compresses depends on how fast this machine
// compresses against how fast its loopback carries bytes; either way the joiner ends with the
// elected tensors, and never receives more than their size.
// Device tensors (on an emulated GPU) next to host tensors: a joiner whose zeroed tensors are
// device memory catches up from a donor with device tensors and two with host tensors; then a
// drifted device tensor is found by its GPU hash, and only it moves.
TEST_F(CollectivesTest, StateSyncWithDeviceTensors) {
  test::EmulatedGpu gpu;
  gpu.install();
  extra_config_["sync_compress"] = "off";
  auto comms = join_all(4);
  ASSERT_EQ(comms.size(), 4u);
  std::vector<State> states = {State(true), State(true), State(true), State(false)};
  std::vector<std::vector<SyncTensor>> lists;
  std::vector<void *> allocated;
  for (size_t i = 0; i < 4; ++i) {
    lists.push_back(states[i].tensors());
    if (i != 0 && i != 3) continue;  // members 0 and 3 hold theirs on the GPU
    for (SyncTensor &t : lists.back()) {
      t.data = gpu.alloc_copy(t.data, t.count * sizeof(float));
      t.device = &gpu;
      allocated.push_back(t.data);
    }
  }
  auto device_tensor = [&](size_t member, size_t k) {
    const std::vector<uint8_t> b =
        gpu.read(lists[member][k].data, lists[member][k].count * sizeof(float));
    std::vector<float> v(lists[member][k].count);
    if (!v.empty()) std::memcpy(v.data(), b.data(), b.size());
    return v;
  };
  auto calls = sync_all(raw(comms), states, {7, 7, 7, 0}, lists);
  const State want(true);
  for (size_t i = 0; i < 4; ++i)
    ASSERT_TRUE(calls[i].status.ok()) << "member " << i << ": " << calls[i].status.to_string();
  EXPECT_EQ(calls[3].stats.sources, 3u) << "the device donor sends too";
  EXPECT_EQ(calls[3].stats.bytes_received, kBig * sizeof(float));
  for (size_t k = 0; k < want.t.size(); ++k)
    EXPECT_TRUE(device_tensor(3, k) == want.t[k]) << "tensor " << k;
  std::vector<float> drifted = device_tensor(0, 3);
  drifted[2] = -1.0f;
  gpu.write(lists[0][3].data, drifted.data(), drifted.size() * sizeof(float));
  calls = sync_all(raw(comms), states, {8, 8, 8, 8}, lists);
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(calls[i].status.ok()) << calls[i].status.to_string();
    EXPECT_EQ(calls[i].stats.bytes_received, i == 0 ? 12u : 0u);
  }
  EXPECT_TRUE(device_tensor(0, 3) == want.t[3]);
  comms.clear();  // they keep memory on the GPU
  for (void *p : allocated) gpu.free(p);
  EXPECT_EQ(gpu.live_allocations(), 0u);
}

TEST_F(CollectivesTest, StateSyncWithCompressionWhereItPays) {
  auto comms = join_all(4);
  ASSERT_EQ(comms.size(), 4u);
  std::vector<State> states = {State(true), State(true), State(true), State(false)};
  auto calls = sync_all(raw(comms), states, {3, 3, 3, 0});
  for (auto &c : calls) ASSERT_TRUE(c.status.ok()) << c.status.to_string();
  EXPECT_TRUE(states[3].t == State(true).t);
  EXPECT_LE(calls[3].stats.bytes_received, kBig * sizeof(float));
  EXPECT_GT(calls[3].stats.bytes_received, 0u);
  std::printf("joiner received %llu wire bytes for %zu tensor bytes\n",
              static_cast<unsigned long long>(calls[3].stats.bytes_received), kBig * sizeof(float));
}

TEST_F(CollectivesTest, StateSyncMismatchIsRefusedEverywhereBeforeDataMoves) {
  auto comms = join_all(4);
  ASSERT_EQ(comms.size(), 4u);
  std::vector<State> states = {State(true), State(true), State(true), State(false)};
  std::vector<std::vector<SyncTensor>> lists;
  for (auto &st : states) lists.push_back(st.tensors());
  lists[2][1].count -= 1;  // one member disagrees on one tensor's length
  auto calls = sync_all(raw(comms), states, {1, 1, 1, 0}, lists);
  const int bad_rank = comms[2]->rank();
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(calls[i].status.code(), WCCL_ERR_INVALID_USAGE) << calls[i].status.to_string();
    EXPECT_EQ(calls[i].status.message(), calls[0].status.message())
        << "every member names the same mismatch";
    EXPECT_EQ(calls[i].revision, i == 3 ? 0u : 1u);
  }
  if (bad_rank != 0) {
    EXPECT_NE(calls[0].status.message().find("tensor 1 is \"layer1\" f32 x " +
                                             std::to_string(kBig / 4 - 1) + " on rank " +
                                             std::to_string(bad_rank)),
              std::string::npos)
        << calls[0].status.message();
  }
  EXPECT_TRUE(states[3].t == State(false).t) << "no tensor data moved";
}

// A donor dies mid-transfer: the survivors re-form without it inside the call and the joiner
// completes from the two that remain.
TEST_F(CollectivesTest, StateSyncDonorLostMidTransferIsCompletedByTheOthers) {
  extra_config_["sync_compress"] = "off";  // the loss must land mid-transfer, by raw bytes received
  auto comms = join_all(4);
  ASSERT_EQ(comms.size(), 4u);
  std::vector<State> states = {State(true), State(true), State(true), State(false)};
  std::vector<std::future<SyncCall>> f;
  for (size_t i = 0; i < 4; ++i) {
    f.push_back(std::async(std::launch::async, [c = comms[i].get(), list = states[i].tensors(), i] {
      SyncCall call{Status(), i == 3 ? 0u : 5u, SyncStats()};
      call.status = state_sync(*c, list, &call.revision, algo::SyncMode::kPopular, &call.stats);
      return call;
    }));
  }
  ASSERT_TRUE(wait_received(comms[3].get(), kBig * sizeof(float) / 8))
      << "the transfer never started";
  comms[1]->abort();  // a donor dies mid-transfer: its links close, then its control connection
  const SyncCall victim = f[1].get();
  EXPECT_EQ(victim.status.code(), WCCL_ERR_ABORTED);
  comms[1].reset();
  std::vector<SyncCall> calls;
  for (size_t i : {0, 2, 3}) calls.push_back(f[i].get());
  for (const SyncCall &c : calls) {
    ASSERT_TRUE(c.status.ok()) << c.status.to_string();
    EXPECT_EQ(c.revision, 5u);
    EXPECT_EQ(c.stats.world_size, 3);
  }
  EXPECT_EQ(calls[2].stats.sources, 2u) << "the joiner finished from the two remaining donors";
  EXPECT_GT(calls[2].stats.bytes_received, kBig * sizeof(float))
      << "what came before the loss counts too";
  EXPECT_TRUE(states[3].t == State(true).t);
  EXPECT_EQ(comms[3]->size(), 3);
}

// At 16 members a donor that is not the joiner's neighbour sends over a link of the sync's own:
// its loss mid-transfer fails that link, and the survivors finish from the 14 others over the
// next epoch's links.
TEST_F(CommTest, StateSyncDonorLostOverTheSyncsOwnLink) {
  constexpr int n = 16;
  extra_config_["sync_compress"] = "off";
  // One stream a link: which links exist is what counts here, and 16 members of one process with 4
  // TLS streams a link were seen to miss the 3 s hello deadline under TSan on a loaded machine.
  extra_config_["streams"] = "1";
  auto comms = group_of(n);
  ASSERT_EQ(comms.size(), size_t{n});
  const std::vector<Communicator *> by_rank = by_rank_of(comms);
  Communicator *joiner = by_rank[n - 1];
  const std::set<int> neighbours = algo::schedule_neighbours(n - 1, n);
  int victim_rank = 0;
  while (neighbours.count(victim_rank) != 0) ++victim_rank;
  Communicator *victim = by_rank[static_cast<size_t>(victim_rank)];
  const size_t count = test::large_bytes(size_t{64} << 20) / sizeof(float);
  std::vector<std::vector<float>> tensor(n);
  std::vector<std::future<SyncCall>> f;
  for (size_t i = 0; i < comms.size(); ++i) {
    const bool late = comms[i].get() == joiner;
    tensor[i] = late ? std::vector<float>(count, 0.0f) : filled(count, 9);
    std::vector<SyncTensor> list = {{"w", tensor[i].data(), codec::Dtype::kF32, count}};
    f.push_back(std::async(std::launch::async, [c = comms[i].get(), list, late] {
      SyncCall call{Status(), late ? 0u : 5u, SyncStats()};
      call.status = state_sync(*c, list, &call.revision, algo::SyncMode::kPopular, &call.stats);
      return call;
    }));
  }
  // The first 512th of the state: every donor is sending its share, and the victim is aborted long
  // before the rest can arrive (after a 32nd, a loaded machine was seen to finish the transfer
  // before the abort took effect).
  ASSERT_TRUE(wait_received(joiner, count * sizeof(float) / 512)) << "the transfer never started";
  victim->abort();
  for (size_t i = 0; i < comms.size(); ++i) {
    const SyncCall call = f[i].get();
    if (comms[i].get() == victim) {
      EXPECT_EQ(call.status.code(), WCCL_ERR_ABORTED);
      continue;
    }
    ASSERT_TRUE(call.status.ok()) << "member " << i << ": " << call.status.to_string();
    EXPECT_EQ(call.revision, 5u);
    EXPECT_EQ(call.stats.world_size, n - 1);
    EXPECT_TRUE(tensor[i] == filled(count, 9)) << "member " << i;
    if (comms[i].get() == joiner) {
      EXPECT_EQ(call.stats.sources, size_t{n - 2}) << "finished from the 14 other donors";
    }
  }
}

// The only donor dies: PEER_LOST, with the joiner's tensors and revision as they were.
TEST_F(CollectivesTest, StateSyncWithNoDonorLeftFailsWithTensorsUntouched) {
  extra_config_["sync_compress"] = "off";
  auto comms = join_all(4);
  ASSERT_EQ(comms.size(), 4u);
  std::vector<State> states = {State(true), State(false), State(false), State(false)};  // one donor
  std::vector<std::future<SyncCall>> f;
  for (size_t i = 0; i < 4; ++i) {
    f.push_back(std::async(std::launch::async, [c = comms[i].get(), list = states[i].tensors(), i] {
      SyncCall call{Status(), i == 0 ? 5u : 0u, SyncStats()};
      // The donor is send-only: three popular members with zeroed tensors would outvote it.
      const algo::SyncMode mode = i == 0 ? algo::SyncMode::kSendOnly : algo::SyncMode::kPopular;
      call.status = state_sync(*c, list, &call.revision, mode, &call.stats);
      return call;
    }));
  }
  ASSERT_TRUE(wait_received(comms[1].get(), kBig * sizeof(float) / 16))
      << "the transfer never started";
  comms[0]->abort();
  EXPECT_EQ(f[0].get().status.code(), WCCL_ERR_ABORTED);
  comms[0].reset();
  for (size_t i = 1; i < 4; ++i) {
    const SyncCall c = f[i].get();
    EXPECT_EQ(c.status.code(), WCCL_ERR_PEER_LOST) << c.status.to_string();
    EXPECT_NE(c.status.message().find("no remaining member holds tensor"), std::string::npos)
        << c.status.to_string();
    EXPECT_EQ(c.revision, 0u);
    EXPECT_TRUE(states[i].t == State(false).t) << "member " << i << "'s tensors are untouched";
  }
}

// Sixteen members, the last admitted by an update: each links to its schedule neighbours only
// (algo::schedule_neighbours: at most 8 of the 15 others), every kind agrees over those links,
// and the joiner's state sync, striped over all 15 donors, links the donors that are not its
// neighbours for that operation alone.
TEST_F(CommTest, SixteenMembersLinkToTheirScheduleNeighboursOnly) {
  constexpr int n = 16;
  extra_config_["chunk_bytes"] = "64K";  // the state below is 15 pieces, one from each donor
  extra_config_["sync_compress"] = "off";
  extra_config_["streams"] = "1";  // as above
  auto comms = group_of(n - 1);
  ASSERT_EQ(comms.size(), size_t{n - 1});
  auto joining = std::async(
      std::launch::async,
      [cfg = peer_config("peer" + std::to_string(n - 1))] { return Communicator::join(cfg); });
  ASSERT_TRUE(eventually(
      [&] {
        return std::all_of(comms.begin(), comms.end(), [](auto &c) { return c->pending() == 1; });
      },
      10s));
  for (const Status &st : update_all(raw(comms))) ASSERT_TRUE(st.ok()) << st.to_string();
  auto joined = joining.get();
  ASSERT_TRUE(joined.ok()) << joined.status().to_string();
  Communicator *joiner = joined.value().get();
  comms.push_back(std::move(joined).value());
  const std::vector<Communicator *> by_rank = by_rank_of(comms);
  auto expect_schedule_links = [&] {
    for (int r = 0; r < n; ++r) {
      std::map<int, std::shared_ptr<net::Link>> links;
      ASSERT_TRUE(by_rank[static_cast<size_t>(r)]->links(10s, &links).ok());
      std::set<int> ranks;
      for (const auto &[rank, link] : links) ranks.insert(rank);
      EXPECT_EQ(ranks, algo::schedule_neighbours(r, n)) << "rank " << r;
      EXPECT_LE(ranks.size(), 8u);
    }
  };
  expect_schedule_links();
  expect_every_kind_agrees(by_rank, {{Kind::kAllreduce, algo::Algo::kRing, 100003},
                                     {Kind::kAllreduce, algo::Algo::kTree, 100003},
                                     {Kind::kBroadcast, algo::Algo::kAuto, 30011},
                                     {Kind::kAllgather, algo::Algo::kAuto, 1009},
                                     {Kind::kReduceScatter, algo::Algo::kAuto, 1009},
                                     {Kind::kBarrier, algo::Algo::kAuto, 0}});

  const size_t count = 15 * (size_t{64} << 10) / sizeof(float);
  std::vector<std::vector<float>> tensor(n);
  std::vector<std::vector<SyncTensor>> lists(n);
  std::vector<uint64_t> revisions(n, 3);
  for (size_t i = 0; i < comms.size(); ++i) {
    const bool late = comms[i].get() == joiner;
    tensor[i] = late ? std::vector<float>(count, 0.0f) : filled(count, 5);
    lists[i] = {{"w", tensor[i].data(), codec::Dtype::kF32, count}};
    if (late) revisions[i] = 0;
  }
  std::vector<State> unused;
  const std::vector<SyncCall> calls = sync_all(raw(comms), unused, revisions, lists);
  for (size_t i = 0; i < comms.size(); ++i) {
    ASSERT_TRUE(calls[i].status.ok()) << "member " << i << ": " << calls[i].status.to_string();
    EXPECT_EQ(calls[i].revision, 3u);
    EXPECT_TRUE(tensor[i] == filled(count, 5)) << "member " << i;
    if (comms[i].get() == joiner) {
      EXPECT_EQ(calls[i].stats.sources, 15u) << "every donor, neighbour or not";
      EXPECT_EQ(calls[i].stats.bytes_received, count * sizeof(float));
    }
  }
  expect_schedule_links();  // the operation's links were its own
  // A second sync, of one member whose tensor drifted, links its donors again for its operation.
  tensor[0][1] = -1.0f;
  revisions.assign(n, 3);
  revisions[0] = 2;
  const std::vector<SyncCall> again = sync_all(raw(comms), unused, revisions, lists);
  for (size_t i = 0; i < comms.size(); ++i) {
    ASSERT_TRUE(again[i].status.ok()) << "member " << i << ": " << again[i].status.to_string();
    EXPECT_TRUE(tensor[i] == filled(count, 5)) << "member " << i;
  }
  EXPECT_EQ(again[0].stats.sources, 15u);
}

TEST_F(CollectivesTest, ChurnSoak) {
  constexpr int kOps = 500;
  constexpr size_t kCount = size_t{1} << 20;
  std::mt19937 rng(20261121);
  std::vector<std::unique_ptr<MemberProcess>> members;
  int spawned = 0;
  auto spawn = [&] {
    const std::string name = "member" + std::to_string(spawned++);
    members.push_back(std::make_unique<MemberProcess>(port_, pki_.node(name), name));
  };
  spawn();
  spawn();
  auto comms = join_all(2);  // two anchors in this process, with the two member processes
  ASSERT_EQ(comms.size(), 2u);
  for (auto &m : members) ASSERT_NE(m->line(20s).find("joined"), std::string::npos);
  std::vector<size_t> waiting_to_join;  // indexes into members, spawned but not admitted yet
  int ok = 0, lost = 0, kills = 0;
  bool revoked = false;
  for (int it = 0; it < kOps; ++it) {
    if (revoked || comms[0]->pending() > 0) {
      for (size_t k = 0; k < members.size(); ++k) {
        if (std::find(waiting_to_join.begin(), waiting_to_join.end(), k) == waiting_to_join.end()) {
          members[k]->command("update");
        }
      }
      for (const Status &st : CommTest::update_all(raw(comms)))
        ASSERT_TRUE(st.ok()) << st.to_string();
      for (size_t k = 0; k < members.size(); ++k) {
        const bool joiner =
            std::find(waiting_to_join.begin(), waiting_to_join.end(), k) != waiting_to_join.end();
        const std::string line = members[k]->line(30s);
        ASSERT_NE(line.find(joiner ? "joined" : "update WCCL_OK"), std::string::npos)
            << "member " << k << ": " << line;
      }
      waiting_to_join.clear();
      revoked = false;
    }
    const int n = comms[0]->size();
    ASSERT_EQ(n, static_cast<int>(comms.size() + members.size() - waiting_to_join.size()));
    for (auto &m : members) m->command("allreduce " + std::to_string(kCount));
    std::vector<std::vector<float>> bufs(comms.size());
    std::vector<std::future<Status>> anchors;
    for (size_t k = 0; k < comms.size(); ++k) {
      bufs[k] = filled(kCount, comms[k]->rank() + 1);
      anchors.push_back(std::async(std::launch::async, [c = comms[k].get(), b = bufs[k].data()] {
        return run_op(c, allreduce(b, b, kCount));
      }));
    }
    const int dice = static_cast<int>(rng() % 100);
    if (dice < 5 && members.size() > 1 && waiting_to_join.empty()) {  // kill a member mid-operation
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 20));
      const size_t victim = rng() % members.size();
      members[victim]->signal(SIGKILL);
      members.erase(members.begin() + static_cast<long>(victim));
      ++kills;
      revoked = true;  // even if this operation committed before the kill, the next one cannot
    } else if (dice < 10 && members.size() < 4) {  // a newcomer asks to join
      spawn();
      waiting_to_join.push_back(members.size() - 1);
      // Once the members hear of it, the next update admits it.
      const auto deadline = Clock::now() + 20s;
      while (comms[0]->pending() < static_cast<int>(waiting_to_join.size()) &&
             Clock::now() < deadline) {
        std::this_thread::sleep_for(1ms);
      }
      ASSERT_EQ(comms[0]->pending(), static_cast<int>(waiting_to_join.size()));
    }
    std::vector<wccl_result_t> outcomes;
    for (size_t k = 0; k < comms.size(); ++k) {
      ASSERT_EQ(anchors[k].wait_for(60s), std::future_status::ready)
          << "operation " << it << " hangs";
      const Status st = anchors[k].get();
      outcomes.push_back(st.code());
      if (st.ok()) {
        for (size_t i = 0; i < kCount; ++i)
          ASSERT_EQ(bufs[k][i], pattern(n * (n + 1) / 2, i)) << "operation " << it;
      } else {
        ASSERT_EQ(st.code(), WCCL_ERR_PEER_LOST) << st.to_string();
        ASSERT_TRUE(bufs[k] == filled(kCount, comms[k]->rank() + 1))
            << "a failed operation changed the buffer";
      }
    }
    for (size_t k = 0; k < members.size(); ++k) {
      if (std::find(waiting_to_join.begin(), waiting_to_join.end(), k) != waiting_to_join.end())
        continue;
      const std::string line = members[k]->line(60s);
      ASSERT_EQ(line.rfind("allreduce ", 0), 0u)
          << "member " << k << " at operation " << it << ": " << line;
      outcomes.push_back(line.find("WCCL_OK 0") != std::string::npos ? WCCL_OK
                                                                     : WCCL_ERR_PEER_LOST);
      if (line.find("WCCL_OK") == std::string::npos) {
        ASSERT_NE(line.find("WCCL_ERR_PEER_LOST"), std::string::npos) << line;
      } else {
        ASSERT_NE(line.find("WCCL_OK 0"), std::string::npos) << "wrong elements: " << line;
      }
    }
    for (wccl_result_t r : outcomes)
      ASSERT_EQ(r, outcomes[0]) << "members disagree on operation " << it;
    if (outcomes[0] == WCCL_OK) {
      ++ok;
    } else {
      ++lost;
      revoked = true;
    }
  }
  std::printf("churn: %d operations OK, %d PEER_LOST, %d members killed, %d spawned\n", ok, lost,
              kills, spawned);
  EXPECT_GT(ok, kOps / 2);
  EXPECT_GT(kills, 0);
}

}  // namespace
}  // namespace wccl::comm
