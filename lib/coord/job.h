// The coordinator's rules for a whole job, as a state machine without I/O: one Membership per
// group, and the node rule over them (DESIGN §8, docs/fault-tolerance.md "The node").
//
// A node is the machine a set of communicators belongs to: they name it alike in the `node` key,
// one communicator per group. A node that also declares how many groups it is in (`node_groups`,
// L) is admitted, dropped and lost whole:
// - It is admitted once all L of its communicators wait as joiners, in L different groups, and
//   then into all L at once: at one instant, every group of the node completes its update barrier
//   (or, with no live epoch, forms its first) with the node in it. A group whose barrier is full
//   while another group of a node it would admit is not yet at its barrier waits for it, at most
//   peer_timeout; then it completes without the node, which waits for the next barrier.
// - It leaves whole: a leave at one group's barrier waits until the node's communicators in its
//   other groups leave too (at their barrier now, or at the next one, for a communicator still
//   updating at an earlier barrier), then all those barriers complete together; if the wait runs
//   out (peer_timeout), or a communicator goes mid-leave, the node is lost in its other groups.
// - It is lost whole: a member lost in one group is lost in every group (for any node, declared
//   L or not), also in a group rebuilt after a restart of the coordinator from an epoch its
//   members report; and a node (declaring L) that such a rebuilt group holds as a member while it
//   waits as a joiner in another group holding an epoch (the old coordinator admitted it, and not
//   every group heard before it went) is lost in all, to enter whole again.
// A communicator without a node, or with node_groups 0, is admitted and leaves on its own.
//
// Events come in through on_message, disconnected and tick, with the time; decisions come out as
// notices addressed to a group's peers.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "coord/membership.h"
#include "coord/messages.h"

namespace wccl::coord {

class Job : private Membership::Gate {
 public:
  explicit Job(Membership::Options options) : opt_(options) {}
  Job(const Job &) = delete;
  Job &operator=(const Job &) = delete;

  // A message from peer m.peer's control link of `group` (a JOIN or REJOIN names the group; the
  // holder of the link passes it for every later message). As Membership::on_message; a JOIN or
  // REJOIN whose node does not fit the node's other communicators (another node_groups, a second
  // communicator in one group, more groups than it declared) is refused (INVALID_USAGE, *drop).
  Status on_message(const std::string &group, const ControlMessage &m, Clock::time_point now,
                    bool *drop);
  // The peer's control link of `group` closed.
  void disconnected(const std::string &group, PeerId id, Clock::time_point now);
  // Applies every group's timeouts and the node rule's.
  void tick(Clock::time_point now);
  // How often tick() must run.
  std::chrono::milliseconds tick_period() const { return Membership::tick_period(opt_); }

  struct Addressed {
    std::string group;
    Notice notice;
  };
  // Every group's decisions since the last call, each group's in the order they were made.
  std::vector<Addressed> take_notices();
  struct GroupEvent {
    std::string group;
    Event event;
  };
  // Every group's membership events since the last call (Options::record_events), each group's in
  // the order they happened.
  std::vector<GroupEvent> take_events();

  // The group, nullptr if no peer ever named it.
  const Membership *group(const std::string &name) const;
  // The names of every group a peer named, in order.
  std::vector<std::string> group_names() const;

 private:
  Membership &membership(const std::string &name);
  // After every event: carries each group's losses of a node's members to the node's other groups,
  // then lets held barriers whose wait ran out complete.
  void settle(Clock::time_point now);
  // The node's communicators, by group, as the groups hold them now (members and joiners).
  std::map<std::string, PeerId> comms_of(const std::string &node) const;
  // The node's declared group count (0: none, or no such node).
  uint32_t declared_groups(const std::string &node) const;
  // The nodes with a declared group count that `group` would admit (all L communicators wait) or
  // let go (a communicator of the node, in any group, at its barrier to leave) at its next barrier.
  std::set<std::string> changing_nodes(const Membership &group) const;
  // After a restart: the nodes a member of one group's epoch and a joiner, declaring its group
  // count, of another group that holds an epoch (the old coordinator admitted them, and some
  // groups never heard).
  std::set<std::string> half_in_nodes() const;
  // The groups that must complete together with `name`: its own and, closed over, those of the
  // nodes that change in any of them.
  std::set<std::string> coupled(const std::string &name) const;
  // Decides that `groups` complete or form together now: sets together_ and entering_.
  void bring_together(const std::set<std::string> &groups);
  void lose_node(const std::string &node, const std::string &except, const std::string &reason);

  // Membership::Gate
  bool may_complete(Membership &group) override;
  bool may_form(Membership &group) override;
  bool admits(const Membership &group, const Member &joiner) const override;
  const std::string &name_of(const Membership &group) const;

  Membership::Options opt_;
  std::map<std::string, std::unique_ptr<Membership>> groups_;
  std::map<const Membership *, std::string> names_;
  Clock::time_point now_{};
  // The groups completing or forming together right now, and the nodes they admit: those whole
  // (every communicator a joiner) when the decision was taken.
  std::set<std::string> together_;
  std::set<std::string> entering_;
  // A coordinator restarted mid-job rebuilds each group from the epoch its members report, formed
  // before the restart: any member in it of a node this coordinator lost since is lost there too.
  // adopted_: some group adopted an epoch (only then are losses kept); lost_nodes_: the nodes
  // lost since, each until one of its communicators is a member of an epoch formed here.
  bool adopted_ = false;
  std::set<std::string> lost_nodes_;
  // Groups whose full barrier waits for the node's other groups, since when.
  std::map<std::string, Clock::time_point> held_;
  // A barrier that completed on its own (held past its wait) let its leaving nodes go: their
  // communicators in the other groups are lost after it.
  std::vector<std::pair<std::string, std::string>> left_alone_;  // (node, group it left)
};

}  // namespace wccl::coord
