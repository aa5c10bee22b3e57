#include "comm/member.h"

#include <algorithm>

#include "algo/collectives.h"

namespace wccl::comm {

using coord::ControlMessage;
using coord::MessageType;

ControlMessage Member::message(MessageType type) const {
  ControlMessage m;
  m.type = type;
  m.peer = id_;
  m.group = group_;
  m.info = info_;
  return m;
}

int Member::rank_of(coord::PeerId id) const { return coord::rank_in(ring_, id); }

// The schedules' neighbours (algo::schedule_neighbours): at most 8 links whatever the epoch's
// size. State sync's donors and receivers are linked per operation (EpochLinks::want).
std::set<int> Member::neighbours() const { return algo::schedule_neighbours(rank_, size()); }

void Member::decide(OpKey op, Status outcome, Actions *out) {
  if (ops_.erase(op) == 0) return;
  Action a;
  a.kind = Action::Kind::kDecide;
  a.epoch = op.first;
  a.seq = op.second;
  a.status = std::move(outcome);
  out->push_back(std::move(a));
}

void Member::fail_undecided(const Status &why, Actions *out, bool keep_awaiting) {
  std::vector<OpKey> undecided;
  bool running = false;
  for (const auto &[key, state] : ops_) {
    if (state == OpState::kRunning) {
      running = true;  // decided by finished() once its data phase has stopped
    } else if (state == OpState::kQueued || !keep_awaiting) {
      undecided.push_back(key);
    }
  }
  for (const OpKey &key : undecided) decide(key, why, out);
  // The first cause is what later operations of the epoch report (an abort has its own flag).
  if (epoch_failure_.ok() && why.code() != WCCL_ERR_ABORTED) epoch_failure_ = why;
  if (running) {
    Action a;
    a.kind = Action::Kind::kCancelRunning;
    a.status = why;
    out->push_back(std::move(a));
  }
}

ControlMessage Member::revoke_here(uint64_t seq, const Status &why, Actions *out) {
  revoked_ = true;
  fail_undecided(why, out, /*keep_awaiting=*/true);
  ControlMessage report = message(MessageType::kOpFailed);
  report.epoch = epoch_;
  report.seq = seq;
  report.code = WCCL_ERR_PEER_LOST;
  report.text = why.message();
  return report;
}

void Member::commit(uint64_t seq, Actions *out) {
  if (seq <= committed_seq_) return;
  committed_seq_ = seq;
  // Operations await their commit in order, ahead of the running and queued ones.
  for (auto it = ops_.lower_bound({epoch_, 0});
       it != ops_.end() && it->first.second <= seq && it->second == OpState::kAwaiting;
       it = ops_.lower_bound({epoch_, 0})) {
    decide(it->first, Status(), out);
  }
}

void Member::revoke_past_barrier(uint64_t seq, Actions *out) {
  Action report;
  report.message = revoke_here(
      seq,
      WCCL_ERROR(WCCL_ERR_PEER_LOST,
                 "members are in different operations of epoch %llu: another member waits at the "
                 "update barrier "
                 "after %llu operations, and this peer is at operation %llu; update and retry",
                 static_cast<unsigned long long>(epoch_),
                 static_cast<unsigned long long>(barrier_ops_),
                 static_cast<unsigned long long>(seq)),
      out);
  out->push_back(std::move(report));
}

void Member::answer(Status st) {
  if (call_ == Call::kNone) return;
  call_ = Call::kNone;
  call_status_ = std::move(st);
}

Actions Member::on_message(const ControlMessage &m) {
  Actions out;
  switch (m.type) {
    case MessageType::kEpoch:
      if (m.epoch < epoch_) break;  // a member's epochs only move forward
      if (m.epoch == epoch_ && revoked_ && rank_ >= 0) {
        // A restarted coordinator adopted this epoch without knowing that it was revoked: it hears
        // so now (the same operation numbers must never run twice), and the call it may have
        // completed at the old barrier is sent again, to end in the next epoch.
        Action report;
        report.message = message(MessageType::kOpFailed);
        report.message.epoch = epoch_;
        report.message.seq = next_seq_ + 1;
        report.message.code = WCCL_ERR_PEER_LOST;
        report.message.text =
            "epoch " + std::to_string(epoch_) + " was revoked before the coordinator restarted";
        out.push_back(std::move(report));
        if (call_ == Call::kUpdate || call_ == Call::kReform) {
          Action again;
          again.message =
              message(call_ == Call::kUpdate ? MessageType::kUpdate : MessageType::kReform);
          again.message.epoch = epoch_;
          again.message.seq = next_seq_;
          again.message.count = call_id_;
          out.push_back(std::move(again));
        }
        break;
      }
      if (m.epoch == epoch_ && m.ring == ring_ && rank_ >= 0 && !revoked_) {
        // The same epoch confirmed (nothing changed at the update, or a restarted coordinator
        // adopted it): its links and its operation numbering carry on. Only the answer to this
        // member's call ends it: an announcement (a restarted coordinator's) or a late answer to
        // an earlier call leaves it waiting, registered at the barrier.
        if (m.count == 0 || m.count != call_id_ ||
            (call_ != Call::kUpdate && call_ != Call::kReform))
          break;
        pending_ = 0;
        barrier_ops_ = kNoBarrier;
        crossovers_ = m.crossovers;  // fixed anew at the barrier, the same for every member
      } else {
        // Operations of the previous epoch that are still undecided can no longer commit.
        fail_undecided(
            WCCL_ERROR(WCCL_ERR_PEER_LOST, "epoch %llu ended before the operation was committed",
                       static_cast<unsigned long long>(epoch_)),
            &out);
        epoch_ = m.epoch;
        ring_ = m.ring;
        crossovers_ = m.crossovers;
        epoch_origin_ = m.origin;
        rank_ = rank_of(id_);
        revoked_ = false;
        removed_ = false;
        epoch_failure_ = Status();
        first_broken_ = Status();
        verdict_.reset();
        verdict_given_ = false;
        next_seq_ = 0;
        committed_seq_ = 0;
        barrier_ops_ = kNoBarrier;
        pending_ = 0;  // admission takes every waiting joiner; later ones are announced anew
        Action a;
        a.kind = Action::Kind::kEpochChanged;
        a.epoch = epoch_;
        out.push_back(std::move(a));
      }
      if (call_ == Call::kJoin || call_ == Call::kUpdate || call_ == Call::kReform)
        answer(Status());
      break;
    case MessageType::kRevoked: {
      if (m.epoch != epoch_) break;
      commit(m.seq, &out);  // a COMMIT this member missed (a coordinator restart) still stands
      revoked_ = true;
      const Status why = WCCL_ERROR(WCCL_ERR_PEER_LOST, "epoch %llu was revoked: %s",
                                    static_cast<unsigned long long>(m.epoch), m.text.c_str());
      // The operation whose failure revoked the epoch fails with the code the coordinator gives it
      // (MISMATCH for calls that differ: one outcome for one fault); a code this library does not
      // know reads as PEER_LOST.
      if (m.failed != 0 && m.code != WCCL_OK && m.code != WCCL_ERR_PEER_LOST &&
          m.code < static_cast<uint32_t>(WCCL_ERR_MISMATCH) + 1 && m.code != WCCL_ERR_IN_PROGRESS) {
        verdict_ = {m.failed,
                    WCCL_ERROR(static_cast<wccl_result_t>(m.code), "epoch %llu was revoked: %s",
                               static_cast<unsigned long long>(m.epoch), m.text.c_str())};
        auto it = ops_.find({epoch_, m.failed});
        if (it != ops_.end() && it->second != OpState::kRunning)
          decide(it->first, verdict_->second, &out);
      }
      fail_undecided(why, &out);
      Action a;
      a.kind = Action::Kind::kWarn;
      a.status = why;
      out.push_back(std::move(a));
      break;
    }
    case MessageType::kLeft:
      left_ = true;  // its links close now without it being anyone's failure
      if (call_ == Call::kLeave) answer(Status());
      break;
    case MessageType::kRemoved:
      // Declared lost (or the epoch moved on without us): this epoch is over for us too.
      revoked_ = true;
      removed_ = true;
      fail_undecided(WCCL_ERROR(WCCL_ERR_PEER_LOST, "this peer was removed from epoch %llu: %s",
                                static_cast<unsigned long long>(epoch_), m.text.c_str()),
                     &out);
      if (call_ == Call::kUpdate || call_ == Call::kJoin) {
        // The UPDATE it sent, or its JOIN (a joiner silent for peer_timeout_ms while it waited,
        // frozen or descheduled), was forgotten with it: an UPDATE re-registers this peer, and
        // repeated while it waits, it only refreshes its liveness. The epoch that admits it answers
        // the call.
        Action a;
        a.message = message(MessageType::kUpdate);
        a.message.epoch = epoch_;
        a.message.seq = next_seq_;
        a.message.count = call_id_;
        out.push_back(std::move(a));
      } else if (call_ == Call::kReform) {
        answer(WCCL_ERROR(
            WCCL_ERR_PEER_LOST,
            "reform: this peer was declared lost while it waited; update to join again"));
      } else if (call_ == Call::kLeave) {
        left_ = true;  // nothing left to leave
        answer(Status());
      }
      break;
    case MessageType::kCommit:
      if (m.epoch == epoch_) commit(m.seq, &out);
      break;
    case MessageType::kBarrier: {
      if (m.epoch != epoch_ || revoked_) break;
      barrier_ops_ = std::min(barrier_ops_, m.seq);
      if (next_seq_ <= barrier_ops_) break;  // this peer stops there too, or will run into it
      revoke_past_barrier(barrier_ops_ + 1, &out);
      break;
    }
    case MessageType::kProbe: {
      Action a;
      a.message = heartbeat();
      out.push_back(std::move(a));
      break;
    }
    case MessageType::kPending:
      if (rank_ < 0 || removed_) {
        awaited_epoch_ =
            std::max(awaited_epoch_, m.epoch);  // it was registered to enter that epoch
      } else if (m.epoch == epoch_) {
        pending_ = static_cast<int>(m.count);
      }
      break;
    case MessageType::kError: {
      const auto code = static_cast<wccl_result_t>(m.code);
      answer(WCCL_ERROR(code == WCCL_OK ? WCCL_ERR_PROTOCOL : code, "the coordinator refused: %s",
                        m.text.c_str()));
      break;
    }
    default:
      break;
  }
  return out;
}

Status Member::submit(uint64_t *seq, Actions *out) {
  if (left_ || rank_ < 0)
    return WCCL_ERROR(WCCL_ERR_INVALID_USAGE, "this peer is not a member (it left)");
  if (revoked_) {
    if (verdict_ && verdict_->first == next_seq_ + 1 && !verdict_given_) {
      // The operation whose failure revoked the epoch, called here only now: it fails as it did
      // everywhere (calls that differ: MISMATCH).
      verdict_given_ = true;
      return verdict_->second;
    }
    return WCCL_ERROR(WCCL_ERR_PEER_LOST, "epoch %llu is revoked%s%s; call update and retry",
                      static_cast<unsigned long long>(epoch_), epoch_failure_.ok() ? "" : ": ",
                      epoch_failure_.message().c_str());
  }
  if (call_ == Call::kUpdate || call_ == Call::kReform) {
    // Its number would follow the barrier this peer waits at, where the epoch and algo=AUTO's
    // crossovers may change: the others would run it in the epoch the answer brings.
    return WCCL_ERROR(WCCL_ERR_INVALID_USAGE,
                      "this peer's %s is waiting at the barrier; start operations after it returns",
                      call_ == Call::kUpdate ? "update" : "reform");
  }
  if (ops_.size() >= kMaxOpsInFlight) {
    return WCCL_ERROR(WCCL_ERR_INVALID_USAGE,
                      "%zu operations are already in flight (the most a communicator takes)",
                      ops_.size());
  }
  if (next_seq_ >= barrier_ops_) {
    // Another member waits at the update barrier after the operations this peer has run: this one
    // could never complete. Revoke the epoch rather than wait for it.
    revoke_past_barrier(next_seq_ + 1, out);
    return epoch_failure_;
  }
  *seq = ++next_seq_;
  ops_[{epoch_, *seq}] = OpState::kQueued;
  return Status();
}

bool Member::start(uint64_t epoch, uint64_t seq) {
  auto it = ops_.find({epoch, seq});
  if (it == ops_.end() || it->second != OpState::kQueued) return false;
  it->second = OpState::kRunning;
  return true;
}

Actions Member::finished(uint64_t epoch, uint64_t seq, const Status &st, bool data_error) {
  Actions out;
  const OpKey key{epoch, seq};
  if (ops_.count(key) == 0) return out;
  if (aborted_) {
    decide(key, WCCL_ERROR(WCCL_ERR_ABORTED, "the communicator was aborted"), &out);
  } else if (!data_error && (!epoch_failure_.ok() || epoch != epoch_)) {
    // Revoked while it ran (or it failed because of that): the revocation decides it.
    decide(key,
           epoch_failure_.ok() || epoch != epoch_
               ? WCCL_ERROR(WCCL_ERR_PEER_LOST, "the epoch ended")
           : verdict_ && verdict_->first == seq ? verdict_->second
                                                : epoch_failure_,
           &out);
  } else if (st.ok()) {
    ops_[key] = OpState::kAwaiting;
    Action a;
    a.message = message(MessageType::kDone);
    a.message.epoch = epoch;
    a.message.seq = seq;
    out.push_back(std::move(a));
  } else {
    // A broken link, the deadline, a data error: the epoch is revoked for everyone. A link of this
    // epoch that broke before is named first: the cause, where st may be a consequence. Not for
    // this member's own data errors, nor when either message holds the other: the operation
    // failed on that link (a peer closing between frames fails a send with "...closed the
    // connection" and then the link with "...closed the connection in the middle of a frame").
    const std::string &first = first_broken_.message();
    const bool earlier = !data_error && epoch == epoch_ && !first_broken_.ok() &&
                         st.message().find(first) == std::string::npos &&
                         first.find(st.message()) == std::string::npos;
    Action report;
    report.message = fail_here(
        key,
        earlier ? WCCL_ERROR(st.code(), "%s; then %s", first.c_str(), st.message().c_str()) : st,
        &out);
    out.push_back(std::move(report));
  }
  return out;
}

std::optional<ControlMessage> Member::link_broken(uint64_t epoch, coord::PeerId suspect,
                                                  const Status &why, bool connecting) {
  if (epoch != epoch_) return std::nullopt;
  if (!connecting && (revoked_ || aborted_ || left_ || why.code() == WCCL_ERR_ABORTED))
    return std::nullopt;
  if (first_broken_.ok()) first_broken_ = why;
  ControlMessage m = message(MessageType::kLinkBroken);
  m.other = suspect;
  return m;
}

Actions Member::report_mismatch(uint64_t epoch, uint64_t seq, const Status &why) const {
  Actions out;
  if (epoch != epoch_ || revoked_ || aborted_ || ops_.count({epoch, seq}) == 0) return out;
  Action report;
  report.message = message(MessageType::kOpFailed);
  report.message.epoch = epoch;
  report.message.seq = seq;
  report.message.code = why.code();
  report.message.text = why.message();
  out.push_back(std::move(report));
  return out;
}

Actions Member::give_up(uint64_t epoch, uint64_t seq, const Status &why) {
  Actions out;
  if (ops_.count({epoch, seq}) == 0) return out;
  Action report;
  report.message = fail_here({epoch, seq}, why, &out);
  out.push_back(std::move(report));
  return out;
}

ControlMessage Member::fail_here(OpKey key, const Status &why, Actions *out) {
  // Running out of time or memory, data the wire codec cannot carry (a NaN on the INT8 wire), or
  // a neighbour whose call differs is this peer's own outcome, which the others hear in the
  // REVOKED; anything else (a broken link, a refused frame) may be the consequence of a failure
  // elsewhere (a neighbour that failed closes its links), so the REVOKED decides it: every member
  // reports the one outcome of the fault that revoked the epoch.
  const bool own = why.code() == WCCL_ERR_TIMEOUT || why.code() == WCCL_ERR_NO_MEMORY ||
                   why.code() == WCCL_ERR_CUDA || why.code() == WCCL_ERR_INVALID_ARGUMENT ||
                   why.code() == WCCL_ERR_MISMATCH;
  const bool current = key.first == epoch_;
  if (own || !current)
    ops_.erase(key);  // decided here
  else
    ops_[key] = OpState::kFailed;  // until the REVOKED (or its deadline: give_up)
  const Status lost =
      WCCL_ERROR(WCCL_ERR_PEER_LOST, "operation %llu failed on this peer: %s",
                 static_cast<unsigned long long>(key.second), why.message().c_str());
  ControlMessage report = message(MessageType::kOpFailed);
  if (current) report = revoke_here(key.second, lost, out);
  report.epoch = key.first;
  report.seq = key.second;
  report.code = own ? why.code() : WCCL_ERR_PEER_LOST;
  report.text = why.message();
  if (own || !current) {
    Action d;
    d.kind = Action::Kind::kDecide;
    d.epoch = key.first;
    d.seq = key.second;
    d.status = own ? why : lost;
    out->push_back(std::move(d));
  }
  return report;
}

Actions Member::abort(const Status &why) {
  Actions out;
  aborted_ = true;
  fail_undecided(why, &out);
  answer(why);
  return out;
}

ControlMessage Member::begin_join() {
  call_ = Call::kJoin;
  return message(MessageType::kJoin);
}

Status Member::call(MessageType type, Actions *out) {
  const char *what = type == MessageType::kUpdate   ? "update"
                     : type == MessageType::kReform ? "reform"
                                                    : "leave";
  if (type != MessageType::kLeave && !ops_.empty()) {
    return WCCL_ERROR(WCCL_ERR_INVALID_USAGE,
                      "%s: %zu operations of this peer are not decided yet; wait for them first",
                      what, ops_.size());
  }
  call_ = type == MessageType::kUpdate   ? Call::kUpdate
          : type == MessageType::kReform ? Call::kReform
                                         : Call::kLeave;
  call_status_ = Status();
  if (++call_id_ == 0) call_id_ = 1;  // 0 names no call
  Action a;
  a.message = message(type);
  a.message.epoch = epoch_;
  a.message.seq = next_seq_;
  a.message.count = call_id_;
  out->push_back(std::move(a));
  return Status();
}

std::vector<ControlMessage> Member::rejoin() const {
  std::vector<ControlMessage> out;
  ControlMessage again = message(MessageType::kRejoin);
  if (rank_ >= 0 && !removed_) {
    again.epoch = epoch_;
    again.seq = committed_seq_;
    again.ring = ring_;
    again.crossovers = crossovers_;
  } else {
    // A joiner, or a peer declared lost, holds no epoch (an empty ring): it comes back as a joiner,
    // naming the newest epoch of the job it heard of.
    again.epoch = std::max(epoch_, awaited_epoch_);
  }
  out.push_back(std::move(again));
  // Operations waiting for their decision report their DONE again: the coordinator may be a new
  // one that never heard it.
  for (const auto &[key, state] : ops_) {
    if (state != OpState::kAwaiting || key.first != epoch_) continue;
    ControlMessage d = message(MessageType::kDone);
    d.epoch = key.first;
    d.seq = key.second;
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace wccl::comm
