// The coordinator's membership rules, driven with injected time: formation, admission at update,
// loss and revocation, probes, graceful leave, a lost peer's return, and coordinator restart.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "algo/collectives.h"
#include "coord/algo_choice.h"
#include "coord/events_log.h"
#include "coord/membership.h"
#include "coord/ring_order.h"

namespace wccl::coord {
namespace {

using namespace std::chrono_literals;
using Kind = Notice::Kind;

constexpr PeerId A = 0xa, B = 0xb, C = 0xc, D = 0xd, E = 0xe;

PeerInfo info(PeerId id) {
  return {"peer-" + std::to_string(id), "10.0.0." + std::to_string(id) + ":7000", ""};
}

std::vector<PeerId> ids(const std::vector<Member> &ring) {
  std::vector<PeerId> out;
  for (const Member &m : ring) out.push_back(m.id);
  return out;
}

std::vector<Notice> of_kind(const std::vector<Notice> &all, Kind kind) {
  std::vector<Notice> out;
  std::copy_if(all.begin(), all.end(), std::back_inserter(out),
               [&](const Notice &n) { return n.kind == kind; });
  return out;
}

// Every member of the current epoch was told the same epoch and ring, and nobody else was.
void expect_announced(const std::vector<Notice> &notices, uint64_t epoch,
                      const std::vector<PeerId> &ring) {
  std::vector<Notice> epochs = of_kind(notices, Kind::kEpoch);
  std::vector<PeerId> told;
  for (const Notice &n : epochs) {
    told.push_back(n.to);
    EXPECT_EQ(n.epoch, epoch);
    EXPECT_EQ(ids(n.ring), ring);
  }
  std::vector<PeerId> sorted_ring = ring;
  std::sort(told.begin(), told.end());
  std::sort(sorted_ring.begin(), sorted_ring.end());
  EXPECT_EQ(told, sorted_ring);
}

class MembershipTest : public testing::Test {
 protected:
  Membership::Options options() {
    Membership::Options o;
    o.min_peers = 1;
    o.settle = 200ms;
    o.peer_timeout = 1000ms;
    o.probe_timeout = 300ms;
    return o;
  }
  // Forms epoch 1 from the given peers.
  // The first epoch of `peers`, in that order: their names ("m<position>-...") sort so.
  void form(Membership &m, std::vector<PeerId> peers) {
    for (size_t k = 0; k < peers.size(); ++k) {
      PeerInfo named = info(peers[k]);
      named.name = "m" + std::to_string(k) + "-" + named.name;
      ASSERT_TRUE(m.join(peers[k], named, t).ok());
    }
    t += 250ms;
    m.tick(t);
    expect_announced(m.take_notices(), 1, peers);
  }
  static void heartbeat_all(Membership &m, std::vector<PeerId> peers, Clock::time_point when) {
    for (PeerId p : peers) m.heartbeat(p, when);
  }
  Clock::time_point t = Clock::time_point() + 1h;
};

// A node's communicators go together: lose_node loses this group's peers of the node (a member
// and a joiner here), revoking the epoch with the reason given; take_lost lists the lost member,
// with its node, once. A node with no peer here, or node "", changes nothing.
TEST_F(MembershipTest, LoseNodeLosesThatNodesPeersHere) {
  Membership m(options());
  PeerInfo a = info(A), b = info(B), d = info(D);
  a.node = "n1";
  b.node = "n2";
  d.node = "n1";
  ASSERT_TRUE(m.join(A, a, t).ok());
  ASSERT_TRUE(m.join(B, b, t).ok());
  ASSERT_TRUE(m.join(C, info(C), t).ok());
  t += 250ms;
  m.tick(t);
  expect_announced(m.take_notices(), 1, {A, B, C});
  ASSERT_TRUE(m.join(D, d, t).ok());  // a joiner of node n1
  (void)m.take_notices();
  m.lose_node("", "nothing", t);
  m.lose_node("n9", "nothing", t);
  EXPECT_TRUE(of_kind(m.take_notices(), Kind::kRevoked).empty());
  EXPECT_TRUE(m.take_lost().empty());
  m.lose_node("n1", "node n1 lost its member x of group \"g1\"", t);
  const auto notices = m.take_notices();
  const auto revoked = of_kind(notices, Kind::kRevoked);
  ASSERT_EQ(revoked.size(), 2u);  // told to B and C
  EXPECT_EQ(revoked[0].lost, A);
  EXPECT_EQ(revoked[0].reason, "peer-10: node n1 lost its member x of group \"g1\"");
  EXPECT_FALSE(m.live(A));
  EXPECT_FALSE(m.live(D));
  EXPECT_TRUE(m.live(B) && m.live(C));
  const auto lost = m.take_lost();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].name, "peer-10");
  EXPECT_EQ(lost[0].node, "n1");
  EXPECT_TRUE(m.take_lost().empty());
  // The survivors' update forms the next epoch without the node.
  ASSERT_TRUE(m.update(B, 1, 0, t).ok());
  ASSERT_TRUE(m.update(C, 1, 0, t).ok());
  expect_announced(m.take_notices(), 2, {B, C});
}

TEST_F(MembershipTest, FirstEpochWaitsForMinPeersAndTheSettleWindow) {
  Membership::Options o = options();
  o.min_peers = 3;
  Membership m(o);
  ASSERT_TRUE(m.join(A, info(A), t).ok());
  ASSERT_TRUE(m.join(B, info(B), t + 50ms).ok());
  m.tick(t + 300ms);
  EXPECT_EQ(m.epoch(), 0u) << "two peers are fewer than min_peers";
  ASSERT_TRUE(m.join(C, info(C), t + 400ms).ok());
  m.tick(t + 500ms);
  EXPECT_EQ(m.epoch(), 0u) << "the settle window restarts with each arrival";
  EXPECT_EQ(m.next_deadline(), t + 600ms);
  m.tick(t + 600ms);
  EXPECT_EQ(m.epoch(), 1u);
  expect_announced(m.take_notices(), 1, {A, B, C});
  EXPECT_EQ(m.ring()[1].info.address, info(B).address);
}

TEST_F(MembershipTest, JoinerWaitsAndIsAdmittedWhenEveryMemberUpdates) {
  Membership m(options());
  form(m, {A, B, C, D});
  ASSERT_TRUE(m.join(E, info(E), t).ok());
  EXPECT_EQ(m.joiners(), 1u);
  std::vector<Notice> pending = of_kind(m.take_notices(), Kind::kPending);
  ASSERT_EQ(pending.size(), 5u) << "every member hears that one joiner waits";
  EXPECT_EQ(pending[0].to, E) << "the joiner hears the epoch it waits to enter as it registers";
  EXPECT_EQ(pending[0].epoch, 1u);
  for (const Notice &n : pending) EXPECT_EQ(n.joiners, 1u);
  for (PeerId p : {A, B, C}) ASSERT_TRUE(m.update(p, 1, m.committed(), t).ok());
  for (const Notice &n : m.take_notices()) {
    EXPECT_EQ(n.kind, Kind::kBarrier)
        << "the barrier waits for D; members only hear where A stopped";
  }
  ASSERT_TRUE(m.update(D, 1, m.committed(), t).ok());
  EXPECT_EQ(m.epoch(), 2u);
  expect_announced(m.take_notices(), 2, {A, B, C, D, E});
  EXPECT_EQ(m.joiners(), 0u);
}

// Peers admitted together take the natural order of their names, whatever order they arrived in:
// a job's first ring (and so its ranks, and the order in which a coded wire's partial sums are
// made) is the same in every run. Members stay where they are; joiners admitted at one update
// follow them, among themselves by name.
TEST_F(MembershipTest, PeersAdmittedTogetherAreOrderedByName) {
  Membership m(options());
  const PeerId F = 0xf;
  const std::vector<std::pair<PeerId, std::string>> arriving = {
      {A, "node10.0"}, {B, "node2.0"}, {C, "node2.1"}, {D, "node02.0"}};
  for (const auto &[id, name] : arriving)
    ASSERT_TRUE(m.join(id, {name, info(id).address, ""}, t).ok());
  t += 250ms;
  m.tick(t);
  // node02.0 and node2.0 name the same number: their order of arrival decides.
  expect_announced(m.take_notices(), 1, {B, D, C, A});
  ASSERT_TRUE(m.join(E, {"b", info(E).address, ""}, t).ok());
  ASSERT_TRUE(m.join(F, {"a", info(F).address, ""}, t).ok());
  for (PeerId p : {B, D, C, A}) ASSERT_TRUE(m.update(p, 1, m.committed(), t).ok());
  EXPECT_EQ(ids(m.ring()), (std::vector<PeerId>{B, D, C, A, F, E}));
}

TEST_F(MembershipTest, ReformDropsTheLostButAdmitsNoJoinerUntilAPlainUpdate) {
  Membership m(options());
  form(m, {A, B, C, D});
  ASSERT_TRUE(m.join(E, info(E), t).ok());
  m.disconnected(D, t);
  (void)m.take_notices();
  for (PeerId p : {A, B, C}) ASSERT_TRUE(m.update(p, 1, m.committed(), t, /*admit=*/false).ok());
  EXPECT_EQ(m.epoch(), 2u);
  const std::vector<Notice> reformed = m.take_notices();
  expect_announced(reformed, 2, {A, B, C});
  EXPECT_EQ(m.joiners(), 1u) << "E still waits";
  // A member forgets the waiting joiners with each new epoch (they are admitted at its barrier),
  // so it hears that E waits again, after the epoch: or no member would ever update to admit E.
  // (wccl-sim found it: a donor lost during a joiner's state sync left a second joiner waiting.)
  const std::vector<Notice> pending = of_kind(reformed, Kind::kPending);
  ASSERT_EQ(pending.size(), 3u);
  for (const Notice &n : pending) EXPECT_TRUE(n.epoch == 2 && n.joiners == 1);
  EXPECT_EQ(reformed.back().kind, Kind::kPending);
  for (PeerId p : {A, B}) ASSERT_TRUE(m.update(p, 2, m.committed(), t).ok());
  ASSERT_TRUE(m.update(C, 2, m.committed(), t).ok());
  EXPECT_EQ(m.epoch(), 3u);
  expect_announced(m.take_notices(), 3, {A, B, C, E});
  // Without a loss or a joiner, a REFORM confirms the epoch like an update.
  for (PeerId p : {A, B, C, E}) ASSERT_TRUE(m.update(p, 3, m.committed(), t, false).ok());
  EXPECT_EQ(m.epoch(), 3u);
}

// Issue 15: members that disagree about which operation they are in never wait for each other.
TEST_F(MembershipTest, AnUpdateArrivalTellsTheOthersWhereItStopped) {
  Membership m(options());
  form(m, {A, B, C});
  for (PeerId p : {A, B, C}) ASSERT_TRUE(m.done(p, 1, 1, t).ok());
  ASSERT_EQ(m.committed(), 1u);
  (void)m.take_notices();
  ASSERT_TRUE(m.update(A, 1, 1, t).ok());
  std::vector<Notice> barrier = of_kind(m.take_notices(), Kind::kBarrier);
  ASSERT_EQ(barrier.size(), 2u) << "B and C hear that A stopped after operation 1";
  for (const Notice &n : barrier) {
    EXPECT_NE(n.to, A);
    EXPECT_EQ(n.seq, 1u);
    EXPECT_EQ(n.epoch, 1u);
  }
  EXPECT_FALSE(m.revoked());
  ASSERT_TRUE(m.update(B, 1, 1, t).ok());
  EXPECT_TRUE(of_kind(m.take_notices(), Kind::kBarrier).empty())
      << "only the first arrival is announced";
}

