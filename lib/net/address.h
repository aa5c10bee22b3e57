// "host:port" and "[v6addr]:port" addresses.
#pragma once

#include <string>

#include "core/status.h"

namespace wccl::net {

struct HostPort {
  std::string host;  // without brackets
  int port = 0;
};

// INVALID_ARGUMENT naming the text and the expected form for anything else.
Result<HostPort> parse_address(const std::string &text);

}  // namespace wccl::net
