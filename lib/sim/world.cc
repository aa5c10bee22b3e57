#include "sim/world.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "algo/collectives.h"

namespace wccl::sim {

void Once::fire(const Status &st) {
  algo::Completion d;
  {
    std::lock_guard<std::mutex> lock(mu);
    d = std::move(done);
    done = nullptr;
  }
  if (d) d(st);
}

void Mailboxes::arrive(const Key &k, std::shared_ptr<std::vector<uint8_t>> bytes, size_t len) {
  if (closed(k)) return;
  auto it = recvs_.find(k);
  if (it == recvs_.end()) {
    arrived_[k] = {std::move(bytes), len};
    return;
  }
  Recv r = it->second;
  recvs_.erase(it);
  place(r, bytes.get(), len);
}

void Mailboxes::post(const Key &k, const Recv &r) {
  if (closed(k)) return;
  auto it = arrived_.find(k);
  if (it == arrived_.end()) {
    recvs_[k] = r;
    return;
  }
  auto [bytes, len] = std::move(it->second);
  arrived_.erase(it);
  place(r, bytes.get(), len);
}

void Mailboxes::close(uint64_t epoch, uint64_t seq, int member) {
  closed_.insert({epoch, seq, member});
  auto drop = [&](auto &map) {
    for (auto it = map.lower_bound({epoch, seq, 0, 0, 0}); it != map.end();) {
      const auto &[e, q, from, to, tag] = it->first;
      if (e != epoch || q != seq) break;
      it = to == member ? map.erase(it) : std::next(it);
    }
  };
  drop(recvs_);
  drop(arrived_);
}

bool Mailboxes::closed(const Key &k) const {
  return closed_.count({std::get<0>(k), std::get<1>(k), std::get<3>(k)}) != 0;
}

void Mailboxes::place(const Recv &r, const std::vector<uint8_t> *bytes, size_t len) {
  Status st;
  if (r.got == nullptr ? len != r.len : len > r.len) {
    st = WCCL_ERROR(WCCL_ERR_PROTOCOL, "a message of %zu bytes for a receive of %zu", len, r.len);
  } else {
    if (bytes != nullptr && len > 0) std::memcpy(r.data, bytes->data(), len);
    if (r.got != nullptr) *r.got = len;
  }
  r.once->fire(st);
  engine_.touch(r.member);
}

std::vector<int> Peer::ring() const {
  std::vector<int> out;
  for (const coord::Member &x : view.ring()) out.push_back(World::index(x.id));
  return out;
}

World::World(const Topology &t, const std::vector<int> &ranks, const TcpOptions &tcp,
             const Workload &w)
    : topo(t),
      engine(static_cast<int>(ranks.size() + w.joins.size())),
      net(engine, t, tcp),
      mail(engine),
      work(w),
      job(options(w, static_cast<int>(ranks.size()))),
      first_peers(static_cast<int>(ranks.size())) {
  peers.reserve(ranks.size() + w.joins.size());
  for (size_t r = 0; r < ranks.size(); ++r)
    peers.emplace_back(id(static_cast<int>(r)), ranks[r], "rank " + std::to_string(r));
  for (size_t j = 0; j < w.joins.size(); ++j) {
    Peer &x = peers.emplace_back(id(static_cast<int>(ranks.size() + j)), w.joins[j].host,
                                 "joiner " + std::to_string(j));
    x.asked = x.joined = x.has_state = false;
    admissions.push_back({w.joins[j]});
  }
}

coord::Membership::Options World::options(const Workload &work, int peers) {
  coord::Membership::Options o;
  o.min_peers = peers;  // the first epoch holds them all
  o.settle = std::chrono::milliseconds(0);
  o.peer_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::nanoseconds(work.peer_timeout));
  o.probe_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::nanoseconds(work.heartbeat));
  o.measured_order = false;      // nobody reports measurements here: the ring keeps its order
  o.measured_crossover = false;  // the workload names its algorithm
  return o;
}

