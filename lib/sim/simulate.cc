#include "sim/simulate.h"

#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <thread>
#include <tuple>

#include "algo/exchange.h"
#include "algo/memory.h"
#include "algo/state_sync.h"
#include "codec/hash.h"
#include "codec/wire.h"
#include "coord/membership.h"

namespace wccl::sim {
namespace {

// A completion that runs once: from the network's events, or at once from abort().
struct Once {
  std::mutex mu;
  algo::Completion done;
  void fire(const Status &st) {
    algo::Completion d;
    {
      std::lock_guard<std::mutex> lock(mu);
      d = std::move(done);
      done = nullptr;
    }
    if (d) d(st);
  }
};

// Address space nothing touches, for elided buffers: every allocation aliases it.
class Void {
 public:
  explicit Void(size_t bytes) : bytes_(bytes) {
    void *p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t *>(p);
  }
  ~Void() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  uint8_t *base() const { return base_; }
  size_t size() const { return bytes_; }

 private:
  size_t bytes_;
  uint8_t *base_;
};

// The messages of every operation, keyed by (epoch, operation, from member, to member, tag). Only
// the driving thread touches it (from events).
class Mailboxes {
 public:
  using Key = std::tuple<uint64_t, uint64_t, int, int, uint32_t>;  // epoch, operation, from, to, tag
  struct Recv {
    uint8_t *data;
    size_t len;
    size_t *got;
    std::shared_ptr<Once> once;
    int member;
  };
  explicit Mailboxes(Engine &engine) : engine_(engine) {}

  void arrive(const Key &k, std::shared_ptr<std::vector<uint8_t>> bytes, size_t len) {
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
  void post(const Key &k, const Recv &r) {
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

  // The member's operation ended with receives pending (aborted): they are dropped, with whatever
  // was waiting for them and whatever arrives for them later.
  void close(uint64_t epoch, uint64_t seq, int member) {
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

 private:
  bool closed(const Key &k) const {
    return closed_.count({std::get<0>(k), std::get<1>(k), std::get<3>(k)}) != 0;
  }
  void place(const Recv &r, const std::vector<uint8_t> *bytes, size_t len) {
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

  Engine &engine_;
  std::map<Key, std::pair<std::shared_ptr<std::vector<uint8_t>>, size_t>> arrived_;
  std::map<Key, Recv> recvs_;
  std::set<std::tuple<uint64_t, uint64_t, int>> closed_;  // (epoch, operation, receiving member)
};

class SimChannel;

// A member as its communicator sees itself: written by events (the coordinator's notices, faults),
// read by its thread; the engine never runs both at once.
struct MemberState {
  int host = 0;
  uint64_t epoch = 0;     // 0: none yet
  std::vector<int> ring;  // the epoch's members (indices), in ring order
  bool links_open = false;
  uint64_t ops = 0;        // operations started in the epoch
  uint64_t committed = 0;  // the epoch's last committed operation
  bool revoked = false;
  uint64_t revoked_committed = 0;  // what the revocation said stays committed
  bool removed = false;
  bool stopped = false;  // killed or frozen
  bool done = false;     // its thread ended
  bool asked = true;      // its process runs (a joiner's from its time, when it sends JOIN)
  bool joined = true;     // the coordinator has registered it (a joiner: once its JOIN arrived)
  bool has_state = true;  // holds the trainer's state (a joiner: once its state sync committed)
  int pending = 0;        // joiners waiting for the next update, as the coordinator last said
  uint64_t synced_epoch = 0;  // the epoch whose state sync it completed
  bool reform = false;        // its state sync lost a peer: it re-forms the survivors, admitting nobody
  bool described = false;     // it hashed its state for the state sync under way (once per call)
  int next_op = 0;            // the workload's next operation
  Time since = 0;  // when its process started (a joiner's JOIN): its heartbeats follow, one a period
  uint32_t call = 0;
  uint32_t answered = 0;  // the last call (UPDATE, REFORM) answered: by an EPOCH, or refused
  SimChannel *running = nullptr;
};

struct World {
  World(const Topology &t, const std::vector<int> &ranks, const TcpOptions &tcp, const Workload &w)
      : topo(t), engine(static_cast<int>(ranks.size() + w.joins.size())), net(engine, t, tcp), mail(engine), work(w),
        membership(options(w, static_cast<int>(ranks.size()))), members(ranks.size() + w.joins.size()),
        first_peers(static_cast<int>(ranks.size())) {
    for (size_t r = 0; r < ranks.size(); ++r) members[r].host = ranks[r];
    for (size_t j = 0; j < w.joins.size(); ++j) {
      MemberState &x = members[ranks.size() + j];
      x.host = w.joins[j].host;
      x.asked = x.joined = x.has_state = false;
      admissions.push_back({w.joins[j]});
    }
  }
  static coord::Membership::Options options(const Workload &work, int peers) {
    coord::Membership::Options o;
    o.min_peers = peers;  // the first epoch holds them all
    o.settle = std::chrono::milliseconds(0);
    o.peer_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::nanoseconds(work.peer_timeout));
    o.probe_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::nanoseconds(work.heartbeat));
    o.measured_order = false;      // nobody reports measurements here: the ring keeps its order
    o.measured_crossover = false;  // the workload names its algorithm
    return o;
  }

  const Topology &topo;
  Engine engine;
  Network net;
  Mailboxes mail;
  const Workload &work;
  coord::Membership membership;
  std::vector<MemberState> members;  // the first epoch's peers, then the joiners
  const int first_peers;
  // Member threads of one instant run at once: what several of them write is atomic or locked.
  std::atomic<int> active{0};  // members whose thread runs and whose process does
  std::atomic<bool> halted{false};  // a member failed for good: the timers stop, so the run ends
  std::mutex logical_mu;
  std::map<uint64_t, std::vector<Time>> links_at;  // epoch -> member -> when its links are open
  std::map<std::pair<uint64_t, uint64_t>, int> logical;  // (epoch, seq) -> the workload's operation
  std::vector<HostTraffic> traffic_before;
  std::vector<Recovery> recoveries;
  std::vector<Admission> admissions;  // joiner j is member first_peers + j
  std::set<uint64_t> needs_sync;      // epochs with a member that lacks the state
  uint64_t last_epoch = 0;
  bool was_revoked = false;
  // Heartbeats and the coordinator's timer decide something only while a stopped peer has not been
  // declared lost yet: they run from a fault until then (so a run without faults has no periodic
  // events, and one that can no longer move ends as the engine's deadlock).
  std::set<int> undetected;  // stopped peers the coordinator has not declared lost (or heard of) yet
  bool timing = false;
  uint64_t timers = 0;  // generation of the running heartbeats and timer

  Time delay(int from_host, int to_host) const {
    if (from_host < 0 || to_host < 0 || from_host == to_host) return 0;
    return topo.delay_ns[static_cast<size_t>(from_host)][static_cast<size_t>(to_host)];
  }
  static coord::PeerId id(int m) { return static_cast<coord::PeerId>(m) + 1; }
  static coord::Clock::time_point at_time(Time t) {
    return coord::Clock::time_point(std::chrono::hours(1) + std::chrono::nanoseconds(t));
  }
  // Member m's message reaches the coordinator a path delay later (nothing from a stopped process).
  void to_coordinator(int m, int by, std::function<void(coord::Clock::time_point)> fn) {
    if (members[static_cast<size_t>(m)].stopped) return;
    const Time t = engine.now() + delay(members[static_cast<size_t>(m)].host, work.coordinator);
    engine.at(t, by, [this, fn = std::move(fn)] {
      fn(at_time(engine.now()));
      dispatch();
    });
  }
  void dispatch();
  void apply(int m, const coord::Notice &n);
  bool timers_needed() const { return !undetected.empty() && active > 0 && !halted; }
  void start_timers();
  void heartbeat(int m, uint64_t generation);
  void tick(uint64_t generation);
  void fault(const Fault &f);
  void join(int m);
};

// One member's view of one operation: ranks are positions in the epoch's ring.
class SimChannel final : public algo::Channel {
 public:
  SimChannel(World &w, int member, uint64_t epoch, uint64_t seq)
      : w_(w), member_(member), epoch_(epoch), seq_(seq), ring_(w.members[static_cast<size_t>(member)].ring) {
    rank_ = static_cast<int>(std::find(ring_.begin(), ring_.end(), member) - ring_.begin());
  }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ring_.size()); }

