// State sync: the hash, the description's encoding, the election and plan rules, and the data
// phase over the in-memory channel (algo/state_sync.h).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <thread>

#include "algo/state_sync.h"
#include "codec/compress.h"
#include "codec/hash.h"
#include "emulated_device.h"
#include "memory_channel.h"

namespace wccl::algo {
namespace {

using codec::Dtype;

TEST(Hash, EveryBitMattersAndLengthCounts) {
  std::vector<uint8_t> buf(1000);
  std::mt19937 rng(7);
  for (auto &b : buf) b = static_cast<uint8_t>(rng());
  std::set<uint64_t> seen;
  for (size_t len : {0, 1, 3, 4, 7, 8, 31, 32, 33, 63, 64, 999, 1000}) {
    const uint64_t h = codec::hash64(buf.data(), len);
    EXPECT_TRUE(seen.insert(h).second) << "length " << len << " collides";
    EXPECT_EQ(h, codec::hash64(buf.data(), len)) << "deterministic";
  }
  const uint64_t base = codec::hash64(buf.data(), buf.size());
  for (size_t byte : {size_t{0}, size_t{31}, size_t{500}, size_t{998}, size_t{999}}) {
    for (int bit = 0; bit < 8; ++bit) {
      buf[byte] ^= static_cast<uint8_t>(1 << bit);
      const uint64_t h = codec::hash64(buf.data(), buf.size());
      buf[byte] ^= static_cast<uint8_t>(1 << bit);
      EXPECT_NE(h, base) << "byte " << byte << " bit " << bit;
      const int changed = __builtin_popcountll(h ^ base);
      EXPECT_GT(changed, 12) << "a one-bit change must avalanche";
      EXPECT_LT(changed, 52);
    }
  }
  std::vector<uint8_t> zeros(4096, 0);
  EXPECT_NE(codec::hash64(zeros.data(), 4096), codec::hash64(zeros.data(), 4092))
      << "zero runs differ by length";
}

TEST(Hash, DoesNotDependOnAlignment) {
  std::vector<uint8_t> a(300), b(301);
  for (size_t i = 0; i < a.size(); ++i) a[i] = b[i + 1] = static_cast<uint8_t>(i * 37);
  EXPECT_EQ(codec::hash64(a.data(), a.size()), codec::hash64(b.data() + 1, a.size()));
}

// A tensor's hash covers its 16 KiB blocks in order, and a GPU computes the same one.
TEST(Hash, TensorHashIsPerBlockAndTheGpuAgrees) {
  std::vector<uint8_t> buf(3 * codec::kHashBlock + 7);
  std::mt19937 rng(9);
  for (auto &b : buf) b = static_cast<uint8_t>(rng());
  EXPECT_EQ(
      codec::tensor_hash(buf.data(), 100),
      codec::combine_block_hashes(std::vector<uint64_t>{codec::hash64(buf.data(), 100)}.data(), 1));
  const uint64_t whole = codec::tensor_hash(buf.data(), buf.size());
  std::swap(buf[10], buf[codec::kHashBlock + 10]);  // the same bytes in other blocks
  EXPECT_NE(codec::tensor_hash(buf.data(), buf.size()), whole);
  std::swap(buf[10], buf[codec::kHashBlock + 10]);
  test::EmulatedGpu gpu;
  Status st;
  std::unique_ptr<DeviceMemory> memory = DeviceMemory::create(gpu, &st);
  ASSERT_TRUE(memory) << st.to_string();
  for (size_t len : {size_t{0}, size_t{1}, codec::kHashBlock - 1, codec::kHashBlock,
                     codec::kHashBlock + 1, buf.size()}) {
    void *d = gpu.alloc_copy(buf.data(), len);
    uint64_t h = 0;
    ASSERT_TRUE(memory->hash(d, len, &h).ok());
    EXPECT_EQ(h, codec::tensor_hash(buf.data(), len)) << "length " << len;
    gpu.free(d);
  }
}

MemberState state(SyncMode mode, uint64_t revision, std::vector<uint64_t> hashes) {
  MemberState s;
  s.mode = mode;
  s.revision = revision;
  for (size_t i = 0; i < hashes.size(); ++i) {
    s.tensors.push_back({"t" + std::to_string(i), Dtype::kF32, 1000 + i, hashes[i]});
  }
  return s;
}

TEST(Description, RoundTripsAndRefusesMalformedBytes) {
  MemberState s = state(SyncMode::kSendOnly, 42, {1, 2, 3});
  s.tensors[1].name = std::string(kMaxNameBytes, 'x');
  s.tensors[2].dtype = Dtype::kBF16;
  std::vector<uint8_t> b = encode_state(s);
  b.resize(b.size() + 5, 0);  // the all-gather's padding
  Result<MemberState> d = decode_state(b.data(), b.size());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d.value().mode, SyncMode::kSendOnly);
  EXPECT_EQ(d.value().revision, 42u);
  ASSERT_EQ(d.value().tensors.size(), 3u);
  EXPECT_EQ(d.value().tensors[1].name, s.tensors[1].name);
  EXPECT_EQ(d.value().tensors[2].dtype, Dtype::kBF16);
  EXPECT_EQ(d.value().tensors[2].hash, 3u);
  EXPECT_EQ(d.value().tensors[0].count, 1000u);