void World::start() {
  engine.at(0, -1, [this] {
    for (int r = 0; r < first_peers; ++r) {
      bool drop = false;
      (void)job.on_message(kSimGroup, peer(r).view.begin_join(), at_time(0), &drop);
    }
    job.tick(at_time(0));
    dispatch();
  });
}

void World::send(int m, int by, coord::ControlMessage msg) {
  if (peer(m).stopped) return;
  const Time t = engine.now() + delay(peer(m).host, work.coordinator);
  engine.at(t, by, [this, m, msg = std::move(msg)] { hear(m, msg); });
}

void World::hear(int m, const coord::ControlMessage &msg) {
  // A joiner's JOIN: it is registered, and sends heartbeats from here while they run.
  const bool joins = msg.type == coord::MessageType::kJoin;
  if (joins) peer(m).joined = true;
  bool drop = false;
  const Status st = job.on_message(kSimGroup, msg, at_time(engine.now()), &drop);
  if (joins && timing_)
    engine.at(engine.now() + work.heartbeat, -1, [this, m, g = timers_] { heartbeat(m, g); });
  if (!st.ok()) {
    // As wccl-coord: the peer hears why (a dropped link too: its member then sees the call fail).
    engine.at(engine.now() + delay(work.coordinator, peer(m).host), -1,
              [this, m, err = coord::refusal(st)] { deliver(m, err); });
  }
  dispatch();
}

void World::carry_out(int m, int by, comm::Actions actions) {
  Peer &p = peer(m);
  for (comm::Action &a : actions) {
    switch (a.kind) {
      case comm::Action::Kind::kSend:
        send(m, by, std::move(a.message));
        break;
      case comm::Action::Kind::kDecide:
        p.decided[{a.epoch, a.seq}] = std::move(a.status);
        break;
      case comm::Action::Kind::kCancelRunning:
        if (p.running != nullptr) p.running->abort(a.status);
        break;
      case comm::Action::Kind::kEpochChanged: {
        // Its links to the new epoch's members open when the coordinator's timing says (dispatch).
        p.links_open = false;
        const uint64_t e = a.epoch;
        engine.at(links_at_[e][static_cast<size_t>(m)], by, [this, m, e] {
          Peer &x = peer(m);
          if (x.view.epoch() != e) return;
          x.links_open = true;
          engine.touch(m);
        });
        break;
      }
      case comm::Action::Kind::kWarn:
        break;
    }
  }
}

void World::deliver(int m, const coord::ControlMessage &msg) {
  Peer &p = peer(m);
  if (p.stopped) return;  // a frozen process reads nothing
  // A revocation of its epoch: it stops using the epoch's links (they carry nothing more).
  const bool closes = msg.type == coord::MessageType::kRevoked && msg.epoch == p.view.epoch();
  carry_out(m, -1, p.view.on_message(msg));
  if (closes) net.close(p.host);
  engine.touch(m);
}