  Status send(int peer, uint32_t tag, const void *data, size_t len, algo::Completion done) override {
    if (!aborted_.ok()) return aborted_;
    auto once = track(std::move(done));
    std::shared_ptr<std::vector<uint8_t>> bytes;
    if (w_.work.data) {
      const auto *p = static_cast<const uint8_t *>(data);
      bytes = std::make_shared<std::vector<uint8_t>>(p, p + len);
    }
    const int to = ring_[static_cast<size_t>(peer)];
    const Mailboxes::Key key{epoch_, seq_, member_, to, tag};
    World &w = w_;
    const int me = member_;
    const uint64_t connection = epoch_;
    w_.engine.at(w_.engine.now(), member_, [&w, me, to, len, key, once, bytes, connection] {
      w.net.send(w.members[static_cast<size_t>(me)].host, w.members[static_cast<size_t>(to)].host, len,
                 [&w, me, once] {
                   once->fire(Status());
                   w.engine.touch(me);
                 },
                 [&w, key, bytes, len] { w.mail.arrive(key, bytes, len); }, connection);
    });
    return Status();
  }

  Status recv(int peer, uint32_t tag, void *data, size_t len, size_t *got, algo::Completion done) override {
    if (!aborted_.ok()) return aborted_;
    Mailboxes::Recv r{static_cast<uint8_t *>(data), len, got, track(std::move(done)), member_};
    const Mailboxes::Key key{epoch_, seq_, ring_[static_cast<size_t>(peer)], member_, tag};
    World &w = w_;
    w_.engine.at(w_.engine.now(), member_, [&w, key, r] { w.mail.post(key, r); });
    return Status();
  }

  // From an event (a revocation, a closed link) or the member's own thread.
  void abort(const Status &why) override {
    if (aborted_.ok()) aborted_ = why;
    w_.mail.close(epoch_, seq_, member_);
    for (auto &once : outstanding_) once->fire(why);
    outstanding_.clear();
  }

  bool wait_until(std::unique_lock<std::mutex> &lock, std::condition_variable &, std::chrono::steady_clock::time_point,
                  const std::function<bool()> &ready) override {
    std::mutex *mu = lock.mutex();
    lock.unlock();
    const bool ok = w_.engine.block(member_, [mu, &ready] {
      std::lock_guard<std::mutex> inner(*mu);
      return ready();
    });
    lock.lock();
    return ok || ready();
  }

 private:
  std::shared_ptr<Once> track(algo::Completion done) {
    auto once = std::make_shared<Once>();
    once->done = std::move(done);
    outstanding_.push_back(once);
    return once;
  }

