#include "net/tcp_info.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>

namespace wccl::net {

uint32_t tcp_min_rtt_us(int fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return 0;
  // An older kernel fills a shorter struct: fields past `len` were not written.
  if (len >= offsetof(tcp_info, tcpi_min_rtt) + sizeof(info.tcpi_min_rtt) && info.tcpi_min_rtt != 0) {
    return info.tcpi_min_rtt;
  }
  return len >= offsetof(tcp_info, tcpi_rtt) + sizeof(info.tcpi_rtt) ? info.tcpi_rtt : 0;
}

}  // namespace wccl::net
