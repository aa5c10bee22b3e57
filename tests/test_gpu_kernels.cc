// The GPU kernels (lib/gpu/kernels.h) against their oracle, the CPU kernels: the same bytes out of
// every encode and the same floats out of every decode and reduction. Skipped where no GPU is
// present; in a build without CUDA, checks that every entry point reports UNSUPPORTED.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "codec/half.h"
#include "codec/hash.h"
#include "codec/kernels.h"
#include "codec/wire.h"
#include "gpu/kernels.h"

namespace wccl::test {
namespace {

using codec::Dtype;
using codec::RedOp;
using codec::Wire;
using codec::WireKind;
using Bytes = std::vector<uint8_t>;

#if WCCL_TEST_CUDA_BUILT  // set by tests/meson.build

// Device memory holding a copy of host bytes.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    EXPECT_TRUE(gpu::alloc(&p_, bytes == 0 ? 1 : bytes).ok());
  }
  DeviceBuffer(const void *host, size_t bytes) : DeviceBuffer(bytes) {
    EXPECT_TRUE(gpu::copy(p_, host, bytes).ok());
  }
  ~DeviceBuffer() { gpu::free(p_); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  template <typename T>
  T *as() const {
    return static_cast<T *>(p_);
  }
  Bytes host() const {
    Bytes b(bytes_);
    EXPECT_TRUE(gpu::copy(b.data(), p_, bytes_).ok());
    return b;
  }

 private:
  void *p_ = nullptr;
  size_t bytes_;
};

Bytes as_bytes(const void *p, size_t n) {
  return Bytes(static_cast<const uint8_t *>(p), static_cast<const uint8_t *>(p) + n);
}

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu::available()) GTEST_SKIP() << "no CUDA device";
  }
};

const size_t kLengths[] = {1, 127, 128, 129, 255, 1024, 1025, 4099, 1 << 20};

TEST_F(GpuTest, WireCodecsMatchTheCpuBitForBit) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-5.0f, 3.0f);
  for (size_t n : kLengths) {
    std::vector<float> x(n), mine(n);
    for (float &v : x) v = d(rng);
    for (float &v : mine) v = d(rng);
    if (n > 20) x[17] = -0.0f;
    for (size_t i = 5; i < n; i += 61)
      x[i] *= 1e-7f;  // small against their block: FP8 subnormals, INT4 steps
    for (size_t i = 9; i < n; i += 301) x[i] *= 400.0f;
    for (size_t i = 11; i < n; i += 20)
      x[i] = i % 3 == 0 ? -2500.0f : 2500.0f;  // ties for TOPK's last places
    DeviceBuffer dx(x.data(), n * 4), dout(n * 4);
    std::vector<float> dec(n);
    for (Wire w :
         {Wire(WireKind::kInt8), Wire(WireKind::kInt4), Wire(WireKind::kInt2), Wire(WireKind::kFp8),
          Wire(WireKind::kTopk), Wire::topk(1), Wire::topk(2), Wire::topk(64)}) {
      const std::string name = codec::wire_label(w);
      Bytes want(codec::wire_size(w, n));
      ASSERT_TRUE(codec::encode(w, x.data(), n, want.data()).ok());
      DeviceBuffer denc(want.size()), dmine(mine.data(), n * 4);
      ASSERT_TRUE(gpu::block_encode(w, dx.as<float>(), n, denc.as<uint8_t>(), nullptr).ok());
      ASSERT_EQ(denc.host(), want) << name << " encode n=" << n;
      ASSERT_TRUE(codec::decode(w, want.data(), want.size(), n, dec.data()).ok());
      ASSERT_TRUE(gpu::block_decode(w, denc.as<uint8_t>(), n, dout.as<float>(), nullptr).ok());
      ASSERT_EQ(dout.host(), as_bytes(dec.data(), n * 4)) << name << " decode n=" << n;
      ASSERT_TRUE(
          codec::decode_reduce(w, RedOp::kSum, want.data(), want.size(), n, dec.data(), mine.data())
              .ok());
      ASSERT_TRUE(gpu::block_decode_add(w, denc.as<uint8_t>(), n, dmine.as<float>(),
                                        dmine.as<float>(), nullptr)
                      .ok());
      ASSERT_EQ(dmine.host(), as_bytes(dec.data(), n * 4)) << name << " decode-add n=" << n;
    }
    for (Wire w : {WireKind::kF16, WireKind::kBF16}) {
      Bytes enc(codec::wire_size(w, n));
      ASSERT_TRUE(codec::encode(w, x.data(), n, enc.data()).ok());
      DeviceBuffer d16(enc.size());
      auto *p16 = d16.as<uint16_t>();
      ASSERT_TRUE((w.kind == WireKind::kF16 ? gpu::f16_encode : gpu::bf16_encode)(dx.as<float>(), n,
                                                                                  p16, nullptr)
                      .ok());
      ASSERT_EQ(d16.host(), enc) << codec::wire_name(w) << " encode n=" << n;
      ASSERT_TRUE(codec::decode(w, enc.data(), enc.size(), n, dec.data()).ok());
      ASSERT_TRUE((w.kind == WireKind::kF16 ? gpu::f16_decode : gpu::bf16_decode)(
                      p16, n, dout.as<float>(), nullptr)
                      .ok());
      ASSERT_EQ(dout.host(), as_bytes(dec.data(), n * 4))
          << codec::wire_name(w) << " decode n=" << n;
    }
  }
}