void World::dispatch() {
  const Time now = engine.now();
  for (auto it = undetected_.begin(); it != undetected_.end();) {
    const bool lost = peer(*it).joined && !group().live(id(*it));
    it = lost ? undetected_.erase(it) : std::next(it);
  }
  const bool first =
      last_epoch_ == 0;  // the job's first epoch: formed before the simulation starts
  std::vector<coord::Notice> notices;
  for (coord::Job::Addressed &a : job.take_notices()) notices.push_back(std::move(a.notice));
  if (group().revoked() && !was_revoked_) {
    // The revocation goes to the fault of the peer whose loss caused it (a stopped joiner that was
    // no member yet revokes nothing), else to the earliest one due.
    int lost = -1;
    for (const coord::Notice &n : notices) {
      if (n.kind == coord::Notice::Kind::kRevoked && n.lost != 0) lost = index(n.lost);
    }
    auto due = [now](const Recovery &r) { return r.revoked < 0 && r.fault.at <= now; };
    auto r = std::find_if(recoveries.begin(), recoveries.end(),
                          [&](const Recovery &x) { return due(x) && x.fault.rank == lost; });
    if (r == recoveries.end()) r = std::find_if(recoveries.begin(), recoveries.end(), due);
    if (r != recoveries.end()) r->revoked = seconds(now);
  }
  was_revoked_ = group().revoked();
  if (group().epoch() != last_epoch_) {
    // A new epoch: when each member hears of it, and when its links to its schedule neighbours
    // (algo::schedule_neighbours) are open. The one of lower
    // rank connects (TCP: a round trip), TLS 1.3 takes another, then each side says hello: the
    // acceptor has the link 2.5 round trips after the connector heard, the connector 3. The
    // first epoch's links are open before the simulation starts.
    last_epoch_ = group().epoch();
    const auto &ring = group().ring();
    std::vector<Time> heard(peers.size(), 0), open(peers.size(), 0);
    for (const coord::Member &x : ring) {
      heard[static_cast<size_t>(index(x.id))] =
          first ? now : now + delay(work.coordinator, peer(index(x.id)).host);
    }
    Time last = now;
    for (size_t a = 0; a < ring.size(); ++a) {
      const int x = index(ring[a].id);
      const int hx = peer(x).host;
      Time t = heard[static_cast<size_t>(x)];
      for (int rb :
           first ? std::set<int>()
                 : algo::schedule_neighbours(static_cast<int>(a), static_cast<int>(ring.size()))) {
        const auto b = static_cast<size_t>(rb);
        const int y = index(ring[b].id);
        const int hy = peer(y).host;
        const Time rtt = delay(hx, hy) + delay(hy, hx);
        t = std::max(t, a < b ? heard[static_cast<size_t>(x)] + 3 * rtt
                              : heard[static_cast<size_t>(y)] + 5 * rtt / 2);
      }
      open[static_cast<size_t>(x)] = t;
      last = std::max(last, t);
    }
    links_at_[last_epoch_] = std::move(open);
    for (const coord::Member &x : ring) {
      const int m = index(x.id);
      if (!peer(m).has_state) needs_sync.insert(last_epoch_);
      if (m >= first_peers && admissions[static_cast<size_t>(m - first_peers)].admitted < 0) {
        admissions[static_cast<size_t>(m - first_peers)].admitted = seconds(now);
        admissions[static_cast<size_t>(m - first_peers)].links = seconds(last);
      }
    }
    for (Recovery &r : recoveries) {
      if (!first && r.revoked >= 0 && r.epoch < 0) {
        r.epoch = seconds(now);
        r.links = seconds(last);
        break;
      }
    }
  }
  for (const coord::Notice &n : notices) {
    if (n.kind == coord::Notice::Kind::kCommit) {
      std::lock_guard<std::mutex> lock(logical_mu);
      auto it = logical.find({n.epoch, n.seq});
      if (it != logical.end() && it->second + 1 == work.warmup && traffic_before.empty())
        traffic_before = net.traffic();
      for (Recovery &r : recoveries) {
        if (r.epoch >= 0 && r.committed < 0) {
          r.committed = seconds(now);
          break;
        }
      }
    }
    const int m = index(n.to);
    if (m < 0 || m >= static_cast<int>(peers.size())) continue;
    const Time t = first ? now : now + delay(work.coordinator, peer(m).host);
    engine.at(t, -1, [this, m, msg = coord::to_message(n)] { deliver(m, msg); });
  }
}

