#include "net/address.h"

#include <cctype>

namespace wccl::net {

Result<HostPort> parse_address(const std::string &text) {
  auto bad = [&](const char *why) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                      "address \"%s\": %s; expected host:port or [ipv6-address]:port", text.c_str(),
                      why);
  };
  HostPort out;
  size_t colon;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos) return bad("unclosed '['");
    out.host = text.substr(1, close - 1);
    if (close + 1 >= text.size() || text[close + 1] != ':') return bad("no :port after ']'");
    colon = close + 1;
  } else {
    colon = text.rfind(':');
    if (colon == std::string::npos) return bad("no port");
    out.host = text.substr(0, colon);
    if (out.host.find(':') != std::string::npos) return bad("an IPv6 address needs brackets");
  }
  if (out.host.empty()) return bad("empty host");
  const std::string port = text.substr(colon + 1);
  if (port.empty() || port.size() > 5) return bad("port is not a number 0..65535");
  int value = 0;
  for (char c : port) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return bad("port is not a number 0..65535");
    value = value * 10 + (c - '0');
  }
  if (value > 65535) return bad("port is not a number 0..65535");
  out.port = value;
  return out;
}

}  // namespace wccl::net
