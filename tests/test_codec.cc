// The codec kernels and wire codecs: every instruction-set tier against the scalar tier, bit for
// bit; the block-quantized wires' error bounds on hard blocks; what encoding refuses and what
// decoding rejects.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "codec/compress.h"
#include "codec/half.h"
#include "codec/kernels.h"
#include "codec/wire.h"

namespace wccl::test {
namespace {

using codec::Dtype;
using codec::Kernels;
using codec::RedOp;
using codec::Tier;
using codec::Wire;
using codec::WireKind;
using Bytes = std::vector<uint8_t>;

// Lengths around the vector widths and the INT8 block, so tails and partial blocks are covered.
const size_t kLengths[] = {0,   1,   3,   15,   16,   17,   63,   64,  65,
                           127, 128, 129, 1023, 1024, 1025, 2048, 4099};
const Wire kBlockWires[] = {WireKind::kInt8, WireKind::kInt4, WireKind::kInt2, WireKind::kFp8,
                            WireKind::kTopk};
// The same with TOPK also at the ends of its keep and at 2 (an odd and an even count of codes).
const Wire kEveryBlockWire[] = {WireKind::kInt8, WireKind::kInt4, WireKind::kInt2,
                                WireKind::kFp8,  WireKind::kTopk, Wire::topk(1),
                                Wire::topk(2),   Wire::topk(63),  Wire::topk(64)};

// Byte-equal (memcmp, which may not be given the null data() of an empty vector).
bool same(const void *a, const void *b, size_t bytes) {
  return bytes == 0 || std::memcmp(a, b, bytes) == 0;
}

std::vector<const Kernels *> wide_tiers() {
  std::vector<const Kernels *> out;
  for (Tier t : codec::kTiers) {
    if (t != Tier::kScalar && codec::kernels_for(t) != nullptr)
      out.push_back(codec::kernels_for(t));
  }
  return out;
}

// Random bytes that are valid, finite-or-special values of type t: finite values of mixed
// magnitude, plus zeros of both signs, subnormals and infinities for the float types (no NaN,
// whose payload the reference would not pin down).
Bytes random_values(Dtype t, size_t n, std::mt19937 &rng) {
  const size_t es = codec::dtype_size(t);
  Bytes b(n * es);
  std::uniform_real_distribution<float> mag(-1000.0f, 1000.0f);
  std::uniform_int_distribution<int> pick(0, 19);
  for (size_t i = 0; i < n; ++i) {
    float f = mag(rng);
    switch (pick(rng)) {
      case 0:
        f = -0.0f;
        break;
      case 1:
        f = 1e-40f;
        break;  // subnormal
      case 2:
        f = std::numeric_limits<float>::infinity();
        break;
      case 3:
        f = 3e-5f;
        break;  // subnormal in F16
      default:
        break;
    }
    switch (t) {
      case Dtype::kF32:
        std::memcpy(&b[i * 4], &f, 4);
        break;
      case Dtype::kF64: {
        const double d = f * 1.0000001;
        std::memcpy(&b[i * 8], &d, 8);
        break;
      }
      case Dtype::kF16: {
        const uint16_t h = codec::float_to_half(f);
        std::memcpy(&b[i * 2], &h, 2);
        break;
      }
      case Dtype::kBF16: {
        const uint16_t h = codec::float_to_bf16(f);
        std::memcpy(&b[i * 2], &h, 2);
        break;
      }
      default:
        for (size_t k = 0; k < es; ++k) b[i * es + k] = static_cast<uint8_t>(rng());
        break;
    }
  }
  return b;
}

TEST(CodecTiers, TheScalarAndGenericTiersAlwaysExist) {
  ASSERT_NE(codec::kernels_for(Tier::kScalar), nullptr);
  ASSERT_NE(codec::kernels_for(Tier::kGeneric), nullptr);
  const Kernels &best = codec::kernels();
  EXPECT_NE(std::string(best.name), "scalar");
  std::printf("fastest tier on this CPU: %s\n", best.name);
}

TEST(CodecTiers, ReductionsAreBitIdenticalToScalar) {
  const Kernels &ref = *codec::kernels_for(Tier::kScalar);
  std::mt19937 rng(7);
  for (const Kernels *k : wide_tiers()) {
    for (int ti = 0; ti < codec::kDtypeCount; ++ti) {
      const auto t = static_cast<Dtype>(ti);
      const size_t es = codec::dtype_size(t);
      for (int oi = 0; oi < codec::kRedOpCount; ++oi) {
        const auto op = static_cast<RedOp>(oi);
        for (size_t n : kLengths) {
          // One element of offset, so no tier gets aligned buffers for free.
          Bytes a = random_values(t, n + 1, rng), b = random_values(t, n + 1, rng);
          Bytes want(a.size()), got(a.size());
          ref.reduce_into(t, op, want.data() + es, a.data() + es, b.data() + es, n);
          k->reduce_into(t, op, got.data() + es, a.data() + es, b.data() + es, n);
          ASSERT_EQ(want, got) << k->name << " " << codec::dtype_name(t) << " "
                               << codec::redop_name(op) << " n=" << n;
          Bytes in_place = a;
          k->reduce_into(t, op, in_place.data() + es, in_place.data() + es, b.data() + es, n);
          ASSERT_TRUE(same(in_place.data() + es, want.data() + es, n * es))
              << k->name << " in place";
          ref.finish_avg(t, want.data() + es, n, 3);
          k->finish_avg(t, got.data() + es, n, 3);
          ASSERT_EQ(want, got) << k->name << " avg " << codec::dtype_name(t) << " n=" << n;
        }
      }
    }
  }
}

std::vector<float> random_floats(size_t n, float lo, float hi, std::mt19937 &rng) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float &x : v) x = d(rng);
  return v;
}

