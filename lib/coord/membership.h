// The coordinator's membership authority for one group, as a state machine without I/O.
//
// Events come in as calls (join, heartbeat, update, leave, a lost control connection, a reported
// broken link, the passage of time); decisions come out as Notices addressed to peers, which the
// coordinator's network layer delivers. Time is passed in, so every rule is testable without
// clocks or sockets. Semantics follow ../shared/DESIGN.md §4:
//
// - Joiners wait. With no live epoch, joiners form one once at least `min_peers` have arrived and
//   `settle` has passed since the last arrival. With a live epoch, joiners are admitted when the
//   members complete an update.
// - An update is a barrier over the live members of the current epoch: each calls update() (or
//   leave(), which is an update that leaves). When every live member has arrived, the next epoch
//   is the survivors in their ring order minus the leavers, followed by the admitted joiners in
//   the natural order of their names (so is a first epoch: "node2" before "node10"). If nothing
//   changed and the epoch was not revoked, the same epoch is confirmed.
// - A member silent for `peer_timeout`, whose control connection closed, or that fails a probe
//   after a neighbour reported a broken link, is lost: the epoch is revoked (every live member is
//   told) and the barrier no longer waits for it. A lost peer never slips back: its later
//   heartbeat earns a kRemoved notice, and its next update() re-registers it as a joiner.
// - After a coordinator restart, peers rejoin() with the epoch and ring they hold; the highest
//   epoch reported is adopted, so numbering continues and members keep their epoch. A joiner
//   hears the epoch it waits to enter when it registers (kPending) and names it when it rejoins.
//   A peer the adopted ring names that reports no ring is a member if it names an older epoch
//   (admitted, its EPOCH lost), else a joiner declared lost from it: the epoch is revoked. So is a
//   member of the epoch it supersedes (one formed here from joiners) that the adopted ring names:
//   removed from both, a joiner (its epochs only move forward).
// - Operations are numbered 1, 2, ... within each epoch (a confirmed epoch continues its
//   numbering), in the order every member
//   calls them. A member reports done(seq) when its data phase completed; once every member has,
//   operation seq is committed (kCommit to every member; it implies every earlier one). A
//   revocation decides every operation not committed by then: it failed. So no member can see
//   one operation succeed and another see it fail, and a member's op_failed() revokes the epoch
//   for everyone. After a restart, the highest committed number any member reports is adopted.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "algo/crossovers.h"
#include "core/status.h"

