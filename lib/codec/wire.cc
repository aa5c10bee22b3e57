#include "codec/wire.h"

#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>

namespace wccl::codec {

namespace {

// The header of each block, and FP8's codes, checked: PROTOCOL names the first bad block.
Status validate_blocks(Wire w, const BlockFormat &f, const uint8_t *src, size_t count) {
  for (size_t b = 0; b < count; b += f.block) {
    const size_t k = count - b < f.block ? count - b : f.block;
    float scale;
    std::memcpy(&scale, src, 4);
    if (w.kind == WireKind::kFp8) {
      uint32_t bits;
      std::memcpy(&bits, &scale, 4);
      // Zero (accepted though never sent) or 2^-126..2^119: 448 * scale is finite.
      if (bits != 0 && ((bits & 0x807fffffu) != 0 || bits < 0x00800000u || bits > 0x7b000000u)) {
        return WCCL_ERROR(
            WCCL_ERR_PROTOCOL,
            "fp8 block at element %zu has scale %g, not a power of two from 2^-126 to 2^119", b,
            static_cast<double>(scale));
      }
      const uint8_t *codes = src + f.header;
      unsigned nan = 0;
      for (size_t j = 0; j < k; ++j) nan |= static_cast<unsigned>((codes[j] & 0x7fu) == 0x7fu);
      if (nan != 0)
        return WCCL_ERROR(WCCL_ERR_PROTOCOL, "fp8 block at element %zu holds a NaN code", b);
    } else if (w.kind == WireKind::kTopk) {
      if (!(scale == 0.0f ||
            (scale >= FLT_MIN && scale <= kFp8Limit / static_cast<float>(kTopkLevels))) ||
          std::signbit(scale)) {
        return WCCL_ERROR(
            WCCL_ERR_PROTOCOL,
            "topk block at element %zu has scale %g, not 0 or a normal float up to 2^127/7", b,
            static_cast<double>(scale));
      }
      const uint8_t *index = src + f.header;
      for (size_t i = 0; i < f.coded(k); ++i) {
        if (index[i] >= k || (i > 0 && index[i] <= index[i - 1])) {
          return WCCL_ERROR(
              WCCL_ERR_PROTOCOL,
              "topk block at element %zu: kept index %u is out of order or past its %zu elements",
              b, static_cast<unsigned>(index[i]), k);
        }
      }
    } else {
      float offset;
      std::memcpy(&offset, src + 4, 4);
      const float top = static_cast<float>((1u << f.bits) - 1);
      if (!(scale >= 0.0f && scale <= FLT_MAX) || !std::isfinite(offset) ||
          !(offset + top * scale <= FLT_MAX)) {
        return WCCL_ERROR(WCCL_ERR_PROTOCOL,
                          "%s block at element %zu has scale %g and offset %g, which do not decode "
                          "to finite values",
                          wire_name(w), b, static_cast<double>(scale), static_cast<double>(offset));
      }
    }
    src += f.block_bytes(k);
  }
  return Status();
}

}  // namespace

Status wire_from_api(int32_t wire, int32_t topk_keep, const char *fn, Wire *out) {
  if (wire < 0 || wire >= kWireCount) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "%s: opts->wire %d is not a wccl_wire_t", fn,
                      wire);
  }
  Wire w(static_cast<WireKind>(wire));
  if (w.kind == WireKind::kTopk) {
    if (topk_keep < 0 || topk_keep > static_cast<int32_t>(kTopkMaxKeep)) {
      return WCCL_ERROR(
          WCCL_ERR_INVALID_ARGUMENT,
          "%s: opts->topk_keep %d is not 1..%zu (elements kept per block of %zu) or 0 for "
          "the default %zu",
          fn, topk_keep, kTopkMaxKeep, kTopkBlock, kTopkDefaultKeep);
    }
    if (topk_keep != 0) w.keep = static_cast<size_t>(topk_keep);
  } else if (topk_keep != 0) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                      "%s: opts->topk_keep is %d, but only the TOPK wire keeps elements (this is "
                      "%s): set it to 0",
                      fn, topk_keep, wire_name(w));
  }
  *out = w;
  return Status();
}

