// wccl-wan-forward: the packet forwarder of the WAN emulator (tools/wan/wan.py, docs/wan.md).
//
//   wccl-wan-forward [--parent PID] TOPOLOGY
//
// --parent PID: PID is this process's parent, and the forwarder ends as on SIGTERM when the parent
// ends (PR_SET_PDEATHSIG; precisely: when the parent's thread that started it ends), so that an
// emulation that a program (a test) started does not outlive it. wan.py's Wan objects pass it;
// `wan.py up`, which returns while the emulation runs, does not.
//
// Creates one TUN device per host of the topology (wccl-w0, wccl-w1, ...), prints one line per host
// ("host NAME ADDRESS DEVICE") and then "ready" on stdout, and forwards IPv4 packets between the
// devices until SIGTERM or SIGINT, when it prints per-host counters (and bytes per 100 ms) on
// stderr. wan.py moves each device into its host's network namespace and gives it the address; any
// program can do the same.
//
// A packet that host i sends to host j crosses, in order:
//   i's uplink     a FIFO at i's `up` rate with a tail-drop queue of `queue` bytes;
//   the path       i->j's one-way delay, plus a uniform sample of [0, jitter) of each end;
//                  lost with probability loss(i) + loss(j); never reordered within the pair;
//   j's downlink   a FIFO at j's `down` rate with the same tail-drop queue;
// and is then written to j's device. Rates count IP bytes. Everything runs on one thread with an
// event heap and a timerfd: no busy-waiting, and memory bounded by the queues and kMaxInFlight.
//
// The topology file: lib/sim/topology.h (wccl-sim reads the same files).
// Host k gets address 10.77.0.(k+1)/16.
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <queue>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "sim/topology.h"

namespace {

constexpr size_t kMaxInFlight = size_t{1} << 30;  // packet buffers on the emulated paths, in bytes
// Each device's transmit queue, in packets. The kernel drops what a host sends while its device's
// queue is full, before the forwarder reads it: a loss the topology does not have, and one that
// comes with CPU contention. The default (500) overflowed under four unpaced TCP windows whenever
// this thread was descheduled for a moment (400-650 retransmissions per host in 10 s at 250 Mbit/s,
// docs/wan.md); this holds every socket's share of the device many times over, so the topology's
// queues are the only drops.
constexpr int kDeviceQueuePackets = 1 << 15;

constexpr int64_t kWireBinNs = 100'000'000;  // Counters::wire_bins: 100 ms each,
constexpr size_t kMaxWireBins = 1 << 20;     // the first 29 hours

struct Counters {
  uint64_t sent = 0, sent_bytes = 0;            // read from this host's device
  uint64_t delivered = 0, delivered_bytes = 0;  // written to this host's device
  uint64_t drop_up = 0, drop_down = 0, lost = 0, unroutable = 0;
  // Bytes that left the host's uplink in each kWireBinNs since the forwarder started (at most
  // kMaxWireBins): the rate on its wire over time, whose peaks the means above hide.
  std::vector<uint64_t> wire_bins;
};

struct Host : wccl::sim::Host {
  int fd = -1;
  int64_t up_free = 0, down_free = 0;  // when each link has sent what it holds
  Counters n;
};

struct Topology {
  std::vector<Host> hosts;
  std::vector<std::vector<int64_t>> delay_ns;  // [from][to], one-way
  size_t queue_bytes = 0;
  int mtu = 0;
  uint64_t seed = 0;
};

[[noreturn]] void fail(const std::string &why) { throw std::runtime_error(why); }
// The same for a failed system call: errno's text after `what`.
[[noreturn]] void fail_errno(const std::string &what) {
  throw std::system_error(errno, std::generic_category(), what);
}

Topology load_topology(const std::string &path) {
  const wccl::sim::Topology parsed = wccl::sim::parse_topology(path);
  if (parsed.hosts.size() > 250)
    fail(path + ": the emulator takes at most 250 hosts (one /24 of addresses)");
  Topology topo;
  for (const wccl::sim::Host &h : parsed.hosts) {
    Host host;
    static_cast<wccl::sim::Host &>(host) = h;
    topo.hosts.push_back(std::move(host));
  }
  topo.delay_ns = parsed.delay_ns;
  topo.queue_bytes = parsed.queue_bytes;
  topo.mtu = parsed.mtu;
  topo.seed = parsed.seed;
  return topo;
}

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int open_tun(const std::string &name) {
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail_errno("/dev/net/tun (needs root and the tun module)");
  ifreq ifr{};
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name.c_str());
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) fail_errno("TUNSETIFF " + name);
  const int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) fail_errno("socket");
  ifr.ifr_qlen = kDeviceQueuePackets;
  const int set = ioctl(sock, SIOCSIFTXQLEN, &ifr);
  close(sock);
  if (set < 0) fail_errno("SIOCSIFTXQLEN " + name);
  return fd;
}

