// A seeded simulation of whole nodes (issue 56, docs/fault-tolerance.md "The node is admitted and
// leaves whole"): nodes of L communicators (node_groups = L, one per group), each communicator
// running the member's real rules (comm::Member), against the coordinator's real rules
// (coord::Job), over control connections with per-message delays (in order within a connection)
// in virtual time; every message goes through the wire's encoding, as on a real connection. Each
// node loops as a trainer does at its outer boundaries: inner steps, then every rank updates its
// group (the ranks' calls up to 300 ms apart; a rank whose update fails, or whose group waits for
// it again, updates again), now and then a node leaves (every rank leaves). Faults until kFaultsMs,
// from the seed: a node SIGKILLed (every communicator's connection closes), a node frozen for less
// or more than peer_timeout_ms, joining nodes whose ranks register up to 2 s apart, and the
// coordinator restarted: every connection closes, a fresh Job comes up within 1 s, and each
// communicator reconnects with back-off and REJOINs with what it holds; a rank's membership call
// that the lost coordinator never answered (or that found it down) is made again once reconnected,
// and a joiner the lost coordinator had not registered fails its join, so its node's process ends
// (as wccl_comm_join returns COORDINATOR_UNREACHABLE).
//
// Checked after every event the coordinator handles: every node is a member of all its L groups
// or of none (no epoch ever holds part of a node). A restarted coordinator rebuilds each group
// from the epoch its members report, as the old one's notices left them: from then on, a group is
// held to it once its epoch is one the restarted coordinator formed. At the end: every node alive,
// not frozen and not leaving is a member of all L groups (joiners admitted, nobody waits for
// ever).
//
//   WCCL_SIM_SEEDS=N (default 1000) schedules; WCCL_SIM_SEED=S runs only seed S, printing its
//   trace: the one-line reproduction a failure prints.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/member.h"
#include "coord/job.h"
#include "coord/messages.h"
#include "sim_clock.h"
#include "sim_nodes.h"

namespace wccl::comm {
namespace {

using coord::ControlMessage;
using coord::MessageType;
using coord::PeerId;

constexpr int64_t kHeartbeatMs = 100;
constexpr int64_t kPeerTimeoutMs = 1000;
constexpr int64_t kFaultsMs = 15000;
constexpr int64_t kEndMs = kFaultsMs + 12000;  // every node settled by then

class Sim : testing_sim::SimClock {
 public:
  Sim(uint64_t seed, bool trace) : SimClock(seed), trace_(trace) {
    groups_ = static_cast<int>(jitter(2, 3));
    coord::Membership::Options o;
    o.min_peers = 1;
    o.settle = std::chrono::milliseconds(50);
    o.peer_timeout = std::chrono::milliseconds(kPeerTimeoutMs);
    o.probe_timeout = std::chrono::milliseconds(kHeartbeatMs);
    o.epoch_base = 1000;
    options_ = o;
    job_ = std::make_unique<coord::Job>(o);
  }
  std::string run();
  const std::string &log() const { return log_; }

 private:
  struct Comm {
    int node = 0, group = 0;
    PeerId id = 0;
    std::unique_ptr<Member> view;
    bool connected = false, began = false, joined = false;  // began: its JOIN went out
    // The connection's number (messages of a closed one are dropped); lost: this process saw it
    // close and reconnects; retry: the membership call to make again once reconnected.
    int conn = 0;
    bool lost = false, connecting = false;
    std::optional<MessageType> call, retry;  // call: the last one made
    int64_t last_to_coord = 0, last_to_comm = 0, backoff = 0, next_attempt = 0;
  };
  enum class App { kJoining, kTraining, kUpdating, kLeaving, kGone };
  struct Node {
    std::vector<int> comms;  // by group
    bool alive = true, frozen = false, leaves = false;
    std::vector<std::function<void()>> deferred;
    App app = App::kJoining;
  };
  coord::Clock::time_point time() const {
    return coord::Clock::time_point() + std::chrono::milliseconds(now_ + 1000000);
  }
  void trace(const std::string &s) {
    if (trace_) log_ += std::to_string(now_) + " " + s + "\n";
  }
  void fail(const std::string &why) {
    if (failure_.empty()) failure_ = "t=" + std::to_string(now_) + " ms: " + why;
  }
  std::string name(int c) const {
    return "n" + std::to_string(comms_[static_cast<size_t>(c)].node) + "." +
           std::to_string(comms_[static_cast<size_t>(c)].group);
  }

