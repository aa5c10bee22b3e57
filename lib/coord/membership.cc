#include "coord/membership.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>

#include "coord/algo_choice.h"
#include "coord/messages.h"
#include "coord/ring_order.h"

namespace wccl::coord {
namespace {

long long ms(std::chrono::milliseconds d) { return static_cast<long long>(d.count()); }

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The natural order of names: runs of digits compare as numbers ("node2" before "node10"),
// everything else byte by byte.
bool name_before(const std::string &a, const std::string &b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (is_digit(a[i]) && is_digit(b[j])) {
      size_t ei = i, ej = j;
      while (ei < a.size() && is_digit(a[ei])) ++ei;
      while (ej < b.size() && is_digit(b[ej])) ++ej;
      size_t zi = i, zj = j;  // past leading zeros
      while (zi + 1 < ei && a[zi] == '0') ++zi;
      while (zj + 1 < ej && b[zj] == '0') ++zj;
      if (ei - zi != ej - zj) return ei - zi < ej - zj;
      const int c = a.compare(zi, ei - zi, b, zj, ej - zj);
      if (c != 0) return c < 0;
      i = ei;
      j = ej;
    } else {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

// Peers admitted together, in the natural order of their names (arrival breaks ties): the ring
// of a job's first epoch does not depend on which node reached the coordinator first.
std::vector<Member> by_name(std::vector<Member> peers) {
  // std::sort over positions, ties by position: std::stable_sort's temporary buffer is deprecated
  // in the C++ library clang 19 builds against (-Werror).
  std::vector<size_t> order(peers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const std::string &a = peers[x].info.name, &b = peers[y].info.name;
    return name_before(a, b) || (!name_before(b, a) && x < y);
  });
  std::vector<Member> sorted;
  sorted.reserve(peers.size());
  for (size_t k : order) sorted.push_back(std::move(peers[k]));
  return sorted;
}

}  // namespace

const char *loss_cause_name(LossCause cause) {
  switch (cause) {
    case LossCause::kDisconnected:
      return "disconnected";
    case LossCause::kSilent:
      return "silent";
    case LossCause::kProbe:
      return "probe";
    case LossCause::kStraggler:
      return "straggler";
    case LossCause::kNode:
      return "node";
    case LossCause::kSuperseded:
      return "superseded";
  }
  return "unknown";
}

const char *event_kind_name(Event::Kind kind) {
  switch (kind) {
    case Event::Kind::kRegistered:
      return "registered";
    case Event::Kind::kAdmitted:
      return "admitted";
    case Event::Kind::kLeft:
      return "left";
    case Event::Kind::kLost:
      return "lost";
    case Event::Kind::kRevoked:
      return "revoked";
    case Event::Kind::kEpoch:
      return "epoch";
    case Event::Kind::kAdopted:
      return "adopted";
  }
  return "unknown";
}

// A live member of the current epoch: in its ring, heard from, and not waiting to join again (a
// lost member that rejoins is a joiner, though its id is still in the old ring).
bool Membership::is_member(PeerId id) const {
  if (live_.count(id) == 0 || is_joiner(id)) return false;
  return std::any_of(ring_.begin(), ring_.end(), [&](const Member &m) { return m.id == id; });
}

bool Membership::is_joiner(PeerId id) const {
  return std::any_of(joiners_.begin(), joiners_.end(), [&](const Member &m) { return m.id == id; });
}

void Membership::forget(PeerId id) {
  const bool unconfirmed = unconfirmed_.erase(id) != 0;
  for (auto it = links_.begin(); it != links_.end();) {
    it = it->first.first == id || it->first.second == id ? links_.erase(it) : std::next(it);
  }
  live_.erase(id);
  probes_.erase(id);
  arrived_.erase(id);
  leaving_.erase(id);
  reforming_.erase(id);
  auto j =
      std::find_if(joiners_.begin(), joiners_.end(), [&](const Member &m) { return m.id == id; });
  if (j != joiners_.end()) joiners_.erase(j);
  if (unconfirmed) announce_revocation();
}

bool Membership::any_member() const {
  return std::any_of(ring_.begin(), ring_.end(), [&](const Member &m) { return is_member(m.id); });
}

int rank_in(const std::vector<Member> &ring, PeerId id) {
  for (size_t i = 0; i < ring.size(); ++i) {
    if (ring[i].id == id) return static_cast<int>(i);
  }
  return -1;
}

Status Membership::on_message(const ControlMessage &m, Clock::time_point now, bool *drop) {
  *drop = false;
  switch (m.type) {
    case MessageType::kJoin:
    case MessageType::kRejoin: {
      Status st = m.type == MessageType::kJoin
                      ? join(m.peer, m.info, now)
                      : rejoin(m.peer, m.info, m.epoch, m.ring, m.seq, now, m.crossovers);
      *drop = !st.ok();
      return st;
    }
    case MessageType::kHeartbeat:
      heartbeat(m.peer, now);
      return Status();
    case MessageType::kUpdate:
    case MessageType::kReform:
      return update(m.peer, m.epoch, m.seq, now, m.type == MessageType::kUpdate, m.count);
    case MessageType::kLeave:
      return leave(m.peer, m.epoch, m.seq, now, m.count);
    case MessageType::kLinkBroken:
      link_broken(m.peer, m.other, now);
      return Status();
    case MessageType::kLinkReport:
      report_links(m.peer, m.epoch, m.links);
      return Status();
    case MessageType::kDone:
      return done(m.peer, m.epoch, m.seq, now);
    case MessageType::kOpFailed:
      op_failed(m.peer, m.epoch, m.seq, m.text, now, m.code);
      return Status();
    default:
      *drop = true;
      return WCCL_ERROR(WCCL_ERR_PROTOCOL, "a peer sent coordinator message type %u",
                        static_cast<unsigned>(m.type));
  }
}

std::chrono::milliseconds Membership::tick_period(const Options &o) {
  auto period = std::min(o.peer_timeout / 20, o.probe_timeout / 4);
  if (o.straggler_timeout.count() > 0) period = std::min(period, o.straggler_timeout / 20);
  return std::clamp(period, std::chrono::milliseconds(5), std::chrono::milliseconds(100));
}

Status Membership::join(PeerId id, const PeerInfo &info, Clock::time_point now) {
  if (id == 0) return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "peer id 0 is reserved");
  if (is_joiner(id) || is_member(id)) {
    return WCCL_ERROR(WCCL_ERR_INVALID_USAGE, "peer %016llx (%s) is already registered",
                      static_cast<unsigned long long>(id), info.name.c_str());
  }
  if (live_.size() >= kMaxRingMembers) {
    return WCCL_ERROR(WCCL_ERR_INVALID_USAGE,
                      "the group already holds %zu peers, the most one group can have",
                      kMaxRingMembers);
  }
  forget_lost(id);
  joiners_.push_back({id, info});
  live_[id] = {info, now};
  last_join_ = now;
  record(Event::Kind::kRegistered, joiners_.back());
  // It hears which epoch it waits to enter: if this coordinator restarts before the job's members
  // come back to it, the joiner's REJOIN with that epoch holds the new one for them (rejoin()).
  if (any_member())
    notify(Notice::Kind::kPending, id).joiners = static_cast<uint32_t>(joiners_.size());
  maybe_form_first(now);
  return Status();
}

void Membership::heartbeat(PeerId id, Clock::time_point now) {
  auto it = live_.find(id);
  if (it != live_.end()) {
    it->second.last_seen = now;
    probes_.erase(id);
    return;
  }
  notify(Notice::Kind::kRemoved, id).reason =
      lost_.count(id) != 0 ? "this peer was declared lost; update to join again"
                           : "this peer is not registered";
}

Status Membership::update(PeerId id, uint64_t epoch, uint64_t ops, Clock::time_point now,
                          bool admit, uint32_t call) {
  if (is_joiner(id)) {
    // A lost peer that re-registered repeats its update when it hears it was removed: it waits
    // for admission either way.
    if (!admit)
      return WCCL_ERROR(WCCL_ERR_PEER_LOST,
                        "this peer waits for admission; it cannot re-form an epoch");
    live_[id].last_seen = now;
    return Status();
  }
  auto lost = lost_.find(id);
  if (lost != lost_.end() && !admit) {
    return WCCL_ERROR(WCCL_ERR_PEER_LOST, "this peer was declared lost; update to join again");
  }
  if (lost != lost_.end()) {
    // A peer declared lost (frozen, cut off) comes back: it joins again like any newcomer.
    const PeerInfo info = lost->second.info;
    return join(id, info, now);
  }
  return arrive(id, epoch, ops, now, /*leaving=*/false, admit, call);
}

Status Membership::arrive(PeerId id, uint64_t epoch, uint64_t ops, Clock::time_point now,
                          bool leaving, bool admit, uint32_t call) {
  if (!is_member(id)) {
    return WCCL_ERROR(WCCL_ERR_INVALID_USAGE, "peer %016llx is not registered",
                      static_cast<unsigned long long>(id));
  }
  if (epoch < epoch_) {
    // It missed the announcement of the epoch it is in (its connection was lost with it): that
    // epoch answers its update.
    live_[id].last_seen = now;
    notify(Notice::Kind::kEpoch, id).answers = call;
    return Status();
  }
  if (epoch != epoch_) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL,
                      "peer %016llx updates from epoch %llu, the current epoch is %llu",
                      static_cast<unsigned long long>(id), static_cast<unsigned long long>(epoch),
                      static_cast<unsigned long long>(epoch_));
  }
  live_[id].last_seen = now;
  const bool updating = admit && !leaving;
  const bool update_waiting = std::any_of(arrived_.begin(), arrived_.end(), [&](const auto &a) {
    return leaving_.count(a.first) == 0 && reforming_.count(a.first) == 0;
  });
  const char *gives_way =
      "a member is at an update barrier, so state sync's re-forming gives way: update and call it "
      "again";
  if (!admit && update_waiting) return WCCL_ERROR(WCCL_ERR_PEER_LOST, "%s", gives_way);
  if (updating) {
    for (PeerId r : reforming_) {
      arrived_.erase(r);
      notify(Notice::Kind::kRefused, r).reason = gives_way;
    }
    reforming_.clear();
  }
  const bool first = arrived_.empty();
  const bool was_open = barrier_open();
  arrived_[id] = call;
  if (leaving) leaving_.insert(id);
  if (!was_open && barrier_open()) barrier_opened_ = now;
  if (!admit) reforming_.insert(id);
  if (!revoked_) {
    const bool ahead = !done_.empty();  // someone completed an operation this member did not run
    if (ops != committed_ || ahead) {
      revoke(id,
             format("members are in different operations: %s reached the update barrier after %llu "
                    "operations of epoch %llu, %llu are committed%s",
                    live_[id].info.name.c_str(), static_cast<unsigned long long>(ops),
                    static_cast<unsigned long long>(epoch_),
                    static_cast<unsigned long long>(committed_),
                    ahead ? " and others completed a later one" : ""));
    } else if (first) {
      // Members still running operations learn where this one stopped: one past it is a mismatch.
      barrier_ops_ = ops;
      for (const Member &m : ring_) {
        if (m.id != id && is_member(m.id)) notify(Notice::Kind::kBarrier, m.id).seq = ops;
      }
    }
  }
  maybe_complete_update();
  return Status();
}

