// The member's half of the control protocol (DESIGN §2, §4), as a state machine without I/O: what
// one peer believes about its group (epoch, ring, revocation, joiners waiting), the numbering and
// outcome of its operations, and its membership calls (join, update, reform, leave). Events come in
// as calls (a coordinator message, a submitted operation, the end of a data phase, a membership
// call); what the shell must do comes out as Actions, in order. It has no clock, thread, lock or
// socket: the Communicator runs it under its mutex over real links, and
// tests/test_coord_control_sim.cc runs it beside the coordinator's Membership in a deterministic
// simulation.
//
// Operations are numbered 1, 2, ... within an epoch; every member must submit the same
// operations in the same order. An operation is queued, then running (its data phase), then
// awaiting its commit (DONE sent), then decided: OK on the coordinator's COMMIT, PEER_LOST when the
// epoch is revoked or ends (the operation whose failure revoked it: that failure's code, on every
// member), or this member's own error. A data phase that fails here revokes the
// epoch for everyone (OP_FAILED). A member that learns that another waits at the update barrier
// after fewer operations than it has submitted revokes the epoch too (BARRIER, issue 15): the
// group never waits with its members in different operations.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "algo/crossovers.h"
#include "coord/membership.h"
#include "coord/messages.h"
#include "core/status.h"

namespace wccl::comm {

struct Action {
  enum class Kind {
    kSend,           // send `message` to the coordinator
    kDecide,         // operation (epoch, seq) has its outcome `status`
    kCancelRunning,  // stop the running data phase with `status` (then call finished())
    kEpochChanged,   // a new epoch: close the old epoch's links, open this one's
    kWarn,           // log `status` as a warning (an epoch revoked: the news users need)
  };
  Kind kind = Kind::kSend;
  coord::ControlMessage message;
  uint64_t epoch = 0, seq = 0;
  Status status;
};
using Actions = std::vector<Action>;

class Member {
 public:
  // The undecided operations one member takes at once.
  static constexpr size_t kMaxOpsInFlight = 256;

  Member(coord::PeerId id, std::string group, coord::PeerInfo info)
      : id_(id), group_(std::move(group)), info_(std::move(info)) {}

  // --- events ---------------------------------------------------------------------------------
  Actions on_message(const coord::ControlMessage &m);
  // The application submits the next operation. On success *seq is its number in the current
  // epoch. PEER_LOST while the epoch is revoked (the operation whose failure revoked it, once:
  // that failure, MISMATCH) (or when it had to be revoked because another
  // member waits at the update barrier: an OP_FAILED is among the actions), INVALID_USAGE if this
  // peer is not a member, its update or reform waits at the barrier, or kMaxOpsInFlight operations
  // are undecided. On error nothing is queued.
  Status submit(uint64_t *seq, Actions *out);
  // The worker is about to run operation seq of `epoch`: false if it was decided meanwhile.
  bool start(uint64_t epoch, uint64_t seq);
  // Where an undecided operation is; none once it is decided (or if it never was submitted).
  // kFailed: its data phase failed here, not by this member's own fault (a link broke); the
  // coordinator's REVOKED decides it, with the code of the failure that revoked the epoch.
  enum class OpState { kQueued, kRunning, kAwaiting, kFailed };
  std::optional<OpState> op_state(uint64_t epoch, uint64_t seq) const {
    auto it = ops_.find({epoch, seq});
    if (it == ops_.end()) return std::nullopt;
    return it->second;
  }
  // Its data phase ended with st. `data_error` (the member's own data could not be sent: a NaN on
  // the INT8 wire, a GPU failure) decides it with st even if the epoch was revoked meanwhile.
  Actions finished(uint64_t epoch, uint64_t seq, const Status &st, bool data_error);
  // Its data phase found that a neighbour's call differs (MISMATCH, `why`) and has not yet closed
  // its links: the OP_FAILED goes to the coordinator now, before any neighbour can see a link
  // close and report it first (which would revoke the epoch with PEER_LOST, not MISMATCH, for the
  // members that hear of it only through the REVOKED). Nothing is decided: finished() does that.
  // No actions once the epoch is revoked here or over.
  Actions report_mismatch(uint64_t epoch, uint64_t seq, const Status &why) const;
  // The caller stopped waiting for seq (its deadline passed while queued or awaiting the commit):
  // decided with `why`, and the epoch is revoked (this peer cannot know the outcome).
  Actions give_up(uint64_t epoch, uint64_t seq, const Status &why);
  // Everything undecided fails with ABORTED from now on.
  Actions abort(const Status &why);

  // Membership calls. begin_join() before the coordinator link's JOIN; call() sends UPDATE, REFORM
  // or LEAVE (INVALID_USAGE for an update or reform while operations are undecided). The answer
  // arrives with a later message: call_answered() turns true and call_status() holds it.
  coord::ControlMessage begin_join();
  Status call(coord::MessageType type, Actions *out);
  bool call_answered() const { return call_ == Call::kNone; }
  const Status &call_status() const { return call_status_; }
  void cancel_call() { call_ = Call::kNone; }

