#include "sim/network.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "net/frame.h"

namespace wccl::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kCubicBeta = 0.7, kRenoBeta = 0.5, kCubicC = 0.4;  // RFC 9438's constants
constexpr double kMinRto = 0.2;                                     // Linux's TCP_RTO_MIN, seconds
constexpr double kEpsilon = 1e-6;                                   // bytes: less is nothing left

Time ns(double s) { return static_cast<Time>(std::ceil(s * 1e9)); }

// Shares `room` among the asks (max-min fairness): the smallest first, each at most its equal part
// of what is left. Calls give(item, ask, got) for each.
template <typename T, typename Give>
void water_fill(std::vector<std::pair<double, T>> &asks, double room, Give give) {
  std::sort(asks.begin(), asks.end(),
            [](const auto &a, const auto &b) { return a.first < b.first; });
  size_t k = asks.size();
  for (auto &[ask, item] : asks) {
    const double got = std::min(ask, room / static_cast<double>(k--));
    room -= got;
    give(item, ask, got);
  }
}

}  // namespace

struct Network::Message {
  size_t len = 0, cut = 0;
  int frames = 0, left = 0, arrived = 0;
  bool all_cut = false;
  std::function<void()> sent, on_arrival;
};

struct Network::Stream {
  Link *link = nullptr;
  std::deque<std::pair<std::shared_ptr<Message>, size_t>> frames;  // the first is going out
  size_t backlog = 0;      // bytes of its frames not yet sent
  double head_sent = 0;    // bytes of the first frame sent
  double sent_total = 0;   // bytes sent ever
  double round_start = 0;  // sent_total when the round began
  double budget = 0;       // bytes the window still lets out in this round trip
  double cwnd = 0, ssthresh = kInf, w_max = 0;
  Time epoch = 0;                                       // CUBIC: when the window last shrank
  Time last_active = -1;                                // -1: never sent
  double rate = 0, up_share = kInf, down_share = kInf;  // bytes/s
  Time since = 0;                                       // rate holds since then
  uint64_t version = 0;                                 // of the pending finish event
  uint64_t generation = 0;                              // of the pending round event
  bool active = false;
  // A stream that starts sends its window at once (no pacing; Network::burst).
  bool bursting = false;  // in the round trip after it started
  double burst_room = 0;  // how much of its window could go at once then
  double burst = 0;       // bytes it put into the queue then
  bool burst_lost = false;
};

struct Network::Link {
  int from = 0, to = 0;
  uint64_t connection = 0;
  std::vector<Stream> streams;
  std::deque<std::shared_ptr<Message>> queue;  // messages with bytes not yet cut into frames
  int next = 0;
  uint64_t bytes = 0;
  size_t uncut = 0;  // bytes of the queue not yet in frames
};

Network::Network(Engine &engine, const Topology &topo, const TcpOptions &tcp)
    : engine_(engine), topo_(topo), tcp_(tcp), mss_(topo.mtu - 52), rng_(topo.seed) {
  const size_t n = topo.hosts.size();
  const double goodput = mss_ / topo.mtu;
  for (const Host &h : topo.hosts) {
    up_Bps_.push_back(h.up_bps / 8 * goodput);
    down_Bps_.push_back(h.down_bps / 8 * goodput);
  }
  up_active_.resize(n);
  down_active_.resize(n);
  up_since_.assign(n, 0);
  up_burst_at_.assign(n, 0);
  up_burst_queue_.assign(n, 0);
  last_arrival_.assign(n, std::vector<Time>(n, 0));
  traffic_.resize(n);
}

Network::~Network() = default;

Network::Link &Network::link(int from, int to, uint64_t connection) {
  auto &l = links_[{from, to}];
  if (l && l->connection != connection) retire(std::exchange(l, nullptr));
  if (!l) {
    l = std::make_unique<Link>();
    l->from = from;
    l->to = to;
    l->connection = connection;
    l->streams.resize(static_cast<size_t>(std::max(tcp_.streams, 1)));
    for (Stream &s : l->streams) {
      s.link = l.get();
      s.cwnd = tcp_.initial_window * mss_;
    }
  }
  return *l;
}