namespace wccl::coord {

using Clock = std::chrono::steady_clock;
using PeerId = uint64_t;  // chosen at random by the peer; 0 is not a valid id
struct ControlMessage;    // coord/messages.h
inline constexpr size_t kMaxRingMembers = 4096;  // members and joiners of one group, at most

struct PeerInfo {
  std::string name;     // for logs
  std::string address;  // where its peer links are accepted ("host:port")
  std::string node;  // the `node` key: its node's communicators in other groups share it ("": none)
  // The `node_groups` key: how many groups the node has a communicator in (L), so that the
  // coordinator admits and drops the node whole (coord::Job); 0: it does not say (the node is
  // only lost together).
  uint32_t node_groups = 0;
};

// How the coordinator formed an epoch (the values of wccl_epoch_origin_t): from the members of the
// one before; or from joiners alone: the group's first, or after its last member was lost, or left.
enum class EpochOrigin : uint32_t { kContinues = 0, kFirst = 1, kAfterLoss = 2, kAfterLeave = 3 };

struct Member {
  PeerId id = 0;
  PeerInfo info;
  bool operator==(const Member &o) const {
    return id == o.id && info.name == o.info.name && info.address == o.info.address;
  }
};

// A member's measurement of its link to another member of its epoch (LINK_REPORT).
struct LinkMeasurement {
  PeerId peer = 0;
  uint32_t rtt_us = 0;  // the link's smallest round trip (net::Link::min_rtt_us), > 0
  uint64_t bytes_per_s =
      0;  // the highest rate it delivered while busy (net::Link::delivery_rate); 0: never busy
};

// What the coordinator knows of a link between two members (the latest LINK_REPORT about it).
struct LinkEstimate {
  uint32_t rtt_us = 0;       // 0: not measured
  uint64_t bytes_per_s = 0;  // 0: not measured
};

// The position of `id` in `ring`, -1 if it is not there.
int rank_in(const std::vector<Member> &ring, PeerId id);

// Rings of at most this many members are ordered from measured round trips (coord/ring_order.h);
// larger ones keep the order they were formed in.
inline constexpr size_t kMaxMeasuredRing = 64;

struct Notice {
  enum class Kind {
    kEpoch,    // `to` is a member of `epoch`, whose ring is `ring` (sent to every member)
    kRevoked,  // `epoch` lost peer `lost`; ops in it fail with PEER_LOST until update
    kRemoved,  // `to` is no longer a member: it was declared lost (`reason`)
    kLeft,     // `to` left: its leave completed at the update barrier
    kProbe,    // `to` must answer with a heartbeat at once (a neighbour reported a broken link)
    kPending,  // `joiners` peers wait to be admitted at the next update (sent to members when it
               // changes, and to a joiner as it registers: the epoch it waits to enter)
    kCommit,   // operations 1..seq of `epoch` are committed
    kBarrier,  // a member reached the update barrier of `epoch` after `seq` operations
    kRefused,  // `to`'s REFORM gave way to a member's UPDATE at the barrier: PEER_LOST (`reason`)
  };
  Kind kind = Kind::kEpoch;
  PeerId to = 0;
  uint64_t epoch = 0;
  std::vector<Member> ring;  // kEpoch
  uint32_t answers =
      0;  // kEpoch: the recipient's call (UPDATE, REFORM) it answers; 0: an announcement
  algo::Crossovers crossovers;  // kEpoch: algo=AUTO's (coord/algo_choice.h); 0s: none
  EpochOrigin origin = EpochOrigin::kContinues;  // kEpoch
  PeerId lost = 0;                               // kRevoked
  // kRevoked: the operation whose failure revoked the epoch (0: a loss) and that failure's
  // wccl_result_t, which that operation reports on every member (the others: PEER_LOST).
  uint64_t failed = 0;
  uint32_t code = WCCL_ERR_PEER_LOST;
  std::string reason;    // kRevoked, kRemoved, kRefused
  uint32_t joiners = 0;  // kPending
  uint64_t seq = 0;      // kCommit, kBarrier; kRevoked: the last committed operation
};

// Why the coordinator declared a peer lost (the events log's `cause`).
enum class LossCause {
  kDisconnected,  // its control connection closed
  kSilent,        // no message for peer_timeout
  kProbe,         // no answer to a probe after a neighbour reported a broken link
  kStraggler,     // not at the update barrier straggler_timeout after the first member
  kNode,          // its node's communicator in another group was lost (coord::Job)
  kSuperseded,    // after a restart, outside the job's epoch a member reported
};
const char *loss_cause_name(LossCause cause);  // "disconnected", "silent", ...

// A change of a group's membership, for the coordinator's events log (config key events_log;
// docs/fault-tolerance.md, "The events log"). Recorded only with Options::record_events.
struct Event {
  enum class Kind {
    kRegistered,  // `peer` waits to be admitted (a JOIN, or a REJOIN from outside the epoch)
    kAdmitted,    // `peer` entered `epoch`
    kLeft,        // `peer` left: a member, at the update barrier of `epoch`, or a joiner
    kLost,        // `peer`, a member of `epoch` or a joiner, was declared lost (`cause`, `reason`)
    kRevoked,     // `epoch` was revoked (`reason`; `seq`: the failed operation, 0 for a loss)
    kEpoch,       // `epoch` formed, of `members`, from `origin`; `admitted`, `left`, `lost`: how
                  // it differs from the one before (none of them: its ring was reordered, or a
                  // revoked epoch re-formed)
    kAdopted,     // after a restart: `epoch` of `members`, `seq` operations committed, as `peer`
                  // reported it
  };
  Kind kind = Kind::kEpoch;
  uint64_t epoch = 0;
  Member peer;
  bool member = false;  // kLost, kLeft: `peer` was a member of `epoch` (else a joiner)
  LossCause cause = LossCause::kDisconnected;    // kLost
  std::string reason;                            // kLost, kRevoked
  uint64_t seq = 0;                              // kRevoked, kAdopted
  uint32_t code = 0;                             // kRevoked: the failure's wccl_result_t
  uint32_t members = 0;                          // kEpoch, kAdopted
  EpochOrigin origin = EpochOrigin::kContinues;  // kEpoch
  uint32_t admitted = 0, left = 0, lost = 0;     // kEpoch
};
const char *event_kind_name(Event::Kind kind);  // "registered", "admitted", ...

// Peers declared lost that the coordinator remembers, so that their next update re-registers
// them: beyond this many, the one lost longest ago is forgotten (its update is then refused as
// not registered, and it joins again), so a long job with churn holds a bounded record.
inline constexpr size_t kMaxLostRemembered = 4096;

// Operations a member may report done ahead of the last committed one.
inline constexpr uint64_t kMaxOpsAhead = 1024;

class Membership {
 public:
  struct Options {
    int min_peers = 1;
    std::chrono::milliseconds settle{200};
    std::chrono::milliseconds peer_timeout{5000};
    std::chrono::milliseconds probe_timeout{1000};
    // The straggler policy: a member that has not reached an update barrier this long after the
    // first member arrived there (with an update or a re-form; a leaver waits for the others) is
    // declared lost, and the barrier completes without it. 0: the barrier waits for every live
    // member (one silent for peer_timeout is lost).
    std::chrono::milliseconds straggler_timeout{0};
    // Epochs this coordinator forms are numbered past this. The coordinator passes its start time
    // in microseconds since 1970: an epoch's number is then at most the time it was formed (epochs
    // take far longer than a microsecond to form), so a restarted coordinator never names an epoch
    // with a number its predecessor used, even before any member of the job is back to report one.
    uint64_t epoch_base = 0;
    // Order each new epoch's ring from the round trips members report (ring_order.h), and re-form
    // an epoch whose order a better one beats by kReorderMargin; false: the order of admission.
    bool measured_order = true;
    // Send with each epoch formed at an update barrier algo=AUTO's crossovers, computed from the
    // links members report (coord/algo_choice.h); false: members use their tree_max_bytes and never
    // the all-gather schedule.
    bool measured_crossover = true;
    // Record membership events (take_events()) for the coordinator's events log.
    bool record_events = false;
  };
  // A better order re-forms an unchanged epoch only when its slowest link, or (with the same
  // slowest link) its sum of round trips, is below this share of the current order's...: a new
  // epoch costs every link a new TLS set-up, so noise in the measurements must not cause one.
  static constexpr double kReorderMargin = 0.9;
  // ... and by at least this much: round trips within a machine room differ by tens of
  // microseconds of noise, which no order improves on.
  static constexpr uint32_t kReorderMinGainUs = 1000;
  explicit Membership(Options options) : opt_(options) {}

