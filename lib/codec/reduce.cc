#include "codec/reduce.h"

#include <cstring>
#include <type_traits>

namespace wccl::codec {
namespace {

// Integer SUM and PROD wrap around (two's complement), as in NCCL and MPI implementations: the
// arithmetic is done in the unsigned type, so overflow is defined.
template <typename T>
struct Sum {
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};
template <typename T>
struct Prod {
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // unsigned int, not the narrow unsigned type: uint8 * uint8 would promote to signed int.
      using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
      return static_cast<T>(static_cast<U>(static_cast<U>(static_cast<std::make_unsigned_t<T>>(a)) *
                                           static_cast<U>(static_cast<std::make_unsigned_t<T>>(b))));
    } else {
      return a * b;
    }
  }
};
template <typename T>
struct Min {
  static T apply(T a, T b) { return b < a ? b : a; }
};
template <typename T>
struct Max {
  static T apply(T a, T b) { return a < b ? b : a; }
};

template <typename T, template <typename> class Op>
void loop(T *__restrict dst, const T *__restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Op<T>::apply(dst[i], src[i]);
}
template <typename T, template <typename> class Op>
void loop3(T *__restrict dst, const T *__restrict a, const T *__restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Op<T>::apply(a[i], b[i]);
}

// 16-bit floats: widen, combine in F32, round back once.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float), template <typename> class Op>
void loop16(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Narrow(Op<float>::apply(Widen(a[i]), Widen(b[i])));
}

template <template <typename> class Op>
void dispatch(Dtype t, void *dst, const void *a, const void *b, size_t n) {
  // a == dst is the in-place form; restrict forbids aliasing, so it has its own loop.
  const bool inplace = a == dst;
  auto run = [&](auto *d) {
    using T = std::remove_pointer_t<decltype(d)>;
    if (inplace) {
      loop<T, Op>(d, static_cast<const T *>(b), n);
    } else {
      loop3<T, Op>(d, static_cast<const T *>(a), static_cast<const T *>(b), n);
    }
  };
  switch (t) {
    case Dtype::kF32: return run(static_cast<float *>(dst));
    case Dtype::kF64: return run(static_cast<double *>(dst));
    case Dtype::kI8: return run(static_cast<int8_t *>(dst));
    case Dtype::kU8: return run(static_cast<uint8_t *>(dst));
    case Dtype::kI32: return run(static_cast<int32_t *>(dst));
    case Dtype::kI64: return run(static_cast<int64_t *>(dst));
    case Dtype::kF16:
      return loop16<half_to_float, float_to_half, Op>(static_cast<uint16_t *>(dst), static_cast<const uint16_t *>(a),
                                                      static_cast<const uint16_t *>(b), n);
    case Dtype::kBF16:
      return loop16<bf16_to_float, float_to_bf16, Op>(static_cast<uint16_t *>(dst), static_cast<const uint16_t *>(a),
                                                      static_cast<const uint16_t *>(b), n);
  }
}

template <typename T>
void divide(T *d, size_t n, int by) {
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<T>(d[i] / static_cast<T>(by));
}

}  // namespace

size_t dtype_size(Dtype t) {
  switch (t) {
    case Dtype::kF32: case Dtype::kI32: return 4;
    case Dtype::kF64: case Dtype::kI64: return 8;
    case Dtype::kF16: case Dtype::kBF16: return 2;
    case Dtype::kI8: case Dtype::kU8: return 1;
  }
  return 0;
}

const char *dtype_name(Dtype t) {
  static const char *const kNames[] = {"f32", "f64", "f16", "bf16", "i8", "u8", "i32", "i64"};
  const int i = static_cast<int>(t);
  return i >= 0 && i < kDtypeCount ? kNames[i] : "?";
}

const char *redop_name(RedOp op) {
  static const char *const kNames[] = {"sum", "avg", "min", "max", "prod"};
  const int i = static_cast<int>(op);
  return i >= 0 && i < kRedOpCount ? kNames[i] : "?";
}

void reduce_into(Dtype t, RedOp op, void *dst, const void *a, const void *b, size_t count) {
  switch (op) {
    case RedOp::kSum: case RedOp::kAvg: return dispatch<Sum>(t, dst, a, b, count);
    case RedOp::kMin: return dispatch<Min>(t, dst, a, b, count);
    case RedOp::kMax: return dispatch<Max>(t, dst, a, b, count);
    case RedOp::kProd: return dispatch<Prod>(t, dst, a, b, count);
  }
}

void reduce(Dtype t, RedOp op, void *dst, const void *src, size_t count) { reduce_into(t, op, dst, dst, src, count); }

void finish_avg(Dtype t, void *dst, size_t count, int n) {
  switch (t) {
    case Dtype::kF32: return divide(static_cast<float *>(dst), count, n);
    case Dtype::kF64: return divide(static_cast<double *>(dst), count, n);
    case Dtype::kI8: return divide(static_cast<int8_t *>(dst), count, n);
    case Dtype::kU8: return divide(static_cast<uint8_t *>(dst), count, n);
    case Dtype::kI32: return divide(static_cast<int32_t *>(dst), count, n);
    case Dtype::kI64: return divide(static_cast<int64_t *>(dst), count, n);
    case Dtype::kF16: {
      auto *d = static_cast<uint16_t *>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = float_to_half(half_to_float(d[i]) / static_cast<float>(n));
      return;
    }
    case Dtype::kBF16: {
      auto *d = static_cast<uint16_t *>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = float_to_bf16(bf16_to_float(d[i]) / static_cast<float>(n));
      return;
    }
  }
}

float half_to_float(uint16_t h) {
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

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t mag = x & 0x7fffffffu;
  if (mag >= 0x7f800000u) {  // Inf, or NaN kept quiet with its top payload bits
    return static_cast<uint16_t>(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u | ((mag >> 13) & 0x3ffu) : 0u));
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

float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace wccl::codec