TEST_F(MembershipTest, AnArrivalBehindAnotherMembersCompletedOperationRevokes) {
  Membership m(options());
  form(m, {A, B, C});
  ASSERT_TRUE(m.done(B, 1, 1, t).ok());  // B completed operation 1, which A never runs
  (void)m.take_notices();
  ASSERT_TRUE(m.update(A, 1, 0, t).ok());
  EXPECT_TRUE(m.revoked());
  std::vector<Notice> revoked = of_kind(m.take_notices(), Kind::kRevoked);
  ASSERT_EQ(revoked.size(), 3u);
  EXPECT_NE(revoked[0].reason.find("different operations"), std::string::npos) << revoked[0].reason;
  // Everyone updates: the next epoch has the same members.
  for (PeerId p : {B, C}) ASSERT_TRUE(m.update(p, 1, 0, t).ok());
  EXPECT_EQ(m.epoch(), 2u);
  expect_announced(m.take_notices(), 2, {A, B, C});
}

TEST_F(MembershipTest, AnArrivalAfterMoreOperationsThanCommittedRevokes) {
  Membership m(options());
  form(m, {A, B});
  ASSERT_TRUE(m.update(A, 1, 3, t).ok());
  EXPECT_TRUE(m.revoked());
}

TEST_F(MembershipTest, AReformGivesWayToAnUpdateAtTheSameBarrier) {
  Membership m(options());
  form(m, {A, B, C});
  m.op_failed(B, 1, 1, "mismatch",
              t);  // revoked: state sync's members re-form, a joiner's loop updates
  (void)m.take_notices();
  ASSERT_TRUE(m.update(A, 1, 0, t, /*admit=*/false).ok());
  ASSERT_TRUE(m.update(C, 1, 0, t).ok());
  std::vector<Notice> refused = of_kind(m.take_notices(), Kind::kRefused);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].to, A);
  EXPECT_EQ(m.update(B, 1, 0, t, false).code(), WCCL_ERR_PEER_LOST)
      << "a later REFORM is refused at once";
  EXPECT_EQ(m.epoch(), 1u) << "the barrier waits for A and B's updates";
  for (PeerId p : {A, B}) ASSERT_TRUE(m.update(p, 1, 0, t).ok());
  EXPECT_EQ(m.epoch(), 2u);
}

TEST_F(MembershipTest,
       TheBarriersEpochNamesEachMembersCallAndAnOldEpochsUpdateIsAnsweredWithTheCurrent) {
  Membership m(options());
  form(m, {A, B});
  ASSERT_TRUE(m.update(A, 1, 0, t, true, /*call=*/7).ok());
  ASSERT_TRUE(m.update(B, 1, 0, t, true, /*call=*/3).ok());
  std::map<PeerId, uint32_t> answers;
  for (const Notice &n : of_kind(m.take_notices(), Kind::kEpoch)) answers[n.to] = n.answers;
  EXPECT_EQ(answers[A], 7u);
  EXPECT_EQ(answers[B], 3u);
  // A member that missed an epoch's announcement updates from the older one: it is told.
  ASSERT_TRUE(m.join(C, info(C), t).ok());
  for (PeerId p : {A, B}) ASSERT_TRUE(m.update(p, 1, 0, t).ok());
  ASSERT_EQ(m.epoch(), 2u);
  (void)m.take_notices();
  ASSERT_TRUE(m.update(A, 1, 0, t, true, 9).ok());
  std::vector<Notice> told = of_kind(m.take_notices(), Kind::kEpoch);
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].to, A);
  EXPECT_EQ(told[0].epoch, 2u);
  EXPECT_EQ(told[0].answers, 9u);
  EXPECT_FALSE(m.revoked());
}

TEST_F(MembershipTest, AMemberThatReconnectsHearsThatJoinersWait) {
  // Its connection was down when the count went out (the coordinator drops notices to a peer it
  // cannot reach): it hears the count again when it comes back, or it would never update for them.
  Membership m(options());
  form(m, {A, B, C});
  ASSERT_TRUE(m.join(D, info(D), t).ok());
  (void)m.take_notices();
  const std::vector<Member> ring = m.ring();
  ASSERT_TRUE(m.rejoin(B, info(B), m.epoch(), ring, m.committed(), t).ok());
  std::vector<Notice> pending = of_kind(m.take_notices(), Kind::kPending);
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].to, B);
  EXPECT_EQ(pending[0].joiners, 1u);
  EXPECT_TRUE(of_kind(m.take_notices(), Kind::kPending).empty()) << "once";
  // The same when the count dropped to 0 while it was away: it would update for nobody.
  m.disconnected(D, t);
  (void)m.take_notices();
  ASSERT_TRUE(m.rejoin(B, info(B), m.epoch(), ring, m.committed(), t).ok());
  pending = of_kind(m.take_notices(), Kind::kPending);
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].to, B);
  EXPECT_EQ(pending[0].joiners, 0u);
}

TEST_F(MembershipTest, AMemberRejoiningWhileOthersWaitAtTheBarrierHearsWhereTheyStopped) {
  Membership before(options());
  form(before, {A, B, C});
  Membership m(options());  // restarted: A and C come back first, A updates
  const std::vector<Member> ring = {{A, info(A)}, {B, info(B)}, {C, info(C)}};
  ASSERT_TRUE(m.rejoin(A, info(A), 1, ring, 4, t).ok());
  ASSERT_TRUE(m.rejoin(C, info(C), 1, ring, 4, t).ok());
  ASSERT_TRUE(m.update(A, 1, 4, t).ok());
  (void)m.take_notices();
  ASSERT_TRUE(m.rejoin(B, info(B), 1, ring, 4, t).ok());
  std::vector<Notice> barrier = of_kind(m.take_notices(), Kind::kBarrier);
  ASSERT_EQ(barrier.size(), 1u);
  EXPECT_EQ(barrier[0].to, B);
  EXPECT_EQ(barrier[0].seq, 4u);
}

TEST_F(MembershipTest, AfterARestartARevocationWaitsForEveryMemberSoACommitOneSawStands) {
  Membership m(options());
  const std::vector<Member> ring = {{A, info(A)}, {B, info(B)}, {C, info(C)}};
  // A and B saw operations up to 4 committed; C (not back yet) saw 5.
  ASSERT_TRUE(m.rejoin(A, info(A), 1, ring, 4, t).ok());
  ASSERT_TRUE(m.rejoin(B, info(B), 1, ring, 4, t).ok());
  (void)m.take_notices();
  m.op_failed(A, 1, 6, "a broken link", t);
  EXPECT_TRUE(m.revoked());
  EXPECT_TRUE(of_kind(m.take_notices(), Kind::kRevoked).empty())
      << "C may have seen a commit: wait for it";
  ASSERT_TRUE(m.rejoin(C, info(C), 1, ring, 5, t).ok());
  std::vector<Notice> n = m.take_notices();
  std::vector<Notice> revoked = of_kind(n, Kind::kRevoked);
  ASSERT_EQ(revoked.size(), 3u);
  for (const Notice &r : revoked)
    EXPECT_EQ(r.seq, 5u) << "operation 5 stays committed for everyone";
  EXPECT_EQ(m.committed(), 5u);
}

// A restarted coordinator hears A and B report epoch 2 with C in its ring, and C report no ring.
// C that names epoch 2 was declared lost from it (its REMOVED came, the members' next epoch did
// not): a joiner, hearing no EPOCH, and epoch 2, which names a member no longer in it, is revoked.
// C that names epoch 1 waited to enter 2 and was admitted by the coordinator that went, whose
// EPOCH never reached it: a member, told its epoch. Either, whichever comes back first. (Taken as a
// member, a lost node's communicator would be in one group while its others wait to join theirs:
// test_coord_job_sim's restarts found that.)
TEST_F(MembershipTest, APeerTheRingNamesButThatReportsNoRingIsAJoinerIfLostFromThatEpoch) {
  const std::vector<Member> ring = {{A, info(A)}, {B, info(B)}, {C, info(C)}};
  for (uint64_t c_reports : {2, 1}) {
    for (bool c_first : {false, true}) {
      const std::string where =
          "C reports epoch " + std::to_string(c_reports) + (c_first ? ", first" : ", last");
      Membership m(options());
      std::vector<Notice> n;
      auto take = [&] {
        for (Notice &x : m.take_notices()) n.push_back(std::move(x));
      };
      if (c_first) {
        ASSERT_TRUE(m.rejoin(C, info(C), c_reports, {}, 0, t).ok());
      }
      take();
      ASSERT_TRUE(m.rejoin(A, info(A), 2, ring, 0, t).ok());
      ASSERT_TRUE(m.rejoin(B, info(B), 2, ring, 0, t).ok());
      if (!c_first) {
        take();
        n.clear();  // what went to C before it was back went nowhere
        ASSERT_TRUE(m.rejoin(C, info(C), c_reports, {}, 0, t).ok());
      }
      take();
      EXPECT_EQ(m.epoch(), 2u) << where;
      EXPECT_TRUE(m.is_member(A) && m.is_member(B)) << where;
      const bool lost = c_reports == 2;
      EXPECT_EQ(m.is_joiner(C), lost) << where;
      EXPECT_EQ(m.is_member(C), !lost) << where;
      EXPECT_EQ(m.revoked(), lost) << where;
      bool told = false;
      for (const Notice &x : n) told = told || (x.kind == Kind::kEpoch && x.to == C);
      EXPECT_EQ(told, !lost) << where << ": the EPOCH to C";
    }
  }
}

TEST_F(MembershipTest, ARestartedCoordinatorNumbersItsOwnEpochsPastItsClockAndEveryReportedOne) {
  Membership::Options o = options();
  o.epoch_base = 1000;  // its start time: the job's old epochs (7 here) were numbered before it
  Membership m(o);
  // A peer that was declared lost from epoch 7 comes back first, as a joiner that reports it.
  ASSERT_TRUE(m.rejoin(A, info(A), 7, {}, 0, t).ok());
  t += 500ms;
  m.heartbeat(A, t);
  m.tick(t);
  EXPECT_EQ(m.epoch(), 0u) << "the job's members get peer_timeout to come back with their epoch";
  t += 600ms;
  m.heartbeat(A, t);
  m.tick(t);
  EXPECT_EQ(m.epoch(), 1001u)
      << "past its clock, so past any number the old job may have reached meanwhile";

  Membership behind(o);  // a clock behind the job's (another host's): past the reported epoch still
  ASSERT_TRUE(behind.rejoin(A, info(A), 5000, {}, 0, t).ok());
  t += 1100ms;
  behind.heartbeat(A, t);
  behind.tick(t);
  EXPECT_EQ(behind.epoch(), 5001u);
}

