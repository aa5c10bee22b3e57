// The collectives' schedules over the in-memory Channel, checked against a serial reference:
// world size x count x dtype x op x algorithm, plus delivery in random order and peers that die
// mid-operation.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <thread>

#include "algo/call.h"
#include "algo/collectives.h"
#include "codec/half.h"
#include "emulated_device.h"
#include "memory_channel.h"

namespace wccl::test {
namespace {

using algo::Algo;
using algo::Call;
using algo::CallBytes;
using algo::Collective;
using algo::Compress;
using algo::Kind;
using codec::Dtype;
using codec::RedOp;
using Clock = std::chrono::steady_clock;

// Values chosen so that every combination is exact in every type (small integers, products of
// +-1 and a few 2s): the reference may then combine in any order and still match bit for bit.
double value(RedOp op, Dtype t, int rank, size_t i) {
  const bool is_unsigned = t == Dtype::kU8;
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return static_cast<double>((rank * 7 + i * 3) % 9) - (is_unsigned ? 0 : 4);
    case RedOp::kMin:
    case RedOp::kMax:
      return static_cast<double>((rank * 31 + i * 17) % 201) - (is_unsigned ? 0 : 100);
    case RedOp::kProd:
      if ((rank + i) % 5 == 0) return 2;
      return (rank + 2 * i) % 3 == 0 && !is_unsigned ? -1 : 1;
  }
  return 0;
}

void store(Dtype t, void *buf, size_t i, double v) {
  switch (t) {
    case Dtype::kF32:
      static_cast<float *>(buf)[i] = static_cast<float>(v);
      break;
    case Dtype::kF64:
      static_cast<double *>(buf)[i] = v;
      break;
    case Dtype::kF16:
      static_cast<uint16_t *>(buf)[i] = codec::float_to_half(static_cast<float>(v));
      break;
    case Dtype::kBF16:
      static_cast<uint16_t *>(buf)[i] = codec::float_to_bf16(static_cast<float>(v));
      break;
    case Dtype::kI8:
      static_cast<int8_t *>(buf)[i] = static_cast<int8_t>(v);
      break;
    case Dtype::kU8:
      static_cast<uint8_t *>(buf)[i] = static_cast<uint8_t>(v);
      break;
    case Dtype::kI32:
      static_cast<int32_t *>(buf)[i] = static_cast<int32_t>(v);
      break;
    case Dtype::kI64:
      static_cast<int64_t *>(buf)[i] = static_cast<int64_t>(v);
      break;
  }
}

using Bytes = std::vector<uint8_t>;

Bytes input(const Collective &c, int n, int rank) {
  const size_t count = algo::in_count(c, n), es = codec::dtype_size(c.dtype);
  Bytes b(count * es);
  for (size_t i = 0; i < count; ++i) store(c.dtype, b.data(), i, value(c.op, c.dtype, rank, i));
  return b;
}

// What rank `rank` must hold afterwards, computed serially.
Bytes expected(const Collective &c, const std::vector<Bytes> &ins, int rank) {
  const int n = static_cast<int>(ins.size());
  const size_t es = codec::dtype_size(c.dtype);
  switch (c.kind) {
    case Kind::kBroadcast:
      return ins[static_cast<size_t>(c.root)];
    case Kind::kAllgather: {
      Bytes out;
      for (const Bytes &b : ins) out.insert(out.end(), b.begin(), b.end());
      return out;
    }
    case Kind::kAllreduce:
    case Kind::kReduceScatter: {
      const size_t off =
          c.kind == Kind::kReduceScatter ? static_cast<size_t>(rank) * c.count * es : 0;
      Bytes acc(ins[0].begin() + static_cast<long>(off),
                ins[0].begin() + static_cast<long>(off + c.count * es));
      for (int r = 1; r < n; ++r)
        codec::reduce(c.dtype, c.op, acc.data(), ins[static_cast<size_t>(r)].data() + off, c.count);
      if (c.op == RedOp::kAvg) codec::finish_avg(c.dtype, acc.data(), c.count, n);
      return acc;
    }
    case Kind::kBarrier:
    case Kind::kStateSync:
      break;
  }
  return {};
}

struct Outcome {
  std::vector<Status> status;
  std::vector<Bytes> in, in_after, out;
  std::vector<uint64_t> bytes_sent;
};

// Runs c on n ranks (one thread each) over `fabric`. When any rank fails, the others are
// cancelled, as the communicator does when the coordinator revokes the epoch.
// The inputs are `ins`, or input(c, n, r) when it is empty.
// `per_rank`, if set, adjusts each rank's copy of c (peers with different local settings).
// With `gpu`, every rank's buffers are device memory of that (emulated) GPU, each rank with its
// own DeviceMemory, as separate processes would have.
Outcome run_all(Fabric &fabric, Collective c, int n,
                std::chrono::milliseconds timeout = std::chrono::seconds(60),
                std::vector<Bytes> ins = {},
                std::function<void(Collective *, int)> per_rank = nullptr,
                EmulatedGpu *gpu = nullptr) {
  Outcome o;
  o.status.resize(static_cast<size_t>(n));
  o.out.resize(static_cast<size_t>(n));
  o.bytes_sent.resize(static_cast<size_t>(n));
  if (ins.empty()) {
    for (int r = 0; r < n; ++r) ins.push_back(input(c, n, r));
  }
  o.in = std::move(ins);
  o.in_after = o.in;
  std::vector<std::unique_ptr<algo::Channel>> channels;
  std::vector<std::unique_ptr<algo::Exchange>> exchanges;
  const auto deadline = Clock::now() + timeout;
  for (int r = 0; r < n; ++r) {
    channels.push_back(fabric.channel(r));
    exchanges.push_back(std::make_unique<algo::Exchange>(*channels.back(), deadline));
  }
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const size_t i = static_cast<size_t>(r);
      Collective mine = c;
      if (per_rank) per_rank(&mine, r);
      o.out[i].assign(algo::out_count(c, n) * codec::dtype_size(c.dtype), 0xEE);
      mine.in = o.in_after[i].data();
      mine.out = o.out[i].data();
      Status st;
      if (gpu != nullptr) {
        std::unique_ptr<algo::DeviceMemory> memory = algo::DeviceMemory::create(*gpu, &st);
        void *din = gpu->alloc_copy(mine.in, o.in_after[i].size());
        void *dout = gpu->alloc_copy(mine.out, o.out[i].size());
        mine.in = din;
        mine.out = dout;
        mine.memory = memory.get();
        if (memory) st = algo::run(*exchanges[i], mine);
        o.in_after[i] = gpu->read(din, o.in_after[i].size());
        o.out[i] = gpu->read(dout, o.out[i].size());
        gpu->free(din);
        gpu->free(dout);
      } else {
        st = algo::run(*exchanges[i], mine);
      }
      if (!st.ok()) {
        for (auto &e : exchanges) e->cancel(WCCL_ERROR(WCCL_ERR_PEER_LOST, "rank %d failed", r));
      }
      std::lock_guard<std::mutex> lock(mu);
      o.status[i] = st;
      o.bytes_sent[i] = exchanges[i]->bytes_sent();
    });
  }
  for (auto &t : threads) t.join();
  return o;
}