Status Membership::leave(PeerId id, uint64_t epoch, uint64_t ops, Clock::time_point now,
                         uint32_t call) {
  if (is_joiner(id)) {
    record(Event::Kind::kLeft, {id, live_.at(id).info});  // a joiner: member stays false
    forget(id);
    Notice &n = notify(Notice::Kind::kRemoved, id);
    n.reason = "left before admission";
    return Status();
  }
  if (lost_.count(id) != 0) {
    forget_lost(id);  // nothing left to leave: it was already removed from the job
    return Status();
  }
  return arrive(id, epoch, ops, now, /*leaving=*/true, /*admit=*/true, call);
}

void Membership::report_links(PeerId id, uint64_t epoch,
                              const std::vector<LinkMeasurement> &links) {
  if (epoch != epoch_ || !is_member(id) || ring_.size() > kMaxMeasuredRing) return;
  for (const LinkMeasurement &l : links) {
    if (l.rtt_us == 0 || l.peer == id || !is_member(l.peer)) continue;
    LinkEstimate &known = links_[std::minmax(id, l.peer)];
    known.rtt_us = l.rtt_us;
    if (l.bytes_per_s != 0) known.bytes_per_s = l.bytes_per_s;
  }
}

LinkEstimate Membership::link(PeerId a, PeerId b) const {
  auto it = links_.find(std::minmax(a, b));
  return it == links_.end() ? LinkEstimate{} : it->second;
}

