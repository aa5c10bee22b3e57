#include "coord/job.h"

#include <algorithm>

#include "core/status.h"

namespace wccl::coord {

Membership &Job::membership(const std::string &name) {
  auto it = groups_.find(name);
  if (it == groups_.end()) {
    it = groups_.emplace(name, std::make_unique<Membership>(opt_)).first;
    it->second->set_gate(this);
    names_[it->second.get()] = name;
  }
  return *it->second;
}

const Membership *Job::group(const std::string &name) const {
  auto it = groups_.find(name);
  return it == groups_.end() ? nullptr : it->second.get();
}

std::vector<std::string> Job::group_names() const {
  std::vector<std::string> names;
  for (const auto &[name, group] : groups_) names.push_back(name);
  return names;
}

const std::string &Job::name_of(const Membership &group) const { return names_.at(&group); }

std::map<std::string, PeerId> Job::comms_of(const std::string &node) const {
  std::map<std::string, PeerId> out;
  if (node.empty()) return out;
  for (const auto &[name, g] : groups_) {
    for (const auto &[id, info] : g->live_peers()) {
      if (info.node == node) out[name] = id;
    }
  }
  return out;
}

uint32_t Job::declared_groups(const std::string &node) const {
  uint32_t declared = 0;
  if (node.empty()) return declared;
  for (const auto &[name, g] : groups_) {
    for (const auto &[id, info] : g->live_peers()) {
      if (info.node == node) declared = std::max(declared, info.node_groups);
    }
  }
  return declared;
}

Status Job::on_message(const std::string &group, const ControlMessage &m, Clock::time_point now,
                       bool *drop) {
  now_ = now;
  *drop = false;
  if ((m.type == MessageType::kJoin || m.type == MessageType::kRejoin) && !m.info.node.empty()) {
    const std::map<std::string, PeerId> comms = comms_of(m.info.node);
    Status refused;
    // (A member of a ring a restarted coordinator adopted says 0 until it is back: the ring does
    // not carry node_groups. Its node's count is then that of the communicators back.)
    const uint32_t declared = declared_groups(m.info.node);
    if (!comms.empty() && declared != 0 && declared != m.info.node_groups) {
      refused = WCCL_ERROR(WCCL_ERR_INVALID_USAGE,
                           "node %s: this communicator says node_groups=%u, the node's "
                           "communicator in group \"%s\" said %u",
                           m.info.node.c_str(), m.info.node_groups, comms.begin()->first.c_str(),
                           declared);
    } else if (m.info.node_groups > 0) {
      auto here = comms.find(group);
      const size_t others = comms.size() - (here != comms.end() ? 1 : 0);
      if (here != comms.end() && here->second != m.peer) {
        refused =
            WCCL_ERROR(WCCL_ERR_INVALID_USAGE, "node %s already has a communicator in group \"%s\"",
                       m.info.node.c_str(), group.c_str());
      } else if (others + 1 > m.info.node_groups) {
        refused = WCCL_ERROR(WCCL_ERR_INVALID_USAGE,
                             "node %s said node_groups=%u and already has a communicator in "
                             "%zu other groups",
                             m.info.node.c_str(), m.info.node_groups, others);
      }
    }
    if (!refused.ok()) {
      *drop = true;
      return refused;
    }
  }
  Membership &g = membership(group);
  const uint64_t epoch = g.epoch();
  Status st = g.on_message(m, now, drop);
  if (m.type == MessageType::kRejoin && g.epoch() != epoch && g.epoch_adopted()) {
    // An epoch adopted from before the restart may hold a node lost since: lost here too.
    adopted_ = true;
    std::set<std::string> lost;
    for (const Member &r : g.ring()) {
      if (lost_nodes_.count(r.info.node) != 0) lost.insert(r.info.node);
    }
    for (const std::string &node : lost) {
      g.lose_node(
          node,
          format("node %s was lost after the epoch its members reported was formed", node.c_str()),
          now);
    }
  }
  settle(now);
  return st;
}

void Job::disconnected(const std::string &group, PeerId id, Clock::time_point now) {
  now_ = now;
  Membership &g = membership(group);
  // A member that said it leaves and goes is gone gracefully from this group; if its barrier has
  // not completed, its node's communicators in the other groups are still in: they are lost (a
  // node leaves whole, and one that went mid-leave is not there to finish it).
  std::string node;
  for (const auto &[peer, info] : g.live_peers()) {
    if (peer == id && info.node_groups > 0 && g.is_member(id) && g.leaving(id)) node = info.node;
  }
  g.disconnected(id, now);
  if (!node.empty()) {
    lose_node(node, group,
              format("node %s's communicator in group \"%s\" went before its leave completed: a "
                     "node leaves whole",
                     node.c_str(), group.c_str()));
  }
  settle(now);
}

void Job::tick(Clock::time_point now) {
  now_ = now;
  for (auto &[name, g] : groups_) g->tick(now);
  settle(now);
}

void Job::lose_node(const std::string &node, const std::string &except, const std::string &reason) {
  if (!node.empty() && adopted_) lost_nodes_.insert(node);
  for (auto &[name, g] : groups_) {
    if (name != except) g->lose_node(node, reason, now_);
  }
}

void Job::settle(Clock::time_point now) {
  together_.clear();  // the event's own completions are done
  entering_.clear();
  for (bool more = true; more;) {
    more = false;
    // A node half in since the restart (its admission reached one group's members before the old
    // coordinator went, not another's): out of every group, to be admitted whole again.
    for (const std::string &node : half_in_nodes()) {
      lose_node(node, "",
                format("node %s is a member of one group's epoch and waits to join another: the "
                       "coordinator that admitted it went before every group heard; a node "
                       "enters whole",
                       node.c_str()));
      more = true;
    }
    // A node's communicators are lost together: a loss in one group is one in the node's other
    // groups too (whose own losses, taken in turn, find this group's peers of the node gone).
    for (auto &[name, g] : groups_) {
      for (const PeerInfo &lost : g->take_lost()) {
        lose_node(lost.node, name,
                  format("node %s lost its member %s of group \"%s\"", lost.node.c_str(),
                         lost.name.c_str(), name.c_str()));
        more = true;
      }
    }
    for (auto &[node, left] : std::exchange(left_alone_, {})) {
      lose_node(
          node, left,
          format("node %s left group \"%s\" while its other groups did not reach their "
                 "barriers within %lld ms (peer_timeout_ms): a node leaves whole",
                 node.c_str(), left.c_str(), static_cast<long long>(opt_.peer_timeout.count())));
      more = true;
    }
    // A barrier held for a node's other groups past peer_timeout completes without the node.
    for (auto it = held_.begin(); it != held_.end();) {
      Membership &g = membership(it->first);
      if (!g.barrier_full() || g.reforming()) {
        it = held_.erase(it);
        continue;
      }
      if (now - it->second < opt_.peer_timeout) {
        ++it;
        continue;
      }
      const std::string name = it->first;
      it = held_.erase(it);
      for (const std::string &node : changing_nodes(g)) {
        const auto comms = comms_of(node);
        auto here = comms.find(name);
        if (here != comms.end() && g.leaving(here->second)) left_alone_.emplace_back(node, name);
      }
      g.complete_barrier();
      more = true;
    }
    together_.clear();
    entering_.clear();
  }
  // A lost node back in an epoch formed here (admitted whole again) is no longer lost.
  for (auto it = lost_nodes_.begin(); it != lost_nodes_.end();) {
    bool back = false;
    for (const auto &[name, g] : groups_) {
      if (g->epoch_adopted()) continue;
      for (const auto &[id, info] : g->live_peers())
        back = back || (info.node == *it && g->is_member(id));
    }
    it = back ? lost_nodes_.erase(it) : std::next(it);
  }
}

std::set<std::string> Job::half_in_nodes() const {
  std::set<std::string> joining, out;
  if (!adopted_) return out;  // only an adopted epoch can hold part of a node
  // Only a node that declares its group count enters whole (a member not back yet says 0: the
  // joiner's own count is asked). A joiner of a group with no epoch yet may still be named by the
  // epoch its members will report. (Groups without joiners, as nearly always, cost nothing here:
  // this runs after every event.)
  for (const auto &[name, g] : groups_) {
    if (g->joiners() == 0 || g->epoch() == 0) continue;
    for (const auto &[id, info] : g->live_peers()) {
      if (!info.node.empty() && info.node_groups > 0 && g->is_joiner(id)) joining.insert(info.node);
    }
  }
  if (joining.empty()) return out;
  for (const auto &[name, g] : groups_) {
    for (const auto &[id, info] : g->live_peers()) {
      if (joining.count(info.node) != 0 && g->is_member(id)) out.insert(info.node);
    }
  }
  return out;
}

std::set<std::string> Job::changing_nodes(const Membership &group) const {
  std::set<std::string> out;
  for (const auto &[id, info] : group.live_peers()) {
    if (info.node_groups == 0 || out.count(info.node) != 0) continue;
    if (group.leaving(id)) {
      out.insert(info.node);
      continue;
    }
    if (!group.is_joiner(id)) continue;
    const auto comms = comms_of(info.node);
    const bool whole = comms.size() == info.node_groups &&
                       std::all_of(comms.begin(), comms.end(), [&](const auto &c) {
                         return groups_.at(c.first)->is_joiner(c.second);
                       });
    if (whole) out.insert(info.node);
  }
  return out;
}

std::set<std::string> Job::coupled(const std::string &name) const {
  std::set<std::string> out{name};
  std::vector<std::string> todo{name};
  std::set<std::string> seen_nodes;
  while (!todo.empty()) {
    const std::string g = todo.back();
    todo.pop_back();
    for (const std::string &node : changing_nodes(*groups_.at(g))) {
      if (!seen_nodes.insert(node).second) continue;
      for (const auto &[other, id] : comms_of(node)) {
        if (out.insert(other).second) todo.push_back(other);
      }
    }
  }
  return out;
}

void Job::bring_together(const std::set<std::string> &groups) {
  together_ = groups;
  entering_.clear();
  for (const std::string &g : groups) {
    const Membership &m = *groups_.at(g);
    for (const std::string &node : changing_nodes(m)) {
      const auto comms = comms_of(node);
      auto here = comms.find(g);
      if (here != comms.end() && m.is_joiner(here->second)) entering_.insert(node);
    }
  }
}

bool Job::may_complete(Membership &group) {
  const std::string &name = name_of(group);
  if (together_.count(name) != 0) return true;
  const std::set<std::string> groups = coupled(name);
  if (groups.size() == 1 && changing_nodes(group).empty()) {
    held_.erase(name);
    return true;  // no node changes here: the group's barrier is its own
  }
  // Ready together: every barrier full, none re-forming, and a node that leaves one leaves each
  // (a communicator of it that updates is at an earlier barrier of its group: the leave waits
  // for its next call there).
  bool ready = std::all_of(groups.begin(), groups.end(), [&](const std::string &g) {
    const Membership &m = *groups_.at(g);
    return m.barrier_full() && !m.reforming();
  });
  for (auto g = groups.begin(); ready && g != groups.end(); ++g) {
    const Membership &m = *groups_.at(*g);
    for (const std::string &node : changing_nodes(m)) {
      const auto comms = comms_of(node);
      auto here = comms.find(*g);
      if (here == comms.end() || !m.leaving(here->second)) continue;
      ready = std::all_of(comms.begin(), comms.end(), [&](const auto &c) {
        const Membership &other = *groups_.at(c.first);
        return !other.is_member(c.second) || other.leaving(c.second);
      });
      if (!ready) break;
    }
  }
  if (!ready) {
    held_.emplace(name, now_);  // keeps the first time
    return false;
  }
  bring_together(groups);
  for (const std::string &g : groups) {
    held_.erase(g);
    if (g != name) groups_.at(g)->complete_barrier();
  }
  return true;
}

bool Job::may_form(Membership &group) {
  const std::string &name = name_of(group);
  if (together_.count(name) != 0) return group.can_form(now_);
  const std::set<std::string> groups = coupled(name);
  bool declared = false;
  for (const auto &[id, info] : group.live_peers()) declared = declared || info.node_groups > 0;
  if (!declared && groups.size() == 1) return group.can_form(now_);
  // Whether each group could form with the nodes admitted together (admits() asks together_).
  const std::set<std::string> together = together_, entering = entering_;
  bring_together(groups);
  const bool all_can = std::all_of(groups.begin(), groups.end(), [&](const std::string &g) {
    return groups_.at(g)->can_form(now_);
  });
  if (!all_can) {
    together_ = together;
    entering_ = entering;
    return false;
  }
  for (const std::string &g : groups) {
    if (g != name) groups_.at(g)->form_first(now_);
  }
  return true;
}

bool Job::admits(const Membership &group, const Member &joiner) const {
  if (joiner.info.node_groups == 0) return true;
  // A node enters with all its communicators, in groups that complete or form together.
  if (together_.count(name_of(group)) == 0 || entering_.count(joiner.info.node) == 0) return false;
  const auto comms = comms_of(joiner.info.node);
  return std::all_of(comms.begin(), comms.end(),
                     [&](const auto &c) { return together_.count(c.first) != 0; });
}

std::vector<Job::GroupEvent> Job::take_events() {
  std::vector<GroupEvent> out;
  for (auto &[name, g] : groups_) {
    for (Event &e : g->take_events()) out.push_back({name, std::move(e)});
  }
  return out;
}

std::vector<Job::Addressed> Job::take_notices() {
  std::vector<Addressed> out;
  for (auto &[name, g] : groups_) {
    for (Notice &n : g->take_notices()) {
      // An EPOCH to a peer lost later in the same event (its node half in after a restart) would
      // answer its join: it hears REMOVED alone.
      if (n.kind == Notice::Kind::kEpoch && !g->is_member(n.to)) continue;
      out.push_back({name, std::move(n)});
    }
  }
  return out;
}

}  // namespace wccl::coord