  World &w_;
  const int member_;
  const uint64_t epoch_, seq_;
  const std::vector<int> ring_;
  int rank_ = 0;
  Status aborted_;
  std::vector<std::shared_ptr<Once>> outstanding_;
};

void World::dispatch() {
  const Time now = engine.now();
  for (auto it = undetected.begin(); it != undetected.end();) {
    const bool lost = members[static_cast<size_t>(*it)].joined && !membership.live(id(*it));
    it = lost ? undetected.erase(it) : std::next(it);
  }
  const bool first = last_epoch == 0;  // the job's first epoch: formed before the simulation starts
  const std::vector<coord::Notice> notices = membership.take_notices();
  if (membership.revoked() && !was_revoked) {
    // The revocation goes to the fault of the peer whose loss caused it (a stopped joiner that was
    // no member yet revokes nothing), else to the earliest one due.
    int lost = -1;
    for (const coord::Notice &n : notices) {
      if (n.kind == coord::Notice::Kind::kRevoked && n.lost != 0) lost = static_cast<int>(n.lost - 1);
    }
    auto due = [now](const Recovery &r) { return r.revoked < 0 && r.fault.at <= now; };
    auto r = std::find_if(recoveries.begin(), recoveries.end(),
                          [&](const Recovery &x) { return due(x) && x.fault.rank == lost; });
    if (r == recoveries.end()) r = std::find_if(recoveries.begin(), recoveries.end(), due);
    if (r != recoveries.end()) r->revoked = seconds(now);
  }
  was_revoked = membership.revoked();
  if (membership.epoch() != last_epoch) {
    // A new epoch: when each member hears of it, and when its links are open. The one of lower
    // rank connects (TCP: a round trip), TLS 1.3 takes another, then each side says hello: the
    // acceptor has the link 2.5 round trips after the connector heard, the connector 3. The
    // first epoch's links are open before the simulation starts.
    last_epoch = membership.epoch();
    const auto &ring = membership.ring();
    std::vector<Time> heard(members.size(), 0), open(members.size(), 0);
    for (const coord::Member &x : ring) {
      const int m = static_cast<int>(x.id - 1);
      heard[static_cast<size_t>(m)] = first ? now : now + delay(work.coordinator, members[static_cast<size_t>(m)].host);
    }
    Time last = now;
    for (size_t a = 0; a < ring.size(); ++a) {
      const int x = static_cast<int>(ring[a].id - 1);
      const int hx = members[static_cast<size_t>(x)].host;
      Time t = heard[static_cast<size_t>(x)];
      for (size_t b = 0; b < ring.size() && !first; ++b) {
        if (b == a) continue;
        const int y = static_cast<int>(ring[b].id - 1);
        const int hy = members[static_cast<size_t>(y)].host;
        const Time rtt = delay(hx, hy) + delay(hy, hx);
        t = std::max(t, a < b ? heard[static_cast<size_t>(x)] + 3 * rtt : heard[static_cast<size_t>(y)] + 5 * rtt / 2);
      }
      open[static_cast<size_t>(x)] = t;
      last = std::max(last, t);
    }
    links_at[last_epoch] = std::move(open);
    for (const coord::Member &x : ring) {
      const int m = static_cast<int>(x.id - 1);
      if (!members[static_cast<size_t>(m)].has_state) needs_sync.insert(last_epoch);
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
      if (it != logical.end() && it->second + 1 == work.warmup && traffic_before.empty()) traffic_before = net.traffic();
      for (Recovery &r : recoveries) {
        if (r.epoch >= 0 && r.committed < 0) {
          r.committed = seconds(now);
          break;
        }
      }
    }
    const int m = static_cast<int>(n.to) - 1;
    if (m < 0 || m >= static_cast<int>(members.size())) continue;
    const Time t = first ? now : now + delay(work.coordinator, members[static_cast<size_t>(m)].host);
    engine.at(t, -1, [this, m, n] { apply(m, n); });
  }
}

void World::apply(int m, const coord::Notice &n) {
  MemberState &me = members[static_cast<size_t>(m)];
  if (me.stopped) return;  // a frozen process reads nothing
  switch (n.kind) {
    case coord::Notice::Kind::kEpoch:
      me.answered = std::max(me.answered, n.answers);
      if (n.epoch != me.epoch) {
        me.epoch = n.epoch;
        me.ring.clear();
        for (const coord::Member &x : n.ring) me.ring.push_back(static_cast<int>(x.id - 1));
        me.ops = me.committed = 0;
        me.revoked = me.links_open = false;
        me.pending = 0;
        const uint64_t e = n.epoch;
        engine.at(links_at[e][static_cast<size_t>(m)], -1, [this, m, e] {
          MemberState &x = members[static_cast<size_t>(m)];
          if (x.epoch != e) return;
          x.links_open = true;
          engine.touch(m);
        });
      }
      break;
    case coord::Notice::Kind::kCommit:
      if (n.epoch == me.epoch) me.committed = std::max(me.committed, n.seq);
      break;
    case coord::Notice::Kind::kRevoked:
      if (n.epoch == me.epoch && !me.revoked) {
        me.revoked = true;
        me.revoked_committed = n.seq;
        if (me.running != nullptr) {
          me.running->abort(WCCL_ERROR(WCCL_ERR_PEER_LOST, "epoch %llu revoked: %s",
                                       static_cast<unsigned long long>(n.epoch), n.reason.c_str()));
        }
        net.close(me.host);  // it closes the epoch's links
      }
      break;
    case coord::Notice::Kind::kRemoved:
      me.removed = true;
      if (me.running != nullptr) me.running->abort(WCCL_ERROR(WCCL_ERR_ABORTED, "removed: %s", n.reason.c_str()));
      break;
    case coord::Notice::Kind::kRefused:  // its REFORM gave way to an UPDATE: it updates instead
      me.answered = me.call;
      break;
    case coord::Notice::Kind::kPending:
      if (n.epoch == me.epoch) me.pending = static_cast<int>(n.joiners);
      break;
    case coord::Notice::Kind::kBarrier:
      // Another member waits at the update barrier after n.seq operations: one this member runs
      // past them could never complete, so it fails (and the member reports it, revoking the epoch).
      if (n.epoch == me.epoch && me.running != nullptr && me.ops > n.seq) {
        me.running->abort(WCCL_ERROR(WCCL_ERR_PEER_LOST, "another member waits at the update barrier after %llu "
                                     "operations", static_cast<unsigned long long>(n.seq)));
      }
      break;
    case coord::Notice::Kind::kProbe:
      to_coordinator(m, -1, [this, m](coord::Clock::time_point now) { membership.heartbeat(id(m), now); });
      break;
    default:
      break;
  }
  engine.touch(m);
}

void World::start_timers() {
  if (timing) return;
  timing = true;
  const uint64_t generation = ++timers;
  // Every running peer has sent a heartbeat each period all along: the coordinator has just heard
  // the latest. They go on from here, and the timer runs as often as the coordinator's does
  // (coord/coordinator.cc).
  for (int m = 0; m < static_cast<int>(members.size()); ++m) {
    if (members[static_cast<size_t>(m)].stopped || !members[static_cast<size_t>(m)].joined) continue;
    membership.heartbeat(id(m), at_time(engine.now()));
    engine.at(engine.now() + work.heartbeat, -1, [this, m, generation] { heartbeat(m, generation); });
  }
  engine.at(engine.now(), -1, [this, generation] { tick(generation); });
}

void World::heartbeat(int m, uint64_t generation) {
  if (generation != timers || !timing || members[static_cast<size_t>(m)].stopped) return;
  to_coordinator(m, -1, [this, m](coord::Clock::time_point now) { membership.heartbeat(id(m), now); });
  engine.at(engine.now() + work.heartbeat, -1, [this, m, generation] { heartbeat(m, generation); });
}

void World::tick(uint64_t generation) {
  if (generation != timers) return;
  membership.tick(at_time(engine.now()));
  dispatch();
  if (!timers_needed()) {
    timing = false;
    return;
  }
  const Time period = std::chrono::nanoseconds(coord::Membership::tick_period(options(work, 1))).count();
  engine.at(engine.now() + period, -1, [this, generation] { tick(generation); });
}

// Joiner m's process starts and asks the coordinator to join; once registered, it sends heartbeats
// while they run.
void World::join(int m) {
  members[static_cast<size_t>(m)].asked = true;
  members[static_cast<size_t>(m)].since = engine.now();
  ++active;
  to_coordinator(m, m, [this, m](coord::Clock::time_point now) {
    members[static_cast<size_t>(m)].joined = true;
    (void)membership.join(id(m), {"joiner " + std::to_string(m - first_peers), "", ""}, now);
    if (timing) engine.at(engine.now() + work.heartbeat, -1, [this, m, g = timers] { heartbeat(m, g); });
  });
}

void World::fault(const Fault &f) {
  const int d = f.rank;
  MemberState &me = members[static_cast<size_t>(d)];
  if (me.stopped || me.done) return;
  me.stopped = true;
  engine.hold(d);
  if (!me.asked) return;  // a joiner whose process had not started: it never will
  --active;
  undetected.insert(d);
  // Its heartbeats ran one per period from its start (a joiner's from a period after its JOIN):
  // the last one before now may still be on its way, and the coordinator heard the one before.
  // (The others' start with the timers.)
  const Time first_beat = d < first_peers ? 0 : me.since + work.heartbeat;
  if (!timing && engine.now() > first_beat) {
    const Time last = first_beat + (engine.now() - 1 - first_beat) / work.heartbeat * work.heartbeat;
    for (Time sent : {last - work.heartbeat, last}) {
      const Time arrives = sent + delay(me.host, work.coordinator);
      if (sent < first_beat) continue;
      if (arrives <= engine.now()) {
        membership.heartbeat(id(d), at_time(arrives));
      } else {
        engine.at(arrives, -1, [this, d, arrives] { membership.heartbeat(id(d), at_time(arrives)); });
      }
    }
  }
  start_timers();
  if (f.kind == Fault::Kind::kFreeze) return;  // silent from now: its connections stay open
  // Killed: the kernel resets its connections. The coordinator sees its control link close, and
  // every member of its epoch its link to it (and reports it broken), a path delay later.
  net.close(me.host);
  engine.at(engine.now() + delay(me.host, work.coordinator), -1, [this, d] {
    membership.disconnected(id(d), at_time(engine.now()));
    dispatch();
  });
  for (int x = 0; x < static_cast<int>(members.size()); ++x) {
    const MemberState &o = members[static_cast<size_t>(x)];
    if (o.stopped || std::find(o.ring.begin(), o.ring.end(), d) == o.ring.end()) continue;
    engine.at(engine.now() + delay(me.host, o.host), -1, [this, x, d, e = o.epoch] {
      MemberState &nb = members[static_cast<size_t>(x)];
      if (nb.stopped || nb.epoch != e) return;
      if (nb.running != nullptr) nb.running->abort(WCCL_ERROR(WCCL_ERR_IO, "the link to member %d closed", d));
      to_coordinator(x, -1, [this, x, d](coord::Clock::time_point now) { membership.link_broken(id(x), id(d), now); });
      engine.touch(x);
    });
  }
}

// The CPU of one member: the kernels run (with data) or not (elided), and each call costs the
// model's time of its input bytes.
class SimMemory final : public algo::Memory {
 public:
  SimMemory(World &w, int rank, const CpuModel &cpu, const Void *space)
      : w_(w), rank_(rank), cpu_(cpu), space_(space) {}
  bool host() const override { return space_ == nullptr; }
  const char *name() const override { return "simulated host"; }