struct Packet {
  explicit Packet(int mtu) : data(new uint8_t[static_cast<size_t>(mtu)]) {}
  size_t len = 0;
  int from = 0, to = 0;
  std::unique_ptr<uint8_t[]> data;  // one MTU: a TUN device without IFF_VNET_HDR reads no larger
};

struct Event {
  int64_t at;
  uint64_t order;  // ties keep the order events were made in
  bool delivery;   // false: arrives at the destination's downlink; true: leaves it
  Packet *packet;
  bool operator>(const Event &o) const { return at != o.at ? at > o.at : order > o.order; }
};

class Forwarder {
 public:
  explicit Forwarder(Topology topo) : t_(std::move(topo)), rng_(t_.seed), start_ns_(now_ns()) {
    const size_t n = t_.hosts.size();
    last_arrival_.assign(n, std::vector<int64_t>(n, 0));
  }

  void open_devices() {
    for (size_t k = 0; k < t_.hosts.size(); ++k) {
      const std::string dev = "wccl-w" + std::to_string(k);
      t_.hosts[k].fd = open_tun(dev);
      std::printf("host %s 10.77.0.%zu %s %d\n", t_.hosts[k].name.c_str(), k + 1, dev.c_str(),
                  t_.mtu);
    }
    std::printf("ready\n");
    std::fflush(stdout);
  }