TEST_F(MembershipTest, AnEpochFormedFromJoinersBeforeTheJobCameBackGivesWayToTheJobs) {
  Membership::Options o = options();
  o.epoch_base = 1000;
  Membership m(o);
  // A fresh coordinator hears from a new peer D before any member of the job (epoch 7: A, B, C).
  ASSERT_TRUE(m.join(D, info(D), t).ok());
  t += 250ms;
  m.tick(t);
  ASSERT_EQ(m.epoch(), 1001u) << "numbered from its clock: epoch 1 may be the job's";
  (void)m.take_notices();
  const std::vector<Member> ring = {{A, info(A)}, {B, info(B)}, {C, info(C)}};
  t += 100ms;
  ASSERT_TRUE(m.rejoin(A, info(A), 7, ring, 3, t).ok());
  EXPECT_EQ(m.epoch(), 7u)
      << "the job's epoch supersedes the one formed from joiners, lower number or not";
  std::vector<Notice> n = m.take_notices();
  ASSERT_EQ(of_kind(n, Kind::kRemoved).size(), 1u);
  EXPECT_EQ(of_kind(n, Kind::kRemoved)[0].to, D) << "D joins again";
  ASSERT_TRUE(m.rejoin(B, info(B), 7, ring, 3, t).ok());
  ASSERT_TRUE(m.rejoin(C, info(C), 7, ring, 3, t).ok());
  ASSERT_TRUE(m.rejoin(D, info(D), 1001, {{D, info(D)}}, 0, t).ok());
  EXPECT_EQ(m.epoch(), 7u) << "an epoch this coordinator formed never comes back";
  EXPECT_EQ(m.joiners(), 1u);
  (void)m.take_notices();
  for (PeerId p : {A, B, C}) ASSERT_TRUE(m.update(p, 7, m.committed(), t).ok());
  EXPECT_EQ(m.epoch(), 1002u) << "the next epoch is numbered past every number used, 1001 included";
  expect_announced(m.take_notices(), 1002, {A, B, C, D});

  // Once peer_timeout has passed, an epoch it formed no longer gives way to a lower number.
  Membership settled(o);
  ASSERT_TRUE(settled.join(D, info(D), t).ok());
  t += 250ms;
  settled.tick(t);
  ASSERT_EQ(settled.epoch(), 1001u);
  t += 1000ms;
  settled.heartbeat(D, t);
  ASSERT_TRUE(settled.rejoin(A, info(A), 7, ring, 3, t).ok());
  EXPECT_EQ(settled.epoch(), 1001u);
  EXPECT_EQ(of_kind(settled.take_notices(), Kind::kRemoved).back().to, A) << "A joins again";
}

// The job's epoch 7 (A, D) lost D before the coordinator restarted; D comes back first, as the
// joiner it is, into the fresh coordinator's epoch of a new peer E (1002). Then A returns with
// epoch 7, whose ring still names D: 7 supersedes 1002, but D, a member of 1002, would never move
// back to 7 (a member's epochs only move forward) and waited there for a decision that never came
// (found by test_coord_control_sim, seed 3494).
// A fresh coordinator numbering from 1000 forms epoch 1001 of a new peer E; D, declared lost from
// the job's epoch 7, comes back as a joiner and enters at E's update: epoch 1002 of E and D.
void form_epoch_of_a_newcomer_and_a_lost_peer(Membership &m, Clock::time_point &t) {
  ASSERT_TRUE(m.join(E, info(E), t).ok());
  t += 250ms;
  m.tick(t);
  ASSERT_EQ(m.epoch(), 1001u);
  ASSERT_TRUE(m.rejoin(D, info(D), 7, {}, 0, t).ok());
  ASSERT_TRUE(m.update(E, 1001, m.committed(), t).ok());
  ASSERT_EQ(m.epoch(), 1002u);
  ASSERT_TRUE(m.is_member(D));
}

TEST_F(MembershipTest, AMemberOfASupersededEpochThatTheJobsRingNamesJoinsAgain) {
  Membership::Options o = options();
  o.epoch_base = 1000;
  Membership m(o);
  form_epoch_of_a_newcomer_and_a_lost_peer(m, t);
  if (HasFatalFailure()) return;
  (void)m.take_notices();
  t += 100ms;
  ASSERT_TRUE(m.rejoin(A, info(A), 7, {{A, info(A)}, {D, info(D)}}, 3, t).ok());
  EXPECT_EQ(m.epoch(), 7u);
  const std::vector<Notice> n = m.take_notices();
  std::set<PeerId> removed;
  for (const Notice &r : of_kind(n, Kind::kRemoved)) removed.insert(r.to);
  EXPECT_EQ(removed, (std::set<PeerId>{D, E})) << "D hears that 1002 is over, as E does";
  for (const Notice &e : of_kind(n, Kind::kEpoch)) EXPECT_NE(e.to, D);
  EXPECT_FALSE(m.is_member(D));
  EXPECT_EQ(m.joiners(), 1u) << "D waits as a joiner";
  EXPECT_TRUE(m.revoked()) << "epoch 7 names a member no longer in it";
  ASSERT_TRUE(m.update(D, 1002, 0, t).ok()) << "D's update (after REMOVED) refreshes it";
  ASSERT_TRUE(m.update(A, 7, m.committed(), t).ok());
  EXPECT_GT(m.epoch(), 1002u);
  EXPECT_TRUE(m.is_member(A) && m.is_member(D)) << "the next update admits D";
}

// As above, but D was lost from 1002 too and registered again before A came back: it is a joiner
// once, not twice (a review found the ring {A, D, D}).
TEST_F(MembershipTest, ASupersededEpochsLostMemberThatRegisteredAgainIsOneJoiner) {
  Membership::Options o = options();
  o.epoch_base = 1000;
  Membership m(o);
  form_epoch_of_a_newcomer_and_a_lost_peer(m, t);
  if (HasFatalFailure()) return;
  m.disconnected(D, t);  // lost from 1002
  ASSERT_TRUE(m.rejoin(D, info(D), 1002, {}, 0, t).ok());
  ASSERT_EQ(m.joiners(), 1u);
  t += 100ms;
  ASSERT_TRUE(m.rejoin(A, info(A), 7, {{A, info(A)}, {D, info(D)}}, 3, t).ok());
  EXPECT_EQ(m.epoch(), 7u);
  EXPECT_EQ(m.joiners(), 1u);
  EXPECT_FALSE(m.is_member(D));
  (void)m.take_notices();
  ASSERT_TRUE(m.update(A, 7, m.committed(), t).ok());
  std::vector<PeerId> ring;
  for (const Member &r : m.ring()) ring.push_back(r.id);
  std::sort(ring.begin(), ring.end());
  EXPECT_EQ(ring, (std::vector<PeerId>{A, D}));
}

// A second restart before the next barrier: D, removed from 1002 for the job's epoch 7, reports
// 1002 and no ring; A reports 7, whose ring still names D. D, past 7, cannot be in it: a joiner,
// not absorbed as the member an older report would make it (a review found it told EPOCH 7, which
// its epochs, only moving forward, ignore).
TEST_F(MembershipTest, AJoinerReportingAnEpochPastTheAdoptedOneStaysAJoiner) {
  Membership::Options o = options();
  o.epoch_base = 2000;
  Membership m(o);
  ASSERT_TRUE(m.rejoin(D, info(D), 1002, {}, 0, t).ok());
  ASSERT_TRUE(m.rejoin(A, info(A), 7, {{A, info(A)}, {D, info(D)}}, 3, t).ok());
  EXPECT_EQ(m.epoch(), 7u);
  EXPECT_FALSE(m.is_member(D));
  EXPECT_EQ(m.joiners(), 1u);
  EXPECT_TRUE(m.revoked());
  for (const Notice &e : of_kind(m.take_notices(), Kind::kEpoch)) EXPECT_NE(e.to, D);
}

TEST_F(MembershipTest, ALostPeersReformIsRefusedAndItsUpdateRejoins) {
  Membership m(options());
  form(m, {A, B, C});
  t += 1500ms;  // C stays silent
  for (PeerId p : {A, B}) m.heartbeat(p, t);
  m.tick(t);
  Status st = m.update(C, 1, m.committed(), t, /*admit=*/false);
  EXPECT_EQ(st.code(), WCCL_ERR_PEER_LOST) << st.to_string();
  EXPECT_EQ(m.joiners(), 0u);
  ASSERT_TRUE(m.update(C, 1, m.committed(), t).ok());
  EXPECT_EQ(m.joiners(), 1u) << "a plain update re-registers it";
}

TEST_F(MembershipTest, UpdateWithoutChangeConfirmsTheSameEpoch) {
  Membership m(options());
  form(m, {A, B});
  ASSERT_TRUE(m.update(A, 1, m.committed(), t).ok());
  ASSERT_TRUE(m.update(B, 1, m.committed(), t).ok());
  EXPECT_EQ(m.epoch(), 1u);
  expect_announced(m.take_notices(), 1, {A, B});
}

// Two continents: ids below 0x10 on one, the rest on the other; 10 ms round trips within, 90 ms
// across.
uint32_t two_continents(PeerId a, PeerId b) { return (a < 0x10) == (b < 0x10) ? 10000 : 90000; }

int crossings(const std::vector<Member> &ring) {
  int n = 0;
  for (size_t k = 0; k < ring.size(); ++k)
    n += two_continents(ring[k].id, ring[(k + 1) % ring.size()].id) > 10000;
  return n;
}

// Every member of `epoch` reports its links to all the others.
void report_all(Membership &m, uint64_t epoch, const std::vector<PeerId> &peers) {
  for (PeerId p : peers) {
    std::vector<LinkMeasurement> rtts;
    for (PeerId q : peers) {
      if (q != p) rtts.push_back({q, two_continents(p, q)});
    }
    m.report_links(p, epoch, rtts);
  }
}

std::vector<Member> members(std::vector<PeerId> ids) {
  std::vector<Member> out;
  for (PeerId id : ids) out.push_back({id, info(id)});
  return out;
}

TEST(RingOrder, ZigZagAcrossTwoContinentsBecomesOneRunPerContinent) {
  const std::vector<Member> zigzag = members({0x1, 0x11, 0x2, 0x12, 0x3, 0x13});
  EXPECT_EQ(crossings(zigzag), 6);
  const std::vector<Member> ordered = order_ring(zigzag, two_continents);
  EXPECT_EQ(crossings(ordered), 2);
  EXPECT_EQ(ordered.front().id, 0x1u) << "the first member stays first";
  std::vector<PeerId> sorted = ids(ordered);
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<PeerId>{0x1, 0x2, 0x3, 0x11, 0x12, 0x13})) << "the same members";
  const RingCost before = *ring_cost(zigzag, two_continents),
                 after = *ring_cost(ordered, two_continents);
  EXPECT_EQ(before.max_us, 90000u);
  EXPECT_EQ(after.max_us, 90000u) << "two crossings are unavoidable";
  EXPECT_EQ(before.sum_us, 540000u);
  EXPECT_EQ(after.sum_us, 2 * 90000u + 4 * 10000u);
  EXPECT_EQ(ids(order_ring(ordered, two_continents)), ids(ordered))
      << "a best order is kept as it is";
}

TEST(RingOrder, TheSlowestLinkComesFirst) {
  // A line of hosts 0..5 km apart: round trip grows with distance. The best ring goes out along
  // even positions and back along odd ones, so that no link spans more than two steps.
  auto line = [](PeerId a, PeerId b) {
    return static_cast<uint32_t>(1000 * (a > b ? a - b : b - a));
  };
  const std::vector<Member> ordered = order_ring(members({1, 2, 3, 4, 5, 6}), line);
  EXPECT_EQ(ring_cost(ordered, line)->max_us, 2000u) << testing::PrintToString(ids(ordered));
}