  // After a reconnection to a (possibly restarted) coordinator: REJOIN with this epoch, then DONE
  // again for every operation awaiting its commit. A peer that is not a member (a joiner, one
  // declared lost) reports no ring and the newest epoch it heard of, awaited_epoch() if higher.
  std::vector<coord::ControlMessage> rejoin() const;
  // The job's epoch this peer heard of while it waits for admission (PENDING to a joiner); 0 if
  // none: the coordinator formed no epoch yet, or has not registered this peer.
  uint64_t awaited_epoch() const { return awaited_epoch_; }
  // Messages that need no state but who this peer is (so any thread may build them).
  coord::ControlMessage heartbeat() const { return message(coord::MessageType::kHeartbeat); }
  // Its link of `epoch` to `suspect` broke, or could not be opened (`connecting`), with `why`:
  // the LINK_BROKEN report, which makes the coordinator probe the suspect; none if the epoch is
  // not the current one, or (a break, not a failed open) if it is over here (revoked, aborted,
  // left) or this member closed the link itself (ABORTED: its own operation failed, or it was
  // aborted), which blames no neighbour. The epoch's first reported break is remembered: an
  // operation that then fails here on another link names it first. A survivor whose own link to
  // a killed peer broke closes all its links when its operation fails, and a member whose
  // transfers to the killed peer were done hears that close before anything else; its error
  // then names the killed peer, followed by the survivor that closed.
  std::optional<coord::ControlMessage> link_broken(uint64_t epoch, coord::PeerId suspect,
                                                   const Status &why, bool connecting = false);

  // --- state ----------------------------------------------------------------------------------
  coord::PeerId id() const { return id_; }
  uint64_t epoch() const { return epoch_; }
  const std::vector<coord::Member> &ring() const { return ring_; }
  // algo=AUTO's crossovers the coordinator measured for this epoch (EPOCH), 0s: none.
  const algo::Crossovers &crossovers() const { return crossovers_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(ring_.size()); }
  bool revoked() const { return revoked_; }
  // The group waits for this member's update: its epoch was revoked (or it was removed from it),
  // or another member waits at the epoch's update barrier (BARRIER). Its operations past the
  // barrier's count cannot commit until it updates.
  bool update_due() const { return revoked_ || barrier_ops_ != kNoBarrier; }
  bool left() const { return left_; }
  bool aborted() const { return aborted_; }
  int pending() const { return pending_; }
  // How the coordinator formed the current epoch (coord::EpochOrigin), from the EPOCH that made
  // this peer a member of it.
  uint32_t epoch_origin() const { return epoch_origin_; }
  size_t undecided() const { return ops_.size(); }
  // Why operations of the current epoch fail (OK while it is sound).
  const Status &epoch_failure() const { return epoch_failure_; }
  int rank_of(coord::PeerId id) const;
  std::set<int> neighbours() const;  // ranks this peer links to in the current epoch

 private:
  enum class Call { kNone, kJoin, kUpdate, kReform, kLeave };
  coord::ControlMessage message(coord::MessageType type) const;
  using OpKey = std::pair<uint64_t, uint64_t>;  // (epoch, seq)
  void decide(OpKey op, Status outcome, Actions *out);
  // Decides every undecided op but the running one (whose data phase is cancelled) with `why`.
  // A revocation of this member's own (keep_awaiting) leaves the ops whose DONE went out to the
  // coordinator: they may commit yet, and its REVOKED says which did.
  void fail_undecided(const Status &why, Actions *out, bool keep_awaiting = false);
  // Revokes the epoch here for a failure at operation seq and returns the OP_FAILED report.
  coord::ControlMessage revoke_here(uint64_t seq, const Status &why, Actions *out);
  // This peer is at operation seq, past barrier_ops_ where another member waits at the update
  // barrier: revokes the epoch here and adds the OP_FAILED report to out.
  void revoke_past_barrier(uint64_t seq, Actions *out);
  // Operation `op` failed on this member with `why`: it is decided (with `why` if that is this
  // member's own fault, else PEER_LOST), its epoch revoked, and the OP_FAILED report returned.
  coord::ControlMessage fail_here(OpKey op, const Status &why, Actions *out);
  void answer(Status st);
  void commit(uint64_t seq, Actions *out);  // operations 1..seq of this epoch are committed

  const coord::PeerId id_;
  const std::string group_;
  const coord::PeerInfo info_;
  uint64_t epoch_ = 0;
  std::vector<coord::Member> ring_;
  algo::Crossovers crossovers_;
  uint32_t epoch_origin_ = 0;
  int rank_ = -1;
  bool revoked_ = false;
  bool removed_ = false;  // declared lost from epoch_ (REMOVED)
  bool left_ = false;
  bool aborted_ = false;
  int pending_ = 0;
  uint64_t awaited_epoch_ = 0;
  Status epoch_failure_;
  Status first_broken_;  // the current epoch's first broken link (link_broken)
  // The operation whose failure revoked the current epoch, and its outcome (REVOKED), for the
  // running operation's finished().
  std::optional<std::pair<uint64_t, Status>> verdict_;
  bool verdict_given_ = false;  // to a submit() after the REVOKED of that operation's number
  uint64_t next_seq_ = 0;       // the last number given in this epoch
  uint64_t committed_seq_ = 0;  // the last COMMIT heard in this epoch
  static constexpr uint64_t kNoBarrier = ~0ULL;
  uint64_t barrier_ops_ =
      kNoBarrier;  // a member waits at the update barrier after this many operations
  // Undecided operations: the current epoch's, and a running one of an earlier epoch until its
  // data phase stops.
  std::map<OpKey, OpState> ops_;
  Call call_ = Call::kNone;
  uint32_t call_id_ = 0;  // numbers the calls; the EPOCH that answers one names it
  Status call_status_;
};

}  // namespace wccl::comm
