// The simulated WAN (docs/sim.md): hosts with an uplink and a downlink, paths with a one-way
// delay, jitter and loss (sim/topology.h), and between every pair of hosts a link of `streams` TCP
// connections, as lib/net makes them. A link cuts its messages into frames as the transport does
// (net::stripe_frame_bytes, round robin over the streams with room: less than frame_bytes plus
// the kernel's net::kUnsentBytes waiting to leave), and each TCP
// stream is a fluid flow:
//
//   rate    the smaller of its fair shares of the sender's uplink and of the receiver's downlink
//           (each shared among the streams with window left), over the goodput of the links
//           ((MTU - 52) / MTU of the IP rate: TCP/IP headers);
//   window  cwnd grows once per round trip while the stream sends: by what it delivered in slow
//           start, then as CUBIC (or Reno) in congestion avoidance, never beyond `window_bytes`
//           (the socket buffers' bound);
//   loss    per round trip, a packet of the round is lost with the path's probability; and while
//           a host's standing queue (its streams' windows beyond what its link carries in a round
//           trip) exceeds the topology's queue, each stream above its fair part of the pipe loses
//           one at its round: cwnd shrinks by CUBIC's 0.7 (Reno's 0.5);
//   burst   a stream that starts (after it ran out of data) puts the acknowledged part of its
//           window (all of it after a round trip idle) into its host's uplink queue at once, as
//           unpaced TCP does; the queue drains at the uplink's rate, and where the bursts
//           overflow it each arriving one loses its tail (Network::burst);
//   idle    a stream idle for longer than its retransmission timeout restarts from a smaller
//           window (Linux's tcp_slow_start_after_idle, on by default), halving per timeout idle;
//   queue   the standing queue at the path's bottleneck (the windows in flight beyond the pipe)
//           lengthens each round trip by queue / capacity; a frame's own wait there is in its rate.
// Not modelled: a loss's cost beyond the window cut (seen a round trip later, the stream's later
// bytes held until the repair: docs/sim.md), BBR (the emulator's kernel default here),
// retransmission timeouts, the receive window apart from window_bytes (its autotuning from small
// included), a standing queue's part in a burst's overflow, and CPU contention between a host's
// peers.
//
// Within a round trip a stream sends at its share until its window's worth is out, then waits for
// the next round trip (so a message smaller than the window crosses at the link's rate plus the
// path's delay, as TCP's burst does). A frame's bytes leave at the stream's rate; they arrive one
// path delay (plus jitter, never reordering a pair's frames) after the last one left. A message is
// sent when its last frame has left, and arrives when its last frame has. Everything here runs on
// the engine's driving thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "sim/engine.h"
#include "sim/topology.h"

namespace wccl::sim {

struct TcpOptions {
  int streams = 4;                    // per link (config key streams)
  size_t frame_bytes = 1 << 20;       // config key frame_bytes
  size_t window_bytes = 3 << 20;      // a stream's largest window (docs/sim.md: calibration)
  bool slow_start_after_idle = true;  // net.ipv4.tcp_slow_start_after_idle
  enum class Cc { kCubic, kReno } cc = Cc::kCubic;
  int initial_window = 10;  // segments
};

// What a host's links carried, for the utilisation summary.
struct HostTraffic {
  uint64_t sent = 0, received = 0;  // payload bytes
  Time up_busy = 0;                 // time its uplink carried at least one stream
};

class Network {
 public:
  Network(Engine &engine, const Topology &topo, const TcpOptions &tcp);
  ~Network();
  Network(const Network &) = delete;
  Network &operator=(const Network &) = delete;

  // Queues a message of len bytes from host `from` to host `to`; sent() runs when its last byte
  // left, arrived() when its last byte reached `to`. `connection` names the link's TCP
  // connections (each epoch opens new ones): a message on another connection than the pair's
  // last closes that one and starts new streams from the initial window. Only from events.
  void send(int from, int to, size_t len, std::function<void()> sent, std::function<void()> arrived,
            uint64_t connection = 0);
  // Every connection from or to `host` is reset (its process died, or it closed its epoch's
  // links): bytes not yet sent are dropped and their messages never complete; frames already on
  // the wire still arrive. Only from events.
  void close(int host);

  const std::vector<HostTraffic> &traffic() const { return traffic_; }
  uint64_t link_bytes(int from, int to) const;
  uint64_t losses() const { return losses_; }
  // The stream's congestion window now (bytes), for tests; 0 if the link has not been used.
  double cwnd(int from, int to, int stream) const;

 private:
  struct Message;
  struct Stream;
  struct Link;
  Link &link(int from, int to, uint64_t connection);
  void retire(std::unique_ptr<Link> l);
  void pump(Link &l);
  void start(Stream &s);
  void stop(Stream &s);
  void settle(Stream &s);
  void reschedule(Stream &s);
  void share(int host, bool up);
  void round(Stream *s, uint64_t generation);
  void grow(Stream &s, double acked);
  void step(Stream *s, uint64_t version);
  void lose(Stream &s);
  void burst(Link &l);
  double rtt_s(const Stream &s) const;
  double queue_delay_s(const Stream &s) const;
  double standing_queue(int host, bool up) const;

  Engine &engine_;
  const Topology &topo_;
  const TcpOptions tcp_;
  const double mss_;
  std::vector<double> up_Bps_, down_Bps_;  // goodput capacities, bytes/s
  std::map<std::pair<int, int>, std::unique_ptr<Link>> links_;
  std::vector<std::unique_ptr<Link>> closed_;  // kept: events of their streams may still be due
  std::vector<std::vector<Stream *>> up_active_, down_active_;
  std::vector<Time> up_since_;          // when the uplink last became busy
  std::vector<double> up_burst_queue_;  // bytes of starting bursts in the uplink's queue
  std::vector<Time> up_burst_at_;       // as of then
  std::vector<std::vector<Time>> last_arrival_;
  std::vector<HostTraffic> traffic_;
  std::mt19937_64 rng_;
  uint64_t losses_ = 0;
};

}  // namespace wccl::sim