  void run() {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    const int sfd = signalfd(-1, &stop, SFD_CLOEXEC);
    const int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    const int ep = epoll_create1(EPOLL_CLOEXEC);
    if (sfd < 0 || tfd < 0 || ep < 0) fail_errno("epoll/timerfd/signalfd");
    auto watch = [ep](int fd, uint64_t tag) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = tag;
      if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) fail_errno("epoll_ctl");
    };
    const uint64_t kSignal = 1000, kTimer = 1001;
    for (size_t k = 0; k < t_.hosts.size(); ++k) watch(t_.hosts[k].fd, k);
    watch(sfd, kSignal);
    watch(tfd, kTimer);
    epoll_event ready[64];
    for (;;) {
      itimerspec when{};  // all zero disarms
      if (!events_.empty()) {
        const int64_t at = std::max<int64_t>(events_.top().at, 1);
        when.it_value.tv_sec = at / 1000000000;
        when.it_value.tv_nsec = at % 1000000000;
      }
      timerfd_settime(tfd, TFD_TIMER_ABSTIME, &when, nullptr);
      const int got = epoll_wait(ep, ready, 64, -1);
      if (got < 0 && errno != EINTR) fail_errno("epoll_wait");
      for (int e = 0; e < got; ++e) {
        const uint64_t tag = ready[e].data.u64;
        if (tag == kSignal) return;
        if (tag == kTimer) {
          uint64_t expirations;
          (void)!read(tfd, &expirations, sizeof(expirations));
        } else {
          read_host(static_cast<int>(tag));
        }
      }
      run_due(now_ns());
    }
  }

  void print_counters() const {
    std::fprintf(stderr, "%-12s %10s %14s %10s %14s %8s %8s %8s %8s\n", "host", "sent", "sent(B)",
                 "delivered", "delivered(B)", "drop-up", "drop-dn", "lost", "other");
    for (const Host &h : t_.hosts) {
      std::fprintf(stderr,
                   "%-12s %10" PRIu64 " %14" PRIu64 " %10" PRIu64 " %14" PRIu64 " %8" PRIu64
                   " %8" PRIu64 " %8" PRIu64 " %8" PRIu64 "\n",
                   h.name.c_str(), h.n.sent, h.n.sent_bytes, h.n.delivered, h.n.delivered_bytes,
                   h.n.drop_up, h.n.drop_down, h.n.lost, h.n.unroutable);
    }
    // Per host: "wire HOST START BIN_S B0 B1 ...", START the Unix time at which bin 0 began.
    timespec real{};
    clock_gettime(CLOCK_REALTIME, &real);
    const double start_unix = static_cast<double>(real.tv_sec) + real.tv_nsec / 1e9 -
                              static_cast<double>(now_ns() - start_ns_) / 1e9;
    for (const Host &h : t_.hosts) {
      std::fprintf(stderr, "wire %s %.6f %.3f", h.name.c_str(), start_unix, kWireBinNs / 1e9);
      for (uint64_t b : h.n.wire_bins) std::fprintf(stderr, " %" PRIu64, b);
      std::fprintf(stderr, "\n");
    }
  }

 private:
  Packet *take() {
    if (free_.empty()) {
      packets_.push_back(std::make_unique<Packet>(t_.mtu));
      free_.push_back(packets_.back().get());
    }
    Packet *p = free_.back();
    free_.pop_back();
    return p;
  }
  void give_back(Packet *p) {
    in_flight_ -= static_cast<size_t>(t_.mtu);
    free_.push_back(p);
  }
  void push(int64_t at, bool delivery, Packet *p) { events_.push({at, order_++, delivery, p}); }

  // Bytes a link still holds at `at`, given when it will have sent them.
  static double backlog(int64_t free_at, int64_t at, double bps) {
    return free_at > at ? static_cast<double>(free_at - at) * bps / 8e9 : 0;
  }
  static int64_t transmit_ns(size_t len, double bps) {
    return static_cast<int64_t>(static_cast<double>(len) * 8e9 / bps);
  }

  void read_host(int from) {
    Host &src = t_.hosts[static_cast<size_t>(from)];
    for (;;) {
      Packet *p = take();
      const ssize_t got = read(src.fd, p->data.get(), static_cast<size_t>(t_.mtu));
      if (got <= 0) {
        free_.push_back(p);
        return;
      }
      p->len = static_cast<size_t>(got);
      in_flight_ += static_cast<size_t>(t_.mtu);
      ++src.n.sent;
      src.n.sent_bytes += p->len;
      uplink(from, p, now_ns());
    }
  }

  // The packet leaves `from`'s device at `now`: the uplink, then the path.
  void uplink(int from, Packet *p, int64_t now) {
    Host &src = t_.hosts[static_cast<size_t>(from)];
    // IPv4 to 10.77.0.(k+1) only; anything else (IPv6 router solicitations, say) goes nowhere.
    const int to = p->len >= 20 && (p->data[0] >> 4) == 4 && p->data[16] == 10 &&
                           p->data[17] == 77 && p->data[18] == 0
                       ? p->data[19] - 1
                       : -1;
    if (to < 0 || to >= static_cast<int>(t_.hosts.size()) || to == from ||
        in_flight_ > kMaxInFlight) {
      ++src.n.unroutable;
      return give_back(p);
    }
    Host &dst = t_.hosts[static_cast<size_t>(to)];
    if (backlog(src.up_free, now, src.up_bps) + static_cast<double>(p->len) >
        static_cast<double>(t_.queue_bytes)) {
      ++src.n.drop_up;
      return give_back(p);
    }
    src.up_free = std::max(src.up_free, now) + transmit_ns(p->len, src.up_bps);
    const size_t bin = static_cast<size_t>((src.up_free - start_ns_) / kWireBinNs);
    if (bin < kMaxWireBins) {
      if (bin >= src.n.wire_bins.size()) src.n.wire_bins.resize(bin + 1, 0);
      src.n.wire_bins[bin] += p->len;
    }
    if (uniform_(rng_) < src.loss + dst.loss) {
      ++src.n.lost;
      return give_back(p);
    }
    int64_t arrival = src.up_free + t_.delay_ns[static_cast<size_t>(from)][static_cast<size_t>(to)];
    for (const Host *h : {&src, &dst}) {
      if (h->jitter_ns > 0)
        arrival += static_cast<int64_t>(uniform_(rng_) * static_cast<double>(h->jitter_ns));
    }
    int64_t &last = last_arrival_[static_cast<size_t>(from)][static_cast<size_t>(to)];
    arrival = std::max(arrival, last);  // jitter delays, never reorders, a pair's packets
    last = arrival;
    p->from = from;
    p->to = to;
    push(arrival, false, p);
  }

  void run_due(int64_t now) {
    while (!events_.empty() && events_.top().at <= now) {
      const Event e = events_.top();
      events_.pop();
      Host &dst = t_.hosts[static_cast<size_t>(e.packet->to)];
      if (!e.delivery) {  // at the destination's downlink
        if (backlog(dst.down_free, e.at, dst.down_bps) + static_cast<double>(e.packet->len) >
            static_cast<double>(t_.queue_bytes)) {
          ++dst.n.drop_down;
          give_back(e.packet);
          continue;
        }
        dst.down_free = std::max(dst.down_free, e.at) + transmit_ns(e.packet->len, dst.down_bps);
        push(dst.down_free, true, e.packet);
      } else {
        if (write(dst.fd, e.packet->data.get(), e.packet->len) ==
            static_cast<ssize_t>(e.packet->len)) {
          ++dst.n.delivered;
          dst.n.delivered_bytes += e.packet->len;
        } else {
          ++dst.n.drop_down;
        }
        give_back(e.packet);
      }
    }
  }

  Topology t_;
  std::mt19937_64 rng_;
  const int64_t start_ns_;  // bin 0 of Counters::wire_bins begins here
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t order_ = 0;
  std::vector<std::vector<int64_t>> last_arrival_;
  std::vector<std::unique_ptr<Packet>> packets_;  // every buffer made; reused through free_
  std::vector<Packet *> free_;
  size_t in_flight_ = 0;
};

}  // namespace