// AVG over more members than the element type can count: integers divide in 64 bits, with
// truncation toward zero.
TEST(CodecTiers, IntegerAverageDividesByAnyMemberCount) {
  for (Tier tier : codec::kTiers) {
    const Kernels *k = codec::kernels_for(tier);
    if (k == nullptr) continue;
    int8_t i8[2] = {120, -120};
    k->finish_avg(Dtype::kI8, i8, 2, 200);
    EXPECT_EQ(i8[0], 0) << k->name;
    EXPECT_EQ(i8[1], 0) << k->name;
    uint8_t u8 = 255;
    k->finish_avg(Dtype::kU8, &u8, 1, 256);
    EXPECT_EQ(u8, 0) << k->name;
    u8 = 200;
    k->finish_avg(Dtype::kU8, &u8, 1, 7);
    EXPECT_EQ(u8, 28) << k->name;
    int32_t i32 = -15;
    k->finish_avg(Dtype::kI32, &i32, 1, 7);
    EXPECT_EQ(i32, -2) << k->name;
  }
}

TEST(CodecTiers, WireCodecsAreBitIdenticalToScalar) {
  const Kernels &ref = *codec::kernels_for(Tier::kScalar);
  std::mt19937 rng(11);
  for (const Kernels *k : wide_tiers()) {
    for (size_t n : kLengths) {
      std::vector<float> x = random_floats(n, -3.0f, 5.0f, rng);
      if (n > 20) x[17] = -0.0f;
      for (Wire w : kEveryBlockWire) {
        const codec::BlockCodec &r = *codec::block_codec(ref, w), &c = *codec::block_codec(*k, w);
        const codec::BlockFormat f = *codec::block_format(w);
        const std::string name = codec::wire_label(w);
        Bytes want(codec::wire_size(w, n)), got(want.size());
        ASSERT_EQ(r.encode(f, x.data(), n, want.data()), n);
        ASSERT_EQ(c.encode(f, x.data(), n, got.data()), n);
        ASSERT_EQ(want, got) << k->name << " " << name << " encode n=" << n;
        std::vector<float> mine = random_floats(n, -1.0f, 1.0f, rng);
        std::vector<float> d_ref(n), d_got(n), a_ref(n), a_got(n);
        r.decode(f, want.data(), n, d_ref.data());
        c.decode(f, want.data(), n, d_got.data());
        ASSERT_TRUE(same(d_ref.data(), d_got.data(), n * 4))
            << k->name << " " << name << " decode n=" << n;
        r.decode_add(f, want.data(), n, a_ref.data(), mine.data());
        c.decode_add(f, want.data(), n, a_got.data(), mine.data());
        ASSERT_TRUE(same(a_ref.data(), a_got.data(), n * 4))
            << k->name << " " << name << " decode-add n=" << n;
        c.decode_add(f, want.data(), n, mine.data(), mine.data());  // in place
        ASSERT_TRUE(same(a_ref.data(), mine.data(), n * 4))
            << k->name << " " << name << " decode-add in place";
      }
      std::vector<float> d_ref(n), d_got(n);

      // 16-bit wire data at an odd address, as it may sit inside a receive buffer.
      Bytes h_ref(2 * n + 1), h_got(2 * n + 1);
      ref.f16_encode(x.data(), n, h_ref.data() + 1);
      k->f16_encode(x.data(), n, h_got.data() + 1);
      ASSERT_EQ(h_ref, h_got) << k->name << " f16 encode";
      ref.f16_decode(h_ref.data() + 1, n, d_ref.data());
      k->f16_decode(h_ref.data() + 1, n, d_got.data());
      ASSERT_TRUE(same(d_ref.data(), d_got.data(), n * 4)) << k->name << " f16 decode";
      ref.bf16_encode(x.data(), n, h_ref.data() + 1);
      k->bf16_encode(x.data(), n, h_got.data() + 1);
      ASSERT_EQ(h_ref, h_got) << k->name << " bf16 encode";
      ref.bf16_decode(h_ref.data() + 1, n, d_ref.data());
      k->bf16_decode(h_ref.data() + 1, n, d_got.data());
      ASSERT_TRUE(same(d_ref.data(), d_got.data(), n * 4)) << k->name << " bf16 decode";
    }
  }
}

