// A peer coming back to the coordinator after its connection was lost or the coordinator
// restarted (REJOIN): it reports the epoch it is in, its ring and the operations it saw committed.
// The job's epoch is adopted from the members that report it, a member of the current epoch hears
// what it missed, anyone else joins again.
#include <algorithm>
#include <set>

#include "coord/membership.h"

namespace wccl::coord {

Status Membership::rejoin(PeerId id, const PeerInfo &info, uint64_t epoch,
                          const std::vector<Member> &ring, uint64_t committed,
                          Clock::time_point now, algo::Crossovers crossovers) {
  if (epoch >= (1ULL << 63)) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "rejoin reports epoch %llu",
                      static_cast<unsigned long long>(epoch));
  }
  std::set<PeerId> seen;
  for (const Member &m : ring) {
    if (!seen.insert(m.id).second) {
      return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "rejoin reports a ring with peer %016llx twice",
                        static_cast<unsigned long long>(m.id));
    }
  }
  if (ring.size() > kMaxRingMembers) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "rejoin reports a ring of %zu peers", ring.size());
  }
  if (seen.count(id) != 0 && !formed_here(epoch) &&
      (epoch > epoch_ || (now < gives_way_until_ && epoch != epoch_))) {
    adopt(id, info, epoch, ring, committed, now, crossovers);
    return Status();
  }
  if (is_member(id) && ring.empty() && epoch == epoch_) {
    // The job's members name it in this epoch, but it was declared lost from it (it reports the
    // epoch and no ring; a joiner whose admitting EPOCH never reached it names the epoch before).
    live_[id] = {info, now, epoch};
    waits_outside(id, now);
    maybe_complete_update();
    return Status();
  }
  if (is_member(id)) {  // a member of the current epoch coming back
    member_returns(id, info, epoch, committed, now);
    return Status();
  }
  // A fresh coordinator numbers the epochs it forms past every epoch a peer reports, so that a
  // number the job used before the restart never names another epoch.
  if (!formed_here(epoch) && epoch > epoch_floor_ && epoch > epoch_) {
    epoch_floor_ = epoch;
    floor_heard_ = now;
  }
  if (is_joiner(id)) return Status();
  if (epoch != 0 && !ring.empty()) {
    // Its epoch is not the job's (or it was lost from it): it must not act as a member of it. A
    // peer that reports no ring knows it is not a member (a joiner naming the epoch it waits to
    // enter, or a peer declared lost): nothing to tell it.
    notify(Notice::Kind::kRemoved, id).reason =
        "its epoch is not the job's current one; it joins again";
  }
  WCCL_RETURN_IF_ERROR(join(id, info, now));
  if (ring.empty()) live_[id].reported = epoch;  // adopt() tells a lost peer from a joiner by it
  return Status();
}