uint32_t Membership::rtt(PeerId a, PeerId b) const { return link(a, b).rtt_us; }

void Membership::disconnected(PeerId id, Clock::time_point now) {
  if (leaving_.count(id) != 0) {
    // It said it was leaving and went: that is the graceful leave, not a loss.
    if (is_member(id)) last_member_left_ = true;
    record(Event::Kind::kLeft, {id, live_.at(id).info}).member = is_member(id);
    forget(id);
  } else {
    lose(id, LossCause::kDisconnected, "its connection to the coordinator closed");
  }
  maybe_complete_update();
  maybe_form_first(now);
}

void Membership::lose_node(const std::string &node, const std::string &reason,
                           Clock::time_point now) {
  if (node.empty()) return;
  std::vector<PeerId> of_node;
  for (const auto &[id, peer] : live_) {
    if (peer.info.node == node) of_node.push_back(id);
  }
  for (PeerId id : of_node) lose(id, LossCause::kNode, reason);
  maybe_complete_update();
  maybe_form_first(now);
}

std::vector<PeerInfo> Membership::take_lost() { return std::exchange(lost_now_, {}); }

void Membership::link_broken(PeerId reporter, PeerId suspect, Clock::time_point now) {
  auto it = live_.find(reporter);
  if (it != live_.end()) it->second.last_seen = now;
  // After a revocation members close the epoch's links on purpose, and the epoch is over anyway:
  // heartbeats alone decide who reaches the update.
  if (revoked_ || live_.count(suspect) == 0 || probes_.count(suspect) != 0) return;
  probes_[suspect] = now + opt_.probe_timeout;
  notify(Notice::Kind::kProbe, suspect);
}