  const std::vector<uint8_t> good = encode_state(s);
  for (size_t len = 0; len < good.size(); len += 7) {
    EXPECT_EQ(decode_state(good.data(), len).status().code(), WCCL_ERR_PROTOCOL)
        << "truncated to " << len;
  }
  auto corrupt = [&](size_t at, uint8_t v) {
    std::vector<uint8_t> c = good;
    c[at] = v;
    return decode_state(c.data(), c.size()).status().code();
  };
  EXPECT_EQ(corrupt(0, 0), WCCL_ERR_PROTOCOL);      // magic
  EXPECT_EQ(corrupt(4, 9), WCCL_ERR_PROTOCOL);      // version
  EXPECT_EQ(corrupt(6, 3), WCCL_ERR_PROTOCOL);      // mode
  EXPECT_EQ(corrupt(7, 1), WCCL_ERR_PROTOCOL);      // reserved
  EXPECT_EQ(corrupt(16, 0xFF), WCCL_ERR_PROTOCOL);  // tensor count past the end
  std::vector<uint8_t> trailing = good;
  trailing.push_back(1);
  EXPECT_EQ(decode_state(trailing.data(), trailing.size()).status().code(), WCCL_ERR_PROTOCOL);
}

TEST(Plan, MostPopularStateWinsAndOnlyDifferingTensorsMove) {
  // Ranks 0, 2, 3 agree at revision 5; rank 1 (a joiner) differs in tensors 0 and 2.
  std::vector<MemberState> m = {
      state(SyncMode::kPopular, 5, {10, 11, 12}), state(SyncMode::kPopular, 0, {0, 11, 0}),
      state(SyncMode::kPopular, 5, {10, 11, 12}), state(SyncMode::kPopular, 5, {10, 11, 12})};
  Result<SyncPlan> p = plan_sync(m, 1000);  // tensor 0 is 4000 bytes: 4 pieces
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p.value().target.revision, 5u);
  EXPECT_EQ(p.value().elected, 0);
  EXPECT_EQ(p.value().target.hashes, (std::vector<uint64_t>{10, 11, 12}));
  std::set<int> donors;
  uint64_t bytes[3] = {0, 0, 0};
  for (const Transfer &t : p.value().transfers) {
    EXPECT_EQ(t.receiver, 1);
    EXPECT_NE(t.tensor, 1u) << "tensor 1 is the same everywhere";
    donors.insert(t.donor);
    bytes[t.tensor] += t.bytes;
  }
  EXPECT_EQ(donors, (std::set<int>{0, 2, 3})) << "striped over every holder";
  EXPECT_EQ(bytes[0], 4000u);
  EXPECT_EQ(bytes[2], 4008u);
}

TEST(Plan, RevisionRules) {
  auto elected = [](std::vector<MemberState> m) {
    Result<SyncPlan> p = plan_sync(m, 1 << 20);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    return p.ok() ? std::make_pair(p.value().elected, p.value().target.revision)
                  : std::make_pair(-1, uint64_t{0});
  };
  // Popularity beats a higher revision.
  EXPECT_EQ(elected({state(SyncMode::kPopular, 7, {2}), state(SyncMode::kPopular, 5, {1}),
                     state(SyncMode::kPopular, 5, {1})}),
            std::make_pair(1, uint64_t{5}));
  // A tie goes to the higher revision...
  EXPECT_EQ(elected({state(SyncMode::kPopular, 5, {1}), state(SyncMode::kPopular, 6, {2})}),
            std::make_pair(1, uint64_t{6}));
  // ... then to the lowest rank.
  EXPECT_EQ(elected({state(SyncMode::kPopular, 5, {1}), state(SyncMode::kPopular, 5, {2})}),
            std::make_pair(0, uint64_t{5}));
  // The same bytes under another revision are another state.
  EXPECT_EQ(elected({state(SyncMode::kPopular, 4, {1}), state(SyncMode::kPopular, 5, {1}),
                     state(SyncMode::kPopular, 5, {1})}),
            std::make_pair(1, uint64_t{5}));
  // Send-only members decide, however few; receive-only members never count.
  EXPECT_EQ(elected({state(SyncMode::kPopular, 9, {1}), state(SyncMode::kPopular, 9, {1}),
                     state(SyncMode::kSendOnly, 3, {2})}),
            std::make_pair(2, uint64_t{3}));
  EXPECT_EQ(elected({state(SyncMode::kReceiveOnly, 9, {1}), state(SyncMode::kReceiveOnly, 9, {1}),
                     state(SyncMode::kPopular, 3, {2})}),
            std::make_pair(2, uint64_t{3}));
}

