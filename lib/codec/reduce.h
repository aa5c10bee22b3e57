// Element types, reduction operators and the reduction kernels the collectives run on their
// worker thread (never on the I/O loop), through the fastest kernel tier of this CPU
// (codec/kernels.h). F16 and BF16 are converted to F32, combined, and rounded back to
// nearest-even once per call, so a ring hop rounds once per element.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace wccl::codec {

// The values match wccl_dtype_t and wccl_redop_t.
enum class Dtype : int {
  kF32 = 0,
  kF64 = 1,
  kF16 = 2,
  kBF16 = 3,
  kI8 = 4,
  kU8 = 5,
  kI32 = 6,
  kI64 = 7
};
enum class RedOp : int { kSum = 0, kAvg = 1, kMin = 2, kMax = 3, kProd = 4 };
inline constexpr int kDtypeCount = 8;
inline constexpr int kRedOpCount = 5;

size_t dtype_size(Dtype t);
const char *dtype_name(Dtype t);   // "f32", "bf16", ...
const char *redop_name(RedOp op);  // "sum", "avg", ...

// dst[i] = dst[i] (op) src[i] for i < count. AVG combines as SUM; finish_avg divides afterwards.
void reduce(Dtype t, RedOp op, void *dst, const void *src, size_t count);
// dst[i] = a[i] (op) b[i]. dst may equal a (not b).
void reduce_into(Dtype t, RedOp op, void *dst, const void *a, const void *b, size_t count);
// dst[i] /= n: the last step of AVG (integer types divide with truncation toward zero).
void finish_avg(Dtype t, void *dst, size_t count, int n);

}  // namespace wccl::codec