void Network::retire(std::unique_ptr<Link> l) {
  for (Stream &s : l->streams) {
    if (s.active) stop(s);
    s.frames.clear();
    s.backlog = 0;
  }
  l->queue.clear();
  l->uncut = 0;
  closed_.push_back(std::move(l));
}

void Network::close(int host) {
  for (auto it = links_.begin(); it != links_.end();) {
    if (it->first.first == host || it->first.second == host) {
      retire(std::move(it->second));
      it = links_.erase(it);
    } else {
      ++it;
    }
  }
}

uint64_t Network::link_bytes(int from, int to) const {
  auto it = links_.find({from, to});
  return it == links_.end() ? 0 : it->second->bytes;
}

double Network::cwnd(int from, int to, int stream) const {
  auto it = links_.find({from, to});
  return it == links_.end() ? 0 : it->second->streams[static_cast<size_t>(stream)].cwnd;
}

double Network::rtt_s(const Stream &s) const {
  return 2 *
         seconds(
             topo_.delay_ns[static_cast<size_t>(s.link->from)][static_cast<size_t>(s.link->to)]);
}

// The bytes the windows through one host's uplink (or downlink) hold beyond what it carries in a
// round trip: they wait in its queue.
double Network::standing_queue(int host, bool up) const {
  const auto &streams =
      up ? up_active_[static_cast<size_t>(host)] : down_active_[static_cast<size_t>(host)];
  if (streams.empty()) return 0;
  double windows = 0, rtt = kInf;
  for (const Stream *s : streams) {
    // What it can have in flight: its window, or less when it has less to send (its frames, and
    // its part of what its link has not cut yet: the socket buffer would hold that).
    const double pending =
        static_cast<double>(s->backlog) +
        static_cast<double>(s->link->uncut) / static_cast<double>(s->link->streams.size());
    windows += std::min(s->cwnd, pending);
    rtt = std::min(rtt, rtt_s(*s));
  }
  const double capacity =
      up ? up_Bps_[static_cast<size_t>(host)] : down_Bps_[static_cast<size_t>(host)];
  return std::max(0.0, windows - capacity * rtt);
}

double Network::queue_delay_s(const Stream &s) const {
  const double up =
      std::min(standing_queue(s.link->from, true), static_cast<double>(topo_.queue_bytes));
  const double down =
      std::min(standing_queue(s.link->to, false), static_cast<double>(topo_.queue_bytes));
  // The excess window waits at the path's bottleneck, one of the two.
  return std::max(up / up_Bps_[static_cast<size_t>(s.link->from)],
                  down / down_Bps_[static_cast<size_t>(s.link->to)]);
}

void Network::send(int from, int to, size_t len, std::function<void()> sent,
                   std::function<void()> arrived, uint64_t connection) {
  auto m = std::make_shared<Message>();
  m->len = len;
  m->sent = std::move(sent);
  m->on_arrival = std::move(arrived);
  if (len == 0) {  // a header alone: it takes the path's delay
    const Time now = engine_.now();
    Time &last = last_arrival_[static_cast<size_t>(from)][static_cast<size_t>(to)];
    last = std::max(last, now + topo_.delay_ns[static_cast<size_t>(from)][static_cast<size_t>(to)]);
    engine_.at(now, -1, [m] { m->sent(); });
    engine_.at(last, -1, [m] { m->on_arrival(); });
    return;
  }
  Link &l = link(from, to, connection);
  l.uncut += len;
  l.queue.push_back(std::move(m));
  pump(l);
  burst(l);
}

