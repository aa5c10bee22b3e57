// A seeded simulation of whole nodes (issue 56, docs/fault-tolerance.md "The node is admitted and
// leaves whole"): nodes of L communicators (node_groups = L, one per group), each communicator
// running the member's real rules (comm::Member), against the coordinator's real rules
// (coord::Job), over control connections with per-message delays (in order within a connection)
// in virtual time. Each node loops as a trainer does at its outer boundaries: inner steps, then
// every rank updates its group (the ranks' calls up to 300 ms apart; a rank whose update fails, or
// whose group waits for it again, updates again), now and then a node leaves (every rank leaves).
// Faults until kFaultsMs, from the seed: a node SIGKILLed (every communicator's connection
// closes), a node frozen for less or more than peer_timeout_ms, joining nodes whose ranks register
// up to 2 s apart.
//
// Checked after every event the coordinator handles: every node is a member of all its L groups
// or of none (no epoch ever holds part of a node). At the end: every node alive, not frozen and
// not leaving is a member of all L groups (joiners admitted, nobody waits for ever).
//
//   WCCL_SIM_SEEDS=N (default 1000) schedules; WCCL_SIM_SEED=S runs only seed S, printing its
//   trace: the one-line reproduction a failure prints.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/member.h"
#include "coord/job.h"
#include "sim_clock.h"

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
    int64_t last_to_coord = 0, last_to_comm = 0;
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
  void check_whole();

  bool trace_;
  int groups_ = 2;
  std::unique_ptr<coord::Job> job_;
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
        cm.connected = cm.began = true;
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

void Sim::send_to_coord(int c, const ControlMessage &m) {
  Comm &cm = comms_[static_cast<size_t>(c)];
  if (!cm.connected) return;
  const int64_t when = std::max(cm.last_to_coord, now_ + jitter(1, 30));
  cm.last_to_coord = when;
  at(when, [this, c, m] {
    if (comms_[static_cast<size_t>(c)].connected) coord_receive(c, m);
  });
}

void Sim::heartbeat(int c) {
  const int n = comms_[static_cast<size_t>(c)].node;
  if (!nodes_[static_cast<size_t>(n)].alive) return;
  after(kHeartbeatMs, [this, c] { heartbeat(c); });
  if (nodes_[static_cast<size_t>(n)].frozen) return;  // a stopped process's timer does not run
  Comm &cm = comms_[static_cast<size_t>(c)];
  if (!cm.view->left()) send_to_coord(c, cm.view->heartbeat());
}

void Sim::coord_receive(int c, const ControlMessage &m) {
  Comm &cm = comms_[static_cast<size_t>(c)];
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
    const ControlMessage m = coord::to_message(a.notice);
    const int64_t when = std::max(cm.last_to_comm, now_ + jitter(1, 30));
    cm.last_to_comm = when;
    at(when, [this, c, m] {
      as_node(comms_[static_cast<size_t>(c)].node, [this, c, m] { deliver(c, m); });
    });
  }
  check_whole();
}

void Sim::check_whole() {
  for (size_t n = 0; n < nodes_.size(); ++n) {
    int in = 0;
    for (int c : nodes_[n].comms) {
      const Comm &cm = comms_[static_cast<size_t>(c)];
      const coord::Membership *g = job_->group("g" + std::to_string(cm.group));
      if (g != nullptr && g->is_member(cm.id)) ++in;
    }
    if (in != 0 && in != groups_) {
      fail("node" + std::to_string(n) + " is a member of " + std::to_string(in) + " of its " +
           std::to_string(groups_) + " groups");
    }
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
    if (!cm.began || !cm.view->call_answered()) {
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
      after(jitter(1, 30), [this, cm_group = cm.group, id = cm.id] {
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
    after(jitter(1, 30), [this, g = cm.group, id = cm.id] {
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
    const int kind = static_cast<int>(jitter(0, 3));
    after(at, [this, kind] {
      const int n = static_cast<int>(jitter(0, static_cast<int64_t>(nodes_.size()) - 1));
      if (kind == 0) kill(n);
      if (kind == 1) freeze(n, jitter(100, kPeerTimeoutMs - 200));
      if (kind == 2) freeze(n, jitter(kPeerTimeoutMs + 200, 3000));
      if (kind == 3) {
        const int j = spawn(2000);
        nodes_[static_cast<size_t>(j)].leaves = jitter(0, 3) == 0;
      }
    });
  }
  const int joiners = static_cast<int>(jitter(1, 2));
  for (int j = 0; j < joiners; ++j) after(jitter(0, kFaultsMs), [this] { (void)spawn(2000); });
  for (int64_t t = 0; t <= kEndMs; t += 10) {
    at(t, [this] {
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