  // The job's rule for whole nodes (coord::Job), consulted wherever this group would admit joiners
  // or let a member go. Without a gate every joiner is admitted at the next barrier.
  class Gate {
   public:
    virtual ~Gate() = default;
    // Every live member is at this group's update barrier, admitting (no REFORM). False holds the
    // barrier: the gate completes it later (complete_barrier()).
    virtual bool may_complete(Membership &group) = 0;
    // The group has no live member and joiners wait: whether they form its epoch now (the gate
    // asks can_form(), which counts the joiners it admits). False: they wait; the gate may form it
    // later (form_first()).
    virtual bool may_form(Membership &group) = 0;
    // Whether `joiner` enters at the barrier or formation under way (else it keeps waiting).
    virtual bool admits(const Membership &group, const Member &joiner) const = 0;
  };
  // `gate` outlives this Membership (nullptr: none).
  void set_gate(Gate *gate) { gate_ = gate; }

  // A message from peer m.peer's control link (the link's own rules are its holder's: its first
  // message is a JOIN or REJOIN, every later one names the same peer), applied through the calls
  // below. Returns OK or the refusal. The link stays and hears the refusal as an ERROR, except
  // where *drop is set: a JOIN or REJOIN refused, or a type no peer sends; then the link is closed
  // with it.
  Status on_message(const ControlMessage &m, Clock::time_point now, bool *drop);
  // How often tick() must run, with these options, for a silent peer, an unanswered probe or a
  // straggler to be declared lost at most a few percent late (5 to 100 ms).
  static std::chrono::milliseconds tick_period(const Options &o);