  int spawn(int64_t spread_ms);
  void as_node(int n, std::function<void()> fn);  // deferred while frozen, dropped once dead
  ControlMessage over_the_wire(const ControlMessage &m);  // what the other end decodes
  void send_to_coord(int c, const ControlMessage &m);
  void deliver(int c, const ControlMessage &m);
  void carry_out(int c, const Actions &actions);
  void heartbeat(int c);
  void coord_receive(int c, const ControlMessage &m);
  void coord_deliver();
  void node_next(int n);
  void rank_call(int c, MessageType type);
  void kill(int n);
  void freeze(int n, int64_t ms);
  void restart_coordinator();
  void connection_closed(int c, int conn);
  void connect(int c);
  void check_whole();

  bool trace_;
  int groups_ = 2;
  coord::Membership::Options options_;
  std::unique_ptr<coord::Job> job_;
  bool coord_up_ = true;
  int restarts_ = 0;
  testing_sim::WholeNodeCheck whole_;
  std::string log_, failure_;
  std::vector<Comm> comms_;
  std::vector<Node> nodes_;
  std::map<PeerId, int> by_id_;
};

int Sim::spawn(int64_t spread_ms) {
  const int n = static_cast<int>(nodes_.size());
  nodes_.emplace_back();
  for (int g = 0; g < groups_; ++g) {
    Comm c;
    c.node = n;
    c.group = g;
    c.id = 0x1000 + static_cast<PeerId>(comms_.size());
    const std::string node = "node" + std::to_string(n);
    c.view = std::make_unique<Member>(c.id, "g" + std::to_string(g),
                                      coord::PeerInfo{node + "." + std::to_string(g), "sim:1", node,
                                                      static_cast<uint32_t>(groups_)});
    const int i = static_cast<int>(comms_.size());
    by_id_[c.id] = i;
    comms_.push_back(std::move(c));
    nodes_.back().comms.push_back(i);
    after(jitter(0, spread_ms), [this, n, i] {
      as_node(n, [this, i] {
        Comm &cm = comms_[static_cast<size_t>(i)];
        if (!coord_up_) {  // wccl_comm_join cannot connect: the node's process ends
          trace(name(i) + " cannot reach the coordinator: its join fails");
          kill(comms_[static_cast<size_t>(i)].node);
          return;
        }
        cm.connected = cm.began = true;
        cm.conn = 1;
        trace(name(i) + " joins");
        send_to_coord(i, cm.view->begin_join());
        after(kHeartbeatMs, [this, i] { heartbeat(i); });
      });
    });
  }
  trace("spawn node" + std::to_string(n));
  return n;
}

void Sim::as_node(int n, std::function<void()> fn) {
  Node &node = nodes_[static_cast<size_t>(n)];
  if (!node.alive) return;
  if (node.frozen) {
    node.deferred.push_back(std::move(fn));
    return;
  }
  fn();
}

ControlMessage Sim::over_the_wire(const ControlMessage &m) {
  const std::vector<uint8_t> bytes = coord::encode(m);
  ControlMessage out;
  const Status st = coord::decode(bytes.data(), bytes.size(), &out);
  if (!st.ok()) fail("a message does not decode: " + st.to_string());
  return out;
}

void Sim::send_to_coord(int c, const ControlMessage &sent) {
  Comm &cm = comms_[static_cast<size_t>(c)];
  if (!cm.connected) return;
  const ControlMessage m = over_the_wire(sent);
  const int64_t when = std::max(cm.last_to_coord, now_ + jitter(1, 30));
  cm.last_to_coord = when;
  at(when, [this, c, m, conn = cm.conn] {
    const Comm &now = comms_[static_cast<size_t>(c)];
    if (now.connected && now.conn == conn) coord_receive(c, m);
  });
}

void Sim::heartbeat(int c) {
  const int n = comms_[static_cast<size_t>(c)].node;
  if (!nodes_[static_cast<size_t>(n)].alive) return;
  after(kHeartbeatMs, [this, c] { heartbeat(c); });
  if (nodes_[static_cast<size_t>(n)].frozen) return;  // a stopped process's timer does not run
  Comm &cm = comms_[static_cast<size_t>(c)];
  if (cm.connected) {
    if (!cm.view->left()) send_to_coord(c, cm.view->heartbeat());
  } else if (cm.lost && now_ >= cm.next_attempt) {
    connect(c);
  }
}

void Sim::connect(int c) {
  Comm &cm = comms_[static_cast<size_t>(c)];
  if (cm.connecting) return;
  cm.connecting = true;
  after(jitter(1, 20), [this, c] {
    as_node(comms_[static_cast<size_t>(c)].node, [this, c] {
      Comm &m = comms_[static_cast<size_t>(c)];
      m.connecting = false;
      if (!coord_up_) {
        m.backoff = std::min(std::max(m.backoff * 2, kHeartbeatMs), 8 * kHeartbeatMs);
        m.next_attempt = now_ + m.backoff;
        return;
      }
      m.connected = true;
      m.lost = false;
      ++m.conn;
      m.backoff = 0;
      m.last_to_coord = m.last_to_comm = now_;
      trace(name(c) + " reconnects");
      for (const ControlMessage &msg : m.view->rejoin()) send_to_coord(c, msg);
      if (m.retry) rank_call(c, *std::exchange(m.retry, std::nullopt));
    });
  });
}

void Sim::connection_closed(int c, int conn) {
  Comm &cm = comms_[static_cast<size_t>(c)];
  if (cm.conn != conn || cm.connected) return;
  const int n = cm.node;
  if (!cm.joined && cm.view->awaited_epoch() == 0) {
    // wccl_comm_join returns COORDINATOR_UNREACHABLE: the node's process ends. (A joiner the
    // coordinator registered for a job's epoch waits on, reconnecting as a member does.)
    trace(name(c) + "'s join fails: connection closed");
    kill(n);
    return;
  }
  cm.lost = true;
  cm.next_attempt = now_;
  if (cm.joined && !cm.view->call_answered()) {
    // The call returns COORDINATOR_UNREACHABLE; the loop makes it again.
    cm.view->cancel_call();
    cm.retry = cm.call;
  }
}

void Sim::restart_coordinator() {
  if (!coord_up_) return;
  coord_up_ = false;
  ++restarts_;
  trace("coordinator restarts");
  std::vector<std::string> groups;
  for (int g = 0; g < groups_; ++g) groups.push_back("g" + std::to_string(g));
  whole_.restarting(*job_, groups);
  for (size_t i = 0; i < comms_.size(); ++i) {
    Comm &cm = comms_[i];
    if (!cm.connected) continue;
    cm.connected = false;
    const int c = static_cast<int>(i);
    // Whatever the old coordinator sent first arrives first; then the close.
    at(std::max(cm.last_to_comm, now_) + 1, [this, c, conn = cm.conn] {
      as_node(comms_[static_cast<size_t>(c)].node, [this, c, conn] { connection_closed(c, conn); });
    });
  }
  after(jitter(0, 1000), [this] {
    job_ = std::make_unique<coord::Job>(options_);
    coord_up_ = true;
    trace("coordinator up");
  });
}

void Sim::coord_receive(int c, const ControlMessage &m) {
  Comm &cm = comms_[static_cast<size_t>(c)];
  whole_.heard(m.peer);
  bool drop = false;
  const Status st = job_->on_message("g" + std::to_string(cm.group), m, time(), &drop);
  if (!st.ok()) {
    // The rules refuse nothing this loop sends: a refusal is a bug of the rules or of the loop.
    fail(name(c) + "'s message type " + std::to_string(static_cast<int>(m.type)) +
         " refused: " + st.to_string());
  }
  coord_deliver();
}

void Sim::coord_deliver() {
  for (const coord::Job::Addressed &a : job_->take_notices()) {
    auto it = by_id_.find(a.notice.to);
    if (it == by_id_.end()) continue;
    const int c = it->second;
    Comm &cm = comms_[static_cast<size_t>(c)];
    if (!cm.connected) continue;
    const ControlMessage m = over_the_wire(coord::to_message(a.notice));
    const int64_t when = std::max(cm.last_to_comm, now_ + jitter(1, 30));
    cm.last_to_comm = when;
    at(when, [this, c, m] {
      as_node(comms_[static_cast<size_t>(c)].node, [this, c, m] { deliver(c, m); });
    });
  }
  check_whole();
}

void Sim::check_whole() {
  if (!coord_up_) return;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    std::vector<std::pair<std::string, PeerId>> comms;
    for (int c : nodes_[n].comms) {
      const Comm &cm = comms_[static_cast<size_t>(c)];
      comms.emplace_back("g" + std::to_string(cm.group), cm.id);
    }
    const std::string why = whole_.check(*job_, "node" + std::to_string(n), comms);
    if (!why.empty()) fail(why);
  }
}

void Sim::deliver(int c, const ControlMessage &m) {
  Comm &cm = comms_[static_cast<size_t>(c)];
  trace(name(c) + " <- " + std::to_string(static_cast<int>(m.type)) + " e" +
        std::to_string(m.epoch) + " " + m.text);
  const bool calling = !cm.view->call_answered();
  carry_out(c, cm.view->on_message(m));
  if (calling && cm.view->call_answered() && !cm.joined && cm.view->call_status().ok())
    cm.joined = true;
  // As the mesh polls its ranks: a call answered, or a rank through its call whose group now
  // waits for its update (a REMOVED, a REVOKED), moves the node's loop.
  const App app = nodes_[static_cast<size_t>(cm.node)].app;
  if ((calling && cm.view->call_answered()) || app == App::kJoining || app == App::kUpdating)
    node_next(cm.node);
}

void Sim::carry_out(int c, const Actions &actions) {
  for (const Action &a : actions) {
    if (a.kind == Action::Kind::kSend) send_to_coord(c, a.message);
  }
}

void Sim::rank_call(int c, MessageType type) {
  Comm &cm = comms_[static_cast<size_t>(c)];
  if (!cm.connected) {  // the call returns COORDINATOR_UNREACHABLE; made again once reconnected
    cm.retry = type;
    return;
  }
  cm.call = type;
  Actions out;
  const Status st = cm.view->call(type, &out);
  if (!st.ok()) fail(name(c) + " cannot call: " + st.to_string());
  carry_out(c, out);
}

// The node's loop, run whenever one of its ranks' calls is answered.
void Sim::node_next(int n) {
  Node &node = nodes_[static_cast<size_t>(n)];
  bool all_answered = true;
  for (int c : node.comms) {
    Comm &cm = comms_[static_cast<size_t>(c)];
    if (!cm.began || !cm.view->call_answered() || cm.retry) {
      all_answered = false;
      continue;
    }
    if (node.app != App::kJoining && node.app != App::kUpdating) continue;
    if (!cm.joined) {
      // Member registers a forgotten joiner again by itself; its join never fails here.
      all_answered = false;
      fail(name(c) + "'s join failed: " + cm.view->call_status().to_string());
    } else if (!cm.view->call_status().ok() || cm.view->update_due()) {
      // A rank whose update was refused, or whose group waits for its update again, makes one
      // now: no barrier waits on an idle rank.
      all_answered = false;
      rank_call(c, MessageType::kUpdate);
    }
  }
  if (!all_answered) return;
  if (node.app == App::kLeaving) {
    node.app = App::kGone;
    trace("node" + std::to_string(n) + " left");
    for (int c : node.comms) comms_[static_cast<size_t>(c)].connected = false;
    for (int c : node.comms) {
      const Comm &cm = comms_[static_cast<size_t>(c)];
      after(jitter(1, 30), [this, cm_group = cm.group, id = cm.id, r = restarts_] {
        if (!coord_up_ || r != restarts_) return;  // that coordinator is gone
        job_->disconnected("g" + std::to_string(cm_group), id, time());
        coord_deliver();
      });
    }
    return;
  }
  if (node.app == App::kGone) return;
  node.app = App::kTraining;
  after(jitter(100, 800), [this, n] {
    as_node(n, [this, n] {
      Node &nd = nodes_[static_cast<size_t>(n)];
      if (nd.app != App::kTraining) return;
      const bool leave = nd.leaves && now_ >= kFaultsMs / 2;
      nd.app = leave ? App::kLeaving : App::kUpdating;
      for (int c : nd.comms) {
        after(jitter(0, 300), [this, n, c, leave] {
          as_node(n, [this, c, leave] {
            rank_call(c, leave ? MessageType::kLeave : MessageType::kUpdate);
          });
        });
      }
    });
  });
}

void Sim::kill(int n) {
  Node &node = nodes_[static_cast<size_t>(n)];
  if (!node.alive) return;
  node.alive = false;
  trace("kill node" + std::to_string(n));
  for (int c : node.comms) {
    Comm &cm = comms_[static_cast<size_t>(c)];
    if (!cm.connected) continue;
    cm.connected = false;
    after(jitter(1, 30), [this, g = cm.group, id = cm.id, r = restarts_] {
      if (!coord_up_ || r != restarts_) return;  // that coordinator is gone
      job_->disconnected("g" + std::to_string(g), id, time());
      coord_deliver();
    });
  }
}

void Sim::freeze(int n, int64_t ms) {
  Node &node = nodes_[static_cast<size_t>(n)];
  if (!node.alive || node.frozen) return;
  node.frozen = true;
  trace("freeze node" + std::to_string(n) + " for " + std::to_string(ms) + " ms");
  after(ms, [this, n] {
    Node &nd = nodes_[static_cast<size_t>(n)];
    nd.frozen = false;
    trace("thaw node" + std::to_string(n));
    for (auto &fn : std::exchange(nd.deferred, {})) as_node(n, std::move(fn));
  });
}

std::string Sim::run() {
  const int initial = static_cast<int>(jitter(2, 3));
  for (int i = 0; i < initial; ++i) spawn(300);
  // Faults and joiners, drawn now.
  const int faults = static_cast<int>(jitter(1, 4));
  for (int f = 0; f < faults; ++f) {
    const int64_t at = jitter(500, kFaultsMs - 1000);
    const int kind = static_cast<int>(jitter(0, 4));
    after(at, [this, kind] {
      const int n = static_cast<int>(jitter(0, static_cast<int64_t>(nodes_.size()) - 1));
      if (kind == 0) kill(n);
      if (kind == 1) freeze(n, jitter(100, kPeerTimeoutMs - 200));
      if (kind == 2) freeze(n, jitter(kPeerTimeoutMs + 200, 3000));
      if (kind == 3) {
        const int j = spawn(2000);
        nodes_[static_cast<size_t>(j)].leaves = jitter(0, 3) == 0;
      }
      if (kind == 4) restart_coordinator();
    });
  }
  const int joiners = static_cast<int>(jitter(1, 2));
  for (int j = 0; j < joiners; ++j) after(jitter(0, kFaultsMs), [this] { (void)spawn(2000); });
  for (int64_t t = 0; t <= kEndMs; t += 10) {
    at(t, [this] {
      if (!coord_up_) return;
      job_->tick(time());
      coord_deliver();
    });
  }
  run_until(kEndMs, [this] { return !failure_.empty(); });
  if (!failure_.empty()) return failure_;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const Node &node = nodes_[n];
    if (!node.alive || node.frozen || node.leaves) continue;
    for (int c : node.comms) {
      const Comm &cm = comms_[static_cast<size_t>(c)];
      if (!job_->group("g" + std::to_string(cm.group))->is_member(cm.id)) {
        return "node" + std::to_string(n) + " is not a member of g" + std::to_string(cm.group) +
               " at the end (its loop: " + std::to_string(static_cast<int>(node.app)) + ")";
      }
    }
  }
  return "";
}

TEST(JobSim, NodesAreWholeInEveryGroupUnderKillsFreezesAndJoins) {
  testing_sim::run_seeds<Sim>(1000, "build/tests/test_coord_job_sim");
}

}  // namespace
}  // namespace wccl::comm
