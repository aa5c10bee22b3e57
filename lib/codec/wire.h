// Wire codecs (DESIGN §5): how F32 elements travel between peers when an operation asks for
// fewer bytes than their native size. docs/protocol.md specifies the formats (kernels.h sums
// them up), docs/algorithms.md the error bounds as seen by a collective.
//
//   kF16, kBF16  each element rounded to nearest-even to 16 bits (plain down-cast: values beyond
//                the format's range become Inf, NaN stays NaN).
//   kInt8        blocks of 1024 elements, each with a float scale and offset and one byte per
//                element: 255 uniform steps from the block's minimum lo to its maximum hi.
//                Element x decodes to within (hi - lo) / 510 of x, plus float rounding (a few ulp
//                of the block's largest magnitude). A block whose step would be below FLT_MIN is
//                sent as its minimum. About a quarter of the bytes (1032 per 4096).
//   kInt4        the same with 15 steps in blocks of 128, two codes per byte: within
//                (hi - lo) / 30 of x plus float rounding (a step below FLT_MIN: its minimum).
//                72 bytes per 128 elements: 7.1 times fewer than F32.
//   kInt2        the same with 3 steps in blocks of 128, four codes per byte: within
//                (hi - lo) / 6 of x plus float rounding (a step below FLT_MIN: its minimum).
//                40 bytes per 128 elements: 12.8 times fewer than F32. Re-encoding partial sums
//                at every hop compounds that coarse error, which is why all-reduce's AUTO sends
//                it by the all-gather schedule (algo/collectives.h).
//   kTopk        sparse: blocks of 256 elements of which the `keep` largest in magnitude are
//                kept (1..64, 8 by default: Wire::keep), each as an index byte, a sign and a 3-bit
//                magnitude in steps of a seventh of the block's largest; the rest decode to 0. A
//                kept x decodes to within amax / 14 of x (amax the block's largest magnitude, plus
//                float rounding); a dropped x is at most the keep-th largest magnitude.
//                4 + 1.5 keep bytes per 256 elements, rounded up: at 8, 16 (64 times fewer
//                than F32).
//                Never re-encoded: all-reduce sums it by the all-gather schedule only; broadcast
//                and all-gather send it; reduce-scatter cannot.
//   kFp8         blocks of 1024 elements: a power-of-two scale 2^k putting the block's largest
//                magnitude amax within 448, then each element as OCP E4M3 (3 mantissa bits).
//                Element x decodes to within max(|x| / 16, 2^(k-10)) of x, with
//                2^k <= max(amax / 224, 2^-126): relative precision, down to an absolute floor
//                of amax / 229376. 1028 bytes per 4096.
// NaN and Inf cannot be encoded by INT8, INT4, INT2, FP8 or TOPK, nor a block whose range does not
// fit in a float (INT8, INT4, INT2: more than about 3.4e38) or that holds a magnitude of 2^127 or
// more (FP8, TOPK):
// INVALID_ARGUMENT.
//
// Decoding validates before it writes: a wrong length, or a header or code that could decode to a
// non-finite value, is PROTOCOL (a bad frame), and nothing is written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "codec/kernels.h"
#include "codec/reduce.h"
#include "core/status.h"
#include "wccl/wccl.h"

namespace wccl::codec {

// The wire formats. The values match wccl_wire_t.
enum class WireKind : int {
  kNative = 0,
  kF16 = 1,
  kBF16 = 2,
  kInt8 = 3,
  kInt4 = 4,
  kFp8 = 5,
  kInt2 = 6,
  kTopk = 7
};
inline constexpr int kWireCount = 8;
static_assert(kWireCount == WCCL_WIRE_TOPK + 1,
              "codec::WireKind and wccl_wire_t list the same wires");
static_assert(kTopkDefaultKeep == WCCL_TOPK_DEFAULT_KEEP, "TOPK keeps what the header says");

// A wire: its format and the one parameter a format has, the elements TOPK keeps of each block
// (every member of an operation uses the same). A kind converts to its wire, TOPK keeping
// kTopkDefaultKeep. Comparing a wire with a kind does not compile: w.kind says which format it is.
struct Wire {
  WireKind kind = WireKind::kNative;
  size_t keep = 0;  // kTopk: 1..kTopkMaxKeep; 0 for every other kind