// The documented bound (wire.h) for element x of a block of `w` data holding [lo, hi]:
//   INT8, INT4, INT2: (hi - lo) / (2 * levels), plus float rounding (2^-20 of the block's largest
//   magnitude), plus the whole range when the step would be below FLT_MIN (sent as its minimum);
//   FP8: max(|x| / 16, 2^(k-10)) with 2^k <= max(amax / 224, 2^-126).
double error_bound(Wire w, float x, float lo, float hi) {
  const double range = static_cast<double>(hi) - lo;
  const double mag =
      std::max(std::fabs(static_cast<double>(lo)), std::fabs(static_cast<double>(hi)));
  if (w.kind == WireKind::kFp8)
    return std::max(std::fabs(static_cast<double>(x)) / 16,
                    std::max(mag / 224, std::ldexp(1.0, -126)) * std::ldexp(1.0, -10));
  const double levels = w.kind == WireKind::kInt8 ? 255.0 : w.kind == WireKind::kInt4 ? 15.0 : 3.0;
  return range / (2 * levels) + mag * std::ldexp(1.0, -20) +
         (range < levels * FLT_MIN ? range : 0.0);
}

void expect_within_bound(Wire w, const std::vector<float> &x, const char *what) {
  const size_t n = x.size(), block = codec::block_format(w)->block, keep = w.keep;
  Bytes enc(codec::wire_size(w, n));
  ASSERT_TRUE(codec::encode(w, x.data(), n, enc.data()).ok())
      << codec::wire_label(w) << " " << what;
  std::vector<float> y(n);
  ASSERT_TRUE(codec::decode(w, enc.data(), enc.size(), n, y.data()).ok()) << what;
  double worst = 0;
  for (size_t b = 0; b < n; b += block) {
    const size_t e = std::min(n, b + block);
    const float lo =
        *std::min_element(x.begin() + static_cast<long>(b), x.begin() + static_cast<long>(e));
    const float hi =
        *std::max_element(x.begin() + static_cast<long>(b), x.begin() + static_cast<long>(e));
    // TOPK: a kept element is within amax / 14 (plus rounding; all of amax when the step would be
    // below FLT_MIN), a dropped one at most the largest magnitude not kept.
    std::vector<double> mags;
    for (size_t i = b; i < e; ++i) mags.push_back(std::fabs(static_cast<double>(x[i])));
    std::sort(mags.rbegin(), mags.rend());
    const double amax = mags[0], dropped = mags.size() > keep ? mags[keep] : 0.0;
    const double topk_bound = std::max(
        amax / 14 + amax * std::ldexp(1.0, -20) + (amax < 7 * FLT_MIN ? amax : 0.0), dropped);
    for (size_t i = b; i < e; ++i) {
      const double bound = w.kind == WireKind::kTopk ? topk_bound : error_bound(w, x[i], lo, hi);
      ASSERT_TRUE(std::isfinite(y[i])) << codec::wire_label(w) << " " << what << " element " << i;
      const double err = std::fabs(static_cast<double>(y[i]) - x[i]);
      ASSERT_LE(err, bound) << codec::wire_label(w) << " " << what << " element " << i << ": "
                            << x[i] << " came back as " << y[i];
      if (bound > 0) worst = std::max(worst, err / bound);
    }
  }
  std::printf("%-7s %-14s n=%-6zu worst error %.3f of the bound\n", codec::wire_label(w).c_str(),
              what, n, worst);
}

