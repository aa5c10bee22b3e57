// The node rule as the seeded control-plane simulations check it (test_coord_control_sim.cc,
// test_coord_job_sim.cc), on the coordinator's own state: no group's epoch holds part of a node.
// A restarted coordinator rebuilds each group from the epoch its members report, as the old one's
// notices left them (which may hold part of a node: its admission reached some groups' members
// only); from then on, an epoch this coordinator formed agrees with each other group about the
// node, as far as it can know: a communicator not back yet (none of its messages reached this
// coordinator) is not counted, as its node may be gone (lost before the restart) or frozen.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "coord/job.h"

namespace wccl::testing_sim {

class WholeNodeCheck {
 public:
  // The coordinator `job` is about to be replaced by a fresh one: remembers the highest epoch of
  // each of `groups` it held.
  void restarting(const coord::Job &job, const std::vector<std::string> &groups) {
    ++restarts_;
    heard_.clear();
    for (const std::string &name : groups) {
      const coord::Membership *g = job.group(name);
      if (g != nullptr) old_epochs_[name] = std::max(old_epochs_[name], g->epoch());
    }
  }

  // A message of peer `id` reached the coordinator.
  void heard(coord::PeerId id) { heard_.insert(id); }

  // "" if node `node`'s communicators, (group, peer id) each, are whole in `job`; else why not.
  std::string check(const coord::Job &job, const std::string &node,
                    const std::vector<std::pair<std::string, coord::PeerId>> &comms) const {
    // Per group that exists (and, after a restart, holds an epoch): whether the node is a member,
    // and whether this coordinator formed the group's epoch (not one adopted from before).
    int in = 0, out = 0, formed_in = 0, formed_out = 0;
    for (const auto &[name, id] : comms) {
      const coord::Membership *g = job.group(name);
      // (After a restart, a group without an epoch yet waits for its members to come back.)
      if (g == nullptr || (restarts_ != 0 && (g->epoch() == 0 || heard_.count(id) == 0))) continue;
      const bool member = g->is_member(id);
      const auto old = old_epochs_.find(name);
      const bool formed = old == old_epochs_.end() || g->epoch() > old->second;
      (member ? in : out) += 1;
      if (formed) (member ? formed_in : formed_out) += 1;
    }
    const bool whole = restarts_ == 0
                           ? in == 0 || in == static_cast<int>(comms.size())
                           : (formed_in == 0 || out == 0) && (formed_out == 0 || in == 0);
    if (whole) return "";
    std::string groups;
    for (const auto &[name, id] : comms) {
      const coord::Membership *g = job.group(name);
      if (g == nullptr) continue;
      groups += " " + name + ": e" + std::to_string(g->epoch()) + " {";
      for (const coord::Member &r : g->ring()) groups += " " + r.info.name;
      groups += " }";
    }
    return node + " is a member of " + std::to_string(in) + " of its " +
           std::to_string(comms.size()) + " groups (" + std::to_string(formed_in + formed_out) +
           " epochs formed since the last restart);" + groups;
  }

 private:
  int restarts_ = 0;
  std::map<std::string, uint64_t> old_epochs_;  // group -> the coordinators' before the last
  std::set<coord::PeerId> heard_;               // since the last restart
};

}  // namespace wccl::testing_sim
