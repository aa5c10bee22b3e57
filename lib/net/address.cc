#include "net/address.h"

#include <netinet/in.h>

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

std::string sockaddr_text(const sockaddr *sa) {
  char ip[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (sa->sa_family == AF_INET) {
    const auto *in = reinterpret_cast<const sockaddr_in *>(sa);
    uv_ip4_name(in, ip, sizeof(ip));
    port = ntohs(in->sin_port);
    return format("%s:%d", ip, port);
  }
  if (sa->sa_family == AF_INET6) {
    const auto *in6 = reinterpret_cast<const sockaddr_in6 *>(sa);
    uv_ip6_name(in6, ip, sizeof(ip));
    port = ntohs(in6->sin6_port);
    return format("[%s]:%d", ip, port);
  }
  return "?";
}

std::string peer_text(const uv_tcp_t *tcp) {
  sockaddr_storage ss{};
  int len = sizeof(ss);
  if (uv_tcp_getpeername(tcp, reinterpret_cast<sockaddr *>(&ss), &len) != 0) return "?";
  return sockaddr_text(reinterpret_cast<sockaddr *>(&ss));
}

std::string local_host_text(const uv_tcp_t *tcp) {
  sockaddr_storage ss{};
  int len = sizeof(ss);
  if (uv_tcp_getsockname(tcp, reinterpret_cast<sockaddr *>(&ss), &len) != 0) return "";
  char ip[INET6_ADDRSTRLEN] = "";
  if (ss.ss_family == AF_INET) uv_ip4_name(reinterpret_cast<sockaddr_in *>(&ss), ip, sizeof(ip));
  if (ss.ss_family == AF_INET6) uv_ip6_name(reinterpret_cast<sockaddr_in6 *>(&ss), ip, sizeof(ip));
  return ip;
}

}  // namespace wccl::net