TEST(BlockCodecs, ErrorStaysWithinTheBound) {
  std::mt19937 rng(3);
  for (Wire w : kEveryBlockWire) {
    for (size_t n : {size_t{1}, size_t{100}, size_t{1000}, size_t{1024}, size_t{5000}}) {
      expect_within_bound(w, random_floats(n, -1.0f, 1.0f, rng), "random");
      expect_within_bound(w, random_floats(n, 1e6f, 1e6f + 1.0f, rng), "offset");
      expect_within_bound(w, std::vector<float>(n, 0.3f), "constant");
      expect_within_bound(w, random_floats(n, 1.0f, 1.0f + 1e-6f, rng), "tiny-range");
      expect_within_bound(w, random_floats(n, -1e37f, 1e37f, rng), "huge-range");
      expect_within_bound(w, random_floats(n, -1e-39f, 1e-39f, rng), "denormal");
      expect_within_bound(w, random_floats(n, 0.0f, 1e-44f, rng), "denormal-tiny");
      std::vector<float> spiky =
          random_floats(n, -1e-3f, 1e-3f, rng);  // a pseudo-gradient with outliers
      for (size_t i = 0; i < n; i += 97) spiky[i] *= 300.0f;
      expect_within_bound(w, spiky, "outliers");
    }
    // The two ends of the float range in one block decode to finite values.
    expect_within_bound(w, {-1.6e38f, 1.6e38f, 0.0f}, "widest");
  }
}

TEST(BlockCodecs, EveryUniformCodeIsUsedOnARamp) {
  // A block that spans 0..levels exactly maps element i to code i: the quantiser is not off by
  // one, INT4 packs element 2p in the low nibble and INT2 element 4p + e in bits 2e, 2e + 1.
  for (Wire w : {WireKind::kInt8, WireKind::kInt4, WireKind::kInt2}) {
    const size_t levels = w.kind == WireKind::kInt8 ? 255 : w.kind == WireKind::kInt4 ? 15 : 3;
    std::vector<float> x(levels + 1);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
    Bytes enc(codec::wire_size(w, x.size()));
    ASSERT_TRUE(codec::encode(w, x.data(), x.size(), enc.data()).ok());
    for (size_t i = 0; i < x.size(); ++i) {
      const unsigned code = w.kind == WireKind::kInt8   ? enc[8 + i]
                            : w.kind == WireKind::kInt4 ? (enc[8 + i / 2] >> (4 * (i % 2))) & 15u
                                                        : (enc[8 + i / 4] >> (2 * (i % 4))) & 3u;
      ASSERT_EQ(code, i) << codec::wire_name(w);
    }
    std::vector<float> y(x.size());
    ASSERT_TRUE(codec::decode(w, enc.data(), enc.size(), x.size(), y.data()).ok());
    EXPECT_EQ(x, y) << codec::wire_name(w);
  }
}

TEST(BlockCodecs, TopkKeepsTheLargestMagnitudesInIndexOrder) {
  // Block 0: ten large values among small ones, four of them tied at magnitude 2 (at 7, 100, 150
  // and 200) for the last three places: the lower indices win, 200 goes (and -1 at 255). Block 1:
  // 5 elements, all kept.
  std::vector<float> x(261, 0.01f);
  const std::vector<std::pair<size_t, float>> big = {
      {3, -7.0f},   {7, 2.0f},   {40, 5.0f},  {41, -3.0f}, {100, 2.0f},
      {150, -2.0f}, {200, 2.0f}, {201, 6.0f}, {250, 4.0f}, {255, -1.0f}};
  for (const auto &[i, v] : big) x[i] = v;
  for (size_t i = 256; i < 261; ++i) x[i] = static_cast<float>(i) - 258.0f;  // -2 -1 0 1 2
  const codec::BlockFormat f = codec::topk_format(codec::kTopkDefaultKeep);
  Bytes enc(codec::wire_size(WireKind::kTopk, x.size()));
  ASSERT_EQ(enc.size(), 16u + 4u + 5u + 3u);
  ASSERT_TRUE(codec::encode(WireKind::kTopk, x.data(), x.size(), enc.data()).ok());
  const std::vector<uint8_t> kept(enc.begin() + 4, enc.begin() + 12);
  EXPECT_EQ(kept, (std::vector<uint8_t>{3, 7, 40, 41, 100, 150, 201, 250}));
  float scale;
  std::memcpy(&scale, enc.data(), 4);
  EXPECT_EQ(scale, 1.0f);  // 7 / 7: every kept value here is a whole number of steps
  std::vector<float> y(x.size());
  ASSERT_TRUE(codec::decode(WireKind::kTopk, enc.data(), enc.size(), x.size(), y.data()).ok());
  for (size_t i = 0; i < 256; ++i) {
    const bool k = std::find(kept.begin(), kept.end(), i) != kept.end();
    EXPECT_EQ(y[i], k ? x[i] : 0.0f) << "element " << i;
  }
  std::memcpy(&scale, enc.data() + f.block_bytes(f.block), 4);
  EXPECT_FLOAT_EQ(scale, 2.0f / 7);
  for (size_t i = 256; i < 261; ++i) EXPECT_NEAR(y[i], x[i], 1.0 / 7) << "element " << i;
}

