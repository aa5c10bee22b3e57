// What the kernel knows about one TCP connection. Apart from the rest of lib/net because it needs
// <linux/tcp.h>, whose struct tcp_info is newer than glibc's <netinet/tcp.h> (which uv.h pulls in)
// and cannot be included beside it.
#pragma once

#include <cstdint>

namespace wccl::net {

// The connection's minimum round-trip time in microseconds (the kernel's windowed minimum over
// the last net.ipv4.tcp_min_rtt_wlen seconds, 300 by default: queueing delay under load does not
// inflate it), or its smoothed round trip where the kernel has no minimum; 0 if the socket gives
// neither.
uint32_t tcp_min_rtt_us(int fd);

}  // namespace wccl::net
