// IEEE binary16 and bfloat16 to and from float, rounding to nearest-even; NaN stays NaN (quiet).
// Plain integer arithmetic that the vectoriser handles, so the kernels of every ISA tier and the
// CUDA kernels produce the same bits. The functions are `static inline` on purpose: each
// translation unit, compiled for its own instruction set, keeps its own copy (a shared inline
// definition would let the linker hand AVX-512 code to the scalar tier).
#pragma once

#include <cstdint>
#include <cstring>

// The CUDA kernels (lib/gpu/kernels.cu) use the same functions on the device.
#if defined(__CUDACC__)
#define WCCL_HOST_DEVICE __host__ __device__
#else
#define WCCL_HOST_DEVICE
#endif

namespace wccl::codec {

static inline WCCL_HOST_DEVICE float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in float.
    const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;
    std::memcpy(&bits, &mag, 4);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

static inline WCCL_HOST_DEVICE uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t mag = x & 0x7fffffffu;
  if (mag >= 0x7f800000u) {  // Inf, or NaN kept quiet with its top payload bits
    return static_cast<uint16_t>(sign | 0x7c00u |
                                 (mag > 0x7f800000u ? 0x200u | ((mag >> 13) & 0x3ffu) : 0u));
  }
  if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to Inf
  if (mag < 0x38800000u) {
    // Below the smallest normal half: adding 0.5 lines the half's subnormal step (2^-24) up
    // with the float's last mantissa bit, so the FPU rounds to nearest-even for us.
    float m;
    std::memcpy(&m, &mag, 4);
    m += 0.5f;
    uint32_t r;
    std::memcpy(&r, &m, 4);
    return static_cast<uint16_t>(sign | (r - 0x3f000000u));
  }
  const uint32_t odd = (mag >> 13) & 1u;
  mag += 0xc8000fffu + odd;  // rebias the exponent (127 -> 15) and round to nearest-even
  return static_cast<uint16_t>(sign | (mag >> 13));
}

static inline WCCL_HOST_DEVICE float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

static inline WCCL_HOST_DEVICE uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace wccl::codec