// The indices of a block's `keep` largest magnitudes (ties: the lower index), ascending: a sort by
// magnitude then index, what TOPK's encoder must pick.
std::vector<uint8_t> largest(const std::vector<float> &x, size_t keep) {
  std::vector<size_t> order(x.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const float ma = std::fabs(x[a]), mb = std::fabs(x[b]);
    return ma != mb ? ma > mb : a < b;
  });
  std::vector<uint8_t> want(order.begin(), order.begin() + static_cast<long>(keep));
  std::sort(want.begin(), want.end());
  return want;
}

// Each keep is its own format: the same block keeps its keep largest (ties: the lower index;
// every magnitude here is held twice), whether the encoder picks them one at a time (few) or by
// the keep-th largest (many), the bytes grow by an index and a code per element kept, and a keep
// outside 1..64 is refused.
TEST(BlockCodecs, TopkKeepsAsManyAsItsKeepSays) {
  std::vector<float> x(256);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 256) - 127.5f;
  for (size_t keep = 1; keep <= codec::kTopkMaxKeep; ++keep) {
    const Wire w = Wire::topk(keep);
    Bytes enc(codec::wire_size(w, x.size()));
    ASSERT_EQ(enc.size(), 4 + keep + (keep + 1) / 2);
    ASSERT_TRUE(codec::encode(w, x.data(), x.size(), enc.data()).ok());
    const std::vector<uint8_t> want = largest(x, keep);
    EXPECT_EQ(std::vector<uint8_t>(enc.begin() + 4, enc.begin() + 4 + static_cast<long>(keep)),
              want)
        << "keep " << keep;
    std::vector<float> y(x.size());
    ASSERT_TRUE(codec::decode(w, enc.data(), enc.size(), x.size(), y.data()).ok());
    for (size_t i = 0; i < x.size(); ++i) {
      const bool kept = std::binary_search(want.begin(), want.end(), i);
      if (kept) {
        EXPECT_NEAR(y[i], x[i], 127.5 / 14 + 1e-4) << "keep " << keep << " element " << i;
      } else {
        EXPECT_EQ(y[i], 0.0f) << "keep " << keep << " element " << i;
      }
    }
    // Bytes of another keep are another length: refused as a bad frame, nothing written.
    const Wire other = Wire::topk(keep == 64 ? 63 : keep + 1);
    std::vector<float> untouched(x.size(), 42.0f);
    EXPECT_EQ(codec::decode(other, enc.data(), enc.size(), x.size(), untouched.data()).code(),
              WCCL_ERR_PROTOCOL);
    EXPECT_EQ(untouched, std::vector<float>(x.size(), 42.0f));
  }
  // A short tail block mostly of zeros (ties among the zeros where the keep reaches them): every
  // keep picks as a stable sort does, both ways of picking included.
  std::vector<float> tail(100, 0.0f);
  for (size_t i = 0; i < tail.size(); i += 3) tail[i] = static_cast<float>(i % 7) - 3.0f;
  for (size_t keep = 1; keep <= codec::kTopkMaxKeep; ++keep) {
    const Wire w = Wire::topk(keep);
    Bytes enc(codec::wire_size(w, tail.size()));
    ASSERT_TRUE(codec::encode(w, tail.data(), tail.size(), enc.data()).ok());
    EXPECT_EQ(std::vector<uint8_t>(enc.begin() + 4, enc.begin() + 4 + static_cast<long>(keep)),
              largest(tail, keep))
        << "tail, keep " << keep;
  }
  for (size_t keep : {size_t{0}, size_t{65}}) {
    Bytes enc(64);
    const Status st = codec::encode(Wire::topk(keep), x.data(), 4, enc.data());
    EXPECT_EQ(st.code(), WCCL_ERR_INVALID_ARGUMENT) << keep;
    EXPECT_NE(st.message().find("not 1..64"), std::string::npos) << st.message();
  }
}

