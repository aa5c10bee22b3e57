#include "net/tcp_info.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>

namespace wccl::net {

TcpSample tcp_sample(int fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  TcpSample s;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return s;
  // An older kernel fills a shorter struct: fields past `len` were not written.
  auto has = [len](size_t offset, size_t size) { return len >= offset + size; };
  if (has(offsetof(tcp_info, tcpi_min_rtt), sizeof(info.tcpi_min_rtt)) && info.tcpi_min_rtt != 0) {
    s.min_rtt_us = info.tcpi_min_rtt;
  } else if (has(offsetof(tcp_info, tcpi_rtt), sizeof(info.tcpi_rtt))) {
    s.min_rtt_us = info.tcpi_rtt;
  }
  if (has(offsetof(tcp_info, tcpi_delivery_rate), sizeof(info.tcpi_delivery_rate))) {
    s.delivery_rate = info.tcpi_delivery_rate;
    s.app_limited = info.tcpi_delivery_rate_app_limited != 0;
  }
  return s;
}

}  // namespace wccl::net