namespace {

// TOPK's format for each keep (entry 0 unused).
constexpr std::array<BlockFormat, kTopkMaxKeep + 1> topk_formats() {
  std::array<BlockFormat, kTopkMaxKeep + 1> all{};
  for (size_t keep = 0; keep <= kTopkMaxKeep; ++keep) all[keep] = topk_format(keep);
  return all;
}
constexpr std::array<BlockFormat, kTopkMaxKeep + 1> kTopkFormats = topk_formats();

}  // namespace

const BlockFormat *block_format(Wire w) {
  switch (w.kind) {
    case WireKind::kInt8:
      return &kInt8Format;
    case WireKind::kInt4:
      return &kInt4Format;
    case WireKind::kInt2:
      return &kInt2Format;
    case WireKind::kFp8:
      return &kFp8Format;
    case WireKind::kTopk:
      return w.keep >= 1 && w.keep <= kTopkMaxKeep ? &kTopkFormats[w.keep] : nullptr;
    case WireKind::kNative:
    case WireKind::kF16:
    case WireKind::kBF16:
      break;
  }
  return nullptr;
}

const BlockCodec *block_codec(const Kernels &k, Wire w) {
  switch (w.kind) {
    case WireKind::kInt8:
      return &k.int8;
    case WireKind::kInt4:
      return &k.int4;
    case WireKind::kInt2:
      return &k.int2;
    case WireKind::kFp8:
      return &k.fp8;
    case WireKind::kTopk:
      return &k.topk;
    case WireKind::kNative:
    case WireKind::kF16:
    case WireKind::kBF16:
      break;
  }
  return nullptr;
}

Status check_keep(Wire w) {
  if (w.kind != WireKind::kTopk || (w.keep >= 1 && w.keep <= kTopkMaxKeep)) return Status();
  return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                    "a topk wire keeping %zu elements per block: not 1..%zu", w.keep, kTopkMaxKeep);
}

Status validate(Wire w, const uint8_t *src, size_t len, size_t count) {
  WCCL_RETURN_IF_ERROR(check_keep(w));
  const size_t want = wire_size(w, count);
  if (len != want && w.kind == WireKind::kTopk) {
    return WCCL_ERROR(
        WCCL_ERR_PROTOCOL,
        "topk data for %zu elements is %zu bytes, not the %zu of keep %zu (every member "
        "must pass the same wire and topk_keep)",
        count, len, want, w.keep);
  }
  if (len != want) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "%s data for %zu elements is %zu bytes, not %zu",
                      wire_name(w), count, len, want);
  }
  const BlockFormat *f = block_format(w);
  return f != nullptr ? validate_blocks(w, *f, src, count) : Status();
}

const char *wire_name(Wire w) {
  static const char *const kNames[] = {"native", "fp16", "bf16", "int8",
                                       "int4",   "fp8",  "int2", "topk"};
  const int i = static_cast<int>(w.kind);
  return i >= 0 && i < kWireCount ? kNames[i] : "?";
}

std::string wire_label(Wire w) {
  std::string label = wire_name(w);
  if (w.kind == WireKind::kTopk) label += "/" + std::to_string(w.keep);
  return label;
}

size_t wire_size(Wire w, size_t count) {
  switch (w.kind) {
    case WireKind::kNative:
      return count * 4;
    case WireKind::kF16:
    case WireKind::kBF16:
      return count * 2;
    case WireKind::kInt8:
    case WireKind::kInt4:
    case WireKind::kInt2:
    case WireKind::kFp8:
    case WireKind::kTopk: {
      const BlockFormat *f = block_format(w);
      return f != nullptr ? f->encoded_size(count) : 0;  // a bad keep: encode refuses it
    }
  }
  return 0;
}

