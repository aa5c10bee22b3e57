// libFuzzer target: the wire decoders (codec/wire.h) on arbitrary bytes. Byte 0 picks the wire
// (its low 3 bits) and TOPK's keep (the high 5: 0 the default 8, 1..30 that keep, 31 the largest,
// 64), bytes 1-2 the element count; the rest is the encoded data. A decoder must reject anything
// malformed (wrong length, bad block scales or offsets, FP8 NaN codes) without touching its output,
// and whatever it accepts must decode to finite values on the block-quantized wires, the same
// through decode and decode-then-add to zero.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "codec/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace wccl::codec;
  if (size < 3) return 0;
  static_assert(kWireCount == 8, "byte 0's low 3 bits pick the wire");
  Wire w(static_cast<WireKind>(data[0] & 7));
  const size_t keep = data[0] >> 3;
  if (w.kind == WireKind::kTopk && keep != 0) w = Wire::topk(keep == 31 ? kTopkMaxKeep : keep);
  const size_t count = data[1] | (static_cast<size_t>(data[2]) << 8);
  const uint8_t *payload = data + 3;
  const size_t len = size - 3;
  std::vector<float> out(count, 42.0f), acc(count, 0.0f);
  const wccl::Status st = decode(w, payload, len, count, out.data());
  const wccl::Status st2 =
      decode_reduce(w, RedOp::kSum, payload, len, count, acc.data(), acc.data());
  if (st.ok() != st2.ok()) __builtin_trap();
  if (!st.ok()) {
    for (float f : out) {
      if (f != 42.0f) __builtin_trap();  // rejected input changed the output
    }
    return 0;
  }
  for (size_t i = 0; i < count; ++i) {
    if (block_format(w) != nullptr && !std::isfinite(out[i])) __builtin_trap();
    // x + 0 is x for everything except -0 (which becomes +0) and NaN payloads.
    if (!(std::isnan(out[i]) && std::isnan(acc[i])) && out[i] + 0.0f != acc[i]) __builtin_trap();
  }
  return 0;
}