TEST(BlockCodecs, Fp8RoundsToNearestEvenE4M3) {
  // 448 = 1.75 * 2^8 puts the scale at 2^0: the elements are E4M3 values themselves.
  const std::vector<float> x = {448.0f,      1.0f,           1.0625f,  1.1875f, -0x1p-9f,
                                3 * 0x1p-9f, 2.5f * 0x1p-9f, 0x1p-11f, -0.0f,   15.5f};
  const std::vector<float> want = {448.0f,      1.0f,        1.0f, 1.25f, -0x1p-9f,
                                   3 * 0x1p-9f, 2 * 0x1p-9f, 0.0f, -0.0f, 16.0f};
  Bytes enc(codec::wire_size(WireKind::kFp8, x.size()));
  ASSERT_TRUE(codec::encode(WireKind::kFp8, x.data(), x.size(), enc.data()).ok());
  float scale;
  std::memcpy(&scale, enc.data(), 4);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(enc[4], 0x7e);  // 448: the largest finite E4M3
  EXPECT_EQ(enc[5], 0x38);  // 1.0: exponent 7, mantissa 0
  std::vector<float> y(x.size());
  ASSERT_TRUE(codec::decode(WireKind::kFp8, enc.data(), enc.size(), x.size(), y.data()).ok());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(y[i], want[i]) << "element " << i << " " << x[i];
    EXPECT_EQ(std::signbit(y[i]), std::signbit(want[i])) << "element " << i;
  }
  // Scaled: every value doubled 2^20 times decodes doubled 2^20 times (the scale is exact).
  std::vector<float> big(x.size());
  for (size_t i = 0; i < x.size(); ++i) big[i] = x[i] * 0x1p20f;
  ASSERT_TRUE(codec::encode(WireKind::kFp8, big.data(), big.size(), enc.data()).ok());
  ASSERT_TRUE(codec::decode(WireKind::kFp8, enc.data(), enc.size(), x.size(), y.data()).ok());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], want[i] * 0x1p20f) << "element " << i;
}