Status encode(Wire w, const float *src, size_t count, uint8_t *dst, size_t first) {
  WCCL_RETURN_IF_ERROR(check_keep(w));
  const Kernels &k = kernels();
  switch (w.kind) {
    case WireKind::kNative:
      if (count != 0) std::memcpy(dst, src, count * 4);
      return Status();
    case WireKind::kF16:
      k.f16_encode(src, count, dst);
      return Status();
    case WireKind::kBF16:
      k.bf16_encode(src, count, dst);
      return Status();
    case WireKind::kInt8:
    case WireKind::kInt4:
    case WireKind::kInt2:
    case WireKind::kFp8:
    case WireKind::kTopk: {
      const size_t bad = block_codec(k, w)->encode(*block_format(w), src, count, dst);
      return bad == count ? Status() : unencodable(w, src[bad], first + bad, count - bad);
    }
  }
  return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "unknown wire %d", static_cast<int>(w.kind));
}

Status unencodable(Wire w, float value, size_t index, size_t left) {
  if (!std::isfinite(value)) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                      "element %zu is %s, which the %s wire cannot carry", index,
                      std::isnan(value) ? "NaN" : "Inf", wire_name(w));
  }
  const size_t block = block_format(w)->block;
  const size_t last = index + (left < block ? left : block) - 1;
  if (w.kind == WireKind::kFp8 || w.kind == WireKind::kTopk) {
    return WCCL_ERROR(
        WCCL_ERR_INVALID_ARGUMENT,
        "the %s block of elements %zu..%zu holds a magnitude of 2^127 or more; use another wire",
        wire_name(w), index, last);
  }
  return WCCL_ERROR(
      WCCL_ERR_INVALID_ARGUMENT,
      "the %s block of elements %zu..%zu spans more than the float range; use another wire",
      wire_name(w), index, last);
}

Status decode(Wire w, const uint8_t *src, size_t len, size_t count, float *dst) {
  WCCL_RETURN_IF_ERROR(validate(w, src, len, count));
  const Kernels &k = kernels();
  switch (w.kind) {
    case WireKind::kNative:
      if (count != 0) std::memcpy(dst, src, count * 4);
      break;
    case WireKind::kF16:
      k.f16_decode(src, count, dst);
      break;
    case WireKind::kBF16:
      k.bf16_decode(src, count, dst);
      break;
    case WireKind::kInt8:
    case WireKind::kInt4:
    case WireKind::kInt2:
    case WireKind::kFp8:
    case WireKind::kTopk:
      block_codec(k, w)->decode(*block_format(w), src, count, dst);
      break;
  }
  return Status();
}

Status decode_reduce(Wire w, RedOp op, const uint8_t *src, size_t len, size_t count, float *dst,
                     const float *mine) {
  WCCL_RETURN_IF_ERROR(validate(w, src, len, count));
  const Kernels &k = kernels();
  const BlockCodec *blocks = block_codec(k, w);
  const BlockFormat *f = block_format(w);
  if (blocks != nullptr && f != nullptr && (op == RedOp::kSum || op == RedOp::kAvg)) {
    blocks->decode_add(*f, src, count, dst, mine);  // fused: no temporary
    return Status();
  }
  // Otherwise decode in pieces small enough for the stack (whole blocks of a block-quantized
  // wire, so that each piece starts at a header), and combine each with `op`.
  float tmp[kMaxBlock];
  const size_t piece = f != nullptr ? f->block : kMaxBlock;
  for (size_t i = 0; i < count; i += piece) {
    const size_t n = count - i < piece ? count - i : piece;
    if (blocks != nullptr && f != nullptr) {
      blocks->decode(*f, src + i / piece * f->block_bytes(piece), n, tmp);
    } else if (w.kind == WireKind::kNative) {
      std::memcpy(tmp, src + i * 4, n * 4);
    } else {
      (w.kind == WireKind::kF16 ? k.f16_decode : k.bf16_decode)(src + 2 * i, n, tmp);
    }
    k.reduce_into(Dtype::kF32, op, dst + i, mine + i, tmp, n);
  }
  return Status();
}

}  // namespace wccl::codec