void Membership::tick(Clock::time_point now) {
  std::vector<std::tuple<PeerId, LossCause, std::string>> lost;
  for (const auto &[id, peer] : live_) {
    if (now - peer.last_seen >= opt_.peer_timeout) {
      lost.emplace_back(id, LossCause::kSilent,
                        format("silent for %lld ms (peer_timeout_ms)", ms(opt_.peer_timeout)));
    }
  }
  for (const auto &[id, deadline] : probes_) {
    if (now >= deadline) {
      lost.emplace_back(
          id, LossCause::kProbe,
          format("no answer to a probe within %lld ms after a neighbour reported a broken link",
                 ms(opt_.probe_timeout)));
    }
  }
  if (opt_.straggler_timeout.count() > 0 && barrier_open() &&
      now - barrier_opened_ >= opt_.straggler_timeout) {
    for (const Member &m : ring_) {
      if (is_member(m.id) && arrived_.count(m.id) == 0) {
        lost.emplace_back(m.id, LossCause::kStraggler,
                          format("a straggler: not at the update barrier %lld ms after the first "
                                 "member (straggler_timeout_ms)",
                                 ms(opt_.straggler_timeout)));
      }
    }
  }
  for (const auto &[id, cause, reason] : lost) lose(id, cause, reason);
  maybe_complete_update();  // after all losses, so no epoch admits a peer about to be lost
  maybe_form_first(now);
}