TEST(RingOrder, AnUnmeasuredPairLeavesTheOrderAlone) {
  auto partial = [](PeerId a, PeerId b) {
    return std::minmax(a, b) == std::minmax<PeerId>(0x1, 0x13) ? 0u : two_continents(a, b);
  };
  const std::vector<Member> zigzag = members({0x1, 0x11, 0x2, 0x12, 0x3, 0x13});
  EXPECT_EQ(ids(order_ring(zigzag, partial)), ids(zigzag));
  EXPECT_FALSE(ring_cost(zigzag, partial).has_value());
}

// Members link to their schedule neighbours only, so a coordinator hears of few pairs: with the
// zigzag's ring pairs (all across) and a few pairs within each continent, the shortest paths over
// them stand for the rest, and 2-opt finds the order that crosses twice.
TEST(RingOrder, PathsStandForUnmeasuredPairs) {
  const std::vector<Member> zigzag = members({0x1, 0x11, 0x2, 0x12, 0x3, 0x13});
  const std::set<std::pair<PeerId, PeerId>> measured = {
      {0x1, 0x11}, {0x2, 0x11}, {0x2, 0x12}, {0x3, 0x12},  {0x3, 0x13},
      {0x1, 0x13}, {0x1, 0x2},  {0x2, 0x3},  {0x11, 0x12}, {0x12, 0x13}};
  auto partial = [&](PeerId a, PeerId b) {
    return measured.count(std::minmax(a, b)) != 0 ? two_continents(a, b) : 0u;
  };
  EXPECT_EQ(ids(order_ring(zigzag, partial)), ids(zigzag)) << "unmeasured pairs: left alone";
  const RttOf paths = with_paths(zigzag, partial);
  EXPECT_EQ(paths(0x1, 0x2), 10000u) << "measured";
  EXPECT_EQ(paths(0x1, 0x3), 20000u) << "through 0x2";
  EXPECT_EQ(paths(0x11, 0x13), 20000u) << "through 0x12";
  EXPECT_EQ(paths(0x1, 0x12), 100000u) << "one crossing and one step";
  EXPECT_EQ(paths(0x1, 0x99), 0u) << "not a member";
  const std::vector<Member> ordered = order_ring(zigzag, paths);
  EXPECT_EQ(crossings(ordered), 2);
  // A pair that no path connects is unmeasured still.
  auto split = [](PeerId a, PeerId b) { return (a < 0x10) == (b < 0x10) ? 10000u : 0u; };
  EXPECT_EQ(with_paths(zigzag, split)(0x1, 0x11), 0u);
  EXPECT_EQ(with_paths(zigzag, split)(0x1, 0x3), 10000u);
}

// As the members report, each of its schedule neighbours alone (algo::schedule_neighbours), a
// zigzag of 12 members over two continents: the coordinator reorders the ring by the paths, and
// once the new ring's links are measured too, it stays.
TEST_F(MembershipTest, NeighbourReportsAloneReorderTheRing) {
  Membership m(options());
  std::vector<PeerId> zigzag;
  for (PeerId k = 1; k <= 6; ++k) zigzag.insert(zigzag.end(), {k, 0x10 + k});
  form(m, zigzag);
  auto report_neighbours = [&](uint64_t epoch) {
    const std::vector<Member> ring = m.ring();
    const int n = static_cast<int>(ring.size());
    for (int r = 0; r < n; ++r) {
      std::vector<LinkMeasurement> rtts;
      for (int q : algo::schedule_neighbours(r, n)) {
        const PeerId a = ring[static_cast<size_t>(r)].id, b = ring[static_cast<size_t>(q)].id;
        rtts.push_back({b, two_continents(a, b)});
      }
      m.report_links(ring[static_cast<size_t>(r)].id, epoch, rtts);
    }
  };
  report_neighbours(1);
  EXPECT_EQ(m.rtt(0x1, 0x3), 0u) << "not neighbours in the zigzag";
  for (PeerId p : zigzag) ASSERT_TRUE(m.update(p, 1, m.committed(), t).ok());
  EXPECT_EQ(m.epoch(), 2u) << "a better order by the paths is worth a new epoch";
  EXPECT_LT(crossings(m.ring()), 12);
  for (uint64_t epoch = 2; epoch < 6 && crossings(m.ring()) > 2; ++epoch) {
    report_neighbours(epoch);
    const std::vector<PeerId> ring = ids(m.ring());
    for (PeerId p : ring) ASSERT_TRUE(m.update(p, epoch, m.committed(), t).ok());
  }
  EXPECT_EQ(crossings(m.ring()), 2) << testing::PrintToString(ids(m.ring()));
  const uint64_t settled = m.epoch();
  report_neighbours(settled);
  for (PeerId p : ids(m.ring())) ASSERT_TRUE(m.update(p, settled, m.committed(), t).ok());
  EXPECT_EQ(m.epoch(), settled) << "the best order is kept";
}

TEST_F(MembershipTest, AnUpdateReordersTheRingByReportedRoundTrips) {
  Membership m(options());  // measured_order: the default
  const std::vector<PeerId> zigzag = {0x1, 0x11, 0x2, 0x12, 0x3, 0x13};
  form(m, zigzag);
  report_all(m, 1, zigzag);
  EXPECT_EQ(m.rtt(0x1, 0x12), 90000u);
  EXPECT_EQ(m.rtt(0x12, 0x1), 90000u);
  for (PeerId p : zigzag) ASSERT_TRUE(m.update(p, 1, m.committed(), t).ok());
  EXPECT_EQ(m.epoch(), 2u) << "a better order is worth a new epoch";
  EXPECT_EQ(crossings(m.ring()), 2);
  expect_announced(m.take_notices(), 2, ids(m.ring()));
  // The next update finds nothing better: the same epoch is confirmed.
  const std::vector<PeerId> ordered = ids(m.ring());
  for (PeerId p : ordered) ASSERT_TRUE(m.update(p, 2, m.committed(), t).ok());
  EXPECT_EQ(m.epoch(), 2u);
  expect_announced(m.take_notices(), 2, ordered);
}

// --- algo=AUTO's crossover (coord/algo_choice.h) ----------------------------------------------

// n members, every link with the same round trip and rate: the ring takes 2(n-1) one-way
// latencies l and sends 2(n-1)/n S, the trees 2h latencies (h: the heap's height) and 2S, so they
// meet at S = n (n - 1 - h) l B. The all-gather takes n - 1 latencies and sends (n - 1) S: it
// meets the ring at S = n l B / (n - 2) and the tree at S = (2h - n + 1) l B / (n - 3), so it wins
// only where n - 1 < 2h (n = 4 here: up to l B); at n = 2 it beats the ring by a latency at every
// size (kMaxAllgatherBytes).
TEST(AlgoChoice, UniformLinksMeetWhereTheClosedFormSays) {
  struct Case {
    int n, h;
    uint32_t rtt_us;
    uint64_t rate;
  };
  for (const Case c : {Case{4, 2, 50000, 125000000}, Case{4, 2, 10000, 125000000},
                       Case{8, 3, 200000, 500000000}, Case{14, 3, 90000, 62500000}}) {
    std::vector<PeerId> peers;
    for (int i = 1; i <= c.n; ++i) peers.push_back(static_cast<PeerId>(i));
    const algo::Crossovers got = crossovers(members(peers), [&](PeerId, PeerId) {
      return LinkEstimate{c.rtt_us, c.rate};
    });
    const double lB = (c.rtt_us / 2e6) * static_cast<double>(c.rate);
    EXPECT_NEAR(static_cast<double>(got.tree_max_bytes), c.n * (c.n - 1 - c.h) * lB, 2.0)
        << "n=" << c.n << " rtt " << c.rtt_us;
    EXPECT_NEAR(static_cast<double>(got.allgather_max_bytes), c.n == 4 ? lB : 0.0, 2.0)
        << "n=" << c.n << " rtt " << c.rtt_us;
  }
  const algo::Crossovers two = crossovers(members({1, 2}), [](PeerId, PeerId) {
    return LinkEstimate{50000, 125000000};
  });
  EXPECT_EQ(two.allgather_max_bytes, kMaxAllgatherBytes);
  EXPECT_EQ(two.tree_max_bytes, 0u) << "two members: no tree";
}

// Three members: the trees' deepest path takes the longest link twice, the all-gather's two delays
// are two links of the ring, and both send 2S over the same links. On even links the two tie (the
// tree keeps it); on uneven ones the all-gather wins the tree at every size, up to where the ring
// wins (L B, L the ring's one-way delays summed), and the tree is never taken.
TEST(AlgoChoice, AtThreeMembersTheAllgatherTiesOrBeatsTheTree) {
  const algo::Crossovers even = crossovers(members({1, 2, 3}), [](PeerId, PeerId) {
    return LinkEstimate{50000, 125000000};
  });
  EXPECT_EQ(even.allgather_max_bytes, 0u) << "a tie keeps the tree";
  EXPECT_NEAR(static_cast<double>(even.tree_max_bytes), 3 * (3 - 1 - 1) * 0.025 * 125e6, 2.0);
  auto uneven = [](PeerId a, PeerId b) {
    const auto p = std::minmax<PeerId>(a, b);
    const uint32_t rtt = p == std::minmax<PeerId>(1, 2)   ? 20000
                         : p == std::minmax<PeerId>(2, 3) ? 40000
                                                          : 60000;
    return LinkEstimate{rtt, 125000000};
  };
  const algo::Crossovers got = crossovers(members({1, 2, 3}), uneven);
  EXPECT_NEAR(static_cast<double>(got.allgather_max_bytes), 0.060 * 125e6, 2.0);
  EXPECT_LT(got.tree_max_bytes, got.allgather_max_bytes) << "the tree is never taken";
}

// A tree that never wins (slower than the ring at S = 0, so taken for empty buffers only) does not
// bound the all-gather, even where it is cheaper per byte: the ring's slow link 2-3 is one the
// trees avoid, whose own extra links are long.
TEST(AlgoChoice, ATreeThatNeverWinsDoesNotBoundTheAllgather) {
  auto links = [](PeerId a, PeerId b) {
    const auto p = std::minmax<PeerId>(a, b);
    const bool tree_only = p == std::minmax<PeerId>(1, 3) || p == std::minmax<PeerId>(2, 4);
    const bool slow = p == std::minmax<PeerId>(2, 3);
    return LinkEstimate{tree_only ? 3000u : 1000u, slow ? 1000000u : 1000000000u};
  };
  const algo::Crossovers got = crossovers(members({1, 2, 3, 4}), links);
  EXPECT_EQ(got.tree_max_bytes, 1u);
  // Against the ring alone: n l B / (n - 2) with l = 0.5 ms and the ring's 1 MB/s (the tree's
  // line would have cut it to 833).
  EXPECT_NEAR(static_cast<double>(got.allgather_max_bytes), 1000.0, 1.0);
}