TEST_F(GpuTest, ReductionsMatchTheCpuBitForBit) {
  std::mt19937 rng(2);
  const size_t n = 100003;
  for (int ti = 0; ti < codec::kDtypeCount; ++ti) {
    const auto t = static_cast<Dtype>(ti);
    const size_t es = codec::dtype_size(t);
    Bytes a(n * es), b(n * es);
    for (size_t i = 0; i < n; ++i) {
      const float fa = std::uniform_real_distribution<float>(-9, 9)(rng),
                  fb = std::uniform_real_distribution<float>(-9, 9)(rng);
      switch (t) {
        case Dtype::kF32:
          std::memcpy(&a[i * 4], &fa, 4);
          std::memcpy(&b[i * 4], &fb, 4);
          break;
        case Dtype::kF64: {
          const double da = fa, db = fb;
          std::memcpy(&a[i * 8], &da, 8);
          std::memcpy(&b[i * 8], &db, 8);
          break;
        }
        case Dtype::kF16: {
          const uint16_t ha = codec::float_to_half(fa), hb = codec::float_to_half(fb);
          std::memcpy(&a[i * 2], &ha, 2);
          std::memcpy(&b[i * 2], &hb, 2);
          break;
        }
        case Dtype::kBF16: {
          const uint16_t ha = codec::float_to_bf16(fa), hb = codec::float_to_bf16(fb);
          std::memcpy(&a[i * 2], &ha, 2);
          std::memcpy(&b[i * 2], &hb, 2);
          break;
        }
        default:
          for (size_t k = 0; k < es; ++k) {
            a[i * es + k] = static_cast<uint8_t>(rng());
            b[i * es + k] = static_cast<uint8_t>(rng());
          }
      }
    }
    for (int oi = 0; oi < codec::kRedOpCount; ++oi) {
      const auto op = static_cast<RedOp>(oi);
      Bytes want(a.size());
      codec::reduce_into(t, op, want.data(), a.data(), b.data(), n);
      DeviceBuffer da(a.data(), a.size()), db(b.data(), b.size());
      ASSERT_TRUE(
          gpu::reduce_into(t, op, da.as<void>(), da.as<void>(), db.as<void>(), n, nullptr).ok());
      ASSERT_TRUE(gpu::synchronize(nullptr).ok());
      ASSERT_EQ(da.host(), want) << codec::dtype_name(t) << " " << codec::redop_name(op);
      codec::finish_avg(t, want.data(), n, 7);
      ASSERT_TRUE(gpu::finish_avg(t, da.as<void>(), n, 7, nullptr).ok());
      ASSERT_TRUE(gpu::synchronize(nullptr).ok());
      ASSERT_EQ(da.host(), want) << codec::dtype_name(t) << " " << codec::redop_name(op)
                                 << " then averaged over 7";
    }
  }
}

