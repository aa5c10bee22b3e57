#include "codec/wire.h"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "codec/kernels.h"

namespace wccl::codec {

Status validate(Wire w, const uint8_t *src, size_t len, size_t count) {
  const size_t want = wire_size(w, count);
  if (len != want) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "%s data for %zu elements is %zu bytes, not %zu", wire_name(w), count, len, want);
  }
  if (w != Wire::kInt8) return Status();
  for (size_t b = 0; b < count; b += kInt8Block) {
    float scale, offset;
    std::memcpy(&scale, src, 4);
    std::memcpy(&offset, src + 4, 4);
    if (!(scale >= 0.0f && scale <= FLT_MAX) || !std::isfinite(offset) || !(offset + 255.0f * scale <= FLT_MAX)) {
      return WCCL_ERROR(WCCL_ERR_PROTOCOL, "int8 block at element %zu has scale %g and offset %g, which do not decode to finite values",
                        b, static_cast<double>(scale), static_cast<double>(offset));
    }
    src += kInt8Header + (count - b < kInt8Block ? count - b : kInt8Block);
  }
  return Status();
}

namespace {

// Decodes in pieces small enough for the stack, and combines each with `op`.
template <typename Decode>
void decode_then_reduce(RedOp op, size_t count, float *dst, const float *mine, Decode decode_piece) {
  float tmp[kInt8Block];
  const Kernels &k = kernels();
  for (size_t i = 0; i < count; i += kInt8Block) {
    const size_t n = count - i < kInt8Block ? count - i : kInt8Block;
    decode_piece(i, n, tmp);
    k.reduce_into(Dtype::kF32, op, dst + i, mine + i, tmp, n);
  }
}

}  // namespace

const char *wire_name(Wire w) {
  static const char *const kNames[] = {"native", "fp16", "bf16", "int8"};
  const int i = static_cast<int>(w);
  return i >= 0 && i < kWireCount ? kNames[i] : "?";
}

size_t wire_size(Wire w, size_t count) {
  switch (w) {
    case Wire::kNative: return count * 4;
    case Wire::kF16: case Wire::kBF16: return count * 2;
    case Wire::kInt8: return int8_encoded_size(count);
  }
  return 0;
}

Status encode(Wire w, const float *src, size_t count, uint8_t *dst, size_t first) {
  const Kernels &k = kernels();
  switch (w) {
    case Wire::kNative:
      if (count != 0) std::memcpy(dst, src, count * 4);
      return Status();
    case Wire::kF16: k.f16_encode(src, count, dst); return Status();
    case Wire::kBF16: k.bf16_encode(src, count, dst); return Status();
    case Wire::kInt8: {
      const size_t bad = k.int8_encode(src, count, dst);
      if (bad == count) return Status();
      if (!std::isfinite(src[bad])) {
        return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "element %zu is %s, which the int8 wire cannot carry", first + bad,
                          std::isnan(src[bad]) ? "NaN" : "Inf");
      }
      return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                        "the int8 block of elements %zu..%zu spans more than the float range; use another wire", first + bad,
                        first + bad + (count - bad < kInt8Block ? count - bad : kInt8Block) - 1);
    }
  }
  return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "unknown wire %d", static_cast<int>(w));
}

Status decode(Wire w, const uint8_t *src, size_t len, size_t count, float *dst) {
  WCCL_RETURN_IF_ERROR(validate(w, src, len, count));
  const Kernels &k = kernels();
  switch (w) {
    case Wire::kNative: if (count != 0) std::memcpy(dst, src, count * 4); break;
    case Wire::kF16: k.f16_decode(src, count, dst); break;
    case Wire::kBF16: k.bf16_decode(src, count, dst); break;
    case Wire::kInt8: k.int8_decode(src, count, dst); break;
  }
  return Status();
}

Status decode_reduce(Wire w, RedOp op, const uint8_t *src, size_t len, size_t count, float *dst, const float *mine) {
  WCCL_RETURN_IF_ERROR(validate(w, src, len, count));
  const Kernels &k = kernels();
  if (w == Wire::kInt8 && (op == RedOp::kSum || op == RedOp::kAvg)) {
    k.int8_decode_add(src, count, dst, mine);  // fused: no temporary
    return Status();
  }
  decode_then_reduce(op, count, dst, mine, [&](size_t i, size_t n, float *tmp) {
    switch (w) {
      case Wire::kNative: std::memcpy(tmp, src + i * 4, n * 4); break;
      case Wire::kF16: k.f16_decode(src + 2 * i, n, tmp); break;
      case Wire::kBF16: k.bf16_decode(src + 2 * i, n, tmp); break;
      // Pieces are whole blocks: piece i / kInt8Block starts at its header.
      case Wire::kInt8: k.int8_decode(src + i / kInt8Block * (kInt8Block + kInt8Header), n, tmp); break;
    }
  });
  return Status();
}

}  // namespace wccl::codec