void expect_correct(const Collective &c, int n, const Outcome &o) {
  for (int r = 0; r < n; ++r) {
    const size_t i = static_cast<size_t>(r);
    ASSERT_TRUE(o.status[i].ok()) << "rank " << r << ": " << o.status[i].to_string();
    ASSERT_EQ(o.in_after[i], o.in[i]) << "rank " << r << " changed its input";
    const Bytes want = expected(c, o.in, r);
    ASSERT_EQ(o.out[i].size(), want.size());
    if (o.out[i] != want) {
      size_t k = 0;
      while (o.out[i][k] == want[k]) ++k;
      FAIL() << "rank " << r << ": first wrong byte " << k << " of " << want.size();
    }
  }
}

struct Shape {
  Kind kind;
  Algo algo;
};

class AlgoTest : public ::testing::TestWithParam<std::tuple<int, size_t, Shape>> {};

// One case of the sweeps: several segments per block, so that the pipelined paths run.
Collective sweep_case(Shape shape, size_t count, int n, Dtype t, RedOp op, codec::Wire wire) {
  Collective c;
  c.kind = shape.kind;
  c.algo = shape.algo;
  c.count = count;
  c.dtype = t;
  c.op = op;
  c.wire = wire;
  c.root = static_cast<int>(count % static_cast<size_t>(n));
  c.chunk_bytes = count > 5000 ? 4096 : 64;
  return c;
}

TEST_P(AlgoTest, MatchesSerialReference) {
  const auto [n, count, shape] = GetParam();
  const bool reduces = shape.kind == Kind::kAllreduce || shape.kind == Kind::kReduceScatter;
  for (int t = 0; t < codec::kDtypeCount; ++t) {
    for (int op = 0; op < (reduces ? codec::kRedOpCount : 1); ++op) {
      const Collective c = sweep_case(shape, count, n, static_cast<Dtype>(t),
                                      static_cast<RedOp>(op), codec::WireKind::kNative);
      ASSERT_TRUE(algo::check(c, n, 0).ok());
      Fabric fabric(n);
      SCOPED_TRACE(std::string(codec::dtype_name(c.dtype)) + " " + codec::redop_name(c.op));
      expect_correct(c, n, run_all(fabric, c, n));
      if (HasFatalFailure()) return;
    }
  }
}

std::string shape_name(const Shape &s) {
  return std::string(algo::kind_name(s.kind)) +
         (s.kind == Kind::kAllreduce ? std::string("_") + algo::algo_name(s.algo) : "");
}

const auto kEveryShape = ::testing::Values(
    Shape{Kind::kAllreduce, Algo::kRing}, Shape{Kind::kAllreduce, Algo::kTree},
    Shape{Kind::kAllreduce, Algo::kAllgather}, Shape{Kind::kBroadcast, Algo::kRing},
    Shape{Kind::kAllgather, Algo::kRing}, Shape{Kind::kReduceScatter, Algo::kRing});

INSTANTIATE_TEST_SUITE_P(Sweep, AlgoTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8, 16),
                                            ::testing::Values<size_t>(0, 1, 2, 7, 13, 1009, 65537),
                                            kEveryShape),
                         [](const auto &p) {
                           return "n" + std::to_string(std::get<0>(p.param)) + "_count" +
                                  std::to_string(std::get<1>(p.param)) + "_" +
                                  shape_name(std::get<2>(p.param));
                         });

// Wire codecs: F32 elements sent as FP16, BF16 or INT8. Every peer ends with bit-identical
// results (each has its own block for reduce-scatter), within the documented bound of the exact
// value: n encodings, each off by at most E, where for INT8 E = R/510 + 2^-20 M, with R the sum
// of the peers' input ranges and M the sum of their largest magnitudes (which bound the range
// and magnitude of any partial result), and for FP16 / BF16 E = M 2^-11 / M 2^-8. Messages are
// delivered in random order.
using WireParam = std::tuple<int, size_t, Shape, codec::Wire>;
class WireTest : public ::testing::TestWithParam<WireParam> {};

std::string wire_param_name(const ::testing::TestParamInfo<WireParam> &p) {
  return "n" + std::to_string(std::get<0>(p.param)) + "_count" +
         std::to_string(std::get<1>(p.param)) + "_" + shape_name(std::get<2>(p.param)) + "_" +
         codec::wire_name(std::get<3>(p.param));
}

std::vector<Bytes> random_inputs(const Collective &c, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<Bytes> ins;
  for (int r = 0; r < n; ++r) {
    std::vector<float> v(algo::in_count(c, n));
    // Magnitudes grow with the rank, except for PROD, where an error would grow with them too.
    const float scale = c.op == RedOp::kProd ? 1.0f : static_cast<float>(r + 1);
    for (float &x : v) x = d(rng) * scale;
    Bytes b(v.size() * 4);
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
    ins.push_back(std::move(b));
  }
  return ins;
}