TEST(AlgoChoice, NoAnswerWithoutMeasurements) {
  const std::vector<Member> four = members({1, 2, 3, 4});
  auto uniform = [](PeerId, PeerId) { return LinkEstimate{50000, 125000000}; };
  const algo::Crossovers no_tree = crossovers(four, [](PeerId a, PeerId b) {
    return std::minmax<PeerId>(a, b) == std::minmax<PeerId>(1, 3) ? LinkEstimate{}
                                                                  : LinkEstimate{50000, 125000000};
  });
  EXPECT_EQ(no_tree.tree_max_bytes, 0u) << "tree 0's link 1-3 has no round trip";
  EXPECT_NEAR(static_cast<double>(no_tree.allgather_max_bytes), 2 * 0.025 * 125e6, 2.0)
      << "the all-gather against the ring alone: n l B / (n - 2)";
  // The ring's links measured their rates, the trees' others did not: those come from their ends.
  auto ring_rates_only = [](PeerId a, PeerId b) {
    const bool ring_link =
        (a > b ? a - b : b - a) == 1 || std::minmax<PeerId>(a, b) == std::minmax<PeerId>(1, 4);
    return LinkEstimate{50000, ring_link ? 125000000u : 0u};
  };
  EXPECT_EQ(crossovers(four, ring_rates_only), crossovers(four, uniform));
  EXPECT_EQ(crossovers(four,
                       [](PeerId, PeerId) {
                         return LinkEstimate{50000, 0};
                       }),
            algo::Crossovers{})
      << "no rate at all";
  EXPECT_EQ(crossovers(members({1}), uniform), algo::Crossovers{}) << "one member";
}

TEST(AlgoChoice, ATreeOverSlowLinksNeverWins) {
  // The ring's links are short; tree 0's link 1-3 and tree 1's link 2-4 cross an ocean.
  auto far = [](PeerId a, PeerId b) {
    const auto p = std::minmax<PeerId>(a, b);
    const bool ocean = p == std::minmax<PeerId>(1, 3) || p == std::minmax<PeerId>(2, 4);
    return LinkEstimate{ocean ? 200000u : 1000u, 125000000};
  };
  const algo::Crossovers got = crossovers(members({1, 2, 3, 4}), far);
  EXPECT_EQ(got.tree_max_bytes, 1u);
  EXPECT_NEAR(static_cast<double>(got.allgather_max_bytes), 2 * 0.0005 * 125e6, 2.0)
      << "the all-gather goes round the ring's short links: it meets the ring at n l B / (n - 2)";
}

TEST_F(MembershipTest, TheCrossoversAreFixedAtTheBarrierAndSentToEveryMember) {
  Membership m(options());
  const std::vector<PeerId> four = {A, B, C, D};
  form(m, four);
  EXPECT_EQ(m.crossovers(), algo::Crossovers{}) << "nothing measured when the first epoch forms";
  for (PeerId p : four) {
    std::vector<LinkMeasurement> links;
    for (PeerId q : four) {
      if (q != p) links.push_back({q, 50000, 125000000});
    }
    m.report_links(p, 1, links);
  }
  EXPECT_EQ(m.link(A, B).bytes_per_s, 125000000u);
  m.report_links(A, 1, {{B, 50000, 0}});
  EXPECT_EQ(m.link(B, A).bytes_per_s, 125000000u)
      << "a link that was never busy keeps the rate last reported";
  EXPECT_EQ(m.crossovers(), algo::Crossovers{})
      << "reports alone change nothing before the barrier";
  for (PeerId p : four) ASSERT_TRUE(m.update(p, 1, m.committed(), t).ok());
  EXPECT_EQ(m.epoch(), 1u);
  EXPECT_NEAR(static_cast<double>(m.crossovers().tree_max_bytes), 12.5e6, 2.0);
  EXPECT_NEAR(static_cast<double>(m.crossovers().allgather_max_bytes), 3.125e6, 2.0);
  const std::vector<Notice> epochs = of_kind(m.take_notices(), Kind::kEpoch);
  ASSERT_EQ(epochs.size(), 4u);
  for (const Notice &n : epochs) EXPECT_EQ(n.crossovers, m.crossovers());

  Membership::Options off = options();
  off.measured_crossover = false;
  Membership fixed(off);
  form(fixed, four);
  for (PeerId p : four) fixed.report_links(p, 1, {{p == A ? B : A, 50000, 125000000}});
  for (PeerId p : four) ASSERT_TRUE(fixed.update(p, 1, fixed.committed(), t).ok());
  EXPECT_EQ(fixed.crossovers(), algo::Crossovers{});
}

TEST_F(MembershipTest, TheRecordOfLostPeersIsBounded) {
  Membership::Options o = options();
  o.min_peers = 2;  // joiners stay joiners: no epoch forms around them
  Membership m(o);
  const PeerId first = 0x100000;
  for (PeerId p = first; p <= first + kMaxLostRemembered; ++p) {  // one more than it remembers
    ASSERT_TRUE(m.join(p, info(p), t).ok());
    m.disconnected(p, t);
  }
  m.take_notices();
  // The longest-lost is forgotten: its update is refused and it joins again as a newcomer would.
  EXPECT_EQ(m.update(first, 0, 0, t).code(), WCCL_ERR_INVALID_USAGE);
  // The next is still remembered: its update re-registers it as a joiner.
  EXPECT_TRUE(m.update(first + 1, 0, 0, t).ok());
  EXPECT_EQ(m.joiners(), 1u);
}

TEST_F(MembershipTest, RoundTripsAreKeptOnlyFromMembersAboutMembersOfTheirEpoch) {
  Membership m(options());
  form(m, {A, B, C, D});
  ASSERT_TRUE(m.join(E, info(E), t).ok());
  m.report_links(A, 1, {{B, 100}, {E, 200}, {A, 300}});
  m.report_links(E, 1, {{C, 400}});  // a joiner
  m.report_links(B, 7, {{C, 500}});  // another epoch
  EXPECT_EQ(m.rtt(A, B), 100u);
  EXPECT_EQ(m.rtt(A, E), 0u);
  EXPECT_EQ(m.rtt(A, A), 0u);
  EXPECT_EQ(m.rtt(E, C), 0u);
  EXPECT_EQ(m.rtt(B, C), 0u);
  m.disconnected(B, t);
  EXPECT_EQ(m.rtt(A, B), 0u) << "a lost peer's round trips are forgotten";
}

TEST_F(MembershipTest, TheFormedOrderStaysWhenMeasuredOrderIsOff) {
  Membership::Options o = options();
  o.measured_order = false;
  Membership m(o);
  const std::vector<PeerId> zigzag = {0x1, 0x11, 0x2, 0x12, 0x3, 0x13};
  form(m, zigzag);
  report_all(m, 1, zigzag);
  for (PeerId p : zigzag) ASSERT_TRUE(m.update(p, 1, m.committed(), t).ok());
  EXPECT_EQ(m.epoch(), 1u);
  EXPECT_EQ(ids(m.ring()), zigzag);
}

TEST_F(MembershipTest, LostMemberRevokesTheEpochAndTheBarrierStopsWaitingForIt) {
  Membership m(options());
  form(m, {A, B, C});
  ASSERT_TRUE(m.update(A, 1, m.committed(), t).ok());
  ASSERT_TRUE(m.update(B, 1, m.committed(), t).ok());
  m.disconnected(C, t);
  std::vector<Notice> n = m.take_notices();
  std::vector<Notice> revoked = of_kind(n, Kind::kRevoked);
  ASSERT_EQ(revoked.size(), 2u);
  for (const Notice &r : revoked) {
    EXPECT_EQ(r.epoch, 1u);
    EXPECT_EQ(r.lost, C);
    EXPECT_NE(r.reason.find("connection to the coordinator closed"), std::string::npos) << r.reason;
  }
  // Revocation is announced before the epoch that follows it.
  const auto first_epoch =
      std::find_if(n.begin(), n.end(), [](const Notice &x) { return x.kind == Kind::kEpoch; });
  const auto first_revoke =
      std::find_if(n.begin(), n.end(), [](const Notice &x) { return x.kind == Kind::kRevoked; });
  EXPECT_LT(first_revoke - n.begin(), first_epoch - n.begin());
  expect_announced(n, 2, {A, B});
}

TEST_F(MembershipTest, SilentPeerIsLostAfterPeerTimeoutExactly) {
  Membership m(options());
  form(m, {A, B, C});
  const Clock::time_point start = t;
  heartbeat_all(m, {A, B, C}, start);
  heartbeat_all(m, {A, B}, start + 600ms);  // C goes silent
  m.tick(start + 999ms);
  EXPECT_FALSE(m.revoked());
  m.tick(start + 1000ms);
  EXPECT_TRUE(m.revoked());
  std::vector<Notice> revoked = of_kind(m.take_notices(), Kind::kRevoked);
  ASSERT_EQ(revoked.size(), 2u);
  EXPECT_EQ(revoked[0].lost, C);
  EXPECT_NE(revoked[0].reason.find("silent for 1000 ms"), std::string::npos) << revoked[0].reason;
}

TEST_F(MembershipTest, BrokenLinkProbesTheNeighbourAtOnce) {
  Membership m(options());
  form(m, {A, B, C});
  heartbeat_all(m, {A, B, C}, t);
  m.link_broken(A, C, t);
  std::vector<Notice> probes = of_kind(m.take_notices(), Kind::kProbe);
  ASSERT_EQ(probes.size(), 1u);
  EXPECT_EQ(probes[0].to, C);
  m.heartbeat(C, t + 100ms);  // C answers: it stays
  m.tick(t + 400ms);
  EXPECT_FALSE(m.revoked());
  heartbeat_all(m, {A, B, C}, t + 500ms);
  m.link_broken(A, C, t + 500ms);
  EXPECT_EQ(m.next_deadline(), t + 800ms);
  m.tick(t + 799ms);
  EXPECT_FALSE(m.revoked());
  m.tick(t + 800ms);  // no answer within probe_timeout: lost, well before peer_timeout
  EXPECT_TRUE(m.revoked());
  std::vector<Notice> revoked = of_kind(m.take_notices(), Kind::kRevoked);
  ASSERT_FALSE(revoked.empty());
  EXPECT_EQ(revoked[0].lost, C);
  EXPECT_NE(revoked[0].reason.find("probe"), std::string::npos);
}

TEST_F(MembershipTest, LostPeerNeverSlipsBackButRejoinsThroughUpdate) {
  Membership m(options());
  form(m, {A, B, C});
  m.disconnected(C, t);  // C was only frozen
  m.take_notices();
  m.heartbeat(C, t + 10ms);
  std::vector<Notice> removed = of_kind(m.take_notices(), Kind::kRemoved);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].to, C);
  EXPECT_NE(removed[0].reason.find("declared lost"), std::string::npos);
  ASSERT_TRUE(m.update(C, 1, m.committed(), t + 20ms).ok())
      << "its update registers it as a joiner";
  EXPECT_EQ(m.joiners(), 1u);
  ASSERT_TRUE(m.update(A, 1, m.committed(), t + 30ms).ok());
  ASSERT_TRUE(m.update(B, 1, m.committed(), t + 30ms).ok());
  expect_announced(m.take_notices(), 2, {A, B, C});
}