  Status host_bytes(size_t n, algo::Bytes *out) override { return allocate(n, out); }
  Status scratch(size_t n, algo::Bytes *out) override { return allocate(n, out); }
  Status copy(void *dst, const void *src, size_t n) override {
    if (!elided()) std::memmove(dst, src, n);
    return spend(n, cpu_.copy);
  }
  Status to_host(uint8_t *dst, const void *src, size_t n) override { return copy(dst, src, n); }
  Status from_host(void *dst, const uint8_t *src, size_t n) override { return copy(dst, src, n); }
  Status reduce_into(codec::Dtype t, codec::RedOp op, void *dst, const void *mine, const uint8_t *got,
                     size_t count) override {
    if (!elided()) WCCL_RETURN_IF_ERROR(algo::host_memory().reduce_into(t, op, dst, mine, got, count));
    return spend(count * codec::dtype_size(t), cpu_.reduce);
  }
  Status finish_avg(codec::Dtype t, void *dst, size_t count, int by) override {
    if (!elided()) WCCL_RETURN_IF_ERROR(algo::host_memory().finish_avg(t, dst, count, by));
    return spend(count * codec::dtype_size(t), cpu_.reduce);
  }
  Status encode(codec::Wire w, const float *src, size_t count, uint8_t *wire, size_t first) override {
    if (!elided()) WCCL_RETURN_IF_ERROR(algo::host_memory().encode(w, src, count, wire, first));
    return spend(count * 4, cpu_.encode);
  }
  Status decode(codec::Wire w, const uint8_t *wire, size_t len, size_t count, float *dst) override {
    if (!elided()) WCCL_RETURN_IF_ERROR(algo::host_memory().decode(w, wire, len, count, dst));
    return spend(count * 4, cpu_.decode);
  }
  Status decode_reduce(codec::Wire w, codec::RedOp op, const uint8_t *wire, size_t len, size_t count, float *dst,
                       const float *mine) override {
    if (!elided()) WCCL_RETURN_IF_ERROR(algo::host_memory().decode_reduce(w, op, wire, len, count, dst, mine));
    return spend(count * 4, cpu_.decode_reduce);
  }
  Status widen(codec::Dtype t, const void *src, size_t count, float *dst) override {
    if (!elided()) WCCL_RETURN_IF_ERROR(algo::host_memory().widen(t, src, count, dst));
    return spend(count * 4, cpu_.decode);
  }
  // State sync hashes outside algo::Memory (codec::tensor_hash): the caller charges its bytes.
  Status hashed(size_t bytes) { return spend(bytes, cpu_.hash); }