std::vector<float> floats(const Bytes &b) {
  std::vector<float> v(b.size() / 4);
  if (!v.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

double encode_error(codec::Wire w, const std::vector<Bytes> &ins) {
  double range = 0, mag = 0;
  for (const Bytes &b : ins) {
    const std::vector<float> v = floats(b);
    if (v.empty()) continue;
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    range += static_cast<double>(*hi) - *lo;
    mag += std::max(std::fabs(*lo), std::fabs(*hi));
  }
  switch (w.kind) {
    case codec::WireKind::kInt8:
      return range / 510 + mag * std::ldexp(1.0, -20);
    case codec::WireKind::kInt4:
      return range / 30 + mag * std::ldexp(1.0, -20);
    case codec::WireKind::kInt2:
      return range / 6 + mag * std::ldexp(1.0, -20);
    case codec::WireKind::kTopk:
      return mag;  // a dropped element is off by at most its magnitude
    case codec::WireKind::kFp8:
      return mag / 16 + mag / 229376;
    case codec::WireKind::kF16:
      return mag * std::ldexp(1.0, -11) + std::ldexp(1.0, -24);
    case codec::WireKind::kBF16:
      return mag * std::ldexp(1.0, -8);
    case codec::WireKind::kNative:
      break;
  }
  return 0;
}

TEST_P(WireTest, WithinTheBoundAndBitIdentical) {
  const auto [n, count, shape, wire] = GetParam();
  const bool reduces = shape.kind == Kind::kAllreduce || shape.kind == Kind::kReduceScatter;
  for (int op = 0; op < (reduces ? codec::kRedOpCount : 1); ++op) {
    const Collective c = sweep_case(shape, count, n, Dtype::kF32, static_cast<RedOp>(op), wire);
    ASSERT_TRUE(algo::check(c, n, 0).ok());
    SCOPED_TRACE(std::string(codec::wire_name(wire)) + " " + codec::redop_name(c.op));
    const std::vector<Bytes> ins = random_inputs(c, n, static_cast<uint32_t>(count + n));
    Fabric::Options
        opt;  // delivered in random order: the coded schedules keep their own buffers apart
    opt.shuffle = true;
    opt.seed = static_cast<uint32_t>(count + op);
    Fabric fabric(n, opt);
    const Outcome o = run_all(fabric, c, n, std::chrono::seconds(60), ins);
    // At most n encodings of partial sums; the all-gather all-reduce encodes each input once.
    const double bound = (c.algo == Algo::kAllgather && shape.kind == Kind::kAllreduce ? 1 : n) *
                         encode_error(wire, ins);
    std::vector<std::vector<float>> x;
    for (const Bytes &b : ins) x.push_back(floats(b));
    for (int r = 0; r < n; ++r) {
      const size_t i = static_cast<size_t>(r);
      ASSERT_TRUE(o.status[i].ok()) << "rank " << r << ": " << o.status[i].to_string();
      ASSERT_EQ(o.in_after[i], o.in[i]) << "rank " << r << " changed its input";
      if (shape.kind != Kind::kReduceScatter) {
        ASSERT_EQ(o.out[i], o.out[0]) << "rank " << r << " differs from rank 0";
      }
      // The exact result, in double.
      std::vector<double> exact(o.out[i].size() / 4);
      const size_t off = shape.kind == Kind::kReduceScatter ? i * count : 0;
      for (size_t k = 0; k < exact.size(); ++k) {
        switch (shape.kind) {
          case Kind::kBroadcast:
            exact[k] = x[static_cast<size_t>(c.root)][k];
            break;
          case Kind::kAllgather:
            exact[k] = x[k / count][k % count];
            break;
          default: {
            double acc = x[0][off + k];
            for (int p = 1; p < n; ++p) {
              const double v = x[static_cast<size_t>(p)][off + k];
              switch (c.op) {
                case RedOp::kSum:
                case RedOp::kAvg:
                  acc += v;
                  break;
                case RedOp::kMin:
                  acc = std::min(acc, v);
                  break;
                case RedOp::kMax:
                  acc = std::max(acc, v);
                  break;
                case RedOp::kProd:
                  acc *= v;
                  break;
              }
            }
            exact[k] = c.op == RedOp::kAvg ? acc / n : acc;
          }
        }
      }
      const std::vector<float> got = floats(o.out[i]);
      for (size_t k = 0; k < exact.size(); ++k) {
        ASSERT_LE(std::fabs(got[k] - exact[k]), bound)
            << "rank " << r << " element " << k << ": " << got[k] << " vs " << exact[k];
      }
      if (shape.kind == Kind::kAllgather || shape.kind == Kind::kBroadcast)
        break;  // everything identical anyway
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sweep, WireTest,
    ::testing::Combine(::testing::Values(1, 2, 3, 5, 8),
                       ::testing::Values<size_t>(0, 1, 7, 1009, 65537), kEveryShape,
                       ::testing::Values(codec::WireKind::kF16, codec::WireKind::kBF16,
                                         codec::WireKind::kInt8, codec::WireKind::kInt4,
                                         codec::WireKind::kFp8, codec::WireKind::kInt2)),
    wire_param_name);

// TOPK is never re-encoded: all-reduce by the all-gather schedule, broadcast and all-gather.
const auto kTopkShapes =
    ::testing::Values(Shape{Kind::kAllreduce, Algo::kAllgather},
                      Shape{Kind::kBroadcast, Algo::kRing}, Shape{Kind::kAllgather, Algo::kRing});
INSTANTIATE_TEST_SUITE_P(Topk, WireTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5, 8),
                                            ::testing::Values<size_t>(0, 1, 7, 1009, 65537),
                                            kTopkShapes, ::testing::Values(codec::WireKind::kTopk)),
                         wire_param_name);

// A member's call as its neighbours compare it (algo/call.h): every field that applies to the
// kind is kept and compared, fields that do not apply are not (a broadcast's reduce op), and
// bytes that are not a call are refused naming the field.
TEST(Call, RoundTripsComparesWhatAppliesAndRefusesBadBytes) {
  Collective c;
  c.kind = Kind::kAllreduce;
  c.count = 1000;
  c.dtype = codec::Dtype::kBF16;
  c.op = codec::RedOp::kMax;
  c.algo = Algo::kTree;
  c.wire = codec::Wire::topk(7);
  c.compress = Compress::kAlways;
  c.chunk_bytes = 65536;
  const Call call = Call::of(c);
  const CallBytes bytes = algo::encode(call);
  Call back;
  ASSERT_TRUE(algo::decode(bytes.data(), bytes.size(), &back).ok());
  EXPECT_TRUE(back == call);
  EXPECT_EQ(
      algo::to_string(back, true),
      "allreduce(1000 x bf16, max, wire topk/7, algo tree, compress zstd, chunk_bytes 65536)");
  Collective other = c;
  other.dtype = codec::Dtype::kF16;
  other.count = 999;
  EXPECT_EQ(algo::differences(Call::of(other), call), "dtype, count");
  Status why = algo::disagreement(3, algo::encode(Call::of(other)), 1, call);
  EXPECT_EQ(why.code(), WCCL_ERR_MISMATCH);
  EXPECT_NE(why.message().find("calls differ in dtype, count: rank 3 called allreduce(999 x f16"),
            std::string::npos)
      << why.to_string();

  // A broadcast's reduce op and algo do not apply; its root does.
  Collective b = c;
  b.kind = Kind::kBroadcast;
  Collective b2 = b;
  b2.op = codec::RedOp::kSum;
  b2.algo = Algo::kRing;
  EXPECT_TRUE(Call::of(b) == Call::of(b2));
  b2.root = 1;
  EXPECT_EQ(algo::differences(Call::of(b), Call::of(b2)), "root");
  // A barrier is its kind alone.
  Collective bar;
  bar.kind = Kind::kBarrier;
  Collective bar2 = c;
  bar2.kind = Kind::kBarrier;
  EXPECT_TRUE(Call::of(bar) == Call::of(bar2));

  EXPECT_EQ(algo::decode(bytes.data(), bytes.size() - 1, &back).code(), WCCL_ERR_PROTOCOL);
  for (size_t i : {0, 1, 2, 3, 4, 5, 6, 12}) {
    CallBytes bad = bytes;
    bad[i] = 0xEE;
    const Status st = algo::decode(bad.data(), bad.size(), &back);
    EXPECT_EQ(st.code(), WCCL_ERR_PROTOCOL) << "byte " << i;
    EXPECT_EQ(algo::disagreement(2, bad, 1, call).code(), WCCL_ERR_PROTOCOL) << "byte " << i;
  }
}

TEST(Algo, Int8RingSendsAQuarterOfTheBytes) {
  const int n = 4;
  Collective c;
  c.count = 1 << 20;
  for (codec::Wire w : {codec::WireKind::kNative, codec::WireKind::kInt8}) {
    c.wire = w;
    const std::vector<Bytes> ins = random_inputs(c, n, 1);
    Fabric fabric(n);
    const Outcome o = run_all(fabric, c, n, std::chrono::seconds(60), ins);
    const double native = 2.0 * (n - 1) / n * c.count * 4;
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(o.status[static_cast<size_t>(r)].ok());
      const double ratio = static_cast<double>(o.bytes_sent[static_cast<size_t>(r)]) / native;
      if (w.kind == codec::WireKind::kNative) {
        EXPECT_NEAR(ratio, 1.0, 1e-6);
      } else {
        EXPECT_NEAR(ratio, 0.25 * (1 + 8.0 / 1024), 0.001) << "rank " << r;
      }
    }
  }
}

// The all-gather all-reduce's result is, bit for bit on every member, the sum in rank order of
// what each member's input decodes to (its roundtrip: what error feedback subtracts), on every
// wire, AVG dividing that sum; each member sends n - 1 times its input's wire bytes. AUTO picks it
// for INT2 only.
TEST(Algo, AllgatherAllreduceIsTheRankOrderSumOfEachInputsRoundtrip) {
  for (int n : {2, 3, 5}) {
    for (codec::Wire w : {codec::WireKind::kNative, codec::WireKind::kInt8, codec::WireKind::kInt4,
                          codec::WireKind::kInt2, codec::WireKind::kFp8, codec::WireKind::kBF16,
                          codec::WireKind::kTopk}) {
      for (RedOp op : {RedOp::kSum, RedOp::kAvg, RedOp::kMax}) {
        SCOPED_TRACE("n " + std::to_string(n) + " " + codec::wire_name(w) + " " +
                     codec::redop_name(op));
        Collective c;
        c.algo = Algo::kAllgather;
        c.count = 70001;
        c.chunk_bytes = 8192;
        c.wire = w;
        c.op = op;
        const std::vector<Bytes> ins = random_inputs(c, n, static_cast<uint32_t>(n));
        std::vector<float> want(c.count);
        for (int m = 0; m < n; ++m) {
          std::vector<float> x = floats(ins[static_cast<size_t>(m)]), kept(c.count);
          if (w.kind == codec::WireKind::kNative) {
            kept = x;
          } else {
            Bytes enc(codec::wire_size(w, c.count));
            ASSERT_TRUE(codec::encode(w, x.data(), c.count, enc.data()).ok());
            ASSERT_TRUE(codec::decode(w, enc.data(), enc.size(), c.count, kept.data()).ok());
          }
          for (size_t i = 0; i < c.count; ++i) {
            want[i] = m == 0              ? kept[i]
                      : op == RedOp::kMax ? std::max(want[i], kept[i])
                                          : want[i] + kept[i];
          }
        }
        if (op == RedOp::kAvg) {
          for (float &v : want) v /= static_cast<float>(n);
        }
        Fabric::Options opt;
        opt.shuffle = true;
        opt.seed = static_cast<uint32_t>(n);
        Fabric fabric(n, opt);
        const Outcome o = run_all(fabric, c, n, std::chrono::seconds(60), ins);
        for (int r = 0; r < n; ++r) {
          const size_t i = static_cast<size_t>(r);
          ASSERT_TRUE(o.status[i].ok()) << "rank " << r << ": " << o.status[i].to_string();
          ASSERT_TRUE(floats(o.out[i]) == want) << "rank " << r;
          EXPECT_EQ(o.bytes_sent[i], static_cast<uint64_t>(n - 1) * codec::wire_size(w, c.count))
              << "rank " << r;
        }
      }
    }
  }
  Collective c;
  c.algo = Algo::kAuto;
  c.count = 1 << 20;  // above the crossover: the ring
  for (codec::Wire w : {codec::WireKind::kNative, codec::WireKind::kInt8, codec::WireKind::kInt4,
                        codec::WireKind::kInt2, codec::WireKind::kTopk}) {
    c.wire = w;
    const bool gather = w.kind == codec::WireKind::kInt2 || w.kind == codec::WireKind::kTopk;
    EXPECT_EQ(algo::choose(c, 4, {}), gather ? Algo::kAllgather : Algo::kRing)
        << codec::wire_name(w);
  }
  c.kind = Kind::kBroadcast;
  EXPECT_EQ(algo::choose(c, 4, {}), Algo::kRing);
  // By size: the all-gather up to its crossover, the tree up to its own, the ring above; a
  // crossover of 0 takes nothing (but an empty buffer, the tree's); INT2 and TOPK the all-gather.
  c.kind = Kind::kAllreduce;
  c.dtype = codec::Dtype::kF32;
  const algo::Crossovers x{4096, 65536};
  for (codec::Wire w : {codec::WireKind::kNative, codec::WireKind::kInt8, codec::WireKind::kInt2}) {
    c.wire = w;
    const bool gather = w.kind == codec::WireKind::kInt2;
    for (const auto &[count, want] : std::vector<std::pair<size_t, Algo>>{{1, Algo::kAllgather},
                                                                          {1024, Algo::kAllgather},
                                                                          {1025, Algo::kTree},
                                                                          {16384, Algo::kTree},
                                                                          {16385, Algo::kRing}}) {
      c.count = count;
      EXPECT_EQ(algo::choose(c, 4, x), gather ? Algo::kAllgather : want)
          << codec::wire_name(w) << " " << count;
    }
    c.count = 1000;
    EXPECT_EQ(algo::choose(c, 2, x), Algo::kAllgather) << "two members";
    EXPECT_EQ(algo::choose(c, 2, {0, 65536}), gather ? Algo::kAllgather : Algo::kRing)
        << "two members take no tree";
    EXPECT_EQ(algo::choose(c, 4, {0, 65536}), gather ? Algo::kAllgather : Algo::kTree);
  }
  c.wire = codec::WireKind::kNative;
  c.algo = Algo::kRing;
  EXPECT_EQ(algo::choose(c, 4, x), Algo::kRing) << "a named algorithm is kept";
  c.algo = Algo::kAuto;
  // TOPK is refused where it would be re-encoded.
  c.wire = codec::WireKind::kTopk;
  EXPECT_TRUE(algo::check(c, 4, 0).ok());
  for (Shape refused : {Shape{Kind::kAllreduce, Algo::kRing}, Shape{Kind::kAllreduce, Algo::kTree},
                        Shape{Kind::kReduceScatter, Algo::kRing}}) {
    c.kind = refused.kind;
    c.algo = refused.algo;
    const Status st = algo::check(c, 4, 0);
    EXPECT_EQ(st.code(), WCCL_ERR_INVALID_ARGUMENT) << shape_name(refused);
    EXPECT_NE(st.message().find("the topk wire is never re-encoded"), std::string::npos)
        << st.message();
  }
}

TEST(Algo, NanOnTheInt8WireFailsNamingTheElement) {
  const int n = 3;
  Collective c;
  c.count = 5000;
  c.wire = codec::WireKind::kInt8;
  std::vector<Bytes> ins = random_inputs(c, n, 2);
  const float nan = std::nanf("");
  std::memcpy(ins[1].data() + 4321 * 4, &nan, 4);
  for (bool on_device : {false, true}) {
    EmulatedGpu gpu;
    Fabric fabric(n);
    const Outcome o =
        run_all(fabric, c, n, std::chrono::seconds(20), ins, nullptr, on_device ? &gpu : nullptr);
    bool named = false;
    for (int r = 0; r < n; ++r) {
      EXPECT_FALSE(o.status[static_cast<size_t>(r)].ok());
      EXPECT_EQ(o.in_after[static_cast<size_t>(r)], o.in[static_cast<size_t>(r)]);
      named |= o.status[static_cast<size_t>(r)].code() == WCCL_ERR_INVALID_ARGUMENT &&
               o.status[static_cast<size_t>(r)].message().find("element 4321 is NaN") !=
                   std::string::npos;
    }
    EXPECT_TRUE(named) << (on_device ? "device" : "host");
    // The member holding the NaN aborted its channel naming it, not the messages in flight.
    EXPECT_NE(fabric.death(1).message().find("element 4321 is NaN"), std::string::npos)
        << fabric.death(1).to_string();
  }
  c.dtype = Dtype::kF64;
  EXPECT_EQ(algo::check(c, n, 0).code(), WCCL_ERR_INVALID_ARGUMENT);
}

TEST(Algo, LargeAllreduce64Mi) {
  for (Algo a : {Algo::kRing, Algo::kTree}) {
    Collective c;
    c.count = 64u << 20;
    c.dtype = Dtype::kU8;
    c.algo = a;
    Fabric fabric(3);
    expect_correct(c, 3, run_all(fabric, c, 3));
  }
}

// A tree's root sends its final down as soon as it has made it, whatever the other tree's final
// is doing. On 4 peers rank 0 is tree 0's root and a leaf of tree 1, rank 3 the other way round.
// Each case holds back the final a root receives as a leaf until the final it made itself has
// gone down its own tree to the leaf at the bottom: a root that waited for the other tree's final
// before sending its own would never finish (it cost one message latency per all-reduce on the
// WAN).
// An epoch's links (docs/protocol.md "Neighbour links"): both ends of every link derive it, so
// the relation is symmetric; it holds every peer a schedule sends to, and at most 8 of them.
TEST(Algo, ScheduleNeighboursAreSymmetricBoundedAndCoverEverySchedule) {
  EXPECT_TRUE(algo::schedule_neighbours(0, 1).empty());
  EXPECT_EQ(algo::schedule_neighbours(0, 2), (std::set<int>{1}));
  EXPECT_TRUE(algo::schedule_neighbours(5, 4).empty()) << "not a rank";
  for (int n = 2; n <= 300; ++n) {
    std::vector<std::set<int>> of(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) of[static_cast<size_t>(r)] = algo::schedule_neighbours(r, n);
    for (int r = 0; r < n; ++r) {
      const std::set<int> &mine = of[static_cast<size_t>(r)];
      ASSERT_LE(mine.size(), 8u) << "n " << n << " rank " << r;
      ASSERT_EQ(mine.count(r), 0u);
      ASSERT_EQ(mine.count((r + 1) % n), 1u);
      ASSERT_EQ(mine.count((r + n - 1) % n), 1u);
      for (int t = 0; t < 2; ++t) {
        const algo::TreeNode node = algo::tree_node(t, r, n);
        for (int q : {node.parent, node.child[0], node.child[1]}) {
          if (q >= 0) {
            ASSERT_EQ(mine.count(q), 1u) << "tree " << t << " n " << n << " rank " << r;
          }
        }
      }
      for (int q : mine) {
        ASSERT_EQ(of[static_cast<size_t>(q)].count(r), 1u) << "n " << n << ": " << r << "-" << q;
      }
    }
  }
}

TEST(Algo, TreeRootsDoNotWaitForTheOtherTree) {
  Collective c;
  c.algo = Algo::kTree;
  c.count = 1000;
  c.dtype = Dtype::kF32;
  c.op = RedOp::kSum;
  const uint32_t down0 = 1, down1 = 3;  // one segment: up tree t is tag 2t, down tree t tag 2t + 1
  for (const Fabric::Options::Hold &hold : {Fabric::Options::Hold{{1, 3, down0}, {2, 0, down1}},
                                            Fabric::Options::Hold{{2, 0, down1}, {1, 3, down0}}}) {
    Fabric::Options opt;
    opt.holds = {hold};
    Fabric fabric(4, opt);
    expect_correct(c, 4, run_all(fabric, c, 4, std::chrono::seconds(5)));
  }
}

TEST(Algo, RandomDeliveryOrder) {
  for (Shape s : {Shape{Kind::kAllreduce, Algo::kRing}, Shape{Kind::kAllreduce, Algo::kTree},
                  Shape{Kind::kBroadcast, Algo::kRing}, Shape{Kind::kAllgather, Algo::kRing},
                  Shape{Kind::kReduceScatter, Algo::kRing}}) {
    for (int n : {2, 5, 7}) {
      Collective c;
      c.kind = s.kind;
      c.algo = s.algo;
      c.count = 10007;
      c.dtype = Dtype::kF32;
      c.op = RedOp::kAvg;
      c.root = 1;
      c.chunk_bytes = 512;
      Fabric::Options opt;
      opt.shuffle = true;
      opt.seed = static_cast<uint32_t>(n);
      Fabric fabric(n, opt);
      SCOPED_TRACE(shape_name(s) + " n=" + std::to_string(n));
      expect_correct(c, n, run_all(fabric, c, n));
    }
  }
}

// zstd on the wire (Compress::kAlways: every message of 4 KiB or more that shrinks): every kind,
// dtype and wire gives exactly the uncompressed result, with fewer bytes sent for inputs that
// compress (input() repeats with a short period), delivered in random order; one peer compressing
// and the others not works too, since receivers tell the forms apart by length.
TEST(Algo, CompressedMessagesGiveTheSameResultsWithFewerBytes) {
  if (!codec::compression_available()) GTEST_SKIP() << "built without zstd";
  for (Shape s : {Shape{Kind::kAllreduce, Algo::kRing}, Shape{Kind::kAllreduce, Algo::kTree},
                  Shape{Kind::kBroadcast, Algo::kRing}, Shape{Kind::kAllgather, Algo::kRing},
                  Shape{Kind::kReduceScatter, Algo::kRing}}) {
    for (Dtype t : {Dtype::kF32, Dtype::kBF16, Dtype::kI64}) {
      for (codec::Wire w : {codec::WireKind::kNative, codec::WireKind::kInt8}) {
        if (w.kind != codec::WireKind::kNative && t != Dtype::kF32) continue;
        const int n = 4;
        Collective c;
        c.kind = s.kind;
        c.algo = s.algo;
        c.count = 100003;
        c.dtype = t;
        c.op = RedOp::kSum;
        c.root = 2;
        c.wire = w;
        c.chunk_bytes = 32768;
        SCOPED_TRACE(shape_name(s) + " " + codec::dtype_name(t) + " " + codec::wire_name(w));
        Fabric plain_fabric(n, {true, 5, {}});
        const Outcome plain = run_all(plain_fabric, c, n);
        c.compress = algo::Compress::kAlways;
        Fabric zstd_fabric(n, {true, 6, {}});
        const Outcome zstd = run_all(zstd_fabric, c, n);
        for (int r = 0; r < n; ++r) {
          const size_t i = static_cast<size_t>(r);
          ASSERT_TRUE(zstd.status[i].ok()) << "rank " << r << ": " << zstd.status[i].to_string();
          ASSERT_TRUE(plain.status[i].ok());
          EXPECT_TRUE(zstd.out[i] == plain.out[i])
              << "rank " << r << ": compression changed the result";
          EXPECT_EQ(zstd.in_after[i], zstd.in[i]);
        }
        uint64_t plain_sent = 0, zstd_sent = 0;
        for (int r = 0; r < n; ++r) {
          plain_sent += plain.bytes_sent[static_cast<size_t>(r)];
          zstd_sent += zstd.bytes_sent[static_cast<size_t>(r)];
        }
        if (w.kind == codec::WireKind::kNative) {
          EXPECT_LT(zstd_sent, plain_sent / 2);
        }
        EXPECT_LE(zstd_sent, plain_sent);
        // Only the odd ranks compress.
        Fabric mixed_fabric(n, {true, 7, {}});
        const Outcome mixed =
            run_all(mixed_fabric, c, n, std::chrono::seconds(60), {}, [](Collective *mine, int r) {
              if (r % 2 == 0) mine->compress = algo::Compress::kOff;
            });
        for (int r = 0; r < n; ++r) {
          const size_t i = static_cast<size_t>(r);
          ASSERT_TRUE(mixed.status[i].ok()) << "rank " << r << ": " << mixed.status[i].to_string();
          EXPECT_TRUE(mixed.out[i] == plain.out[i]) << "rank " << r;
        }
      }
    }
  }
}

// A peer dies at its k-th send: no rank waits for the deadline, the dead rank fails, every other
// rank either fails or already holds the right result (a data phase upstream of the failure may
// finish: agreeing on one outcome is the commit step's job), and no input changes. On the INT8
// wire too, whose schedules keep buffers of their own that must be drained before they are freed
// (its results are checked by WireTest), and with zstd, whose frames in flight live in the
// schedule and whose receives' lengths live in the exchange.
TEST(Algo, PeerDiesMidOperation) {
  for (auto [w, z] : {std::pair{codec::WireKind::kNative, algo::Compress::kOff},
                      std::pair{codec::WireKind::kInt8, algo::Compress::kOff},
                      std::pair{codec::WireKind::kNative, algo::Compress::kAlways}}) {
    for (Shape s : {Shape{Kind::kAllreduce, Algo::kRing}, Shape{Kind::kAllreduce, Algo::kTree},
                    Shape{Kind::kBroadcast, Algo::kRing}, Shape{Kind::kAllgather, Algo::kRing},
                    Shape{Kind::kReduceScatter, Algo::kRing}}) {
      for (uint64_t k : {1, 7, 40}) {
        const int n = 5, dies = 3;
        Collective c;
        c.kind = s.kind;
        c.algo = s.algo;
        c.count = 1 << 16;
        c.chunk_bytes = w == codec::WireKind::kNative ? 4096 : 1024;
        c.wire = w;
        c.compress = z;
        Fabric fabric(n);
        fabric.kill_at_send(dies, k);
        const auto start = Clock::now();
        const std::vector<Bytes> ins = w == codec::WireKind::kNative
                                           ? std::vector<Bytes>{}
                                           : random_inputs(c, n, static_cast<uint32_t>(k));
        Outcome o = run_all(fabric, c, n, std::chrono::seconds(20), ins);
        const std::string what = std::string(codec::wire_name(w)) +
                                 (z == algo::Compress::kOff ? "" : " zstd") + " " + shape_name(s) +
                                 " k=" + std::to_string(k);
        EXPECT_LT(Clock::now() - start, std::chrono::seconds(10))
            << what << ": ranks waited for the deadline";
        EXPECT_FALSE(o.status[dies].ok()) << what;
        for (int r = 0; r < n; ++r) {
          const size_t i = static_cast<size_t>(r);
          EXPECT_EQ(o.in_after[i], o.in[i]) << what;
          if (w == codec::WireKind::kNative && o.status[i].ok()) {
            EXPECT_TRUE(o.out[i] == expected(c, o.in, r)) << what << " rank " << r;
          }
        }
      }
    }
  }
}

// In place (all-reduce, broadcast: one buffer; all-gather: in = out + rank * count;
// reduce-scatter: out = in + rank * count), with an Undo as the communicator uses it: the result
// has the out-of-place bits, and when a peer dies mid-operation, restoring the Undo gives every
// rank its buffer back byte for byte.
TEST(Algo, InPlaceWithUndo) {
  for (codec::Wire w : {codec::WireKind::kNative, codec::WireKind::kInt8}) {
    for (Shape s : {Shape{Kind::kAllreduce, Algo::kRing}, Shape{Kind::kAllreduce, Algo::kTree},
                    Shape{Kind::kBroadcast, Algo::kRing}, Shape{Kind::kAllgather, Algo::kRing},
                    Shape{Kind::kReduceScatter, Algo::kRing}}) {
      for (int n : {2, 3, 5}) {
        for (uint64_t dies_at : {uint64_t{0}, uint64_t{2}}) {
          const std::string what = std::string(codec::wire_name(w)) + " " + shape_name(s) +
                                   " n=" + std::to_string(n) + (dies_at != 0 ? " dies" : "");
          SCOPED_TRACE(what);
          Collective c = sweep_case(s, 20000, n, Dtype::kF32, RedOp::kSum, w);
          const std::vector<Bytes> ins = random_inputs(c, n, 7);
          const Outcome want = [&] {
            Fabric fabric(n);
            return run_all(fabric, c, n, std::chrono::seconds(20), ins);
          }();
          Fabric fabric(n);
          const int victim = s.kind == Kind::kBroadcast ? c.root : 0;  // a rank that sends
          if (dies_at != 0) fabric.kill_at_send(victim, dies_at);
          const size_t es = 4, block = c.count * es;
          std::vector<Bytes> buf(static_cast<size_t>(n)), before;
          std::vector<Status> status(static_cast<size_t>(n));
          std::vector<std::unique_ptr<algo::Channel>> channels;
          std::vector<std::unique_ptr<algo::Exchange>> exchanges;
          for (int r = 0; r < n; ++r) {
            const size_t i = static_cast<size_t>(r);
            if (s.kind == Kind::kAllgather) {
              buf[i].assign(static_cast<size_t>(n) * block, 0xEE);
              std::memcpy(buf[i].data() + i * block, ins[i].data(), block);
            } else {
              buf[i] = ins[i];
            }
            channels.push_back(fabric.channel(r));
            exchanges.push_back(std::make_unique<algo::Exchange>(
                *channels.back(), Clock::now() + std::chrono::seconds(20)));
          }
          before = buf;
          std::vector<std::thread> threads;
          for (int r = 0; r < n; ++r) {
            threads.emplace_back([&, r] {
              const size_t i = static_cast<size_t>(r);
              Collective mine = c;
              uint8_t *b = buf[i].data();
              mine.in = s.kind == Kind::kAllgather ? b + i * block : b;
              mine.out = s.kind == Kind::kReduceScatter ? b + i * block : b;
              ASSERT_TRUE(algo::check(mine, n, r).ok());
              const size_t out_bytes = algo::out_count(c, n) * es;
              Bytes saved(out_bytes);
              algo::Undo undo(algo::host_memory(), mine.out, out_bytes, saved.data());
              status[i] = algo::run(*exchanges[i], mine, &undo);
              if (!status[i].ok()) {
                for (auto &e : exchanges)
                  e->cancel(WCCL_ERROR(WCCL_ERR_PEER_LOST, "rank %d failed", r));
                ASSERT_TRUE(undo.restore([](void *dst, const void *src, size_t len) {
                                  std::memcpy(dst, src, len);
                                  return Status();
                                })
                                .ok());
              }
            });
          }
          for (auto &t : threads) t.join();
          if (dies_at != 0) {
            EXPECT_FALSE(status[static_cast<size_t>(victim)].ok());
          }
          for (int r = 0; r < n; ++r) {
            const size_t i = static_cast<size_t>(r);
            if (!status[i].ok()) {
              EXPECT_EQ(buf[i], before[i])
                  << "rank " << r << " was not restored: " << status[i].to_string();
              continue;
            }
            if (dies_at != 0)
              continue;  // finished before the death reached it: its result is checked elsewhere
            const size_t off = s.kind == Kind::kReduceScatter ? i * block : 0;
            const Bytes got(buf[i].begin() + static_cast<long>(off),
                            buf[i].begin() + static_cast<long>(off + want.out[i].size()));
            EXPECT_TRUE(got == want.out[i])
                << "rank " << r << " in place differs from out of place";
          }
        }
      }
    }
  }
}

TEST(Algo, RejectsOverlapOtherThanInPlace) {
  std::vector<float> buf(64);
  Collective c;
  c.count = 16;
  c.in = buf.data();
  c.out = buf.data() + 1;
  EXPECT_EQ(algo::check(c, 2, 0).code(), WCCL_ERR_INVALID_ARGUMENT);
  c.out = buf.data();
  EXPECT_TRUE(algo::check(c, 2, 0).ok());
  c.kind = Kind::kAllgather;  // in must be rank 1's block of out
  c.in = buf.data() + 16;
  EXPECT_TRUE(algo::check(c, 2, 1).ok());
  EXPECT_EQ(algo::check(c, 2, 0).code(), WCCL_ERR_INVALID_ARGUMENT);
  c.kind = Kind::kReduceScatter;  // out must be rank 1's block of in
  c.in = buf.data();
  c.out = buf.data() + 16;
  EXPECT_TRUE(algo::check(c, 2, 1).ok());
  EXPECT_EQ(algo::check(c, 2, 0).code(), WCCL_ERR_INVALID_ARGUMENT);
}

TEST(Algo, UndoSavesEachByteOnceBeforeItsFirstWrite) {
  Bytes out(100), saved(100, 0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i);
  const Bytes original = out;
  algo::Undo undo(algo::host_memory(), out.data(), out.size(), saved.data());
  Bytes outside(8);
  ASSERT_TRUE(undo.will_write(outside.data(), outside.size()).ok());  // not the output: ignored
  EXPECT_EQ(undo.saved_bytes(), 0u);
  ASSERT_TRUE(undo.will_write(out.data() + 10, 10).ok());
  std::fill(out.begin() + 10, out.begin() + 20, 0xAA);
  ASSERT_TRUE(undo.will_write(out.data() + 30, 10).ok());
  std::fill(out.begin() + 30, out.begin() + 40, 0xBB);
  ASSERT_TRUE(undo.will_write(out.data() + 5, 40).ok());  // spans both: only the gaps are saved now
  std::fill(out.begin() + 5, out.begin() + 45, 0xCC);
  ASSERT_TRUE(undo.will_write(out.data() + 95, 20).ok());  // runs past the end
  std::fill(out.begin() + 95, out.end(), 0xDD);
  EXPECT_EQ(undo.saved_bytes(), 45u);
  ASSERT_TRUE(undo.restore([](void *dst, const void *src, size_t n) {
                    std::memcpy(dst, src, n);
                    return Status();
                  })
                  .ok());
  EXPECT_EQ(out, original);
}

TEST(Algo, DeadlineEndsAWaitForAPeerThatNeverSends) {
  Fabric fabric(2);
  auto ch = fabric.channel(0);
  algo::Exchange ex(*ch, Clock::now() + std::chrono::milliseconds(200));
  std::vector<uint8_t> in(1024), out(1024);
  Collective c;
  c.count = 256;
  c.in = in.data();
  c.out = out.data();
  const auto start = Clock::now();
  Status st = algo::run(ex, c);
  EXPECT_EQ(st.code(), WCCL_ERR_TIMEOUT) << st.to_string();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

// --- Device buffers ------------------------------------------------------------------------------
// The same schedules with every rank's buffers on an emulated GPU (tests/emulated_device.h): the
// device path must give the host path's bytes exactly, since its kernels compute the same bits.

class DeviceTest : public ::testing::TestWithParam<WireParam> {};

TEST_P(DeviceTest, SameBitsAsHostMemory) {
  const auto [n, count, shape, wire] = GetParam();
  const bool reduces = shape.kind == Kind::kAllreduce || shape.kind == Kind::kReduceScatter;
  EmulatedGpu gpu;
  // Element sizes 8, 4, 2 and 1 (test_gpu_kernels checks every dtype's kernels against the CPU's).
  const std::vector<Dtype> dtypes =
      wire.kind == codec::WireKind::kNative
          ? std::vector<Dtype>{Dtype::kF64, Dtype::kF32, Dtype::kBF16, Dtype::kI8}
          : std::vector<Dtype>{Dtype::kF32};
  for (Dtype t : dtypes) {
    for (int op = 0; op < (reduces ? codec::kRedOpCount : 1); ++op) {
      const Collective c = sweep_case(shape, count, n, t, static_cast<RedOp>(op), wire);
      ASSERT_TRUE(algo::check(c, n, 0).ok());
      SCOPED_TRACE(std::string(codec::wire_name(wire)) + " " + codec::dtype_name(c.dtype) + " " +
                   codec::redop_name(c.op));
      const std::vector<Bytes> ins =
          wire.kind == codec::WireKind::kNative ? std::vector<Bytes>{} : random_inputs(c, n, 7);
      Fabric host_fabric(n), device_fabric(n);
      const Outcome host = run_all(host_fabric, c, n, std::chrono::seconds(60), ins);
      const Outcome device =
          run_all(device_fabric, c, n, std::chrono::seconds(60), ins, nullptr, &gpu);
      for (int r = 0; r < n; ++r) {
        const size_t i = static_cast<size_t>(r);
        ASSERT_TRUE(device.status[i].ok()) << "rank " << r << ": " << device.status[i].to_string();
        ASSERT_EQ(device.in_after[i], device.in[i]) << "rank " << r << " changed its input";
        ASSERT_EQ(device.out[i], host.out[i]) << "rank " << r << " differs from the host path";
        ASSERT_EQ(device.bytes_sent[i], host.bytes_sent[i]) << "rank " << r;
      }
      ASSERT_EQ(gpu.live_allocations(), 0u) << "device memory left allocated";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sweep, DeviceTest,
    ::testing::Combine(::testing::Values(1, 2, 3, 5), ::testing::Values<size_t>(0, 7, 65537),
                       kEveryShape,
                       ::testing::Values(codec::WireKind::kNative, codec::WireKind::kF16,
                                         codec::WireKind::kBF16, codec::WireKind::kInt8,
                                         codec::WireKind::kInt4, codec::WireKind::kFp8,
                                         codec::WireKind::kInt2)),
    wire_param_name);
INSTANTIATE_TEST_SUITE_P(Topk, DeviceTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5),
                                            ::testing::Values<size_t>(0, 7, 65537), kTopkShapes,
                                            ::testing::Values(codec::WireKind::kTopk)),
                         wire_param_name);

// DESIGN §7: with a wire codec only the encoded bytes cross PCIe, each way, through page-locked
// memory. A native ring all-reduce moves its elements across about 2(n-1)/n times each way; the
// INT8 ring about a quarter of that.
TEST(Device, OnlyWireBytesCrossPcie) {
  const int n = 4;
  Collective c;
  c.count = 1 << 20;
  c.chunk_bytes = 1 << 18;
  uint64_t crossed[2] = {0, 0};
  for (codec::Wire w : {codec::WireKind::kNative, codec::WireKind::kInt8}) {
    c.wire = w;
    EmulatedGpu gpu;
    Fabric fabric(n);
    const Outcome o =
        run_all(fabric, c, n, std::chrono::seconds(60), random_inputs(c, n, 3), nullptr, &gpu);
    for (const Status &st : o.status) ASSERT_TRUE(st.ok()) << st.to_string();
    crossed[w.kind == codec::WireKind::kInt8] = gpu.to_device_bytes() + gpu.to_host_bytes();
    EXPECT_GT(gpu.pinned_allocations(), 0u);
  }
  const double bytes = 4.0 * c.count * n;  // every rank's elements
  EXPECT_LT(static_cast<double>(crossed[0]) / bytes, 4.2) << "native";
  const double ratio = static_cast<double>(crossed[1]) / static_cast<double>(crossed[0]);
  EXPECT_LT(ratio, 0.30) << "int8 moved " << crossed[1] << " bytes across PCIe, native "
                         << crossed[0];
}

TEST(Device, CompressedMessagesFromDeviceBuffers) {
  if (!codec::compression_available()) GTEST_SKIP() << "built without zstd";
  const int n = 3;
  for (codec::Wire w : {codec::WireKind::kNative, codec::WireKind::kInt8}) {
    Collective c;
    c.count = 100003;
    c.wire = w;
    c.compress = algo::Compress::kAlways;
    c.chunk_bytes = 32768;
    EmulatedGpu gpu;
    Fabric host_fabric(n), device_fabric(n);
    const Outcome host = run_all(host_fabric, c, n);
    const Outcome device =
        run_all(device_fabric, c, n, std::chrono::seconds(60), {}, nullptr, &gpu);
    for (int r = 0; r < n; ++r) {
      const size_t i = static_cast<size_t>(r);
      ASSERT_TRUE(device.status[i].ok()) << device.status[i].to_string();
      EXPECT_EQ(device.out[i], host.out[i]);
      EXPECT_EQ(device.bytes_sent[i], host.bytes_sent[i]);
      EXPECT_LT(device.bytes_sent[i], 2 * c.count * 4 / 2) << "input() compresses";
    }
  }
}

// A GPU call that fails anywhere in the operation fails it with WCCL_ERR_CUDA on that rank
// (NO_MEMORY where it was an allocation; the others are cancelled), leaves every input as it was,
// and leaks no device memory.
TEST(Device, AFaultInTheFirstQuarterOfItsGpuCallsFailsTheOperationCleanly) {
  const int n = 3;
  for (codec::Wire w : {codec::WireKind::kNative, codec::WireKind::kInt8}) {
    Collective c;
    c.count = 30011;
    c.chunk_bytes = 4096;
    c.wire = w;
    // The calls of a clean run: faults go at its first ones and up to a quarter of the way in,
    // before any rank can have finished.
    EmulatedGpu clean;
    Fabric clean_fabric(n);
    for (const Status &st : run_all(clean_fabric, c, n, std::chrono::seconds(20),
                                    random_inputs(c, n, 5), nullptr, &clean)
                                .status) {
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
    const long total = static_cast<long>(clean.calls());
    ASSERT_GT(total, 100) << "calls of a clean run";
    for (long k : {0L, 1L, 5L, total / 8, total / 4}) {
      EmulatedGpu gpu;
      gpu.fail_after(k);
      Fabric fabric(n);
      const Outcome o =
          run_all(fabric, c, n, std::chrono::seconds(20), random_inputs(c, n, 5), nullptr, &gpu);
      int cuda = 0;
      for (int r = 0; r < n; ++r) {
        const size_t i = static_cast<size_t>(r);
        EXPECT_FALSE(o.status[i].ok()) << "fault after " << k;
        EXPECT_EQ(o.in_after[i], o.in[i]);
        cuda += o.status[i].code() == WCCL_ERR_CUDA ||
                o.status[i].code() == WCCL_ERR_NO_MEMORY;  // alloc
      }
      EXPECT_EQ(cuda, 1) << codec::wire_name(w) << ", fault after " << k << ": "
                         << o.status[0].to_string() << " / " << o.status[1].to_string() << " / "
                         << o.status[2].to_string() << " (of " << total << " calls)";
      EXPECT_EQ(gpu.live_allocations(), 0u);
    }
  }
}

TEST(Algo, TreesAreComplementary) {
  for (int n = 1; n <= 33; ++n) {
    std::vector<int> interior(static_cast<size_t>(n), 0);
    for (int t = 0; t < 2; ++t) {
      int roots = 0;
      for (int r = 0; r < n; ++r) {
        const algo::TreeNode node = algo::tree_node(t, r, n);
        if (node.parent < 0) ++roots;
        EXPECT_EQ(node.depth, node.parent < 0 ? 0 : algo::tree_node(t, node.parent, n).depth + 1);
        if (node.child[0] >= 0) ++interior[static_cast<size_t>(r)];
        int below = -1;  // the children's greatest height
        for (int ch : node.child) {
          if (ch >= 0) {
            const algo::TreeNode child = algo::tree_node(t, ch, n);
            EXPECT_EQ(child.parent, r);
            below = std::max(below, child.height);
          }
        }
        EXPECT_EQ(node.height, below + 1) << "n=" << n << " tree " << t << " rank " << r;
      }
      EXPECT_EQ(roots, 1);
    }
    for (int r = 0; r < n; ++r)
      EXPECT_LE(interior[static_cast<size_t>(r)], 1) << "n=" << n << " rank " << r;
  }
}

TEST(Algo, ChecksTagSpace) {
  Collective c;
  c.count = size_t{1} << 40;
  c.dtype = Dtype::kU8;
  c.chunk_bytes = 1;
  EXPECT_EQ(algo::check(c, 4, 0).code(), WCCL_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace wccl::test