  // A new peer asks to join. INVALID_USAGE if the id is already a joiner or member, or if the
  // group already holds kMaxRingMembers peers.
  Status join(PeerId id, const PeerInfo &info, Clock::time_point now);
  // Liveness from a peer (also the answer to a probe). A peer that is neither a member nor a
  // joiner gets a kRemoved notice.
  void heartbeat(PeerId id, Clock::time_point now);
  // A member of `epoch` reaches the update barrier after submitting `ops` operations in it. A lost
  // peer's update re-registers it as a joiner; a joiner's update waits with it (OK). PROTOCOL for
  // a member naming another epoch than the current one. With admit false (a REFORM: state sync
  // re-forming the survivors to finish a transfer), the barrier this member reaches admits no
  // joiner (they keep waiting for the next plain update), and a lost peer gets PEER_LOST instead
  // of re-registering.
  //
  // Members that disagree about where they are must not wait for each other (the stall of issue
  // 15): an arrival after another number of operations than the epoch has committed, or while a
  // member reported a later operation done, revokes the epoch; otherwise the first arrival sends
  // every other member a kBarrier notice with `ops`, and a member that has submitted more
  // operations reports OP_FAILED (the epoch is revoked). A REFORM and an UPDATE at one barrier
  // also disagree: the update wins, and every REFORM gets PEER_LOST (a kRefused notice, or the
  // returned status), so state sync returns and its caller updates too.
  // `call` numbers the member's calls: the EPOCH that answers it names it.
  Status update(PeerId id, uint64_t epoch, uint64_t ops, Clock::time_point now, bool admit = true,
                uint32_t call = 0);
  // A member leaves gracefully: it counts as arrived at the barrier and is not in the next epoch.
  Status leave(PeerId id, uint64_t epoch, uint64_t ops, Clock::time_point now, uint32_t call = 0);
  // The peer's control connection closed: it is lost now.
  void disconnected(PeerId id, Clock::time_point now);
  // `reporter` lost its link to `suspect`: the suspect is probed and is lost unless it answers
  // with a heartbeat within probe_timeout. Ignored while the epoch is revoked (members close its
  // links then).
  void link_broken(PeerId reporter, PeerId suspect, Clock::time_point now);
  // After a coordinator restart: a peer that held `epoch` with `ring` reconnects. If the peer is in
  // `ring` and `epoch` is not one this coordinator formed, that epoch is adopted when it is newer
  // than the current one, or when the current one was formed from joiners alone less than
  // peer_timeout ago by a coordinator that had heard of no epoch: its members are told, and peers
  // outside it are removed (they join again), as are the members of the superseded epoch that
  // `ring` names (they wait as joiners, and the adopted epoch is revoked). A peer whose epoch is
  // not the current one is removed and re-registered as a joiner; one that reports an epoch and no
  // ring (a joiner naming the epoch it waited to enter, a peer declared lost) is registered as a
  // joiner, and if this coordinator has not adopted that epoch, joiners do not form one of their
  // own for peer_timeout (the job's members may be on their way back with it). INVALID_ARGUMENT for
  // a ring with duplicate ids or an epoch of 2^63 or more. `committed` is the last operation of
  // `epoch` the peer saw committed, `crossovers` those it holds for it (adopted with the epoch, so
  // its members keep picking alike).
  Status rejoin(PeerId id, const PeerInfo &info, uint64_t epoch, const std::vector<Member> &ring,
                uint64_t committed, Clock::time_point now, algo::Crossovers crossovers = {});
  // A member's data phase of operation seq of `epoch` completed. Reports for another epoch or a
  // revoked one are ignored (the revocation already decided them); PROTOCOL for a seq more than
  // kMaxOpsAhead past the last committed operation.
  Status done(PeerId id, uint64_t epoch, uint64_t seq, Clock::time_point now);
  // Operation seq failed on a member (a broken link, a timeout, calls that differ) with `code`:
  // the epoch is revoked; seq fails on every member with MISMATCH if that is `code`, else with
  // PEER_LOST (REVOKED's code). Operations already committed stay committed.
  void op_failed(PeerId id, uint64_t epoch, uint64_t seq, const std::string &reason,
                 Clock::time_point now, uint32_t code = WCCL_ERR_PEER_LOST);
  // A member of `epoch` reports what its links measured (LINK_REPORT). Kept for pairs of members
  // of the current epoch (the latest report of either side wins; a delivery rate of 0, a link
  // that was never busy, keeps the last one) and used when the next epoch's ring is ordered and
  // its crossover computed; reports about other epochs, non-members or rings larger than
  // kMaxMeasuredRing are ignored.
  void report_links(PeerId id, uint64_t epoch, const std::vector<LinkMeasurement> &links);
  // The round trip last reported between two members, in µs; 0 if none.
  uint32_t rtt(PeerId a, PeerId b) const;
  // What was last reported about the link between two members (zeros if nothing).
  LinkEstimate link(PeerId a, PeerId b) const;
  // Applies timeouts (silent peers, unanswered probes, stragglers, the initial settle window).
  void tick(Clock::time_point now);
  // Another group lost a communicator of `node` (PeerInfo::node, not ""): this group's peers of
  // that node, members or joiners, are lost too, for `reason`. A node's communicators go together.
  void lose_node(const std::string &node, const std::string &reason, Clock::time_point now);
  // The members declared lost since the last call (those with a node), for the coordinator to carry
  // each one's loss to the other groups of its node. (A joiner that goes, such as one whose join
  // timed out, is not a node's failure: its node's members elsewhere stay.)
  std::vector<PeerInfo> take_lost();