// The highest epoch any member reports is the one the job is in, and it supersedes an epoch this
// coordinator formed from joiners before any member of the job came back. Its members are told
// (some may have rejoined already under an older epoch); those not back yet get peer_timeout from
// now. Anyone else this coordinator knew is not part of it: removed, to join again.
void Membership::adopt(PeerId id, const PeerInfo &info, uint64_t epoch,
                       const std::vector<Member> &ring, uint64_t committed, Clock::time_point now,
                       algo::Crossovers crossovers) {
  // The members of an epoch formed here that this one supersedes hold a number past the job's.
  std::set<PeerId> superseded;
  if (epoch_ != 0 && formed_here(epoch_)) {
    for (const Member &m : ring_) superseded.insert(m.id);
  }
  gives_way_until_ = Clock::time_point();
  epoch_ = epoch;
  Event &adopted = record(Event::Kind::kAdopted, {id, info});
  adopted.members = static_cast<uint32_t>(ring.size());
  adopted.seq = committed;
  origin_ = EpochOrigin::kContinues;  // its members keep the origin they were told
  ring_ = ring;
  crossovers_ = crossovers;
  unconfirmed_.clear();
  revocation_pending_ = false;
  revoked_ = false;
  arrived_.clear();
  leaving_.clear();
  reforming_.clear();
  std::vector<PeerId> outside;
  for (const auto &[known, peer] : live_) {
    if (rank_in(ring, known) < 0 && !is_joiner(known)) outside.push_back(known);
  }
  for (PeerId o : outside) {
    const PeerInfo gone = live_[o].info;
    Event &e = record(Event::Kind::kLost, {o, gone});
    e.member = superseded.count(o) != 0;
    e.cause = LossCause::kSuperseded;
    e.reason = "outside the epoch the job's members reported after the coordinator restarted";
    remember_lost(o, gone);
    forget(o);
    notify(Notice::Kind::kRemoved, o).reason =
        "its epoch was superseded by the job's; update to join again";
    // Out of this group, its node is out of every group (Job): a member of an epoch this
    // coordinator formed in another group would be half in.
    if (!gone.node.empty()) lost_now_.push_back(gone);
  }
  std::vector<PeerId> lost_here;  // declared lost from this epoch: they stay joiners
  for (const Member &m : ring_) {
    forget_lost(m.id);
    if (superseded.count(m.id) != 0 && m.id != id && live_.count(m.id) != 0) {
      // Named by the job's ring, yet a member of the epoch formed here: it came back as a peer
      // declared lost from the job's epoch (which joined the epoch formed here), and a member's
      // epochs only move forward. Out of both: it waits as a joiner, and the job's epoch, which
      // names a member no longer in it, is revoked.
      if (!is_joiner(m.id)) {  // (one lost from it that registered again is a joiner already)
        joiners_.push_back({m.id, live_[m.id].info});
        notify(Notice::Kind::kRemoved, m.id).reason =
            "its epoch was superseded by the job's, which it cannot go back to; update to join "
            "again";
      }
      lost_here.push_back(m.id);
      continue;
    }
    auto j = std::find_if(joiners_.begin(), joiners_.end(),
                          [&](const Member &x) { return x.id == m.id; });
    if (j != joiners_.end()) {
      // A joiner that reported an older epoch was admitted to this one by the coordinator that
      // went, and never heard: a member. One that reported this epoch was declared lost from it,
      // and one that reported a later one (it heard of an epoch past it) cannot be in it.
      if (live_[m.id].reported >= epoch) {
        lost_here.push_back(m.id);
      } else {
        joiners_.erase(j);
      }
    }
    if (live_.count(m.id) == 0 && m.id != id) {
      live_[m.id] = {m.info, now};
      unconfirmed_.insert(m.id);  // what it saw committed is not known yet
    }
  }
  live_[id] = {info, now};
  done_.clear();
  committed_ = committed;
  announce_epoch(false);  // not to those outside it
  for (PeerId o : lost_here) waits_outside(o, now);
}

// A peer declared lost from the current epoch before the coordinator restarted, whose REMOVED
// reached it and the members' next epoch did not: their ring still names it. It waits as the
// joiner it is, and the epoch, which names a member no longer in it, is revoked (a node's
// communicators in the other groups are lost with it: Job). Taken back as a member, a node's
// communicator would be in this group while the node's others wait to join theirs.
void Membership::waits_outside(PeerId id, Clock::time_point now) {
  const PeerInfo info = live_.at(id).info;
  unconfirmed_.erase(id);
  if (!is_joiner(id)) {
    joiners_.push_back({id, info});
    last_join_ = now;
    notify(Notice::Kind::kPending, id).joiners = static_cast<uint32_t>(joiners_.size());
  }
  if (!info.node.empty()) lost_now_.push_back(info);
  revoke(id, info.name + ": declared lost from this epoch before the coordinator restarted");
}

// A member of the current epoch comes back (its connection was lost, or this coordinator restarted
// and adopted its epoch): it hears what it missed.
void Membership::member_returns(PeerId id, const PeerInfo &info, uint64_t epoch, uint64_t committed,
                                Clock::time_point now) {
  live_[id] = {info, now};
  retell_pending_.insert(id);  // it may have missed the count of waiting joiners
  const bool confirming = unconfirmed_.erase(id) != 0;
  if (epoch < epoch_) {
    // It missed the announcement of the epoch the others are in.
    notify(Notice::Kind::kEpoch, id);
  } else if (committed < committed_) {
    // It missed a COMMIT (its connection was lost with it): what is committed stays so.
    notify(Notice::Kind::kCommit, id).seq = committed_;
  } else if (committed > committed_ && (!revoked_ || revocation_pending_)) {
    // It saw a commit this coordinator (restarted) had not heard of: that decision stands.
    committed_ = committed;
    done_.erase(done_.begin(), done_.upper_bound(committed_));
    for (const Member &m : ring_) {
      if (is_member(m.id)) notify(Notice::Kind::kCommit, m.id).seq = committed_;
    }
  }
  if (!revoked_ && !arrived_.empty() && arrived_.count(id) == 0) {
    // Others wait at the update barrier: it hears where they stopped, as the others did (after
    // the epoch, if it missed that: a BARRIER for an epoch it is not in would mean nothing to it).
    notify(Notice::Kind::kBarrier, id).seq = barrier_ops_;
  }
  if (confirming) {
    announce_revocation();
  } else if (revoked_ && !revocation_pending_) {
    // It missed the revocation while it was away: the epoch's operations fail for it too.
    notify_revoked(id);
  }
}

}  // namespace wccl::coord
