// A WAN topology file: the WAN emulator (tools/wan/forward.cc) and the simulator (wccl-sim) read
// the same files, so a rehearsal on one can be checked against the other (docs/wan.md,
// docs/sim.md). Standard library only: the forwarder links nothing else.
//
// One statement per line, '#' starts a comment:
//   host NAME region=R up=RATE [down=RATE] [jitter=TIME] [loss=P] [count=N]
//                           down defaults to up; count=N makes N hosts NAME0..NAME(N-1)
//   delay A B TIME          one-way, both directions; A and B name regions or hosts (a pair of
//                           hosts overrides their regions' delay); every pair needs one
//   queue BYTES             each link's queue (default 1M); suffixes K, M (2^10, 2^20)
//   mtu N                   the MTU (default 1500)
//   seed N                  the loss and jitter generator's seed (default 1)
// RATE: a number with kbit, mbit or gbit (10^3, 10^6, 10^9 bit/s). TIME: a number with us or ms.
// A packet from host i to host j waits in i's uplink (a FIFO at its up rate), crosses the path
// (i-j's delay, plus a uniform sample of [0, jitter) of each end; lost with probability
// loss(i) + loss(j)), then waits in j's downlink (at its down rate).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace wccl::sim {

struct Host {
  std::string name, region;
  double up_bps = 0, down_bps = 0;  // bit/s of IP packets
  int64_t jitter_ns = 0;
  double loss = 0;  // probability per packet, each way
};

struct Topology {
  std::vector<Host> hosts;
  std::vector<std::vector<int64_t>> delay_ns;  // [from][to], one-way
  size_t queue_bytes = 1 << 20;
  int mtu = 1500;
  uint64_t seed = 1;

  int index(const std::string &name) const;  // -1 if no host has that name
};

// Throws std::runtime_error naming the file, line and cause.
Topology parse_topology(const std::string &path);
Topology parse_topology_text(const std::string &text, const std::string &name);

}  // namespace wccl::sim
