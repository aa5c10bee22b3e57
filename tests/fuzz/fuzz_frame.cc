// libFuzzer target: the frame header and hello decoders must reject or accept any bytes without
// reading out of bounds, and whatever they accept must re-encode to the same bytes.
#include <cstdint>
#include <cstring>

#include "net/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace wccl::net;
  if (size < kFrameHeaderBytes) return 0;
  FrameHeader h;
  if (decode_header(data, kMaxFramePayload, &h).ok()) {
    uint8_t again[kFrameHeaderBytes];
    encode_header(h, again);
    if (std::memcmp(again, data, kFrameHeaderBytes) != 0) __builtin_trap();
    if (h.offset + h.length > h.msg_len) __builtin_trap();
    const size_t rest = size - kFrameHeaderBytes;
    if (h.type == FrameType::kHello && rest >= h.length) {
      Hello hello;
      for (bool from_connector : {true, false}) {
        if (decode_hello(data + kFrameHeaderBytes, h.length, from_connector, &hello).ok()) {
          uint8_t buf[kMaxHelloBytes];
          if (encode_hello(hello, buf) != h.length) __builtin_trap();
        }
      }
    }
  }
  return 0;
}