void Membership::remember_lost(PeerId id, const PeerInfo &info) {
  forget_lost(id);
  const uint64_t order = ++lost_count_;
  lost_[id] = {info, order};
  lost_order_[order] = id;
  while (lost_.size() > kMaxLostRemembered) {  // the longest-lost is forgotten
    lost_.erase(lost_order_.begin()->second);
    lost_order_.erase(lost_order_.begin());
  }
}

void Membership::forget_lost(PeerId id) {
  auto it = lost_.find(id);
  if (it == lost_.end()) return;
  lost_order_.erase(it->second.order);
  lost_.erase(it);
}

void Membership::lose(PeerId id, LossCause cause, const std::string &reason) {
  auto it = live_.find(id);
  if (it == live_.end()) return;  // already lost or unknown
  const PeerInfo info = it->second.info;
  const bool member = is_member(id);
  Event &e = record(Event::Kind::kLost, {id, info});
  e.member = member;
  e.cause = cause;
  e.reason = reason;
  forget(id);
  // Marked lost, a peer never comes back as a member of this epoch, and its next update
  // re-registers it: a joiner too (a newcomer, or a lost member waiting again), which sends an
  // UPDATE when its heartbeat after a freeze longer than peer_timeout earns it a kRemoved.
  remember_lost(id, info);
  if (!member) return;
  last_member_left_ = false;
  if (!info.node.empty()) lost_now_.push_back(info);  // drained by take_lost() after every event
  revoke(id, info.name + ": " + reason);
  // Delivered only if it is still reachable (frozen or cut off rather than dead).
  notify(Notice::Kind::kRemoved, id).reason = "declared lost: " + reason;
}

void Membership::revoke(PeerId because, const std::string &reason, uint64_t failed, uint32_t code) {
  if (!revoked_) {
    Event &e = record(Event::Kind::kRevoked);
    e.reason = reason;
    e.seq = failed;
    e.code = code;
  }
  revoked_ = true;
  done_.clear();
  if (!revocation_pending_)
    revoked_by_ = {because, reason, failed, code};  // a pending one keeps its first cause
  revocation_pending_ = true;
  announce_revocation();
}

// After a restart, a member not back yet may have seen a COMMIT this coordinator never heard of:
// the others hear of the revocation (which fails what is not committed) once every member of the
// epoch is back or lost, so that a commit one of them saw is never undone.
void Membership::announce_revocation() {
  if (!revocation_pending_ || !unconfirmed_.empty()) return;
  revocation_pending_ = false;
  for (const Member &m : ring_) {
    if (is_member(m.id)) notify_revoked(m.id);
  }
}

void Membership::notify_revoked(PeerId to) {
  Notice &n = notify(Notice::Kind::kRevoked, to);
  n.lost = revoked_by_.lost;
  n.reason = revoked_by_.reason;
  n.failed = revoked_by_.failed;
  n.code = revoked_by_.code;
  n.seq = committed_;  // what stays committed, for a member that has not heard the COMMIT yet
}

Status Membership::done(PeerId id, uint64_t epoch, uint64_t seq, Clock::time_point now) {
  if (!is_member(id))
    return Status();  // lost or gone: its operations were decided by the revocation
  live_[id].last_seen = now;
  if (epoch != epoch_) return Status();
  if (seq <= committed_) {
    // A repeat after a reconnection: a committed operation stays committed, revoked epoch or not.
    notify(Notice::Kind::kCommit, id).seq = committed_;
    return Status();
  }
  if (revoked_) return Status();
  if (seq > committed_ + kMaxOpsAhead) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL,
                      "peer %016llx reports operation %llu done; the last committed is %llu",
                      static_cast<unsigned long long>(id), static_cast<unsigned long long>(seq),
                      static_cast<unsigned long long>(committed_));
  }
  done_[seq].insert(id);
  maybe_commit();
  return Status();
}