// A stream that starts puts what its window lets out into its host's uplink queue at once: Reno
// and CUBIC are not paced, so the kernel writes as much as the window allows as fast as the
// interface takes it, far faster than the WAN link drains it. That is the acknowledged part of the
// window (burst_room: all of it after a round trip idle), and through the stream's first round
// trip every byte within it joins the burst. The queue drains at the uplink's rate; where the
// bursts overflow it, tail drop takes the rest of the arriving one: the stream loses (once per
// burst) and this round carries only what got in, the lost bytes going in the next round under the
// reduced window. A link's frames go out round robin over its streams, so their bursts interleave
// as here.
void Network::burst(Link &l) {
  const Time now = engine_.now();
  const size_t host = static_cast<size_t>(l.from);
  const auto bursts = [](const Stream &s) { return s.bursting && !s.burst_lost; };
  if (std::none_of(l.streams.begin(), l.streams.end(), bursts)) return;  // the common case
  double &queued = up_burst_queue_[host];
  queued = std::max(0.0, queued - up_Bps_[host] * seconds(now - up_burst_at_[host]));
  up_burst_at_[host] = now;
  const double uncut = static_cast<double>(l.uncut) / static_cast<double>(l.streams.size());
  std::vector<std::pair<double, Stream *>> outs;
  for (Stream &s : l.streams) {
    if (!bursts(s)) continue;
    const double out = std::min(s.burst_room, s.sent_total - s.round_start +
                                                  static_cast<double>(s.backlog) + uncut) -
                       s.burst;
    if (out > 0) outs.emplace_back(out, &s);
  }
  const double room = std::max(0.0, static_cast<double>(topo_.queue_bytes) - queued);
  water_fill(outs, room, [&](Stream *s, double out, double in) {
    queued += in;
    s->burst += in;
    if (in >= out) return;
    s->burst_lost = true;
    settle(*s);
    lose(*s);
    s->budget = std::max(0.0, s->burst - (s->sent_total - s->round_start));
    reschedule(*s);
  });
}

void Network::pump(Link &l) {
  const int n = static_cast<int>(l.streams.size());
  while (!l.queue.empty()) {
    Stream *s = nullptr;
    for (int i = 0; i < n; ++i) {
      Stream &c = l.streams[static_cast<size_t>((l.next + i) % n)];
      if (c.backlog < tcp_.frame_bytes + net::kUnsentBytes) {
        s = &c;
        l.next = (l.next + i + 1) % n;
        break;
      }
    }
    if (s == nullptr) return;  // every stream's writes are full: a finish calls back in
    const std::shared_ptr<Message> m = l.queue.front();
    const size_t frame = std::min<size_t>(
        net::stripe_frame_bytes(m->len, n, static_cast<uint32_t>(tcp_.frame_bytes)),
        m->len - m->cut);
    m->cut += frame;
    l.uncut -= frame;
    ++m->frames;
    if (m->cut == m->len) {
      m->all_cut = true;
      l.queue.pop_front();
    }
    s->frames.emplace_back(m, frame);
    s->backlog += frame;
    if (!s->active) start(*s);
  }
}

void Network::start(Stream &s) {
  const Time now = engine_.now();
  if (tcp_.slow_start_after_idle && s.last_active >= 0) {
    // Linux's tcp_cwnd_restart: the window halves for each retransmission timeout spent idle,
    // down to the initial window.
    const double rto = kMinRto + rtt_s(s);
    const double restart = std::min(s.cwnd, tcp_.initial_window * mss_);
    s.ssthresh = std::max(s.ssthresh == kInf ? 0.0 : s.ssthresh, 0.75 * s.cwnd);
    for (double idle = seconds(now - s.last_active) - rto; idle > 0 && s.cwnd > restart;
         idle -= rto)
      s.cwnd /= 2;
    s.cwnd = std::max(s.cwnd, restart);
  }
  s.active = true;
  s.since = now;
  s.rate = 0;
  s.budget = s.cwnd;
  // What goes out at once is the part of its window already acknowledged: all of it after a round
  // trip idle; sooner, the rest is still in flight, and acknowledgements clock it out.
  s.bursting = true;
  s.burst_room =
      s.last_active < 0 ? s.cwnd : s.cwnd * std::min(1.0, seconds(now - s.last_active) / rtt_s(s));
  s.burst = 0;
  s.burst_lost = false;
  s.up_share = s.down_share = kInf;
  auto &up = up_active_[static_cast<size_t>(s.link->from)];
  if (up.empty()) up_since_[static_cast<size_t>(s.link->from)] = now;
  up.push_back(&s);
  down_active_[static_cast<size_t>(s.link->to)].push_back(&s);
  share(s.link->from, true);
  share(s.link->to, false);
  s.round_start = s.sent_total;
  const uint64_t generation = ++s.generation;
  engine_.at(now + ns(rtt_s(s)), -1, [this, p = &s, generation] { round(p, generation); });
}