TEST(Plan, AKeptTargetOutlivesTheElectionAndNeedsADonor) {
  // After a loss, the survivors finish towards the state elected before it, even where the
  // survivors alone would elect another.
  const SyncTarget keep{5, {10, 11}};
  std::vector<MemberState> m = {state(SyncMode::kPopular, 0, {0, 11}),
                                state(SyncMode::kPopular, 0, {0, 11}),
                                state(SyncMode::kPopular, 5, {10, 11})};
  Result<SyncPlan> p = plan_sync(m, 1 << 20, &keep);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p.value().target.revision, 5u);
  EXPECT_EQ(p.value().elected, 2);
  ASSERT_EQ(p.value().transfers.size(), 2u);
  for (const Transfer &t : p.value().transfers) EXPECT_EQ(t.donor, 2);
  m.pop_back();  // the last holder is gone too
  Status st = plan_sync(m, 1 << 20, &keep).status();
  EXPECT_EQ(st.code(), WCCL_ERR_PEER_LOST);
  EXPECT_NE(st.message().find("no remaining member holds tensor \"t0\""), std::string::npos)
      << st.to_string();
}

TEST(Plan, ReceiveOnlyMembersNeverDonate) {
  std::vector<MemberState> m = {state(SyncMode::kReceiveOnly, 1, {7}),
                                state(SyncMode::kPopular, 1, {7}),
                                state(SyncMode::kPopular, 0, {0})};
  Result<SyncPlan> p = plan_sync(m, 100);
  ASSERT_TRUE(p.ok());
  ASSERT_FALSE(p.value().transfers.empty());
  for (const Transfer &t : p.value().transfers) {
    EXPECT_EQ(t.donor, 1);
    EXPECT_EQ(t.receiver, 2);
  }
}

TEST(Plan, MismatchesAndConflictsAreNamed) {
  auto error = [](std::vector<MemberState> m) {
    Status st = plan_sync(m, 1 << 20).status();
    EXPECT_EQ(st.code(), WCCL_ERR_INVALID_USAGE);
    return st.message();
  };
  MemberState a = state(SyncMode::kPopular, 1, {1, 2});
  MemberState fewer = state(SyncMode::kPopular, 1, {1});
  EXPECT_NE(error({a, a, fewer}).find("rank 2 passes 1 tensors, rank 0 passes 2"),
            std::string::npos);
  MemberState renamed = a;
  renamed.tensors[1].name = "other";
  EXPECT_NE(error({a, renamed})
                .find("tensor 1 is \"other\" f32 x 1001 on rank 1 but \"t1\" f32 x 1001 on rank 0"),
            std::string::npos);
  MemberState retyped = a;
  retyped.tensors[0].dtype = Dtype::kF16;
  EXPECT_NE(error({a, retyped}).find("tensor 0 is \"t0\" f16"), std::string::npos);
  MemberState resized = a;
  resized.tensors[0].count = 5;
  EXPECT_NE(error({a, a, a, resized}).find("x 5 on rank 3"), std::string::npos);
  EXPECT_NE(error({state(SyncMode::kSendOnly, 1, {1}), state(SyncMode::kSendOnly, 2, {1})})
                .find("send-only"),
            std::string::npos);
  EXPECT_NE(error({state(SyncMode::kReceiveOnly, 1, {1}), state(SyncMode::kReceiveOnly, 1, {1})})
                .find("receive-only"),
            std::string::npos);
}

// Runs the plan's data phase on every member over the in-memory channel (shuffled delivery).
struct Members {
  std::vector<std::vector<std::vector<uint8_t>>> tensors;  // [rank][tensor]
  Compress compress = Compress::kOff;
  std::vector<size_t> elem_bytes;
  std::vector<std::vector<uint8_t>> stage;
  std::vector<SyncJob> jobs;
  std::vector<Status> status;
  std::vector<uint64_t> sent, received;
};