TEST(BlockCodecs, NanAndInfAreRefusedNamingTheElement) {
  for (Wire w : kEveryBlockWire) {
    const char *name = codec::wire_name(w);
    std::vector<float> x(3000, 1.0f);
    Bytes enc(codec::wire_size(w, x.size()));
    x[2500] = std::numeric_limits<float>::quiet_NaN();
    x[2700] = std::numeric_limits<float>::infinity();
    Status st = codec::encode(w, x.data(), x.size(), enc.data(), 100);
    EXPECT_EQ(st.code(), WCCL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(st.message().find("element 2600 is NaN, which the " + std::string(name) + " wire"),
              std::string::npos)
        << st.message();
    x[2500] = 1.0f;
    st = codec::encode(w, x.data(), x.size(), enc.data());
    EXPECT_NE(st.message().find("element 2700 is Inf"), std::string::npos) << st.message();
    x[2700] = 1.0f;
    x[1030] = -3e38f;
    x[1031] = 3e38f;
    st = codec::encode(w, x.data(), x.size(), enc.data());
    EXPECT_EQ(st.code(), WCCL_ERR_INVALID_ARGUMENT) << name;
    const std::string want =
        w.kind == WireKind::kInt8
            ? "the int8 block of elements 1024..2047 spans more than the float range"
        : w.kind == WireKind::kInt4
            ? "the int4 block of elements 1024..1151 spans more than the float range"
        : w.kind == WireKind::kInt2
            ? "the int2 block of elements 1024..1151 spans more than the float range"
        : w.kind == WireKind::kTopk
            ? "the topk block of elements 1024..1279 holds a magnitude of 2^127 or more"
            : "the fp8 block of elements 1024..2047 holds a magnitude of 2^127 or more";
    EXPECT_NE(st.message().find(want), std::string::npos) << st.message();
  }
}

TEST(BlockCodecs, BadDataIsRejectedBeforeAnythingIsWritten) {
  std::mt19937 rng(5);
  const std::vector<float> x = random_floats(2000, -1.0f, 1.0f, rng);
  const std::vector<float> untouched(x.size(), 42.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  for (Wire w : kBlockWires) {
    const codec::BlockFormat &f = *codec::block_format(w);
    Bytes good(codec::wire_size(w, x.size()));
    ASSERT_TRUE(codec::encode(w, x.data(), x.size(), good.data()).ok());
    auto expect_rejected = [&](const Bytes &enc, size_t len, const std::string &what) {
      std::vector<float> y = untouched;
      Status st = codec::decode(w, enc.data(), len, x.size(), y.data());
      EXPECT_EQ(st.code(), WCCL_ERR_PROTOCOL) << codec::wire_name(w) << " " << what;
      st = codec::decode_reduce(w, RedOp::kSum, enc.data(), len, x.size(), y.data(), y.data());
      EXPECT_EQ(st.code(), WCCL_ERR_PROTOCOL) << codec::wire_name(w) << " " << what;
      EXPECT_EQ(y, untouched) << codec::wire_name(w) << " " << what;
    };
    expect_rejected(good, good.size() - 1, "truncated");
    Bytes longer = good;
    longer.push_back(0);
    expect_rejected(longer, longer.size(), "too long");
    const std::vector<float> bad_scales =
        w.kind == WireKind::kFp8 ? std::vector<float>{nan, -1.0f, inf, 3.0f, 0x1p120f, 0x1p-127f}
        : w.kind == WireKind::kTopk
            ? std::vector<float>{nan, -1.0f, -0.0f, inf, 0x1p125f, 0x1p-127f}
            : std::vector<float>{nan, -1.0f, inf,
                                 w.kind == WireKind::kInt8   ? 1e37f
                                 : w.kind == WireKind::kInt4 ? 1e38f
                                                             : 2e38f};
    for (float s : bad_scales) {
      Bytes enc = good;
      std::memcpy(&enc[f.block_bytes(f.block)], &s, 4);  // the second block's scale
      expect_rejected(enc, enc.size(), "scale " + std::to_string(s));
    }
    Bytes enc = good;
    if (w.kind == WireKind::kFp8) {
      for (uint8_t code : {0x7f, 0xff}) {
        enc = good;
        enc[f.block_bytes(f.block) + f.header + 5] = code;  // a NaN code in the second block
        expect_rejected(enc, enc.size(), "NaN code");
      }
    } else if (w.kind == WireKind::kTopk) {
      const size_t second = f.block_bytes(f.block) + f.header;  // the second block's kept indices
      enc[second + 3] = enc[second + 2];
      expect_rejected(enc, enc.size(), "a repeated index");
      enc = good;
      std::swap(enc[second + 3], enc[second + 4]);
      expect_rejected(enc, enc.size(), "indices out of order");
      enc = good;
      enc[codec::wire_size(w, 1792) + f.header + 7] =
          255;  // the last block holds 2000 - 1792 = 208
      expect_rejected(enc, enc.size(), "an index past the block");
    } else {
      std::memcpy(&enc[4], &inf, 4);
      expect_rejected(enc, enc.size(), "infinite offset");
    }
  }
}

TEST(WireCodec, DecodeReduceEqualsDecodeThenReduce) {
  std::mt19937 rng(9);
  for (int wi = 0; wi < codec::kWireCount; ++wi) {
    const Wire w(static_cast<WireKind>(wi));
    for (int oi = 0; oi < codec::kRedOpCount; ++oi) {
      const auto op = static_cast<RedOp>(oi);
      for (size_t n : kLengths) {
        const std::vector<float> x = random_floats(n, -2.0f, 2.0f, rng),
                                 mine = random_floats(n, -2.0f, 2.0f, rng);
        Bytes enc(codec::wire_size(w, n));
        ASSERT_TRUE(codec::encode(w, x.data(), n, enc.data()).ok());
        std::vector<float> decoded(n), want(n), got(n);
        ASSERT_TRUE(codec::decode(w, enc.data(), enc.size(), n, decoded.data()).ok());
        codec::reduce_into(Dtype::kF32, op, want.data(), mine.data(), decoded.data(), n);
        ASSERT_TRUE(
            codec::decode_reduce(w, op, enc.data(), enc.size(), n, got.data(), mine.data()).ok());
        ASSERT_TRUE(same(want.data(), got.data(), n * 4))
            << codec::wire_name(w) << " " << codec::redop_name(op) << " n=" << n;
      }
    }
  }
}

TEST(WireCodec, SixteenBitWiresRoundToNearestEven) {
  // 1 + 2^-11 is halfway between two halves: it rounds to the even one (1.0); 1 + 3 * 2^-11 to
  // 1 + 2^-9. bf16 keeps 8 bits: 1 + 2^-8 is halfway and rounds to 1.0.
  const std::vector<float> x = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 1e6f,
                                -0.0f,           1.0f + 0x1p-8f};
  const size_t n = x.size();
  Bytes enc(codec::wire_size(WireKind::kF16, n));
  ASSERT_TRUE(codec::encode(WireKind::kF16, x.data(), n, enc.data()).ok());
  std::vector<float> y(n);
  ASSERT_TRUE(codec::decode(WireKind::kF16, enc.data(), enc.size(), n, y.data()).ok());
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 1.0f + 0x1p-9f);
  EXPECT_EQ(y[2], 65504.0f);
  EXPECT_TRUE(std::isinf(y[3]));
  EXPECT_TRUE(std::signbit(y[4]));
  ASSERT_TRUE(codec::encode(WireKind::kBF16, x.data(), n, enc.data()).ok());
  ASSERT_TRUE(codec::decode(WireKind::kBF16, enc.data(), enc.size(), n, y.data()).ok());
  EXPECT_EQ(y[5], 1.0f);
  EXPECT_EQ(y[3], 999424.0f);  // 1e6 to 8 significant bits
  EXPECT_EQ(codec::wire_size(WireKind::kBF16, 10), 20u);
  EXPECT_EQ(codec::wire_size(WireKind::kInt8, 1025), 1025u + 16u);
  EXPECT_EQ(codec::wire_size(WireKind::kInt4, 129), 72u + 9u);
  EXPECT_EQ(codec::wire_size(WireKind::kInt4, 3), 8u + 2u);
  EXPECT_EQ(codec::wire_size(WireKind::kInt2, 129), 40u + 9u);
  EXPECT_EQ(codec::wire_size(WireKind::kInt2, 5), 8u + 2u);
  EXPECT_EQ(codec::wire_size(WireKind::kTopk, 512), 32u);
  EXPECT_EQ(codec::wire_size(WireKind::kTopk, 259), 16u + 4u + 3u + 2u);
  EXPECT_EQ(codec::wire_size(Wire::topk(2), 512), 14u);  // 146 times fewer bytes than F32
  EXPECT_EQ(codec::wire_size(Wire::topk(1), 257), 6u + 6u);
  EXPECT_EQ(codec::wire_size(Wire::topk(64), 259), 100u + 4u + 3u + 2u);
  EXPECT_EQ(codec::wire_size(WireKind::kFp8, 1025), 1028u + 5u);
}