void Network::stop(Stream &s) {
  const Time now = engine_.now();
  settle(s);
  grow(s, s.sent_total - s.round_start);  // the last round's acknowledgements still come back
  s.round_start = s.sent_total;
  s.active = false;
  s.last_active = now;
  ++s.version;
  ++s.generation;
  s.rate = 0;
  auto drop = [&s](std::vector<Stream *> &v) { v.erase(std::find(v.begin(), v.end(), &s)); };
  auto &up = up_active_[static_cast<size_t>(s.link->from)];
  drop(up);
  drop(down_active_[static_cast<size_t>(s.link->to)]);
  if (up.empty())
    traffic_[static_cast<size_t>(s.link->from)].up_busy +=
        now - up_since_[static_cast<size_t>(s.link->from)];
  share(s.link->from, true);
  share(s.link->to, false);
}

void Network::settle(Stream &s) {
  const Time now = engine_.now();
  if (s.active && !s.frames.empty()) {
    const double moved =
        std::min({s.rate * seconds(now - s.since),
                  static_cast<double>(s.frames.front().second) - s.head_sent, s.budget});
    s.head_sent += moved;
    s.sent_total += moved;
    s.budget -= moved;
  }
  s.since = now;
}

void Network::reschedule(Stream &s) {
  const uint64_t version = ++s.version;
  if (!s.active || s.frames.empty() || s.rate <= 0) return;
  const double left =
      std::max(0.0, std::min(static_cast<double>(s.frames.front().second) - s.head_sent, s.budget));
  engine_.at(engine_.now() + ns(left / s.rate), -1, [this, p = &s, version] { step(p, version); });
}

// Fair shares of one host's uplink (or downlink) among its streams that have window left in this
// round trip; a stream runs at the smaller of its two shares. (Each side is shared on its own: the
// part of an uplink share that a slower downlink leaves unused is not given to the others.)
void Network::share(int host, bool up) {
  auto &streams =
      up ? up_active_[static_cast<size_t>(host)] : down_active_[static_cast<size_t>(host)];
  std::vector<std::pair<double, Stream *>> asks;
  asks.reserve(streams.size());
  for (Stream *s : streams) asks.emplace_back(s->budget > kEpsilon ? kInf : 0.0, s);
  water_fill(asks, up ? up_Bps_[static_cast<size_t>(host)] : down_Bps_[static_cast<size_t>(host)],
             [&](Stream *s, double, double got) {
               (up ? s->up_share : s->down_share) = got;
               const double rate = std::min(s->up_share, s->down_share);
               if (rate != s->rate) {
                 settle(*s);
                 s->rate = rate;
                 reschedule(*s);
               }
             });
}

void Network::lose(Stream &s) {
  ++losses_;
  s.w_max = s.cwnd;
  s.cwnd =
      std::max(2 * mss_, s.cwnd * (tcp_.cc == TcpOptions::Cc::kCubic ? kCubicBeta : kRenoBeta));
  s.ssthresh = s.cwnd;
  s.epoch = engine_.now();
}

