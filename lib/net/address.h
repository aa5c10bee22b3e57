// "host:port" and "[v6addr]:port" addresses, parsed from configuration and written for logs.
#pragma once

#include <uv.h>

#include <string>

#include "core/status.h"

namespace wccl::net {

struct HostPort {
  std::string host;  // without brackets
  int port = 0;
};

// INVALID_ARGUMENT naming the text and the expected form for anything else.
Result<HostPort> parse_address(const std::string &text);

// sa as "ip:port" or "[ip6]:port"; "?" for another family.
std::string sockaddr_text(const sockaddr *sa);
// The peer of a connected socket as sockaddr_text writes it ("?" if unknown).
std::string peer_text(const uv_tcp_t *tcp);
// This side's IP address on a connected socket, without the port ("" if unknown).
std::string local_host_text(const uv_tcp_t *tcp);

}  // namespace wccl::net