std::vector<uint8_t> bytes_of(uint64_t seed, size_t n) {
  std::vector<uint8_t> b(n);
  std::mt19937_64 rng(seed);
  for (auto &x : b) x = static_cast<uint8_t>(rng());
  return b;
}

void run_members(Members &m, const std::vector<MemberState> &states, size_t piece_bytes,
                 test::Fabric &fabric) {
  const int n = static_cast<int>(states.size());
  auto plan = plan_sync(states, piece_bytes);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  auto shared = std::make_shared<const SyncPlan>(std::move(plan).value());
  m.jobs.resize(static_cast<size_t>(n));
  m.stage.resize(static_cast<size_t>(n));
  m.status.resize(static_cast<size_t>(n));
  m.sent.resize(static_cast<size_t>(n));
  m.received.resize(static_cast<size_t>(n));
  std::vector<std::unique_ptr<Channel>> channels;
  std::vector<std::unique_ptr<Exchange>> exchanges;
  for (int r = 0; r < n; ++r) {
    SyncJob &job = m.jobs[static_cast<size_t>(r)];
    job.plan = shared;
    for (auto &t : m.tensors[static_cast<size_t>(r)]) {
      job.tensors.push_back(t.data());
      job.tensor_bytes.push_back(t.size());
    }
    place_received(&job, r);
    job.compress = m.compress;
    job.elem_bytes = m.elem_bytes;
    m.stage[static_cast<size_t>(r)].assign(job.stage_bytes, 0xEE);
    channels.push_back(fabric.channel(r));
    exchanges.push_back(std::make_unique<Exchange>(
        *channels.back(), Exchange::Clock::now() + std::chrono::seconds(30)));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const size_t i = static_cast<size_t>(r);
      Status st = run_sync(*exchanges[i], m.jobs[i], m.stage[i].data());
      exchanges[i]->finish();
      if (!st.ok()) {
        for (auto &e : exchanges) e->cancel(WCCL_ERROR(WCCL_ERR_PEER_LOST, "rank %d failed", r));
      }
      m.status[i] = st;
      m.sent[i] = exchanges[i]->bytes_sent();
      m.received[i] = exchanges[i]->bytes_received();
    });
  }
  for (auto &t : threads) t.join();
}

MemberState describe(const std::vector<std::vector<uint8_t>> &tensors, uint64_t revision,
                     SyncMode mode = SyncMode::kPopular) {
  MemberState s;
  s.mode = mode;
  s.revision = revision;
  for (size_t i = 0; i < tensors.size(); ++i) {
    s.tensors.push_back({"w" + std::to_string(i), Dtype::kU8, tensors[i].size(),
                         codec::tensor_hash(tensors[i].data(), tensors[i].size())});
  }
  return s;
}

TEST(RunSync, TwoJoinersCatchUpFromThreeDonorsStripedAndVerified) {
  const std::vector<size_t> sizes = {100000, 1, 0, 65536, 4097};
  std::vector<std::vector<uint8_t>> good;
  for (size_t i = 0; i < sizes.size(); ++i) good.push_back(bytes_of(i, sizes[i]));
  Members m;
  m.tensors = {good, good, good, good, good};
  for (int r : {1, 4}) {
    for (size_t i : {size_t{0}, size_t{3}, size_t{4}})
      m.tensors[r][i].assign(sizes[i], 0);  // stale tensors 0, 3, 4
  }
  m.tensors[4][1] = {0x55};  // and one more for rank 4
  std::vector<MemberState> states;
  for (int r = 0; r < 5; ++r)
    states.push_back(describe(m.tensors[static_cast<size_t>(r)], r == 1 || r == 4 ? 0 : 8));
  test::Fabric fabric(5, {true, 3, {}});
  run_members(m, states, 4096, fabric);
  const uint64_t stale = sizes[0] + sizes[3] + sizes[4];
  for (int r = 0; r < 5; ++r) {
    const size_t i = static_cast<size_t>(r);
    ASSERT_TRUE(m.status[i].ok()) << "rank " << r << ": " << m.status[i].to_string();
    const SyncJob &job = m.jobs[i];
    if (r == 1 || r == 4) {
      EXPECT_EQ(m.received[i], stale + (r == 4 ? 1 : 0));
      for (size_t t = 0; t < sizes.size(); ++t) {
        if (job.stage_offset[t] == SyncJob::kNotReceived) continue;
        std::vector<uint8_t> got(
            m.stage[i].begin() + static_cast<long>(job.stage_offset[t]),
            m.stage[i].begin() + static_cast<long>(job.stage_offset[t] + sizes[t]));
        EXPECT_EQ(got, good[t]) << "rank " << r << " tensor " << t;
      }
      EXPECT_EQ(job.stage_offset[2], SyncJob::kNotReceived) << "an empty tensor never moves";
      EXPECT_EQ(job.stage_offset[1] == SyncJob::kNotReceived, r == 1);
    } else {
      EXPECT_EQ(m.received[i], 0u);
      EXPECT_EQ(job.stage_bytes, 0u);
      EXPECT_GT(m.sent[i], stale * 2 / 3 / 2) << "every donor carries a share";
    }
    EXPECT_EQ(m.tensors[i], r == 1 || r == 4 ? m.tensors[i] : good)
        << "run_sync never writes tensors";
  }
}