int main(int argc, char **argv) {
  const bool parent = argc == 4 && std::strcmp(argv[1], "--parent") == 0;
  if ((argc != 2 && !parent) || argv[argc - 1][0] == '-') {
    std::fprintf(stderr,
                 "usage: wccl-wan-forward [--parent PID] TOPOLOGY   (see tools/wan/wan.py and "
                 "docs/wan.md)\n");
    return 2;
  }
  if (parent) {
    char *end = nullptr;
    const long pid = std::strtol(argv[2], &end, 10);
    if (end == argv[2] || *end != '\0' || pid <= 0) {
      std::fprintf(stderr, "wccl-wan-forward: --parent takes a process id, not \"%s\"\n", argv[2]);
      return 2;
    }
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) {
      std::perror("wccl-wan-forward: prctl(PR_SET_PDEATHSIG)");
      return 1;
    }
    if (getppid() != static_cast<pid_t>(pid)) {
      std::fprintf(stderr, "wccl-wan-forward: its parent %s has already ended\n", argv[2]);
      return 1;
    }
  }
  try {
    Forwarder f(load_topology(argv[argc - 1]));
    f.open_devices();
    f.run();
    f.print_counters();
  } catch (const std::exception &e) {
    std::fprintf(stderr, "wccl-wan-forward: %s\n", e.what());
    return 1;
  }
  return 0;
}