  // Decisions since the last call, in the order they were made, ending with a kPending notice to
  // every member if the number of waiting joiners changed since the last call, or else to every
  // member that reconnected (rejoin) since and, while joiners wait, every member told of an epoch.
  std::vector<Notice> take_notices();
  // The membership events since the last call, in the order they happened (record_events).
  std::vector<Event> take_events() { return std::exchange(events_, {}); }

  uint64_t epoch() const { return epoch_; }
  // The current epoch is one a member reported after a restart, not one this coordinator formed.
  bool epoch_adopted() const { return epoch_ != 0 && !formed_here(epoch_); }
  uint64_t committed() const { return committed_; }
  // Operations committed here in every epoch of the group (not those a restart adopted).
  uint64_t operations_committed() const { return operations_committed_; }
  bool revoked() const { return revoked_; }
  const std::vector<Member> &ring() const { return ring_; }
  // The current epoch's algo=AUTO crossovers (Options::measured_crossover), 0s if none.
  const algo::Crossovers &crossovers() const { return crossovers_; }
  EpochOrigin origin() const { return origin_; }
  size_t joiners() const { return joiners_.size(); }
  // The peer is a member or a joiner this coordinator hears from: not lost, not unknown.
  bool live(PeerId id) const { return live_.count(id) != 0; }
  // When tick() next has something to decide (a timeout or the settle window), for the timer.
  Clock::time_point next_deadline() const;