void Membership::maybe_commit() {
  auto complete = [&](const std::set<PeerId> &done) {
    // (A member that is not live has revoked the epoch, so nothing gets here without it.)
    return std::all_of(ring_.begin(), ring_.end(),
                       [&](const Member &m) { return done.count(m.id) != 0; });
  };
  const uint64_t before = committed_;
  for (auto next = done_.find(committed_ + 1); next != done_.end() && complete(next->second);
       next = done_.find(committed_ + 1)) {
    ++committed_;
    done_.erase(next);
  }
  if (committed_ == before) return;
  operations_committed_ += committed_ - before;
  for (const Member &m : ring_) notify(Notice::Kind::kCommit, m.id).seq = committed_;
}

void Membership::op_failed(PeerId id, uint64_t epoch, uint64_t seq, const std::string &reason,
                           Clock::time_point now, uint32_t code) {
  if (!is_member(id)) return;
  live_[id].last_seen = now;
  // Even after seq was committed: the member's view of the epoch is broken (it may have given
  // up waiting for the commit), so every member must update. Committed operations stay committed.
  if (epoch != epoch_ || revoked_) return;
  // Calls that differ are every member's failure, and a retry would differ again: the operation
  // fails with MISMATCH everywhere. Any other failure is the reporting member's own (its deadline,
  // its GPU, its data) or a broken link: for the others a peer of the epoch was lost, and an update
  // and retry may succeed without it.
  revoke(id,
         format("operation %llu failed on %s: %s", static_cast<unsigned long long>(seq),
                live_[id].info.name.c_str(), reason.c_str()),
         seq, code == WCCL_ERR_MISMATCH ? WCCL_ERR_MISMATCH : WCCL_ERR_PEER_LOST);
}

std::vector<Member> Membership::admissible_joiners() const {
  std::vector<Member> out;
  for (const Member &j : joiners_) {
    if (gate_ == nullptr || gate_->admits(*this, j)) out.push_back(j);
  }
  return out;
}

std::vector<Member> Membership::take_admitted() {
  std::vector<Member> admitted = admissible_joiners();
  for (const Member &a : admitted) {
    joiners_.erase(std::find(joiners_.begin(), joiners_.end(), a));
  }
  return by_name(std::move(admitted));
}

bool Membership::can_form(Clock::time_point now) const {
  if (any_member() || joiners_.empty() || now - last_join_ < opt_.settle) return false;
  // A peer reported an epoch this coordinator (restarted) never adopted: the job's members may be
  // on their way back with it. They get peer_timeout to return before joiners form a new one.
  if (epoch_floor_ > epoch_ && now - floor_heard_ < opt_.peer_timeout) return false;
  const size_t admissible = admissible_joiners().size();
  return admissible > 0 && admissible >= static_cast<size_t>(opt_.min_peers);
}

// With no live member, waiting joiners form the next epoch once there are enough of them and no
// newcomer has arrived for `settle`.
void Membership::maybe_form_first(Clock::time_point now) {
  if (gate_ != nullptr ? gate_->may_form(*this) : can_form(now)) form_first(now);
}

void Membership::form_first(Clock::time_point now) {
  ring_ = take_admitted();
  const bool first = epoch_ == 0 && epoch_floor_ == 0;  // heard of no job yet
  if (first) gives_way_until_ = now + opt_.peer_timeout;
  // Joiners alone: after the group's earlier members are all gone, they hold none of their state.
  origin_ = first               ? EpochOrigin::kFirst
            : last_member_left_ ? EpochOrigin::kAfterLeave
                                : EpochOrigin::kAfterLoss;
  epoch_ = next_epoch_number();
  crossovers_ = {};  // nothing measured yet
  for (const Member &m : ring_) record(Event::Kind::kAdmitted, m);
  Event &formed = record(Event::Kind::kEpoch);
  formed.members = formed.admitted = static_cast<uint32_t>(ring_.size());
  formed.origin = origin_;
  revoked_ = false;
  unconfirmed_.clear();
  revocation_pending_ = false;
  done_.clear();
  committed_ = 0;
  arrived_.clear();
  leaving_.clear();
  reforming_.clear();
  announce_epoch(false);
}

