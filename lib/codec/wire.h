// Wire codecs (DESIGN §5): how F32 elements travel between peers when an operation asks for
// fewer bytes than their native size. docs/protocol.md specifies the formats.
//
//   kF16, kBF16  each element rounded to nearest-even to 16 bits (plain down-cast: values beyond
//                the format's range become Inf, NaN stays NaN).
//   kInt8        blocks of kInt8Block elements, each with a float scale and offset and one byte
//                per element (kernels.h). Element x of a block with minimum lo and maximum hi
//                decodes to within (hi - lo) / 510 of x, plus float rounding (a few ulp of the
//                block's largest magnitude). A block whose range is below 255 * FLT_MIN is
//                sent as its minimum. NaN and Inf cannot be encoded, nor a block whose range
//                does not fit in a float (more than about 3.4e38): INVALID_ARGUMENT.
//
// Decoding validates before it writes: a wrong length or an INT8 header that could decode to a
// non-finite value is PROTOCOL (a bad frame), and nothing is written.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/reduce.h"
#include "core/status.h"

namespace wccl::codec {

// The values match wccl_wire_t.
enum class Wire : int { kNative = 0, kF16 = 1, kBF16 = 2, kInt8 = 3 };
inline constexpr int kWireCount = 4;

const char *wire_name(Wire w);  // "native", "fp16", "bf16", "int8"

// Bytes that `count` F32 elements take on the wire.
size_t wire_size(Wire w, size_t count);

// Encodes count elements into wire_size(w, count) bytes at dst. `first` is the index of src[0] in
// the caller's buffer, for the error message.
Status encode(Wire w, const float *src, size_t count, uint8_t *dst, size_t first = 0);

// OK if the `len` bytes at src are well-formed `w` data for `count` elements (PROTOCOL if not):
// the check decode runs first, for callers that decode elsewhere (the GPU kernels).
Status validate(Wire w, const uint8_t *src, size_t len, size_t count);

// Decodes the `len` bytes at src, which must encode `count` elements, into dst.
Status decode(Wire w, const uint8_t *src, size_t len, size_t count, float *dst);

// dst[i] = mine[i] (op) decoded element i, combined in F32 (AVG as SUM); dst may equal mine.
Status decode_reduce(Wire w, RedOp op, const uint8_t *src, size_t len, size_t count, float *dst, const float *mine);

}  // namespace wccl::codec