void World::start_timers() {
  if (timing_) return;
  timing_ = true;
  const uint64_t generation = ++timers_;
  // Every running peer has sent a heartbeat each period all along: the coordinator has just heard
  // the latest. They go on from here, and the timer runs as often as the coordinator's does
  // (Membership::tick_period).
  for (int m = 0; m < static_cast<int>(peers.size()); ++m) {
    if (peer(m).stopped || !peer(m).joined) continue;
    bool drop = false;
    (void)job.on_message(kSimGroup, peer(m).view.heartbeat(), at_time(engine.now()), &drop);
    engine.at(engine.now() + work.heartbeat, -1,
              [this, m, generation] { heartbeat(m, generation); });
  }
  engine.at(engine.now(), -1, [this, generation] { tick(generation); });
}

void World::heartbeat(int m, uint64_t generation) {
  if (generation != timers_ || !timing_ || peer(m).stopped) return;
  send(m, -1, peer(m).view.heartbeat());
  engine.at(engine.now() + work.heartbeat, -1, [this, m, generation] { heartbeat(m, generation); });
}

void World::tick(uint64_t generation) {
  if (generation != timers_) return;
  job.tick(at_time(engine.now()));
  dispatch();
  if (!timers_needed()) {
    timing_ = false;
    return;
  }
  const Time period =
      std::chrono::nanoseconds(coord::Membership::tick_period(options(work, 1))).count();
  engine.at(engine.now() + period, -1, [this, generation] { tick(generation); });
}

void World::join(int m) {
  peer(m).asked = true;
  peer(m).since = engine.now();
  ++active;
  send(m, m, peer(m).view.begin_join());
}

void World::fault(const Fault &f) {
  const int d = f.rank;
  Peer &me = peer(d);
  if (me.stopped || me.done) return;
  me.stopped = true;
  engine.hold(d);
  if (!me.asked) return;  // a joiner whose process had not started: it never will
  --active;
  undetected_.insert(d);
  // Its heartbeats ran one per period from its start (a joiner's from a period after its JOIN):
  // the last one before now may still be on its way, and the coordinator heard the one before.
  // (The others' start with the timers.)
  const Time first_beat = d < first_peers ? 0 : me.since + work.heartbeat;
  if (!timing_ && engine.now() > first_beat) {
    const Time last =
        first_beat + (engine.now() - 1 - first_beat) / work.heartbeat * work.heartbeat;
    for (Time sent : {last - work.heartbeat, last}) {
      const Time arrives = sent + delay(me.host, work.coordinator);
      if (sent < first_beat) continue;
      auto beat = [this, d, arrives] {
        bool drop = false;
        (void)job.on_message(kSimGroup, peer(d).view.heartbeat(), at_time(arrives), &drop);
      };
      if (arrives <= engine.now()) {
        beat();
      } else {
        engine.at(arrives, -1, beat);
      }
    }
  }
  start_timers();
  if (f.kind == Fault::Kind::kFreeze) return;  // silent from now: its connections stay open
  // Killed: the kernel resets its connections. The coordinator sees its control link close, and
  // every member of its epoch its link to it (and reports it broken), a path delay later.
  net.close(me.host);
  engine.at(engine.now() + delay(me.host, work.coordinator), -1, [this, d] {
    job.disconnected(kSimGroup, id(d), at_time(engine.now()));
    dispatch();
  });
  for (int x = 0; x < static_cast<int>(peers.size()); ++x) {
    const Peer &o = peer(x);
    if (o.stopped || o.view.rank_of(id(d)) < 0) continue;
    engine.at(engine.now() + delay(me.host, o.host), -1, [this, x, d, e = o.view.epoch()] {
      Peer &nb = peer(x);
      if (nb.stopped || nb.view.epoch() != e) return;
      // As the Communicator: the data phase fails on the closed link, and the member reports it.
      const Status why = WCCL_ERROR(WCCL_ERR_IO, "the link to member %d closed", d);
      if (nb.running != nullptr) nb.running->abort(why);
      if (auto report = nb.view.link_broken(e, id(d), why)) send(x, -1, *report);
      engine.touch(x);
    });
  }
}

}  // namespace wccl::sim