uint64_t Membership::next_epoch_number() {
  // Past epoch_ too: an adopted epoch may carry a number above the clock's (another host's).
  last_formed_ = std::max({epoch_, epoch_floor_, last_formed_}) + 1;
  return last_formed_;
}

bool Membership::barrier_open() const {
  return std::any_of(arrived_.begin(), arrived_.end(),
                     [&](const auto &a) { return leaving_.count(a.first) == 0; });
}

bool Membership::barrier_full() const {
  if (arrived_.empty()) return false;
  return std::all_of(ring_.begin(), ring_.end(), [&](const Member &m) {
    return !is_member(m.id) || arrived_.count(m.id) != 0;
  });
}

// When every live member has arrived at the barrier, decides the next epoch.
void Membership::maybe_complete_update() {
  if (!barrier_full()) return;
  if (gate_ != nullptr && reforming_.empty() && !gate_->may_complete(*this)) return;
  complete_barrier();
}

void Membership::complete_barrier() {
  if (!barrier_full()) return;
  std::vector<Member> next;
  for (const Member &m : ring_) {
    if (is_member(m.id) && leaving_.count(m.id) == 0) next.push_back(m);
  }
  const bool admit = reforming_.empty();
  const std::vector<Member> admitted = admit ? take_admitted() : std::vector<Member>{};
  bool changed = revoked_ || !admitted.empty() || next.size() != ring_.size();
  const std::set<PeerId> leavers = leaving_;
  const auto members_lost = static_cast<uint32_t>(std::count_if(
      ring_.begin(), ring_.end(), [this](const Member &m) { return !is_member(m.id); }));
  for (PeerId id : leavers) {
    record(Event::Kind::kLeft, {id, live_.at(id).info}).member = true;
    forget(id);
    notify(Notice::Kind::kLeft, id);
  }
  if (!leavers.empty()) last_member_left_ = true;
  // No member goes on (they left, or were lost after arriving): the joiners admitted here are
  // alone, as if they formed the epoch with no member left.
  const EpochOrigin origin = !next.empty()       ? EpochOrigin::kContinues
                             : last_member_left_ ? EpochOrigin::kAfterLeave
                                                 : EpochOrigin::kAfterLoss;
  next.insert(next.end(), admitted.begin(), admitted.end());
  if (opt_.measured_order && next.size() <= kMaxMeasuredRing) {
    const RttOf rtt_of = with_paths(next, [this](PeerId a, PeerId b) { return rtt(a, b); });
    std::vector<Member> ordered = order_ring(next, rtt_of);
    const auto now_cost = ring_cost(next, rtt_of), best = ring_cost(ordered, rtt_of);
    auto gains = [](uint64_t now, uint64_t then) {
      return then + kReorderMinGainUs <= now &&
             static_cast<double>(then) < kReorderMargin * static_cast<double>(now);
    };
    const bool worth_an_epoch =
        now_cost && best &&
        (gains(now_cost->max_us, best->max_us) ||
         (best->max_us <= now_cost->max_us && gains(now_cost->sum_us, best->sum_us)));
    if (changed || worth_an_epoch) {
      changed = changed || next != ordered;
      next = std::move(ordered);
    }
  }
  leaving_.clear();
  reforming_.clear();
  // Every member is at the barrier, so all of them start their next operation with the crossovers
  // the answer carries, and they stay fixed until the next barrier (re-sent answers carry them
  // too).
  crossovers_ = opt_.measured_crossover && next.size() <= kMaxMeasuredRing
                    ? coord::crossovers(next, [this](PeerId a, PeerId b) { return link(a, b); })
                    : algo::Crossovers{};
  if (changed) {
    epoch_ = next_epoch_number();
    origin_ = origin;
    ring_ = std::move(next);
    revoked_ = false;
    unconfirmed_.clear();
    revocation_pending_ = false;
    done_.clear();  // operation numbers start again with every new epoch
    committed_ = 0;
    for (const Member &m : admitted) record(Event::Kind::kAdmitted, m);
    if (!ring_.empty()) {  // (every member left: the group has no epoch; the kLeft events say so)
      Event &formed = record(Event::Kind::kEpoch);
      formed.members = static_cast<uint32_t>(ring_.size());
      formed.origin = origin_;
      formed.admitted = static_cast<uint32_t>(admitted.size());
      formed.left = static_cast<uint32_t>(leavers.size());
      formed.lost = members_lost;
    }
  }
  announce_epoch(/*barrier=*/true);  // names each member's call at the barrier
  arrived_.clear();
}