TEST(Shuffle, GroupsEachByteOfEveryElementAndUndoes) {
  const Bytes in = {1, 2, 3, 4,  5, 6,
                    7, 8, 9, 10, 11};  // two 4-byte elements and 3 bytes left over
  Bytes out(in.size()), back(in.size());
  codec::shuffle(in.data(), in.size(), 4, out.data());
  EXPECT_EQ(out, (Bytes{1, 5, 2, 6, 3, 7, 4, 8, 9, 10, 11}));
  codec::unshuffle(out.data(), out.size(), 4, back.data());
  EXPECT_EQ(back, in);
}

TEST(Compressor, RoundTripsAndRefusesWhatIsNotItsFrame) {
  if (!codec::compression_available()) GTEST_SKIP() << "built without zstd";
  codec::Compressor z;
  Bytes f32(65536 * 4);
  for (size_t i = 0; i < 65536; ++i) {
    const float v = static_cast<float>(i % 1000) * 0.5f;
    std::memcpy(f32.data() + 4 * i, &v, 4);
  }
  Bytes frame(f32.size()), back(f32.size());
  const size_t n = z.compress(f32.data(), f32.size(), 4, frame.data(), frame.size());
  ASSERT_GT(n, 0u);
  EXPECT_LT(n, f32.size() / 4);
  ASSERT_TRUE(z.decompress(frame.data(), n, 4, back.data(), back.size()).ok());
  EXPECT_EQ(back, f32);
  // In place: the frame at the start of the destination.
  Bytes inplace(f32.size());
  std::memcpy(inplace.data(), frame.data(), n);
  ASSERT_TRUE(z.decompress(inplace.data(), n, 4, inplace.data(), inplace.size()).ok());
  EXPECT_EQ(inplace, f32);

  Bytes random(50000);
  std::mt19937 rng(3);
  for (auto &b : random) b = static_cast<uint8_t>(rng());
  EXPECT_EQ(z.compress(random.data(), random.size(), 1, frame.data(), frame.size()), 0u)
      << "nothing to gain: declined";

  auto code = [&](const uint8_t *src, size_t len, size_t want) {
    return z.decompress(src, len, 4, back.data(), want).code();
  };
  EXPECT_EQ(code(frame.data(), n, f32.size() - 4), WCCL_ERR_PROTOCOL) << "another size";
  EXPECT_EQ(code(frame.data(), n - 1, f32.size()), WCCL_ERR_PROTOCOL) << "truncated";
  EXPECT_EQ(code(random.data(), 1000, f32.size()), WCCL_ERR_PROTOCOL) << "not a frame";
  Bytes two(2 * n);
  std::memcpy(two.data(), frame.data(), n);
  std::memcpy(two.data() + n, frame.data(), n);
  EXPECT_EQ(code(two.data(), two.size(), f32.size()), WCCL_ERR_PROTOCOL)
      << "a second frame after it";
  Bytes flipped(frame.begin(), frame.begin() + static_cast<long>(n));
  flipped[n / 2] ^= 0xFF;
  // zstd frames carry no checksum here: a corrupted one fails or yields other bytes, which state
  // sync's hash of the whole tensor then refuses.
  const Status corrupted = z.decompress(flipped.data(), n, 4, back.data(), f32.size());
  EXPECT_TRUE(!corrupted.ok() || back != f32);
}

}  // namespace
}  // namespace wccl::test