  // For a Gate. The live peers (members and joiners) and what each said when it registered.
  std::vector<std::pair<PeerId, PeerInfo>> live_peers() const;
  bool is_member(PeerId id) const;
  bool is_joiner(PeerId id) const;
  // Every live member is at the update barrier (leavers and re-forming members included).
  bool barrier_full() const;
  // Some member at the barrier re-forms (REFORM): the barrier admits nobody.
  bool reforming() const { return !reforming_.empty(); }
  // The member is at the update barrier to leave.
  bool leaving(PeerId id) const { return leaving_.count(id) != 0; }
  // With no live member, joiners the gate admits could form an epoch now: at least min_peers of
  // them, none arrived for `settle`, no member of a restarted job's epoch on its way back.
  bool can_form(Clock::time_point now) const;
  // Completes the full update barrier now (barrier_full()), whatever the gate said.
  void complete_barrier();
  // Forms the epoch from the joiners the gate admits now (can_form()), whatever the gate said.
  void form_first(Clock::time_point now);

 private:
  struct Peer {
    PeerInfo info;
    Clock::time_point last_seen;
    uint64_t reported = 0;  // a joiner by REJOIN: the epoch it reported
  };
  bool any_member() const;
  Status arrive(PeerId id, uint64_t epoch, uint64_t ops, Clock::time_point now, bool leaving,
                bool admit, uint32_t call);
  // Removes a lost peer; the caller runs maybe_complete_update() once all losses are in.
  void lose(PeerId id, LossCause cause, const std::string &reason);
  // Records an event (record_events) about the current epoch; the caller fills in the rest.
  Event &record(Event::Kind kind, const Member &peer = {});
  void forget(PeerId id);  // drops every trace of a live peer but lost_
  // rejoin() (rejoin.cc): the job's epoch a member reports supersedes this coordinator's; a member
  // of the current epoch comes back and hears what it missed.
  void adopt(PeerId id, const PeerInfo &info, uint64_t epoch, const std::vector<Member> &ring,
             uint64_t committed, Clock::time_point now, algo::Crossovers crossovers);
  void member_returns(PeerId id, const PeerInfo &info, uint64_t epoch, uint64_t committed,
                      Clock::time_point now);
  void waits_outside(PeerId id, Clock::time_point now);
  void remember_lost(PeerId id, const PeerInfo &info);
  void forget_lost(PeerId id);
  // Every event and tick() ask the gate again what it held: complete the barrier if it is full,
  // form the epoch if joiners can, each if the gate agrees.
  void maybe_complete_update();
  void maybe_form_first(Clock::time_point now);
  // The joiners the gate admits now, in arrival order; take_admitted() removes them from the
  // joiners and returns them in the order of their names.
  std::vector<Member> admissible_joiners() const;
  std::vector<Member> take_admitted();
  // The number of the next epoch this coordinator forms: past every number it formed, adopted or
  // heard of.
  uint64_t next_epoch_number();
  bool formed_here(uint64_t epoch) const {
    return epoch > opt_.epoch_base && epoch <= last_formed_;
  }
  // A member waits at the update barrier with an update or a re-form (not only leavers): the
  // straggler timeout runs from barrier_opened_.
  bool barrier_open() const;
  // Tells every member the current epoch; `barrier`: as the answer to the calls at the barrier.
  void announce_epoch(bool barrier);
  // Every member is told; ops of the epoch have failed unless committed.
  // `failed` and `code`: the operation whose failure revoked it, and that failure (Notice).
  void revoke(PeerId because, const std::string &reason, uint64_t failed = 0,
              uint32_t code = WCCL_ERR_PEER_LOST);
  void announce_revocation();  // tells every member of revoked_by_, once no member is unconfirmed
  void notify_revoked(PeerId to);  // the current epoch's REVOKED, from revoked_by_
  void maybe_commit();
  // Queues a notice of `kind` for `to` about the current epoch; the caller fills in the rest.
  Notice &notify(Notice::Kind kind, PeerId to);

