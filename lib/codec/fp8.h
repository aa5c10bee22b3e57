// OCP E4M3 (FP8) elements for the FP8 wire (kernels.h), shared by every CPU tier and the CUDA
// kernels so that all of them produce the same bits: integer arithmetic plus one float add whose
// rounding is the conversion's. `static inline` for the reason half.h gives.
#pragma once

#include <cstdint>
#include <cstring>

#include "codec/half.h"  // WCCL_HOST_DEVICE

namespace wccl::codec {

// The exponent k of a block's scale 2^k: the smallest k in [-126, 119] with amax <= 448 * 2^k,
// where amax is the float bits of the block's largest magnitude (sign clear, below 2^127). With
// amax = m * 2^e (1 <= m < 2), 448 = 1.75 * 2^8 gives k = e - 8 when m <= 1.75, else e - 7.
static inline WCCL_HOST_DEVICE int fp8_scale_exponent(uint32_t amax) {
  const int e = static_cast<int>(amax >> 23) - 127;
  const int k = (amax & 0x7fffffu) <= 0x600000u ? e - 8 : e - 7;
  return k < -126 ? -126 : k;
}

// 2^k as a float, for k in [-126, 127].
static inline WCCL_HOST_DEVICE float fp8_pow2(int k) {
  const auto bits = static_cast<uint32_t>(k + 127) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// y (finite, |y| <= 448) to E4M3, rounded to nearest-even. Both ranges are computed and one is
// selected, without a branch, so that the loops over it vectorise.
static inline WCCL_HOST_DEVICE uint8_t fp8_from_float(float y) {
  uint32_t u;
  std::memcpy(&u, &y, 4);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  // 2^-6 and up, E4M3's normal range: rebias the exponent (127 -> 7), then round away the low 20
  // mantissa bits to nearest-even; 448 (0x7e) is the largest finite E4M3.
  const uint32_t rebiased = a - ((127u - 7u) << 23);
  uint32_t normal = (rebiased + 0x7ffffu + ((rebiased >> 20) & 1u)) >> 20;
  normal = normal < 0x7eu ? normal : 0x7eu;
  // Below 2^-6 E4M3 steps by 2^-9: 16384 has that ulp, so the float add rounds |y| to a multiple
  // of it, to nearest-even (8 steps is 2^-6, the smallest normal, code 0x08).
  float m;
  std::memcpy(&m, &a, 4);
  m += 16384.0f;
  uint32_t r;
  std::memcpy(&r, &m, 4);
  const uint32_t subnormal = r - 0x46800000u;
  return static_cast<uint8_t>(sign | (a >= 0x3c800000u ? normal : subnormal));
}

// E4M3 to float (exact), branch-free like the encoder. The NaN codes (S.1111.111) are rejected
// before decoding.
static inline WCCL_HOST_DEVICE float fp8_to_float(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t e = (c >> 3) & 15u;
  const uint32_t m = c & 7u;
  const float sub = static_cast<float>(m) * 0.001953125f;  // e == 0: m * 2^-9, exact
  uint32_t sub_bits;
  std::memcpy(&sub_bits, &sub, 4);
  const uint32_t bits = sign | (e == 0 ? sub_bits : ((e + 120u) << 23) | (m << 20));
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace wccl::codec