// The straggler policy (straggler_timeout): A and B reach the update barrier, C (alive,
// heartbeating: busy or slow) does not. Off, the barrier waits for C as long as it lives; on, C is
// declared lost straggler_timeout after the first arrival, in every group of its node, and the
// epoch forms without it. C's later update registers it again, and the next barrier admits it. A
// leaver alone at the barrier does not start the clock: the others are not late for its leave.
TEST_F(MembershipTest, AStragglerIsDroppedFromTheBarrierOnlyWhenTheCoordinatorSaysSo) {
  for (const auto timeout : {0ms, 500ms}) {
    SCOPED_TRACE(timeout.count());
    Membership::Options o = options();
    o.straggler_timeout = timeout;
    Membership m(o);
    PeerInfo c = info(C);
    c.node = "n3";
    ASSERT_TRUE(m.join(A, info(A), t).ok());
    ASSERT_TRUE(m.join(B, info(B), t).ok());
    ASSERT_TRUE(m.join(C, c, t).ok());
    t += 250ms;
    m.tick(t);
    expect_announced(m.take_notices(), 1, {A, B, C});
    ASSERT_TRUE(m.update(A, 1, 0, t).ok());
    const auto opened = t;
    t += 100ms;
    ASSERT_TRUE(m.update(B, 1, 0, t).ok());
    (void)m.take_notices();
    if (timeout.count() == 0) {
      for (int i = 0; i < 20; ++i) {  // 10 s, C heartbeating
        t += 500ms;
        heartbeat_all(m, {A, B, C}, t);
        m.tick(t);
      }
      EXPECT_EQ(m.epoch(), 1u) << "the barrier waits for every live member";
      EXPECT_TRUE(m.live(C));
      continue;
    }
    EXPECT_EQ(m.next_deadline(), opened + timeout);
    m.heartbeat(C, opened + timeout - 1ms);
    m.tick(opened + timeout - 1ms);
    EXPECT_EQ(m.epoch(), 1u);
    t = opened + timeout;
    heartbeat_all(m, {A, B, C}, t);
    m.tick(t);
    EXPECT_FALSE(m.live(C));
    const auto notices = m.take_notices();
    const auto removed = of_kind(notices, Kind::kRemoved);
    ASSERT_EQ(removed.size(), 1u);
    EXPECT_EQ(removed[0].to, C);
    EXPECT_NE(removed[0].reason.find("straggler_timeout_ms"), std::string::npos)
        << removed[0].reason;
    EXPECT_EQ(m.epoch(), 2u);
    expect_announced(notices, 2, {A, B});
    const auto lost = m.take_lost();
    ASSERT_EQ(lost.size(), 1u) << "its node's communicators in other groups go with it";
    EXPECT_EQ(lost[0].node, "n3");
    // C arrives late: registered again, admitted at the next barrier.
    t += 100ms;
    ASSERT_TRUE(m.update(C, 1, 0, t).ok());
    EXPECT_EQ(m.joiners(), 1u);
    ASSERT_TRUE(m.update(A, 2, 0, t).ok());
    ASSERT_TRUE(m.update(B, 2, 0, t).ok());
    EXPECT_EQ(m.epoch(), 3u);
    EXPECT_EQ(m.ring().size(), 3u);
    (void)m.take_notices();
    // A leaver alone at the barrier starts no clock.
    t += 100ms;
    ASSERT_TRUE(m.leave(A, 3, 0, t).ok());
    t += 2 * timeout;
    heartbeat_all(m, {A, B, C}, t);
    m.tick(t);
    EXPECT_TRUE(m.live(B) && m.live(C)) << "nobody is late for a leave";
    ASSERT_TRUE(m.update(B, 3, 0, t).ok());
    t += timeout;
    heartbeat_all(m, {A, B, C}, t);
    m.tick(t);
    EXPECT_FALSE(m.live(C)) << "an update's arrival starts it";
    EXPECT_EQ(ids(m.ring()), (std::vector<PeerId>{B})) << "A left, C was late";
  }
}

TEST_F(MembershipTest, GracefulLeaveFailsNobodyEvenWhenTheLeaverArrivesLast) {
  Membership m(options());
  form(m, {A, B, C});
  ASSERT_TRUE(m.update(A, 1, m.committed(), t).ok());
  ASSERT_TRUE(m.update(B, 1, m.committed(), t).ok());
  ASSERT_TRUE(m.leave(C, 1, m.committed(), t).ok());
  std::vector<Notice> n = m.take_notices();
  EXPECT_TRUE(of_kind(n, Kind::kRevoked).empty()) << "a graceful leave revokes nothing";
  EXPECT_TRUE(of_kind(n, Kind::kRemoved).empty()) << "nobody was lost";
  std::vector<Notice> left = of_kind(n, Kind::kLeft);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].to, C);
  expect_announced(n, 2, {A, B});
}

TEST_F(MembershipTest, BadCallsAreRefusedAndChangeNothing) {
  Membership m(options());
  EXPECT_EQ(m.join(0, info(0), t).code(), WCCL_ERR_INVALID_ARGUMENT);
  form(m, {A, B});
  EXPECT_EQ(m.join(A, info(A), t).code(), WCCL_ERR_INVALID_USAGE);
  ASSERT_TRUE(m.join(C, info(C), t).ok());
  EXPECT_EQ(of_kind(m.take_notices(), Kind::kPending).size(), 3u)
      << "A, B, and C, of the epoch it waits to enter";
  EXPECT_TRUE(m.update(C, 1, m.committed(), t).ok()) << "a joiner's update waits with it";
  EXPECT_EQ(m.update(C, 1, m.committed(), t, /*admit=*/false).code(), WCCL_ERR_PEER_LOST)
      << "a joiner re-forms nothing";
  EXPECT_EQ(m.update(A, 7, m.committed(), t).code(), WCCL_ERR_PROTOCOL);
  EXPECT_EQ(m.update(D, 1, m.committed(), t).code(), WCCL_ERR_INVALID_USAGE);
  EXPECT_EQ(m.epoch(), 1u);
  EXPECT_TRUE(m.take_notices().empty());
}

TEST_F(MembershipTest, AMemberThatMissedTheEpochHearsItBeforeTheBarrierInIt) {
  Membership m(options());  // restarted: A and B report epoch 2, at whose update barrier they wait
  const std::vector<Member> ring = {{A, info(A)}, {B, info(B)}, {C, info(C)}};
  ASSERT_TRUE(m.rejoin(A, info(A), 2, ring, 0, t).ok());
  ASSERT_TRUE(m.rejoin(B, info(B), 2, ring, 0, t).ok());
  ASSERT_TRUE(m.update(A, 2, 0, t).ok());
  ASSERT_TRUE(m.update(B, 2, 0, t).ok());
  (void)m.take_notices();
  // C missed epoch 2's announcement in the crash: a BARRIER of epoch 2 means something to it only
  // once it knows epoch 2 (the control-plane simulation stalled on the other order, seed 16675).
  ASSERT_TRUE(m.rejoin(C, info(C), 1, ring, 0, t).ok());
  std::vector<Notice> n = m.take_notices();
  std::vector<Kind> kinds;
  for (const Notice &x : n) {
    if (x.to == C) kinds.push_back(x.kind);
  }
  // (Then the count of waiting joiners, 0 here, which a member that reconnects hears again.)
  EXPECT_EQ(kinds, (std::vector<Kind>{Kind::kEpoch, Kind::kBarrier, Kind::kPending}));
}

TEST_F(MembershipTest, RestartedCoordinatorContinuesFromWhatPeersReport) {
  Membership m(options());  // a fresh coordinator: it knows nothing
  const std::vector<Member> ring = {{A, info(A)}, {B, info(B)}, {C, info(C)}};
  ASSERT_TRUE(m.rejoin(B, info(B), 5, ring, 0, t).ok());
  EXPECT_EQ(m.epoch(), 5u) << "epoch numbering continues from the members' report";
  m.take_notices();
  ASSERT_TRUE(
      m.rejoin(A, info(A), 4, ring, 0, t + 10ms).ok());  // A missed the announcement of epoch 5
  std::vector<Notice> n = m.take_notices();
  ASSERT_EQ(of_kind(n, Kind::kEpoch).size(), 1u);
  EXPECT_EQ(of_kind(n, Kind::kEpoch)[0].to, A);
  EXPECT_EQ(of_kind(n, Kind::kEpoch)[0].epoch, 5u);
  ASSERT_TRUE(m.rejoin(E, info(E), 3, {{E, info(E)}}, 0, t + 20ms)
                  .ok());  // not in the job's ring: a joiner
  EXPECT_EQ(m.joiners(), 1u);
  heartbeat_all(m, {A, B, E}, t + 600ms);
  m.tick(t + 1000ms);  // C never came back
  EXPECT_TRUE(m.revoked());
  m.take_notices();
  ASSERT_TRUE(m.update(A, 5, m.committed(), t + 1010ms).ok());
  ASSERT_TRUE(m.update(B, 5, m.committed(), t + 1010ms).ok());
  expect_announced(m.take_notices(), 6, {A, B, E});
}

TEST_F(MembershipTest, JoinersFormTheNextEpochWhenNoMemberIsLeft) {
  Membership m(options());
  form(m, {A});
  ASSERT_TRUE(m.join(E, info(E), t).ok());
  m.disconnected(A, t + 10ms);
  m.take_notices();
  m.tick(t + 100ms);
  EXPECT_EQ(m.epoch(), 1u) << "still inside E's settle window";
  m.tick(t + 200ms);
  expect_announced(m.take_notices(), 2, {E});
}

// Each EPOCH says how the epoch was formed: the group's first FIRST, every epoch formed from
// members of the one before CONTINUES, joiners forming one alone after the last member was lost
// AFTER_LOSS, after it left AFTER_LEAVE.
TEST_F(MembershipTest, AnEpochOfJoinersAloneSaysHowTheGroupsMembersWent) {
  auto origins = [](const std::vector<Notice> &notices) {
    std::set<EpochOrigin> out;
    for (const Notice &n : of_kind(notices, Kind::kEpoch)) out.insert(n.origin);
    return out;
  };
  using O = std::set<EpochOrigin>;
  Membership m(options());
  for (PeerId p : {A, B}) ASSERT_TRUE(m.join(p, info(p), t).ok());
  t += 250ms;
  m.tick(t);
  EXPECT_EQ(origins(m.take_notices()), O{EpochOrigin::kFirst}) << "the group's first epoch";
  ASSERT_TRUE(m.join(C, info(C), t).ok());
  ASSERT_TRUE(m.update(A, 1, 0, t).ok());
  ASSERT_TRUE(m.update(B, 1, 0, t).ok());
  EXPECT_EQ(origins(m.take_notices()), O{EpochOrigin::kContinues})
      << "a barrier admitting a joiner";
  // Every member lost (A, B by silence, C's link closed): the next joiner is alone.
  m.disconnected(C, t);
  t += 1100ms;
  m.tick(t);
  EXPECT_EQ(m.ring().size(), 3u);  // the epoch stays; its members are gone
  ASSERT_TRUE(m.join(D, info(D), t).ok());
  t += 250ms;
  m.tick(t);
  auto notices = m.take_notices();
  expect_announced(notices, m.epoch(), {D});
  EXPECT_EQ(origins(notices), O{EpochOrigin::kAfterLoss});
  EXPECT_EQ(m.origin(), EpochOrigin::kAfterLoss);
  // D leaves at its barrier: the next joiner's epoch comes after a leave.
  ASSERT_TRUE(m.leave(D, m.epoch(), 0, t).ok());
  (void)m.take_notices();
  ASSERT_TRUE(m.join(E, info(E), t).ok());
  t += 250ms;
  m.tick(t);
  notices = m.take_notices();
  expect_announced(notices, m.epoch(), {E});
  EXPECT_EQ(origins(notices), O{EpochOrigin::kAfterLeave});
  // A joiner admitted at the barrier where the last member leaves is alone too.
  const PeerId F = 0xf, G = 0x10;
  ASSERT_TRUE(m.join(F, info(F), t).ok());  // waits: E is a member
  ASSERT_TRUE(m.leave(E, m.epoch(), 0, t).ok());
  notices = m.take_notices();
  expect_announced(notices, m.epoch(), {F});
  EXPECT_EQ(origins(notices), O{EpochOrigin::kAfterLeave}) << "F was admitted as E left";
  // One admitted while a member goes on continues it.
  ASSERT_TRUE(m.join(G, info(G), t).ok());
  ASSERT_TRUE(m.update(F, m.epoch(), 0, t).ok());
  notices = m.take_notices();
  expect_announced(notices, m.epoch(), {F, G});
  EXPECT_EQ(origins(notices), O{EpochOrigin::kContinues});
}

