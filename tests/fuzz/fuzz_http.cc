// libFuzzer target: the HTTP request parser decides any bytes without reading out of bounds, and
// decides them alike whether they come at once or in pieces (the first input byte picks the piece
// size), as a connection delivers them.
#include <cstdint>
#include <string>

#include "net/http.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using wccl::net::HttpRequestParser;
  if (size == 0) return 0;
  const size_t piece = data[0] % 16 + 1;
  const char *text = reinterpret_cast<const char *>(data + 1);
  const size_t n = size - 1;
  HttpRequestParser whole, pieces;
  whole.feed(text, n);
  for (size_t i = 0; i < n && pieces.state() == HttpRequestParser::State::kReading; i += piece) {
    pieces.feed(text + i, piece < n - i ? piece : n - i);
  }
  if (whole.state() != pieces.state()) __builtin_trap();
  if (whole.state() == HttpRequestParser::State::kFailed) {
    if (whole.error_status() != pieces.error_status() || whole.error_status() < 400 ||
        whole.error().empty())
      __builtin_trap();
  }
  if (whole.state() == HttpRequestParser::State::kComplete) {
    const auto &a = whole.request(), &b = pieces.request();
    if (a.method != b.method || a.path != b.path || a.query != b.query ||
        a.authorization != b.authorization || a.path.empty() || a.path[0] != '/')
      __builtin_trap();
  }
  return 0;
}