// The window after a round trip that delivered `acked` bytes (or lost one of them).
void Network::grow(Stream &s, double acked) {
  const Link &l = *s.link;
  const double p =
      topo_.hosts[static_cast<size_t>(l.from)].loss + topo_.hosts[static_cast<size_t>(l.to)].loss;
  const bool overflow =
      (standing_queue(l.from, true) > static_cast<double>(topo_.queue_bytes) ||
       standing_queue(l.to, false) > static_cast<double>(topo_.queue_bytes)) &&
      s.cwnd * static_cast<double>(up_active_[static_cast<size_t>(l.from)].size()) >
          up_Bps_[static_cast<size_t>(l.from)] * rtt_s(s);  // above its fair part of the pipe
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const bool random_loss =
      p > 0 && acked > 0 && uniform(rng_) < 1 - std::pow(1 - std::min(p, 1.0), acked / mss_);
  if (overflow || random_loss) {
    lose(s);
  } else if (s.cwnd < s.ssthresh) {
    s.cwnd += acked;  // slow start: one segment per segment acknowledged
  } else if (tcp_.cc == TcpOptions::Cc::kReno) {
    s.cwnd += mss_ * acked / s.cwnd;
  } else {
    // CUBIC (RFC 9438), in segments and seconds since the window last shrank, with its
    // Reno-friendly floor.
    const double t = seconds(engine_.now() - s.epoch), w_max = s.w_max / mss_;
    const double k = std::cbrt(w_max * (1 - kCubicBeta) / kCubicC);
    const double cubic = kCubicC * std::pow(t - k, 3) + w_max;
    const double reno = w_max * kCubicBeta + 3 * (1 - kCubicBeta) / (1 + kCubicBeta) * t / rtt_s(s);
    const double target = std::max(cubic, reno) * mss_;
    if (target > s.cwnd) s.cwnd = std::min(target, s.cwnd * 1.5);
  }
  s.cwnd = std::min(s.cwnd, static_cast<double>(tcp_.window_bytes));
}

void Network::round(Stream *s, uint64_t generation) {
  if (!s->active || generation != s->generation) return;
  s->bursting = false;
  settle(*s);
  grow(*s, s->sent_total - s->round_start);
  s->budget = s->cwnd;  // a new round trip: the window's worth may go out
  s->round_start = s->sent_total;
  share(s->link->from, true);
  share(s->link->to, false);
  reschedule(*s);
  const uint64_t next = ++s->generation;
  engine_.at(engine_.now() + ns(rtt_s(*s) + queue_delay_s(*s)), -1,
             [this, s, next] { round(s, next); });
}

void Network::step(Stream *s, uint64_t version) {
  if (version != s->version) return;
  settle(*s);
  if (static_cast<double>(s->frames.front().second) - s->head_sent > kEpsilon) {
    if (s->budget > kEpsilon)
      return reschedule(*s);  // a new round trip refilled the window meanwhile
    // The window is spent before the frame: it waits for the next round trip.
    share(s->link->from, true);
    share(s->link->to, false);
    return;
  }
  const Time now = engine_.now();
  Link &l = *s->link;
  const std::shared_ptr<Message> m = s->frames.front().first;
  const size_t len = s->frames.front().second;
  s->frames.pop_front();
  s->backlog -= len;
  s->sent_total += static_cast<double>(len) - s->head_sent;
  s->head_sent = 0;
  l.bytes += len;
  traffic_[static_cast<size_t>(l.from)].sent += len;
  traffic_[static_cast<size_t>(l.to)].received += len;
  const Host &a = topo_.hosts[static_cast<size_t>(l.from)],
             &b = topo_.hosts[static_cast<size_t>(l.to)];
  // The fluid rate already holds the frame's wait at the bottleneck: its last byte left at the
  // link's rate, so it arrives one path delay later.
  Time arrival = now + topo_.delay_ns[static_cast<size_t>(l.from)][static_cast<size_t>(l.to)];
  if (a.jitter_ns + b.jitter_ns > 0) {
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    arrival += static_cast<Time>(uniform(rng_) * static_cast<double>(a.jitter_ns + b.jitter_ns));
  }
  Time &last = last_arrival_[static_cast<size_t>(l.from)][static_cast<size_t>(l.to)];
  arrival = last = std::max(arrival, last);  // jitter delays, never reorders, a pair's bytes
  engine_.at(arrival, -1, [m] {
    if (++m->arrived == m->frames && m->all_cut) m->on_arrival();
  });
  if (++m->left == m->frames && m->all_cut) m->sent();
  pump(l);
  burst(l);
  if (s->frames.empty()) {
    stop(*s);
  } else if (s->budget <= kEpsilon) {
    share(l.from, true);
    share(l.to, false);
  } else {
    reschedule(*s);
  }
}

}  // namespace wccl::sim