TEST(RunSync, CompressedPiecesArriveIntactAndShorter) {
  if (!codec::compression_available()) GTEST_SKIP() << "built without zstd";
  // Tensor 0: F32 values with few distinct exponents (compress well once shuffled); tensor 1:
  // random bytes (no piece shrinks: sent as they are); tensor 2: 5 bytes (shorter than a frame).
  std::vector<std::vector<uint8_t>> good(3);
  good[0].resize(300000 * 4);
  for (size_t i = 0; i < 300000; ++i) {
    const float v = 1.0f + static_cast<float>(i % 4096) / 4096.0f;
    std::memcpy(good[0].data() + i * 4, &v, 4);
  }
  good[1] = bytes_of(9, 200000);
  good[2] = {1, 2, 3, 4, 5};
  Members m;
  m.tensors = {good,
               good,
               {std::vector<uint8_t>(good[0].size(), 0), std::vector<uint8_t>(good[1].size(), 0),
                std::vector<uint8_t>(5, 0)}};
  std::vector<MemberState> states = {describe(good, 2), describe(good, 2),
                                     describe(m.tensors[2], 0)};
  test::Fabric fabric(3, {true, 11, {}});
  m.compress = Compress::kAlways;
  m.elem_bytes = {4, 1, 1};
  run_members(m, states, 65536, fabric);
  for (size_t r = 0; r < 3; ++r) ASSERT_TRUE(m.status[r].ok()) << m.status[r].to_string();
  const SyncJob &job = m.jobs[2];
  for (size_t t = 0; t < 3; ++t) {
    std::vector<uint8_t> got(
        m.stage[2].begin() + static_cast<long>(job.stage_offset[t]),
        m.stage[2].begin() + static_cast<long>(job.stage_offset[t] + good[t].size()));
    EXPECT_EQ(got, good[t]) << "tensor " << t;
  }
  const uint64_t raw = good[0].size() + good[1].size() + good[2].size();
  EXPECT_LT(m.received[2], good[1].size() + good[2].size() + good[0].size() / 2)
      << "tensor 0 shrank";
  EXPECT_GE(m.received[2], good[1].size() + good[2].size()) << "random bytes do not";
  EXPECT_EQ(m.sent[0] + m.sent[1], m.received[2]);
  EXPECT_LT(m.received[2], raw);
}

TEST(RunSync, CorruptBytesFailTheHashCheck) {
  std::vector<std::vector<uint8_t>> good = {bytes_of(1, 5000)};
  Members m;
  m.tensors = {good, {std::vector<uint8_t>(5000, 0)}};
  std::vector<MemberState> states = {describe(good, 1), describe(m.tensors[1], 0)};
  states[0].tensors[0].hash ^= 1;  // rank 0 claims bytes it does not hold
  test::Fabric fabric(2);
  run_members(m, states, 1024, fabric);
  EXPECT_EQ(m.status[1].code(), WCCL_ERR_PROTOCOL) << m.status[1].to_string();
  EXPECT_NE(m.status[1].message().find("tensor 0"), std::string::npos);
}

TEST(RunSync, ADonorDyingFailsTheReceiverPromptly) {
  std::vector<std::vector<uint8_t>> good = {bytes_of(2, 1 << 20)};
  Members m;
  m.tensors = {good, good, {std::vector<uint8_t>(1 << 20, 0)}};
  std::vector<MemberState> states = {describe(good, 1), describe(good, 1),
                                     describe(m.tensors[2], 0)};
  test::Fabric fabric(3, {true, 5, {}});
  fabric.kill_at_send(1, 10);
  const auto start = std::chrono::steady_clock::now();
  run_members(m, states, 4096, fabric);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_FALSE(m.status[2].ok());
  EXPECT_EQ(m.tensors[2][0], std::vector<uint8_t>(1 << 20, 0)) << "tensors untouched";
}

}  // namespace
}  // namespace wccl::algo
