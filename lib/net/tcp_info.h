// What the kernel knows about one TCP connection. Apart from the rest of lib/net because it needs
// <linux/tcp.h>, whose struct tcp_info is newer than glibc's <netinet/tcp.h> (which uv.h pulls in)
// and cannot be included beside it.
#pragma once

#include <cstdint>

namespace wccl::net {

struct TcpSample {
  // The connection's minimum round-trip time in microseconds (the kernel's windowed minimum over
  // the last net.ipv4.tcp_min_rtt_wlen seconds, 300 by default: queueing delay under load does
  // not inflate it), or its smoothed round trip where the kernel has no minimum; 0: neither.
  uint32_t min_rtt_us = 0;
  // The rate, in bytes per second, at which the peer acknowledged data in the kernel's latest
  // delivery-rate sample (the one congestion control reads); 0: none yet.
  uint64_t delivery_rate = 0;
  // That sample was limited by the application (the sender ran out of data), so it says less
  // than the path can carry.
  bool app_limited = true;
};

// One getsockopt(TCP_INFO); all zero if it fails.
TcpSample tcp_sample(int fd);

}  // namespace wccl::net
