#include "codec/reduce.h"

#include "codec/kernels.h"

namespace wccl::codec {

size_t dtype_size(Dtype t) {
  switch (t) {
    case Dtype::kF32:
    case Dtype::kI32:
      return 4;
    case Dtype::kF64:
    case Dtype::kI64:
      return 8;
    case Dtype::kF16:
    case Dtype::kBF16:
      return 2;
    case Dtype::kI8:
    case Dtype::kU8:
      return 1;
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
  kernels().reduce_into(t, op, dst, a, b, count);
}

void reduce(Dtype t, RedOp op, void *dst, const void *src, size_t count) {
  reduce_into(t, op, dst, dst, src, count);
}

void finish_avg(Dtype t, void *dst, size_t count, int n) { kernels().finish_avg(t, dst, count, n); }

}  // namespace wccl::codec