void Membership::announce_epoch(bool barrier) {
  for (const Member &m : ring_) {
    if (is_joiner(m.id)) continue;  // named by an adopted ring, but outside it (waits_outside)
    Notice &n = notify(Notice::Kind::kEpoch, m.id);
    auto call = arrived_.find(m.id);
    if (barrier && call != arrived_.end()) n.answers = call->second;
  }
}

Event &Membership::record(Event::Kind kind, const Member &peer) {
  if (!opt_.record_events) {
    ignored_event_ = {};
    return ignored_event_;
  }
  Event e;
  e.kind = kind;
  e.epoch = epoch_;
  e.peer = peer;
  events_.push_back(std::move(e));
  return events_.back();
}

Notice &Membership::notify(Notice::Kind kind, PeerId to) {
  Notice n;
  n.kind = kind;
  n.to = to;
  n.epoch = epoch_;
  if (kind == Notice::Kind::kEpoch) {
    n.ring = ring_;
    n.crossovers = crossovers_;
    n.origin = origin_;
  }
  notices_.push_back(std::move(n));
  return notices_.back();
}

std::vector<Notice> Membership::take_notices() {
  if (joiners_.size() != pending_told_) {
    pending_told_ = joiners_.size();
    for (const Member &m : ring_) {
      if (is_member(m.id))
        notify(Notice::Kind::kPending, m.id).joiners = static_cast<uint32_t>(pending_told_);
    }
  } else {
    // A member that reconnected may have missed the count (even a drop to 0) and hears it again.
    // A member told of an epoch forgets the joiners that waited (a barrier admits them all), but
    // an epoch that admitted nobody (a REFORM, an adopted one) leaves them waiting: while they do,
    // its members hear the count again.
    std::set<PeerId> told = retell_pending_;
    for (const Notice &n : notices_) {
      if (n.kind == Notice::Kind::kEpoch && pending_told_ > 0) told.insert(n.to);
    }
    for (PeerId id : told) {
      if (is_member(id))
        notify(Notice::Kind::kPending, id).joiners = static_cast<uint32_t>(pending_told_);
    }
  }
  retell_pending_.clear();
  std::vector<Notice> out;
  out.swap(notices_);
  return out;
}

std::vector<std::pair<PeerId, PeerInfo>> Membership::live_peers() const {
  std::vector<std::pair<PeerId, PeerInfo>> out;
  out.reserve(live_.size());
  for (const auto &[id, peer] : live_) out.emplace_back(id, peer.info);
  return out;
}

Clock::time_point Membership::next_deadline() const {
  Clock::time_point next = Clock::time_point::max();
  for (const auto &[id, peer] : live_) next = std::min(next, peer.last_seen + opt_.peer_timeout);
  for (const auto &[id, deadline] : probes_) next = std::min(next, deadline);
  if (opt_.straggler_timeout.count() > 0 && barrier_open())
    next = std::min(next, barrier_opened_ + opt_.straggler_timeout);
  if (!any_member() && joiners_.size() >= static_cast<size_t>(std::max(1, opt_.min_peers))) {
    next = std::min(next, std::max(last_join_ + opt_.settle, epoch_floor_ > epoch_
                                                                 ? floor_heard_ + opt_.peer_timeout
                                                                 : Clock::time_point()));
  }
  return next;
}

}  // namespace wccl::coord