TEST_F(MembershipTest, NextDeadlineTracksTheEarliestTimeout) {
  Membership m(options());
  EXPECT_EQ(m.next_deadline(), Clock::time_point::max());
  ASSERT_TRUE(m.join(A, info(A), t).ok());
  EXPECT_EQ(m.next_deadline(), t + 200ms);  // settle
  m.tick(t + 200ms);
  EXPECT_EQ(m.next_deadline(), t + 1000ms);  // A's peer_timeout
}

// Random joins, updates, leaves, disconnects, silences and broken links. After every step: each
// epoch decision reaches exactly its ring's members with one (epoch, ring); epochs never go back;
// a peer declared lost appears in no later ring unless it joined again.
TEST_F(MembershipTest, ChurnKeepsEveryDecisionConsistent) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    Membership m(options());
    std::set<PeerId> gone;  // disconnected and not joined since
    uint64_t last_epoch = 0;
    PeerId next_id = 1;
    for (int step = 0; step < 400; ++step) {
      t += std::chrono::milliseconds(rng() % 120);
      const std::vector<Member> ring = m.ring();
      const PeerId some = ring.empty() ? 0 : ring[rng() % ring.size()].id;
      switch (rng() % 7) {
        case 0:
          (void)m.join(next_id, info(next_id), t);
          gone.erase(next_id++);
          break;
        case 1:
        case 2:
          for (const Member &x : ring) {  // a disconnected peer is dead: it calls nothing
            if (gone.count(x.id) == 0 && rng() % 4 != 0)
              (void)m.update(x.id, m.epoch(), m.committed(), t);
          }
          break;
        case 3:
          if (some != 0 && gone.count(some) == 0) (void)m.leave(some, m.epoch(), m.committed(), t);
          break;
        case 4:
          if (some != 0) {
            m.disconnected(some, t);
            gone.insert(some);
          }
          break;
        case 5:
          for (const Member &x : ring) {
            if (gone.count(x.id) == 0) m.heartbeat(x.id, t);
          }
          break;
        default:
          if (ring.size() >= 2) m.link_broken(ring[0].id, ring[1].id, t);
          break;
      }
      m.tick(t);
      std::vector<Notice> epochs = of_kind(m.take_notices(), Kind::kEpoch);
      if (epochs.empty()) continue;
      ASSERT_GE(epochs[0].epoch, last_epoch) << "seed " << seed << " step " << step;
      last_epoch = epochs[0].epoch;
      // Decisions in one step come one after another; check the last one against the state.
      std::vector<Notice> last;
      for (const Notice &n : epochs) {
        if (n.epoch == m.epoch()) last.push_back(n);
      }
      expect_announced(last, m.epoch(), ids(m.ring()));
      const std::vector<PeerId> now_ring = ids(m.ring());
      const std::set<PeerId> unique(now_ring.begin(), now_ring.end());
      ASSERT_EQ(unique.size(), m.ring().size()) << "seed " << seed << " step " << step;
      for (PeerId g : gone) {
        ASSERT_EQ(unique.count(g), 0u)
            << "lost peer " << g << " slipped back, seed " << seed << " step " << step;
      }
      if (HasFailure()) return;
    }
    EXPECT_GE(last_epoch, 10u) << "seed " << seed << ": the churn hardly changed membership";
  }
}

TEST_F(MembershipTest, RejoinOrderDoesNotMatterAfterARestart) {
  Membership m(options());
  const std::vector<Member> ring = {{A, info(A)}, {B, info(B)}};
  ASSERT_TRUE(m.rejoin(A, info(A), 4, ring, 0, t).ok());  // A holds an older epoch and comes first
  expect_announced(m.take_notices(), 4, {A, B});
  ASSERT_TRUE(m.rejoin(B, info(B), 5, ring, 0, t).ok());  // B saw epoch 5 before the crash
  expect_announced(m.take_notices(), 5, {A, B});          // A too is told of epoch 5
  ASSERT_TRUE(m.update(A, 5, m.committed(), t).ok());
  ASSERT_TRUE(m.update(B, 5, m.committed(), t).ok());
  EXPECT_EQ(of_kind(m.take_notices(), Kind::kEpoch).size(), 2u);
}

TEST_F(MembershipTest, AdoptedEpochRemovesPeersOutsideIt) {
  Membership m(options());
  form(m,
       {E});  // a fresh coordinator formed an epoch of newcomers before the old members came back
  ASSERT_TRUE(m.rejoin(A, info(A), 5, {{A, info(A)}, {B, info(B)}}, 0, t).ok());
  std::vector<Notice> n = m.take_notices();
  std::vector<Notice> removed = of_kind(n, Kind::kRemoved);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].to, E);
  EXPECT_NE(removed[0].reason.find("superseded"), std::string::npos);
  expect_announced(n, 5, {A, B});
  ASSERT_TRUE(m.update(E, 1, m.committed(), t).ok()) << "E joins again through its update";
  EXPECT_EQ(m.joiners(), 1u);
}

TEST_F(MembershipTest, RejoinWithABadReportIsRefused) {
  Membership m(options());
  EXPECT_EQ(m.rejoin(A, info(A), 3, {{A, info(A)}, {A, info(A)}}, 0, t).code(),
            WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(m.rejoin(A, info(A), ~0ULL, {{A, info(A)}}, 0, t).code(), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(m.epoch(), 0u);
}

TEST_F(MembershipTest, LeaverThatDisconnectsBeforeTheBarrierRevokesNothing) {
  Membership m(options());
  form(m, {A, B, C});
  ASSERT_TRUE(m.leave(C, 1, m.committed(), t).ok());
  m.disconnected(C, t);  // it leaves and goes at once, before A and B update
  EXPECT_TRUE(of_kind(m.take_notices(), Kind::kRevoked).empty());
  ASSERT_TRUE(m.update(A, 1, m.committed(), t).ok());
  ASSERT_TRUE(m.update(B, 1, m.committed(), t).ok());
  expect_announced(m.take_notices(), 2, {A, B});
}

// After a restart the coordinator knows a member that is not back yet only from the ring another
// member reported: the node it gives must come with the member's loss, so that the coordinator
// loses the node's communicators in its other groups too (a soak of the trainer, coordinator
// restart + freeze + kill, livelocked for 270 s when an adopted member lost by silence named no
// node: its sibling in the other group stayed a member, the node was half in).
TEST_F(MembershipTest, AnAdoptedMemberLostBeforeItIsBackNamesItsNode) {
  Membership m(options());
  PeerInfo a = info(A), b = info(B);
  a.node = "n1";
  b.node = "n2";
  ASSERT_TRUE(m.rejoin(A, a, 5, {{A, a}, {B, b}}, 0, t).ok());
  expect_announced(m.take_notices(), 5, {A, B});
  t += 1000ms;  // B (frozen) never comes back: silent for peer_timeout since the adoption
  m.heartbeat(A, t);
  m.tick(t);
  EXPECT_FALSE(m.live(B));
  const auto lost = m.take_lost();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].name, b.name);
  EXPECT_EQ(lost[0].node, "n2");
}

TEST_F(MembershipTest, LostPeerCannotRejoinItsOldEpochAsAMember) {
  Membership m(options());
  form(m, {A, B, C});
  m.disconnected(C, t);                                       // lost from epoch 1
  ASSERT_TRUE(m.rejoin(C, info(C), 1, m.ring(), 0, t).ok());  // back: a joiner
  EXPECT_EQ(m.joiners(), 1u);
  m.disconnected(C, t);  // and gone again
  m.take_notices();
  ASSERT_TRUE(m.rejoin(C, info(C), 1, m.ring(), 0, t).ok());  // back once more
  EXPECT_EQ(m.joiners(), 1u) << "still a joiner, never a member of the epoch it was lost from";
  ASSERT_TRUE(m.update(A, 1, m.committed(), t).ok());
  ASSERT_TRUE(m.update(B, 1, m.committed(), t).ok());
  expect_announced(m.take_notices(), 2, {A, B, C});
}

}  // namespace
}  // namespace wccl::coord

