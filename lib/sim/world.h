// wccl-sim's world (docs/sim.md): the simulated WAN (sim/network.h) on the virtual clock
// (sim/engine.h), the coordinator's rules (coord::Job, as wccl-coord runs them: one group, each
// peer a node of one communicator) on a host of the topology, and one member's rules per peer
// (comm::Member, as the Communicator runs them). The two sides exchange the library's own control
// messages, each a path delay on its way; the world carries out what a member's rules ask (a send,
// an operation's outcome, cancelling its data phase, its links for a new epoch) as the Communicator
// would, over simulated links.
//
// Only events touch the coordinator; a member's rules are touched by events and by that member's
// thread (sim/driver.h), which the engine never runs at once.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "algo/channel.h"
#include "comm/member.h"
#include "coord/job.h"
#include "coord/messages.h"
#include "sim/engine.h"
#include "sim/network.h"
#include "sim/simulate.h"
#include "sim/topology.h"

namespace wccl::sim {

// A completion that runs once: from the network's events, or at once from abort().
struct Once {
  std::mutex mu;
  algo::Completion done;
  void fire(const Status &st);
};

// The messages of every operation, keyed by (epoch, operation, from member, to member, tag). Only
// the driving thread touches it (from events).
class Mailboxes {
 public:
  using Key =
      std::tuple<uint64_t, uint64_t, int, int, uint32_t>;  // epoch, operation, from, to, tag
  struct Recv {
    uint8_t *data;
    size_t len;
    size_t *got;
    std::shared_ptr<Once> once;
    int member;
  };
  explicit Mailboxes(Engine &engine) : engine_(engine) {}

  void arrive(const Key &k, std::shared_ptr<std::vector<uint8_t>> bytes, size_t len);
  void post(const Key &k, const Recv &r);
  // The member's operation ended with receives pending (aborted): they are dropped, with whatever
  // was waiting for them and whatever arrives for them later.
  void close(uint64_t epoch, uint64_t seq, int member);

 private:
  bool closed(const Key &k) const;
  void place(const Recv &r, const std::vector<uint8_t> *bytes, size_t len);

  Engine &engine_;
  std::map<Key, std::pair<std::shared_ptr<std::vector<uint8_t>>, size_t>> arrived_;
  std::map<Key, Recv> recvs_;
  std::set<std::tuple<uint64_t, uint64_t, int>> closed_;  // (epoch, operation, receiving member)
};

// The group every simulated peer is in (its JOIN names it).
inline constexpr const char *kSimGroup = "sim";

// One simulated peer: its process, its member's rules, and what its trainer holds.
struct Peer {
  Peer(coord::PeerId id, int on_host, const std::string &name)
      : host(on_host), view(id, kSimGroup, {name, "", name, 1}) {}
  std::vector<int> ring() const;  // its epoch's members (World::index of each), in ring order
  int host = 0;
  comm::Member view;  // the library's rules: epoch, ring, operations' numbering and outcomes
  std::map<std::pair<uint64_t, uint64_t>, Status>
      decided;                       // outcomes of its operations not taken yet
  algo::Channel *running = nullptr;  // the data phase under way
  bool links_open = false;           // its current epoch's links are open
  // Its process.
  bool stopped = false;  // killed or frozen
  bool done = false;     // its thread ended
  bool asked = true;     // it runs (a joiner's from its time, when it sends JOIN)
  bool joined = true;    // the coordinator has registered it (a joiner: once its JOIN arrived)
  Time since = 0;        // when it started (a joiner's JOIN): its heartbeats follow, one a period
  // Its trainer (sim/driver.h).
  bool has_state = true;      // holds the trainer's state (a joiner: once its state sync committed)
  uint64_t synced_epoch = 0;  // the epoch whose state sync it completed
  int next_op = 0;            // the workload's next operation
};

struct World {
  World(const Topology &t, const std::vector<int> &ranks, const TcpOptions &tcp, const Workload &w);
  static coord::Membership::Options options(const Workload &work, int peers);
  static coord::PeerId id(int m) { return static_cast<coord::PeerId>(m) + 1; }
  static int index(coord::PeerId id) { return static_cast<int>(id) - 1; }
  static coord::Clock::time_point at_time(Time t) {
    return coord::Clock::time_point(std::chrono::hours(1) + std::chrono::nanoseconds(t));
  }
  Peer &peer(int m) { return peers[static_cast<size_t>(m)]; }
  Time delay(int from_host, int to_host) const {
    if (from_host < 0 || to_host < 0 || from_host == to_host) return 0;
    return topo.delay_ns[static_cast<size_t>(from_host)][static_cast<size_t>(to_host)];
  }

  // The job before the first operation: every first-epoch peer joins at time 0 and the
  // coordinator forms the first epoch, in rank order.
  void start();
  // Member m's message to the coordinator, sent by `by` (m's thread, or -1: an event): it arrives
  // a path delay later (nothing leaves a stopped process), and a refusal comes back as an ERROR.
  void send(int m, int by, coord::ControlMessage msg);
  // Carries out member m's actions, from its thread (by = m) or an event (-1).
  void carry_out(int m, int by, comm::Actions actions);
  bool timers_needed() const { return !undetected_.empty() && active > 0 && !halted; }
  void fault(const Fault &f);
  void join(int m);  // joiner m's process starts (its thread) and asks the coordinator to join

  const Topology &topo;
  Engine engine;
  Network net;
  Mailboxes mail;
  const Workload &work;
  coord::Job job;  // the coordinator's rules, as wccl-coord runs them
  // The job's one group (every peer a node of one communicator), once the first JOIN named it.
  const coord::Membership &group() const { return *job.group(kSimGroup); }
  std::vector<Peer> peers;  // the first epoch's peers, then the joiners
  const int first_peers;
  // Member threads of one instant run at once: what several of them write is atomic or locked.
  std::atomic<int> active{0};       // members whose thread runs and whose process does
  std::atomic<bool> halted{false};  // a member failed for good: the timers stop, so the run ends
  std::mutex logical_mu;
  std::map<std::pair<uint64_t, uint64_t>, int> logical;  // (epoch, seq) -> the workload's operation
  std::vector<HostTraffic> traffic_before;
  std::vector<Recovery> recoveries;
  std::vector<Admission> admissions;  // joiner j is member first_peers + j
  std::set<uint64_t> needs_sync;      // epochs with a member that lacks the state

 private:
  // The coordinator hears member m's message now; its decisions go out.
  void hear(int m, const coord::ControlMessage &msg);
  // The coordinator's decisions since the last call go to their members, a path delay away.
  void dispatch();
  // The coordinator's message reaches member m now (a stopped process reads nothing).
  void deliver(int m, const coord::ControlMessage &msg);
  void start_timers();
  void heartbeat(int m, uint64_t generation);
  void tick(uint64_t generation);

  std::map<uint64_t, std::vector<Time>> links_at_;  // epoch -> member -> when its links are open
  uint64_t last_epoch_ = 0;
  bool was_revoked_ = false;
  // Heartbeats and the coordinator's timer decide something only while a stopped peer has not been
  // declared lost yet: they run from a fault until then (so a run without faults has no periodic
  // events, and one that can no longer move ends as the engine's deadlock).
  std::set<int>
      undetected_;  // stopped peers the coordinator has not declared lost (or heard of) yet
  bool timing_ = false;
  uint64_t timers_ = 0;  // generation of the running heartbeats and timer
};

}  // namespace wccl::sim
