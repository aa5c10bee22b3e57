// libFuzzer target: the control-message decoder accepts or refuses any bytes without reading out
// of bounds, and what it accepts re-encodes to the same bytes.
#include <cstdint>
#include <cstring>

#include "coord/messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace wccl::coord;
  ControlMessage m;
  if (decode(data, size, &m).ok()) {
    const std::vector<uint8_t> again = encode(m);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  }
  return 0;
}