  constexpr Wire() = default;
  constexpr Wire(WireKind k)  // NOLINT(google-explicit-constructor): a kind names its wire
      : kind(k), keep(k == WireKind::kTopk ? kTopkDefaultKeep : 0) {}
  static constexpr Wire topk(size_t keep) {
    Wire w(WireKind::kTopk);
    w.keep = keep;
    return w;
  }
  friend constexpr bool operator==(Wire a, Wire b) { return a.kind == b.kind && a.keep == b.keep; }
  friend constexpr bool operator!=(Wire a, Wire b) { return !(a == b); }
  friend bool operator==(Wire, WireKind) = delete;
  friend bool operator!=(Wire, WireKind) = delete;
  friend bool operator==(WireKind, Wire) = delete;
  friend bool operator!=(WireKind, Wire) = delete;
};

// The wire of a wccl_wire_t value and TOPK's keep as wccl_opts_t gives them (0: the default), or
// INVALID_ARGUMENT naming `fn` and the bad value (a keep on another wire included).
Status wire_from_api(int32_t wire, int32_t topk_keep, const char *fn, Wire *out);

const char *wire_name(Wire w);  // "native", "fp16", "bf16", "int8", "int4", "fp8", "int2", "topk"
// The wire's name with TOPK's keep, as logs and tools print a wire: "int8", "topk/2".
std::string wire_label(Wire w);

// OK, or INVALID_ARGUMENT for a TOPK wire whose keep is not 1..kTopkMaxKeep (what the kernels
// trust: every encoder and decoder, CPU and GPU, checks it first).
Status check_keep(Wire w);

// The block format of a block-quantized wire (INT8, INT4, INT2, FP8, TOPK), or null (also for a
// TOPK keep outside 1..kTopkMaxKeep); its kernels in table k.
const BlockFormat *block_format(Wire w);
const BlockCodec *block_codec(const Kernels &k, Wire w);

// The wire whose bytes are F16 or BF16 elements as they are (kF16, kBF16): its decode widens them
// to F32 exactly, its encode rounds F32 to them (nearest-even; beyond F16's range, Inf).
inline Wire half_wire(Dtype t) { return t == Dtype::kF16 ? WireKind::kF16 : WireKind::kBF16; }

// Bytes that `count` F32 elements take on the wire.
size_t wire_size(Wire w, size_t count);

// Encodes count elements into wire_size(w, count) bytes at dst. `first` is the index of src[0] in
// the caller's buffer, for the error message.
Status encode(Wire w, const float *src, size_t count, uint8_t *dst, size_t first = 0);

// The INVALID_ARGUMENT for a block-quantized wire's encoder stopping at element `index` (of the
// caller's buffer) whose value is `value`, with `left` elements from there to the end.
Status unencodable(Wire w, float value, size_t index, size_t left);

// OK if the `len` bytes at src are well-formed `w` data for `count` elements (PROTOCOL if not):
// the check decode runs first, for callers that decode elsewhere (the GPU kernels).
Status validate(Wire w, const uint8_t *src, size_t len, size_t count);

// Decodes the `len` bytes at src, which must encode `count` elements, into dst.
Status decode(Wire w, const uint8_t *src, size_t len, size_t count, float *dst);

// dst[i] = mine[i] (op) decoded element i, combined in F32 (AVG as SUM); dst may equal mine.
Status decode_reduce(Wire w, RedOp op, const uint8_t *src, size_t len, size_t count, float *dst,
                     const float *mine);

}  // namespace wccl::codec