  Options opt_;
  Gate *gate_ = nullptr;
  uint64_t epoch_ = 0;
  uint64_t epoch_floor_ =
      0;  // the highest epoch any peer reported: new epochs are numbered past it
  Clock::time_point floor_heard_{};         // when it was reported
  uint64_t last_formed_ = opt_.epoch_base;  // the highest number this coordinator gave an epoch
  // A fresh coordinator that formed its first epoch from joiners before hearing of any other: until
  // this time (peer_timeout later), the epochs it formed give way to one a member of the job it
  // restarted under reports on coming back, whatever the numbers. Cleared when it adopts one.
  Clock::time_point gives_way_until_{};
  bool revoked_ = false;
  std::vector<Member> ring_;     // members of the current epoch, in ring order
  std::map<PeerId, Peer> live_;  // members and joiners we hear from
  std::vector<Member> joiners_;  // waiting for admission, in arrival order
  Clock::time_point last_join_{};
  std::map<PeerId, uint32_t> arrived_;  // members at the update barrier, with the call each made
  std::set<PeerId> leaving_;            // of those, the ones leaving
  std::set<PeerId> reforming_;          // of those, the ones that admit no joiner (REFORM)
  uint64_t barrier_ops_ = 0;            // the operations the first of them had submitted
  Clock::time_point barrier_opened_{};  // when the first of them not leaving arrived
  // After a restart: members of the adopted epoch not back yet. A revocation waits for them before
  // it is announced (revocation_pending_).
  std::set<PeerId> unconfirmed_;
  struct Revocation {
    PeerId lost = 0;  // or the member whose operation failed
    std::string reason;
    uint64_t failed = 0;  // Notice::failed
    uint32_t code = WCCL_ERR_PEER_LOST;
  };
  Revocation revoked_by_;  // the current epoch's
  bool revocation_pending_ = false;
  std::map<PeerId, Clock::time_point> probes_;  // suspect -> deadline for its heartbeat
  // Declared lost (an update from one rejoins it), the kMaxLostRemembered most recent only.
  struct LostPeer {
    PeerInfo info;
    uint64_t order = 0;  // key in lost_order_
  };
  std::map<PeerId, LostPeer> lost_;
  std::map<uint64_t, PeerId> lost_order_;  // the order they were lost in
  uint64_t lost_count_ = 0;
  std::vector<Notice> notices_;
  std::vector<Event> events_;
  Event ignored_event_;                // what record() fills in without record_events
  std::vector<PeerInfo> lost_now_;     // for take_lost()
  size_t pending_told_ = 0;            // the joiner count the members last heard
  std::set<PeerId> retell_pending_;    // members that reconnected since the last take_notices()
  uint64_t committed_ = 0;             // operations of this epoch committed
  uint64_t operations_committed_ = 0;  // ... of every epoch, by this coordinator
  std::map<uint64_t, std::set<PeerId>> done_;  // operation -> members whose data phase completed
  std::map<std::pair<PeerId, PeerId>, LinkEstimate>
      links_;                    // (smaller id, larger id), live peers only
  algo::Crossovers crossovers_;  // the current epoch's, fixed at its update barrier
  EpochOrigin origin_ = EpochOrigin::kContinues;  // how the current epoch was formed
  bool last_member_left_ = false;  // the last member to go went by LEAVE (else it was lost)
};

}  // namespace wccl::coord