namespace wccl::coord {
namespace {

std::vector<PeerId> committed_to(const std::vector<Notice> &notices, uint64_t seq) {
  std::vector<PeerId> out;
  for (const Notice &n : of_kind(notices, Kind::kCommit)) {
    if (n.seq == seq) out.push_back(n.to);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST_F(MembershipTest, AnOperationCommitsWhenEveryMemberIsDone) {
  Membership m(options());
  form(m, {A, B, C});
  ASSERT_TRUE(m.done(A, 1, 1, t).ok());
  ASSERT_TRUE(m.done(B, 1, 1, t).ok());
  ASSERT_TRUE(m.done(A, 1, 2, t).ok());
  EXPECT_TRUE(of_kind(m.take_notices(), Kind::kCommit).empty());
  ASSERT_TRUE(m.done(C, 1, 1, t).ok());
  EXPECT_EQ(committed_to(m.take_notices(), 1), (std::vector<PeerId>{A, B, C}));
  ASSERT_TRUE(m.done(B, 1, 2, t).ok());
  ASSERT_TRUE(m.done(C, 1, 2, t).ok());
  EXPECT_EQ(committed_to(m.take_notices(), 2), (std::vector<PeerId>{A, B, C}));
  EXPECT_EQ(m.committed(), 2u);
  // A repeat (after a reconnection) is answered at once.
  ASSERT_TRUE(m.done(B, 1, 2, t).ok());
  EXPECT_EQ(committed_to(m.take_notices(), 2), (std::vector<PeerId>{B}));
  EXPECT_EQ(m.done(A, 1, 2 + kMaxOpsAhead + 1, t).code(), WCCL_ERR_PROTOCOL);
}

TEST_F(MembershipTest, ALossBeforeTheLastDoneFailsTheOperationForEveryone) {
  Membership m(options());
  form(m, {A, B, C});
  ASSERT_TRUE(m.done(A, 1, 1, t).ok());
  ASSERT_TRUE(m.done(B, 1, 1, t).ok());
  m.disconnected(C, t);
  std::vector<Notice> n = m.take_notices();
  EXPECT_EQ(of_kind(n, Kind::kRevoked).size(), 2u);
  ASSERT_TRUE(m.done(C, 1, 1, t).ok());  // too late: C is lost, and the epoch revoked
  EXPECT_TRUE(of_kind(m.take_notices(), Kind::kCommit).empty());
  ASSERT_TRUE(m.update(A, 1, m.committed(), t).ok());
  ASSERT_TRUE(m.update(B, 1, m.committed(), t).ok());
  expect_announced(m.take_notices(), 2, {A, B});
  ASSERT_TRUE(m.done(A, 2, 1, t).ok());
  ASSERT_TRUE(m.done(B, 2, 1, t).ok());
  EXPECT_EQ(committed_to(m.take_notices(), 1), (std::vector<PeerId>{A, B}))
      << "numbering restarts with the epoch";
}

TEST_F(MembershipTest, AFailedOperationRevokesTheEpochWithoutLosingAnyone) {
  Membership m(options());
  form(m, {A, B, C});
  ASSERT_TRUE(m.done(A, 1, 1, t).ok());
  m.op_failed(B, 1, 1, "ring link broke", t);
  std::vector<Notice> n = m.take_notices();
  ASSERT_EQ(of_kind(n, Kind::kRevoked).size(), 3u);
  EXPECT_NE(of_kind(n, Kind::kRevoked)[0].reason.find("ring link broke"), std::string::npos);
  ASSERT_TRUE(m.done(C, 1, 1, t).ok());
  EXPECT_TRUE(of_kind(m.take_notices(), Kind::kCommit).empty());
  for (PeerId p : {A, B, C}) ASSERT_TRUE(m.update(p, 1, m.committed(), t).ok());
  expect_announced(m.take_notices(), 2, {A, B, C});
}

TEST_F(MembershipTest, BrokenLinksInARevokedEpochProbeNobody) {
  Membership m(options());
  form(m, {A, B, C});
  m.op_failed(A, 1, 1, "timeout", t);
  (void)m.take_notices();
  m.link_broken(B, C, t);  // members close a revoked epoch's links on purpose
  EXPECT_TRUE(of_kind(m.take_notices(), Kind::kProbe).empty());
  m.tick(t + 500ms);
  EXPECT_TRUE(of_kind(m.take_notices(), Kind::kRevoked).empty()) << "nobody was lost";
}

TEST_F(MembershipTest, ARestartedCoordinatorKeepsACommitAnyMemberSaw) {
  Membership m(options());
  const std::vector<Member> ring = {{A, info(A)}, {B, info(B)}};
  // B rejoins first: it saw operation 2 committed, and reports 3 done again.
  ASSERT_TRUE(m.rejoin(B, info(B), 5, ring, 2, t).ok());
  ASSERT_TRUE(m.done(B, 5, 3, t).ok());
  EXPECT_TRUE(of_kind(m.take_notices(), Kind::kCommit).empty());
  // A saw the old coordinator commit 3 before it died: that decision stands, and B hears it.
  ASSERT_TRUE(m.rejoin(A, info(A), 5, ring, 3, t).ok());
  EXPECT_EQ(committed_to(m.take_notices(), 3), (std::vector<PeerId>{A, B}));
  EXPECT_EQ(m.committed(), 3u);
}

// The events log's record (Options::record_events): each change of the membership once, in order,
// with the epoch it concerns and, for a loss, its cause. Summarised as "kind peer details".
std::vector<std::string> summary(const std::vector<Event> &events) {
  std::vector<std::string> out;
  for (const Event &e : events) {
    std::string line = std::string(event_kind_name(e.kind)) + " " + std::to_string(e.epoch);
    if (e.peer.id != 0) line += " " + e.peer.info.name;
    switch (e.kind) {
      case Event::Kind::kLost:
        line += std::string(" ") + loss_cause_name(e.cause) + (e.member ? " member" : " joiner");
        break;
      case Event::Kind::kLeft:
        line += e.member ? " member" : " joiner";
        break;
      case Event::Kind::kRevoked:
        line += " op " + std::to_string(e.seq) + " " +
                wccl_result_name(static_cast<wccl_result_t>(e.code));
        break;
      case Event::Kind::kEpoch:
        line += " of " + std::to_string(e.members) + " +" + std::to_string(e.admitted) + " -" +
                std::to_string(e.left) + " x" + std::to_string(e.lost);
        break;
      case Event::Kind::kAdopted:
        line += " of " + std::to_string(e.members) + " committed " + std::to_string(e.seq);
        break;
      default:
        break;
    }
    out.push_back(line);
  }
  return out;
}

TEST_F(MembershipTest, EventsRecordEachChangeOnceWithItsCause) {
  Membership::Options o = options();
  o.record_events = true;
  o.straggler_timeout = 500ms;
  Membership m(o);
  using V = std::vector<std::string>;
  for (PeerId p : {A, B, C}) ASSERT_TRUE(m.join(p, info(p), t).ok());
  t += 250ms;
  m.tick(t);
  EXPECT_EQ(summary(m.take_events()),
            (V{"registered 0 peer-10", "registered 0 peer-11", "registered 0 peer-12",
               "admitted 1 peer-10", "admitted 1 peer-11", "admitted 1 peer-12",
               "epoch 1 of 3 +3 -0 x0"}));
  ASSERT_TRUE(m.join(D, info(D), t).ok());
  for (PeerId p : {A, B, C}) ASSERT_TRUE(m.update(p, 1, 0, t).ok());
  EXPECT_EQ(summary(m.take_events()),
            (V{"registered 1 peer-13", "admitted 2 peer-13", "epoch 2 of 4 +1 -0 x0"}));
  // A probe unanswered, then a closed connection: two losses, one revocation (the first cause).
  heartbeat_all(m, {A, B, C, D}, t);
  m.link_broken(A, B, t);
  t += 300ms;
  heartbeat_all(m, {A, C, D}, t);
  m.tick(t);
  m.disconnected(C, t);
  EXPECT_EQ(summary(m.take_events()),
            (V{"lost 2 peer-11 probe member", "revoked 2 op 0 WCCL_ERR_PEER_LOST",
               "lost 2 peer-12 disconnected member"}));
  ASSERT_TRUE(m.update(A, 2, 0, t).ok());
  ASSERT_TRUE(m.leave(D, 2, 0, t).ok());
  EXPECT_EQ(summary(m.take_events()), (V{"left 2 peer-13 member", "epoch 3 of 1 +0 -1 x2"}));
  // A joiner that leaves before its admission, one that goes silent, and a straggler.
  ASSERT_TRUE(m.join(E, info(E), t).ok());
  ASSERT_TRUE(m.leave(E, 0, 0, t).ok());
  ASSERT_TRUE(m.join(B, info(B), t).ok());
  for (PeerId p : {A, B}) ASSERT_TRUE(m.update(p, 3, 0, t).ok());
  ASSERT_TRUE(m.join(C, info(C), t).ok());
  EXPECT_EQ(summary(m.take_events()),
            (V{"registered 3 peer-14", "left 3 peer-14 joiner", "registered 3 peer-11",
               "admitted 4 peer-11", "epoch 4 of 2 +1 -0 x0", "registered 4 peer-12"}));
  ASSERT_TRUE(m.update(A, 4, 0, t).ok());
  t += 500ms;
  m.heartbeat(A, t);
  m.heartbeat(B, t);
  m.tick(t);
  const V straggler = summary(m.take_events());
  ASSERT_EQ(straggler.size(), 4u);
  EXPECT_EQ(straggler[0], "lost 4 peer-11 straggler member");
  EXPECT_EQ(straggler[1], "revoked 4 op 0 WCCL_ERR_PEER_LOST");
  EXPECT_EQ(straggler[2], "admitted 5 peer-12") << "C, the joiner, enters at A's barrier";
  EXPECT_EQ(straggler[3], "epoch 5 of 2 +1 -0 x1");
  t += 600ms;
  m.heartbeat(A, t);
  m.tick(t);  // C went silent
  EXPECT_EQ(summary(m.take_events()),
            (V{"lost 5 peer-12 silent member", "revoked 5 op 0 WCCL_ERR_PEER_LOST"}));
  // An operation that failed with MISMATCH revokes the epoch with that failure.
  ASSERT_TRUE(m.update(A, 5, 0, t).ok());
  (void)m.take_events();
  ASSERT_TRUE(m.join(B, info(B), t).ok());
  ASSERT_TRUE(m.update(A, 6, 0, t).ok());
  (void)m.take_events();
  m.op_failed(B, 7, 1, "calls differ", t, WCCL_ERR_MISMATCH);
  EXPECT_EQ(summary(m.take_events()), (V{"revoked 7 op 1 WCCL_ERR_MISMATCH"}));
}

TEST_F(MembershipTest, EventsRecordWhatARestartedCoordinatorAdopted) {
  Membership::Options o = options();
  o.record_events = true;
  Membership m(o);
  ASSERT_TRUE(m.join(E, info(E), t).ok());  // a newcomer forms an epoch before the job is back
  t += 250ms;
  m.tick(t);
  (void)m.take_events();
  ASSERT_TRUE(m.rejoin(A, info(A), 5, {{A, info(A)}, {B, info(B)}}, 3, t).ok());
  EXPECT_EQ(summary(m.take_events()),
            (std::vector<std::string>{"adopted 5 peer-10 of 2 committed 3",
                                      "lost 5 peer-14 superseded member"}));
  Membership quiet(options());  // without record_events nothing is kept
  ASSERT_TRUE(quiet.join(A, info(A), t).ok());
  EXPECT_TRUE(quiet.take_events().empty());
}

// One line of JSON per event: strings escaped (a peer's name may hold quotes, backslashes and
// control bytes), the time in UTC to the millisecond, only the fields of the event's kind.
TEST(EventsLog, AnEventIsOneLineOfJson) {
  Event e;
  e.kind = Event::Kind::kLost;
  e.epoch = 7;
  e.peer = {0xab, {"a\"b\\c\n\x01", "10.0.0.1:7000", "n1"}};
  e.member = true;
  e.cause = LossCause::kProbe;
  e.reason = "no answer";
  const auto at = std::chrono::system_clock::time_point(std::chrono::milliseconds(1796298817398));
  EXPECT_EQ(event_json("g", e, at),
            "{\"time\":\"2026-12-03T11:53:37.398Z\",\"group\":\"g\",\"event\":\"lost\",\"epoch\":7,"
            "\"peer\":\"00000000000000ab\",\"name\":\"a\\\"b\\\\c\\n\\u0001\",\"node\":\"n1\","
            "\"address\":\"10.0.0.1:7000\",\"cause\":\"probe\",\"reason\":\"no answer\","
            "\"member\":true}");
  e = {};
  e.kind = Event::Kind::kRevoked;
  e.epoch = 8;
  e.seq = 3;
  e.code = WCCL_ERR_MISMATCH;
  e.reason = "calls differ";
  EXPECT_EQ(
      event_json("g", e, at),
      "{\"time\":\"2026-12-03T11:53:37.398Z\",\"group\":\"g\",\"event\":\"revoked\","
      "\"epoch\":8,\"reason\":\"calls differ\",\"failed_op\":3,\"code\":\"WCCL_ERR_MISMATCH\"}");
  auto bad = EventsLog::open("/nonexistent-dir/events.jsonl");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), WCCL_ERR_IO);
  EXPECT_NE(bad.status().message().find("/nonexistent-dir/events.jsonl"), std::string::npos);
}

}  // namespace
}  // namespace wccl::coord