TEST_F(GpuTest, TensorHashBlocksMatchTheCpu) {
  std::vector<uint8_t> x(5 * codec::kHashBlock + 13);
  std::mt19937 rng(3);
  for (auto &b : x) b = static_cast<uint8_t>(rng());
  const size_t blocks = codec::hash_blocks(x.size());
  DeviceBuffer dx(x.data(), x.size()), dh(blocks * 8);
  ASSERT_TRUE(gpu::hash_blocks(dx.as<void>(), x.size(), dh.as<uint64_t>(), nullptr).ok());
  const Bytes h = dh.host();
  std::vector<uint64_t> hashes(blocks);
  std::memcpy(hashes.data(), h.data(), h.size());
  EXPECT_EQ(codec::combine_block_hashes(hashes.data(), blocks),
            codec::tensor_hash(x.data(), x.size()));
}

TEST_F(GpuTest, NanIsRefusedNamingTheElementAndPointersAreClassified) {
  std::vector<float> x(5000, 1.0f);
  x[4321] = std::numeric_limits<float>::quiet_NaN();
  x[4500] = std::numeric_limits<float>::infinity();
  DeviceBuffer dx(x.data(), x.size() * 4), denc(codec::wire_size(WireKind::kInt8, x.size()));
  for (Wire w :
       {WireKind::kInt8, WireKind::kInt4, WireKind::kInt2, WireKind::kFp8, WireKind::kTopk}) {
    const Status st = gpu::block_encode(w, dx.as<float>(), x.size(), denc.as<uint8_t>(), nullptr);
    EXPECT_EQ(st.code(), WCCL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(st.message().find("element 4321 is NaN"), std::string::npos) << st.message();
  }
  // A block that does not fit: the message names it as the CPU's does.
  std::vector<float> y(3000, 1.0f);
  y[1030] = -3e38f;
  y[1031] = 3e38f;
  DeviceBuffer dy(y.data(), y.size() * 4);
  for (Wire w :
       {WireKind::kInt8, WireKind::kInt4, WireKind::kInt2, WireKind::kFp8, WireKind::kTopk}) {
    Bytes enc(codec::wire_size(w, y.size()));
    const Status want = codec::encode(w, y.data(), y.size(), enc.data(), 7);
    const Status got =
        gpu::block_encode(w, dy.as<float>(), y.size(), denc.as<uint8_t>(), nullptr, 7);
    EXPECT_EQ(got.code(), WCCL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(got.message(), want.message());
  }
  EXPECT_GE(gpu::device_ordinal(dx.as<void>()), 0);
  EXPECT_EQ(gpu::device_ordinal(x.data()), -1);
}

#else

TEST(GpuStubs, EveryEntryPointReportsUnsupported) {
  EXPECT_FALSE(gpu::available());
  float f = 0;
  EXPECT_EQ(gpu::device_ordinal(&f), -1);
  void *p = &f;
  EXPECT_EQ(gpu::alloc(&p, 16).code(), WCCL_ERR_UNSUPPORTED);
  EXPECT_EQ(p, nullptr);
  uint8_t b[16];
  EXPECT_EQ(gpu::block_encode(WireKind::kInt8, &f, 1, b, nullptr).code(), WCCL_ERR_UNSUPPORTED);
  EXPECT_EQ(gpu::reduce_into(Dtype::kF32, RedOp::kSum, &f, &f, &f, 1, nullptr).code(),
            WCCL_ERR_UNSUPPORTED);
  EXPECT_EQ(gpu::finish_avg(Dtype::kF32, &f, 1, 2, nullptr).code(), WCCL_ERR_UNSUPPORTED);
  void *stream = &f;
  EXPECT_EQ(gpu::stream_create(&stream).code(), WCCL_ERR_UNSUPPORTED);
  EXPECT_EQ(stream, nullptr);
}

#endif

}  // namespace
}  // namespace wccl::test