 protected:
  void give_back(uint8_t *p, bool) override {
    if (!elided()) delete[] p;
  }

 private:
  bool elided() const { return space_ != nullptr; }
  Status allocate(size_t n, algo::Bytes *out) {
    if (n == 0) {
      *out = algo::Bytes(nullptr, algo::ReturnBytes{this, false});
      return Status();
    }
    if (elided()) {
      if (n > space_->size()) return WCCL_ERROR(WCCL_ERR_NO_MEMORY, "sim: %zu bytes exceed the elided space", n);
      *out = algo::Bytes(space_->base(), algo::ReturnBytes{this, false});
    } else {
      *out = algo::Bytes(new uint8_t[n](), algo::ReturnBytes{this, false});
    }
    return Status();
  }
  Status spend(size_t bytes, double rate) {
    if (rate <= 0 || bytes == 0) return Status();
    if (!w_.engine.sleep(rank_, static_cast<Time>(static_cast<double>(bytes) / rate * 1e9))) {
      return WCCL_ERROR(WCCL_ERR_TIMEOUT, "sim: the simulation stopped during CPU work");
    }
    return Status();
  }

  World &w_;
  const int rank_;
  const CpuModel &cpu_;
  const Void *space_;
};

// The pattern of bench/perf/sweep.h: element i of rank r holds (r + 1) * ((i % 251) + 1).
float pattern(int rank, size_t i) { return static_cast<float>((rank + 1) * static_cast<int>(i % 251 + 1)); }

}  // namespace

double Report::mean() const {
  return seconds.empty() ? 0 : std::accumulate(seconds.begin(), seconds.end(), 0.0) / static_cast<double>(seconds.size());
}

Report simulate(const Topology &topo, const std::vector<int> &ranks, const TcpOptions &tcp, const CpuModel &cpu,
                const Workload &work) {
  Report report;
  const int n = static_cast<int>(ranks.size());
  algo::Collective base = work.op;
  if (n < 2) {
    report.status = WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "sim: at least 2 peers are needed");
    return report;
  }
  if (base.algo == algo::Algo::kAuto) base.algo = algo::choose(base, n, 0);  // the ring, or INT2's all-gather
  if (work.data && (base.dtype != codec::Dtype::kF32 || base.kind != algo::Kind::kAllreduce)) {
    report.status = WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "sim: data is carried for F32 all-reduces only");
    return report;
  }
  const int all = n + static_cast<int>(work.joins.size());  // the first epoch's peers and the joiners
  std::set<int> faulty;
  for (const Fault &f : work.faults) {
    if (f.rank < 0 || f.rank >= all || f.at < 0 || !faulty.insert(f.rank).second) {
      report.status = WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "sim: a fault names rank %d at %.3f s: each fault needs a "
                                 "rank of its own below %d (the peers, then the joiners) and a time from 0", f.rank,
                                 seconds(f.at), all);
      return report;
    }
  }
  const auto first_faulty = static_cast<int>(std::count_if(faulty.begin(), faulty.end(), [n](int r) { return r < n; }));
  if (first_faulty > n - 2) {
    report.status = WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "sim: %d faults leave fewer than 2 of %d peers", first_faulty, n);
    return report;
  }
  if (work.heartbeat <= 0 || work.peer_timeout <= 0) {
    report.status = WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "sim: the heartbeat and peer_timeout must be positive");
    return report;
  }
  std::set<int> hosts(ranks.begin(), ranks.end());
  for (const Join &j : work.joins) {
    if (j.host < 0 || j.host >= static_cast<int>(topo.hosts.size()) || j.at < 0 || work.state_bytes == 0 ||
        !hosts.insert(j.host).second) {
      report.status = WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "sim: a joiner on host %d at %.3f s: it needs a host of "
                                 "the topology without another peer, a time from 0 and a state to receive "
                                 "(state_bytes)", j.host, seconds(j.at));
      return report;
    }
  }
  World w(topo, ranks, tcp, work);
  const size_t in_bytes = algo::in_count(base, all) * codec::dtype_size(base.dtype);
  const size_t out_bytes = algo::out_count(base, all) * codec::dtype_size(base.dtype);
  std::unique_ptr<Void> space;
  if (!work.data) {
    space = std::make_unique<Void>(std::max({in_bytes, out_bytes, work.state_bytes}) * 2 + (size_t{64} << 20));
    if (space->base() == nullptr) {
      report.status = WCCL_ERROR(WCCL_ERR_NO_MEMORY, "sim: cannot reserve address space for the elided buffers");
      return report;
    }
  }
  const int ops = work.warmup + work.iters;
  constexpr Time kNever = -1;
  std::vector<std::vector<Time>> started(static_cast<size_t>(ops), std::vector<Time>(static_cast<size_t>(all), kNever));
  std::vector<std::vector<Time>> committed = started, data_done = started;
  std::vector<std::pair<Time, Status>> failures(static_cast<size_t>(all));  // when and why a member gave up
  std::vector<std::vector<float>> buffers(work.data ? static_cast<size_t>(all) : 0);
  std::vector<std::vector<int>> last_ring(static_cast<size_t>(all));  // the ring of each member's last operation

  // The trainer's state, for state sync: with data, each member's own bytes (the first epoch's
  // peers hold a pattern, a joiner zeros); elided, the untouched (zero) address space, which a
  // joiner describes with another hash, as a fresh process's state differs.
  std::vector<std::vector<uint8_t>> state(work.data && !work.joins.empty() ? static_cast<size_t>(all) : 0);
  for (int m = 0; m < static_cast<int>(state.size()); ++m) {
    state[static_cast<size_t>(m)].assign(work.state_bytes, 0);
    if (m < n) {
      for (size_t i = 0; i < work.state_bytes; ++i) state[static_cast<size_t>(m)][i] = static_cast<uint8_t>(i * 131 + 7);
    }
  }
  uint64_t held_hash = 0, fresh_hash = 0;  // the described hashes of a state that is held, and of a joiner's
  if (!work.joins.empty()) {
    held_hash = codec::tensor_hash(work.data ? state[0].data() : space->base(), work.state_bytes);
    fresh_hash = work.data ? codec::tensor_hash(state[static_cast<size_t>(n)].data(), work.state_bytes) : held_hash + 1;
  }

  // One operation of member r in its current epoch, from its call to its commit.
  enum class Outcome { kCommitted, kRetry, kStop };
  auto attempt = [&](int r, SimMemory &memory, algo::Collective c, int logical, Time *data_end,
                     size_t hashed_after) -> Outcome {
    MemberState &me = w.members[static_cast<size_t>(r)];
    // As the library's submit: nothing starts in a revoked epoch (the revocation may have come
    // during CPU work between operations); the loop updates.
    if (me.revoked || me.removed) return Outcome::kRetry;
    const uint64_t epoch = me.epoch, seq = ++me.ops;
    if (logical >= 0) {
      std::lock_guard<std::mutex> lock(w.logical_mu);
      w.logical[{epoch, seq}] = logical;
    }
    c.memory = &memory;
    Status st;
    {
      SimChannel channel(w, r, epoch, seq);
      me.running = &channel;
      algo::Exchange ex(channel, std::chrono::steady_clock::time_point::max());
      st = algo::run(ex, c, nullptr);
      ex.finish();
      me.running = nullptr;
    }
    if (st.ok() && hashed_after > 0) st = memory.hashed(hashed_after);
    if (data_end != nullptr) *data_end = w.engine.now();
    if (me.stopped) return Outcome::kStop;
    if (!st.ok() && st.code() != WCCL_ERR_PEER_LOST && st.code() != WCCL_ERR_IO) {
      // Not a lost peer: the caller gets the error, as from the library, and the run ends.
      failures[static_cast<size_t>(r)] = {w.engine.now(), st};
      w.halted = true;
      return Outcome::kStop;
    }
    if (!st.ok()) {
      // A lost peer: it reports the failure (unless the coordinator told it), and the operation
      // is not committed anywhere (it never reported it done).
      if (!me.revoked && !me.removed) {
        const std::string why = st.to_string();
        w.to_coordinator(r, r, [&w, r, epoch, seq, why](coord::Clock::time_point now) {
          w.membership.op_failed(World::id(r), epoch, seq, why, now);
        });
      }
      return w.engine.block(r, [&me, epoch] { return me.removed || me.revoked || me.epoch != epoch; })
                 ? Outcome::kRetry
                 : Outcome::kStop;
    }
    w.to_coordinator(r, r, [&w, r, epoch, seq](coord::Clock::time_point now) {
      (void)w.membership.done(World::id(r), epoch, seq, now);
    });
    if (!w.engine.block(r, [&me, epoch, seq] {
          return me.removed || me.revoked || me.epoch != epoch || me.committed >= seq;
        })) {
      return Outcome::kStop;
    }
    const bool done = me.epoch == epoch && (me.committed >= seq || (me.revoked && me.revoked_committed >= seq));
    return done ? Outcome::kCommitted : Outcome::kRetry;
  };

  // State sync as comm/state_sync.cc runs it: every member hashes its state to describe it, the
  // descriptions are all-gathered (their lengths, then the descriptions), every member plans
  // alike, and the members that hold the state send it to those that lack it (the trainer's
  // SEND_ONLY and RECEIVE_ONLY), who check its hash before the commit.
  auto sync = [&](int r, SimMemory &memory) -> Outcome {
    MemberState &me = w.members[static_cast<size_t>(r)];
    std::vector<algo::MemberState> states;
    for (int m : me.ring) {
      algo::MemberState d;
      const bool held = w.members[static_cast<size_t>(m)].has_state;
      d.mode = held ? algo::SyncMode::kSendOnly : algo::SyncMode::kReceiveOnly;
      d.revision = held ? 1 : 0;
      d.tensors.push_back({"state", codec::Dtype::kU8, work.state_bytes, held ? held_hash : fresh_hash});
      states.push_back(std::move(d));
    }
    const int rank = static_cast<int>(std::find(me.ring.begin(), me.ring.end(), r) - me.ring.begin());
    if (!me.described) {  // once per call, before its retries
      if (!memory.hashed(work.state_bytes).ok()) return Outcome::kStop;
      me.described = true;
    }
    std::vector<uint8_t> mine = algo::encode_state(states[static_cast<size_t>(rank)]);
    std::vector<int64_t> lens(me.ring.size(), static_cast<int64_t>(mine.size()));
    std::vector<uint8_t> descriptions(mine.size() * me.ring.size());
    algo::Collective c;
    c.kind = algo::Kind::kAllgather;
    c.dtype = codec::Dtype::kI64;
    c.count = 1;
    c.in = &lens[static_cast<size_t>(rank)];
    c.out = lens.data();
    if (const Outcome o = attempt(r, memory, c, -1, nullptr, 0); o != Outcome::kCommitted) return o;
    c.dtype = codec::Dtype::kU8;
    c.count = mine.size();
    c.in = mine.data();
    c.out = descriptions.data();
    if (const Outcome o = attempt(r, memory, c, -1, nullptr, 0); o != Outcome::kCommitted) return o;
    Result<algo::SyncPlan> plan = algo::plan_sync(states, base.chunk_bytes);
    if (!plan.ok()) {
      failures[static_cast<size_t>(r)] = {w.engine.now(), plan.status()};
      w.halted = true;
      return Outcome::kStop;
    }
    auto job = std::make_shared<algo::SyncJob>();
    job->plan = std::make_shared<const algo::SyncPlan>(std::move(plan).value());
    uint8_t *tensor = work.data ? state[static_cast<size_t>(r)].data() : space->base();
    job->tensors = {tensor};
    job->tensor_bytes = {work.state_bytes};
    algo::place_received(job.get(), rank);
    std::vector<uint8_t> stage(work.data ? job->stage_bytes : 0);
    if (!job->plan->transfers.empty()) {
      c.kind = algo::Kind::kStateSync;
      c.count = job->stage_bytes;
      c.sync = job;
      c.in = c.out = work.data ? stage.data() : space->base();
      if (const Outcome o = attempt(r, memory, c, -1, nullptr, job->stage_bytes); o != Outcome::kCommitted) return o;
    }
    me.synced_epoch = me.epoch;
    me.described = false;
    if (!me.has_state) {
      // Committed: the received state becomes its own, and it goes on where the others are.
      if (job->stage_bytes > 0 && !memory.copy(tensor, c.out, job->stage_bytes).ok()) return Outcome::kStop;
      me.has_state = true;
      for (int m : me.ring) me.next_op = std::max(me.next_op, w.members[static_cast<size_t>(m)].next_op);
      w.admissions[static_cast<size_t>(r - n)].synced = seconds(w.engine.now());
    }
    return Outcome::kCommitted;
  };

  auto member = [&](int r) {
    MemberState &me = w.members[static_cast<size_t>(r)];
    SimMemory memory(w, r, cpu, space.get());
    // A joiner's process starts at its time and asks to join.
    bool running = r < n || w.engine.sleep(r, work.joins[static_cast<size_t>(r - n)].at);
    if (running && r >= n) w.join(r);
    while (running && me.next_op < ops) {
      if (!w.engine.block(r, [&me] { return me.removed || me.revoked || (me.epoch != 0 && me.links_open); })) break;
      if (me.removed) break;
      const bool sync_due = w.needs_sync.count(me.epoch) != 0 && me.synced_epoch != me.epoch;
      if (me.revoked || (me.pending > 0 && !sync_due)) {
        // The training loop's update: its answer to PEER_LOST, and, at an operation's boundary,
        // how joiners that wait are admitted (not inside a state sync: that goes on first). After
        // a state sync lost a peer, the sync's own REFORM instead: an update that admits nobody,
        // refused (PEER_LOST) where a member updates, and then this member updates too.
        const uint64_t e = me.epoch, submitted = me.ops;
        const uint32_t call = ++me.call;
        const bool admit = !me.reform;
        me.reform = false;
        if (admit) me.described = false;  // a state sync that gave up is called anew after the update
        w.to_coordinator(r, r, [&w, r, e, submitted, call, admit](coord::Clock::time_point now) {
          if (w.membership.update(World::id(r), e, submitted, now, admit, call).ok()) return;
          MemberState &x = w.members[static_cast<size_t>(r)];
          w.engine.at(w.engine.now() + w.delay(w.work.coordinator, x.host), -1, [&w, r, call] {
            MemberState &y = w.members[static_cast<size_t>(r)];
            y.answered = std::max(y.answered, call);
            w.engine.touch(r);
          });
        });
        running = w.engine.block(r, [&me, call] { return me.removed || me.answered >= call; });
        continue;
      }
      if (sync_due) {
        const Outcome o = sync(r, memory);
        running = o != Outcome::kStop;
        me.reform = o == Outcome::kRetry && me.revoked;
        continue;
      }
      const int k = me.next_op;
      auto &first_start = started[static_cast<size_t>(k)][static_cast<size_t>(r)];
      if (first_start == kNever) first_start = w.engine.now();
      algo::Collective c = base;
      if (work.data) {
        auto &b = buffers[static_cast<size_t>(r)];
        b.resize(algo::out_count(c, static_cast<int>(me.ring.size())));
        for (size_t i = 0; i < b.size(); ++i) b[i] = pattern(r, i);
        c.in = c.out = b.data();
      } else {
        c.in = c.out = space->base();
      }
      const Outcome o = attempt(r, memory, c, k, &data_done[static_cast<size_t>(k)][static_cast<size_t>(r)], 0);
      running = o != Outcome::kStop;
      if (o != Outcome::kCommitted) continue;
      committed[static_cast<size_t>(k)][static_cast<size_t>(r)] = w.engine.now();
      last_ring[static_cast<size_t>(r)] = me.ring;
      if (r >= n && w.admissions[static_cast<size_t>(r - n)].committed < 0) {
        w.admissions[static_cast<size_t>(r - n)].committed = seconds(w.engine.now());
      }
      if (++me.next_op < ops) w.engine.sleep(r, work.gap);
    }
    if (!me.stopped) {
      // A joiner never admitted asked after the job's last update: that is no failure.
      const bool admitted = r < n || me.epoch != 0;
      if (me.next_op < ops && admitted && failures[static_cast<size_t>(r)].second.ok()) {
        failures[static_cast<size_t>(r)] = {
            w.engine.now(),
            me.removed ? WCCL_ERROR(WCCL_ERR_PEER_LOST, "sim: member %d was removed at operation %d", r, me.next_op)
                       : WCCL_ERROR(WCCL_ERR_TIMEOUT, "sim: member %d could not finish operation %d: nothing more could "
                                    "happen", r, me.next_op)};
      }
      if (me.asked) --w.active;
    }
    me.done = true;
    w.engine.finished();
  };

  // The job before the first operation: every peer joined, and the coordinator formed the first
  // epoch in rank order.
  w.active = n;
  for (const Fault &f : work.faults) w.recoveries.push_back({f});
  w.engine.at(0, -1, [&w, n] {
    for (int r = 0; r < n; ++r) {
      (void)w.membership.join(World::id(r), {"rank " + std::to_string(r), "", ""}, World::at_time(0));
    }
    w.membership.tick(World::at_time(0));
    w.dispatch();
  });
  for (const Fault &f : work.faults) {
    w.engine.at(f.at, -1, [&w, f] { w.fault(f); });
  }
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(all));
  for (int r = 0; r < all; ++r) threads.emplace_back(member, r);
  for (auto &t : threads) t.join();

  // The first failure in virtual time: the others are often its consequences.
  const auto failed = std::min_element(failures.begin(), failures.end(), [](const auto &a, const auto &b) {
    return !a.second.ok() && (b.second.ok() || a.first < b.first);
  });
  if (!failed->second.ok()) {
    report.status = failed->second;
    return report;
  }
  report.recoveries = w.recoveries;
  report.admissions = w.admissions;
  for (const MemberState &m : w.members) report.survivors += m.epoch != 0 && !m.stopped && !m.removed;
  for (int k = work.warmup; k < ops; ++k) {
    Time slowest = 0, phase = 0;
    for (int r = 0; r < all; ++r) {
      const Time start = started[static_cast<size_t>(k)][static_cast<size_t>(r)];
      if (committed[static_cast<size_t>(k)][static_cast<size_t>(r)] == kNever) continue;  // stopped before
      slowest = std::max(slowest, committed[static_cast<size_t>(k)][static_cast<size_t>(r)] - start);
      phase = std::max(phase, data_done[static_cast<size_t>(k)][static_cast<size_t>(r)] - start);
    }
    report.seconds.push_back(seconds(slowest));
    report.data_phase += seconds(phase) / work.iters;
  }
  if (work.iters > 0) {
    Time first = std::numeric_limits<Time>::max(), last = 0;
    for (int r = 0; r < all; ++r) {
      if (committed[static_cast<size_t>(ops - 1)][static_cast<size_t>(r)] == kNever) continue;
      const Time start = started[static_cast<size_t>(work.warmup)][static_cast<size_t>(r)];
      if (start != kNever) first = std::min(first, start);  // kNever: a joiner admitted later
      last = std::max(last, committed[static_cast<size_t>(ops - 1)][static_cast<size_t>(r)]);
    }
    report.timed_s = seconds(last - first);
  }
  report.traffic = w.net.traffic();
  if (!w.traffic_before.empty()) {
    for (size_t h = 0; h < report.traffic.size(); ++h) {
      report.traffic[h].sent -= w.traffic_before[h].sent;
      report.traffic[h].received -= w.traffic_before[h].received;
      report.traffic[h].up_busy -= w.traffic_before[h].up_busy;
    }
  }
  report.events = w.engine.events();
  report.losses = w.net.losses();
  if (work.data) {
    // Every member that finished holds the last operation's result over that operation's ring.
    report.checked = true;
    int reference = -1;
    for (int r = 0; r < all && report.checked; ++r) {
      if (committed[static_cast<size_t>(ops - 1)][static_cast<size_t>(r)] == kNever) continue;
      const auto &b = buffers[static_cast<size_t>(r)];
      if (reference < 0) reference = r;
      const auto &ref = buffers[static_cast<size_t>(reference)];
      if (b.size() != ref.size() || std::memcmp(b.data(), ref.data(), b.size() * sizeof(float)) != 0) report.checked = false;
      if (base.wire == codec::Wire::kNative && base.op == codec::RedOp::kSum) {
        double sum_ranks = 0;
        for (int m : last_ring[static_cast<size_t>(r)]) sum_ranks += m + 1;
        for (size_t i = 0; i < b.size() && report.checked; ++i) {
          report.checked = b[i] == static_cast<float>(sum_ranks * static_cast<double>(i % 251 + 1));
        }
      }
    }
    report.checked = report.checked && reference >= 0;
    // Every joiner that got in holds the first epoch's peers' state.
    for (int r = n; r < static_cast<int>(state.size()) && report.checked; ++r) {
      if (w.members[static_cast<size_t>(r)].has_state) report.checked = state[static_cast<size_t>(r)] == state[0];
    }
  }
  return report;
}

}  // namespace wccl::sim
