// The coordinator over real links on 127.0.0.1, with in-process peers speaking control messages:
// formation and admission, loss by closed link, silence and failed probe, refusal of bad or
// out-of-order input without harm to the members, groups, and unauthenticated clients.
#include <sys/wait.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "coord/channel.h"
#include "coord/coordinator.h"
#include "support.h"

namespace wccl::coord {
namespace {

using namespace std::chrono_literals;

// 2026-01-01 in microseconds since 1970: a coordinator numbers its epochs past its start time, so
// that a restarted one never reuses a number.
constexpr uint64_t kBefore2026Us = 1767225600000000;
using test::make_config;

// A peer's side of the control plane, with its own transport.
class Client {
 public:
  Client(int port, Config cfg, PeerId id, std::string group = "g")
      : id_(id), group_(std::move(group)) {
    auto t = net::Transport::create(cfg);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (!t.ok()) return;
    transport_ = std::move(t).value();
    auto link = transport_->connect_sync("127.0.0.1:" + std::to_string(port));
    connect_status_ = link.status();
    if (!link.ok()) return;
    auto state = state_;
    channel_ = ControlChannel::open(
        link.value(),
        [state](ControlMessage m) {
          std::lock_guard<std::mutex> lock(state->mu);
          state->inbox.push_back(std::move(m));
          state->cv.notify_all();
        },
        [state](Status why) {
          std::lock_guard<std::mutex> lock(state->mu);
          state->closed = why;
          state->cv.notify_all();
        });
  }
  ~Client() { transport_.reset(); }

  const Status &connect_status() const { return connect_status_; }
  void send(ControlMessage m) {
    m.peer = id_;
    ASSERT_TRUE(channel_->send(m).ok());
  }
  void join() {
    ControlMessage m;
    m.type = MessageType::kJoin;
    m.group = group_;
    m.info = {"peer-" + std::to_string(id_), "127.0.0.1:" + std::to_string(7000 + id_), node_};
    send(m);
  }
  void heartbeat() { send(simple(MessageType::kHeartbeat, 0)); }
  void update(uint64_t epoch) { send(simple(MessageType::kUpdate, epoch)); }
  void heartbeats(std::chrono::milliseconds period) {
    ASSERT_TRUE(transport_
                    ->every(period,
                            [this] {
                              if (!paused_)
                                (void)channel_->send(simple(MessageType::kHeartbeat, 0));
                            })
                    .ok());
  }
  void pause_heartbeats() { paused_ = true; }
  // The next message of `type`; messages of other types before it are dropped.
  std::optional<ControlMessage> next(MessageType type, std::chrono::milliseconds timeout = 5s) {
    std::unique_lock<std::mutex> lock(state_->mu);
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      while (!state_->inbox.empty()) {
        ControlMessage m = std::move(state_->inbox.front());
        state_->inbox.pop_front();
        if (m.type == type) return m;
      }
      if (state_->cv.wait_until(lock, deadline) == std::cv_status::timeout && state_->inbox.empty())
        return {};
    }
  }
  // The reason the coordinator closed the link, or nullopt if it stays open for `timeout`.
  std::optional<Status> closed(std::chrono::milliseconds timeout = 5s) {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->cv.wait_for(lock, timeout, [&] { return state_->closed.has_value(); });
    return state_->closed;
  }
  PeerId id() const { return id_; }
  void set_node(std::string node) { node_ = std::move(node); }  // the `node` its JOIN names
  ControlChannel &channel() { return *channel_; }

 private:
  ControlMessage simple(MessageType type, uint64_t epoch) const {
    ControlMessage m;
    m.type = type;
    m.peer = id_;
    m.epoch = epoch;
    return m;
  }
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<ControlMessage> inbox;
    std::optional<Status> closed;
  };
  PeerId id_;
  std::string group_;
  std::string node_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::unique_ptr<net::Transport> transport_;
  std::shared_ptr<ControlChannel> channel_;
  Status connect_status_;
  std::atomic<bool> paused_{false};
};

std::vector<PeerId> ring_ids(const ControlMessage &m) {
  std::vector<PeerId> out;
  for (const Member &x : m.ring) out.push_back(x.id);
  return out;
}

// Peers join over separate connections, so the order their JOINs arrive in is not fixed.
std::vector<PeerId> sorted(std::vector<PeerId> v) {
  std::sort(v.begin(), v.end());
  return v;
}

class CoordinatorTest : public testing::Test {
 protected:
  void SetUp() override {
    coord_files_ = pki_.node("coordinator");
    Config cfg = make_config("coordinator", &coord_files_);
    ASSERT_TRUE(cfg.set("listen", "127.0.0.1:0").ok());
    ASSERT_TRUE(cfg.set("settle_ms", "100").ok());
    ASSERT_TRUE(cfg.set("heartbeat_ms", "200").ok());
    ASSERT_TRUE(cfg.set("peer_timeout_ms", "800").ok());
    auto c = Coordinator::start(cfg);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    coord_ = std::move(c).value();
  }
  std::unique_ptr<Client> client(PeerId id, std::string group = "g") {
    auto files = pki_.node("peer-" + std::to_string(id));
    return std::make_unique<Client>(coord_->port(),
                                    make_config("peer-" + std::to_string(id), &files), id, group);
  }
  // n peers that joined and agreed on one epoch (its number is left in epoch_, its ring in ring_).
  std::vector<std::unique_ptr<Client>> formed(std::vector<PeerId> ids) {
    std::vector<std::unique_ptr<Client>> out;
    // Every client connects (TLS, which is slow under the sanitizers) before any joins, so the
    // JOINs arrive within settle_ms of each other and form one epoch.
    for (PeerId id : ids) out.push_back(client(id));
    for (auto &c : out) {
      c->heartbeats(100ms);
      c->join();
    }
    for (auto &c : out) {
      auto e = c->next(MessageType::kEpoch);
      EXPECT_TRUE(e.has_value()) << "peer " << c->id() << " got no epoch";
      if (e) {
        if (epoch_ == 0) epoch_ = e->epoch;
        EXPECT_EQ(e->epoch, epoch_);
        EXPECT_EQ(sorted(ring_ids(*e)), sorted(ids));
        if (ring_.empty()) ring_ = ring_ids(*e);
        EXPECT_EQ(ring_ids(*e), ring_) << "every member is told the same ring";
      }
    }
    EXPECT_GT(epoch_, kBefore2026Us);
    return out;
  }

  test::Pki pki_;
  devkit::NodeFiles coord_files_;
  std::unique_ptr<Coordinator> coord_;
  std::vector<PeerId> ring_;
  uint64_t epoch_ = 0;
};

TEST_F(CoordinatorTest, FourPeersAgreeAndAFifthIsAdmittedAtTheNextUpdate) {
  auto peers = formed({1, 2, 3, 4});
  auto fifth = client(5);
  fifth->heartbeats(100ms);
  fifth->join();
  EXPECT_FALSE(fifth->next(MessageType::kEpoch, 300ms).has_value())
      << "a joiner waits for the members' update";
  for (auto &p : peers) p->update(epoch_);
  peers.push_back(std::move(fifth));
  for (auto &p : peers) {
    auto e = p->next(MessageType::kEpoch);
    ASSERT_TRUE(e.has_value()) << "peer " << p->id();
    EXPECT_EQ(e->epoch, epoch_ + 1);
    std::vector<PeerId> expected = ring_;  // the members keep their order; the joiner comes last
    expected.push_back(5);
    EXPECT_EQ(ring_ids(*e), expected);
  }
}

TEST_F(CoordinatorTest, ClosedControlLinkRevokesTheEpochAtOnce) {
  auto peers = formed({1, 2, 3});
  const auto t0 = Clock::now();
  peers[2].reset();  // its transport goes: the link closes
  for (int i = 0; i < 2; ++i) {
    auto r = peers[i]->next(MessageType::kRevoked, 2s);
    ASSERT_TRUE(r.has_value()) << "peer " << peers[i]->id();
    EXPECT_EQ(r->epoch, epoch_);
    EXPECT_EQ(r->other, 3u);
  }
  EXPECT_LT(Clock::now() - t0, 1s);
  peers[0]->update(epoch_);
  peers[1]->update(epoch_);
  auto e = peers[0]->next(MessageType::kEpoch);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->epoch, epoch_ + 1);
  EXPECT_EQ(sorted(ring_ids(*e)), (std::vector<PeerId>{1, 2}));
}

// Two nodes, A and B, each with a communicator in groups g0 and g1 (a node of two local ranks): A's
// communicator in g1 goes, so A's in g0 is lost with it, and g0's epoch is revoked naming why. B
// stays in both.
TEST_F(CoordinatorTest, ANodesCommunicatorsAreLostTogether) {
  std::map<std::string, std::unique_ptr<Client>> c;
  for (const auto &[name, id, group] :
       {std::tuple{"a0", 1, "g0"}, {"b0", 2, "g0"}, {"a1", 3, "g1"}, {"b1", 4, "g1"}}) {
    c[name] = client(static_cast<PeerId>(id), group);
    c[name]->set_node(name[0] == 'a' ? "node-A" : "node-B");
  }
  for (auto &[name, cl] : c) {
    cl->heartbeats(100ms);
    cl->join();
  }
  for (auto &[name, cl] : c) ASSERT_TRUE(cl->next(MessageType::kEpoch).has_value()) << name;
  c["a1"].reset();  // its transport goes: the link closes
  auto in_g1 = c["b1"]->next(MessageType::kRevoked);
  ASSERT_TRUE(in_g1.has_value());
  EXPECT_NE(in_g1->text.find("peer-3: its connection to the coordinator closed"), std::string::npos)
      << in_g1->text;
  auto in_g0 = c["b0"]->next(MessageType::kRevoked);
  ASSERT_TRUE(in_g0.has_value()) << "A's communicator in g0 is lost with the one in g1";
  EXPECT_EQ(in_g0->other, PeerId{1});
  EXPECT_NE(in_g0->text.find("node node-A lost its member peer-3 of group \"g1\""),
            std::string::npos)
      << in_g0->text;
  auto removed = c["a0"]->next(MessageType::kRemoved);
  ASSERT_TRUE(removed.has_value());
  EXPECT_NE(removed->text.find("declared lost: node node-A"), std::string::npos) << removed->text;
  EXPECT_FALSE(c["b0"]->next(MessageType::kRemoved, 300ms).has_value()) << "node B stays";
}

TEST_F(CoordinatorTest, SilentPeerIsRevokedAfterPeerTimeout) {
  auto peers = formed({1, 2, 3});
  const auto t0 = Clock::now();
  peers[2]->pause_heartbeats();  // alive, connected, silent: a frozen process
  auto r = peers[0]->next(MessageType::kRevoked, 3s);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->other, 3u);
  EXPECT_NE(r->text.find("silent for 800 ms"), std::string::npos) << r->text;
  const auto waited = Clock::now() - t0;
  EXPECT_GE(waited, 600ms);  // its last heartbeat was up to 100 ms before the pause
  EXPECT_LT(waited, 800ms + 200ms + 300ms) << "peer_timeout + one heartbeat, plus scheduling";
  // It is told it was removed if it speaks again.
  peers[2]->heartbeat();
  auto removed = peers[2]->next(MessageType::kRemoved);
  ASSERT_TRUE(removed.has_value());
  EXPECT_NE(removed->text.find("declared lost"), std::string::npos) << removed->text;
}

TEST_F(CoordinatorTest, BrokenLinkReportProbesTheNeighbour) {
  auto peers = formed({1, 2, 3});
  peers[2]->pause_heartbeats();
  ControlMessage report;
  report.type = MessageType::kLinkBroken;
  report.other = 3;
  const auto t0 = Clock::now();
  peers[0]->send(report);
  ASSERT_TRUE(peers[2]->next(MessageType::kProbe, 2s).has_value());
  auto r = peers[1]->next(MessageType::kRevoked, 2s);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->other, 3u);
  EXPECT_NE(r->text.find("probe"), std::string::npos) << r->text;
  EXPECT_LT(Clock::now() - t0, 600ms)
      << "a probe decides within heartbeat_ms, long before peer_timeout";
}

TEST_F(CoordinatorTest, BadInputClosesOnlyThatClient) {
  auto peers = formed({1, 2});
  auto early = client(7);
  early->update(epoch_);  // before JOIN
  // The coordinator logs the cause ("... before JOIN") and drops the link: the client sees it go.
  auto why = early->closed();
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(why->code(), WCCL_ERR_IO) << why->to_string();

  auto garbage = client(8);
  // A body that does not decode: the length message says 3 bytes, the body is junk.
  uint8_t len[4] = {3, 0, 0, 0}, junk[3] = {0xee, 0xee, 0xee};
  ASSERT_TRUE(
      garbage->channel().link().send({kControlEpoch, 0, 1}, len, 4, [](const Status &) {}).ok());
  ASSERT_TRUE(
      garbage->channel().link().send({kControlEpoch, 0, 2}, junk, 3, [](const Status &) {}).ok());
  ASSERT_TRUE(garbage->closed().has_value());

  auto impostor = client(9);
  impostor->join();
  ControlMessage forged;
  forged.type = MessageType::kHeartbeat;
  ASSERT_TRUE(impostor->channel()
                  .send([&] {
                    forged.peer = 1;
                    return forged;
                  }())
                  .ok());  // another peer's id
  ASSERT_TRUE(impostor->closed().has_value());

  // The members noticed nothing and carry on.
  EXPECT_FALSE(peers[0]->next(MessageType::kRevoked, 300ms).has_value());
  peers[0]->update(epoch_);
  peers[1]->update(epoch_);
  auto e = peers[1]->next(MessageType::kEpoch);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(ring_ids(*e), ring_) << "nothing changed: the same epoch is confirmed";
  EXPECT_EQ(e->epoch, epoch_);
}

TEST_F(CoordinatorTest, MemberSendingJunkIsDroppedAtOnceAndCanComeBack) {
  auto peers = formed({1, 2, 3});
  // A message of a type this coordinator does not know, in sequence on a joined member's link.
  ControlMessage junk;
  junk.type = static_cast<MessageType>(99);
  const auto t0 = Clock::now();
  ASSERT_TRUE(peers[2]->channel().send(junk).ok());
  ASSERT_TRUE(peers[2]->closed().has_value()) << "the coordinator must drop that link";
  auto r = peers[0]->next(MessageType::kRevoked, 2s);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->other, 3u);
  EXPECT_LT(Clock::now() - t0, 1s) << "dropping the link is a loss now, not after peer_timeout";
  // It comes back under its id: not locked out, admitted at the next update.
  peers[2].reset();
  auto back = client(3);
  back->heartbeats(100ms);
  back->join();
  EXPECT_FALSE(back->closed(300ms).has_value()) << "the returning peer was refused";
  peers[0]->update(epoch_);
  peers[1]->update(epoch_);
  auto e = back->next(MessageType::kEpoch);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(sorted(ring_ids(*e)), (std::vector<PeerId>{1, 2, 3}));
}

TEST_F(CoordinatorTest, RefusedRequestIsAnsweredWithAnError) {
  auto peers = formed({1, 2});
  peers[0]->update(epoch_ + 7);  // an epoch that never was
  auto err = peers[0]->next(MessageType::kError);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->code, static_cast<uint32_t>(WCCL_ERR_PROTOCOL));
  EXPECT_NE(err->text.find("current epoch is " + std::to_string(epoch_)), std::string::npos)
      << err->text;
  EXPECT_FALSE(peers[0]->closed(100ms).has_value()) << "a refused request does not cost the link";
}

TEST_F(CoordinatorTest, GroupsFormIndependentEpochs) {
  auto a = client(1, "gpu0"), b = client(2, "gpu1"), c = client(3, "gpu0");
  for (auto *p : {a.get(), b.get(), c.get()}) {
    p->heartbeats(100ms);
    p->join();
  }
  auto ea = a->next(MessageType::kEpoch), eb = b->next(MessageType::kEpoch);
  ASSERT_TRUE(ea.has_value() && eb.has_value());
  EXPECT_EQ(sorted(ring_ids(*ea)), (std::vector<PeerId>{1, 3}));
  EXPECT_EQ(ring_ids(*eb), (std::vector<PeerId>{2}));
}

TEST_F(CoordinatorTest, UnauthenticatedClientsNeverReachTheProtocol) {
  auto peers = formed({1, 2});
  auto foreign = pki_.foreign_node("intruder");
  foreign.ca = coord_files_.ca;
  Client intruder(coord_->port(), make_config("intruder", &foreign), 66);
  EXPECT_EQ(intruder.connect_status().code(), WCCL_ERR_AUTH)
      << intruder.connect_status().to_string();
  Client plain(coord_->port(), make_config("plain", nullptr), 67);
  EXPECT_EQ(plain.connect_status().code(), WCCL_ERR_AUTH) << plain.connect_status().to_string();
  EXPECT_FALSE(peers[0]->next(MessageType::kRevoked, 200ms).has_value());
  peers[0]->update(epoch_);
  peers[1]->update(epoch_);
  ASSERT_TRUE(peers[0]->next(MessageType::kEpoch).has_value());
}

// A peer that says something and goes at once (a member reporting its failed operation, then
// destroyed): destroying a transport drops the frames it has not written yet, so the channel's
// flush is what gets the last messages out. Without it some rounds lose their tail.
TEST(ControlChannelClose, FlushedMessagesArriveBeforeTheClose) {
  test::Pki pki;
  auto server_files = pki.node("server"), client_files = pki.node("client");
  constexpr int kRounds = 60, kMessages = 20;
  for (int round = 0; round < kRounds; ++round) {
    test::LinkPair p;
    test::open_pair(p, make_config("server", &server_files), make_config("client", &client_files));
    ASSERT_NE(p.server_link, nullptr);
    std::mutex mu;
    std::condition_variable cv;
    std::vector<uint64_t> got;
    bool closed = false;
    Status why;
    auto receiver = ControlChannel::open(
        p.server_link,
        [&](ControlMessage m) {
          std::lock_guard<std::mutex> lock(mu);
          got.push_back(m.seq);
        },
        [&](Status st) {
          std::lock_guard<std::mutex> lock(mu);
          why = st;
          closed = true;
          cv.notify_all();
        });
    auto sender = ControlChannel::open(
        p.client_link, [](ControlMessage) {}, [](Status) {});
    for (int i = 0; i < kMessages; ++i) {
      ControlMessage m;
      m.type = MessageType::kDone;
      m.peer = 7;
      m.seq = static_cast<uint64_t>(i);
      ASSERT_TRUE(sender->send(m).ok());
    }
    ASSERT_TRUE(sender->flush(5s)) << "round " << round;
    p.client.reset();
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return closed; })) << "round " << round;
    ASSERT_EQ(got.size(), static_cast<size_t>(kMessages))
        << "round " << round << ", closed with " << why.to_string();
    for (int i = 0; i < kMessages; ++i)
      EXPECT_EQ(got[static_cast<size_t>(i)], static_cast<uint64_t>(i));
  }
}

// The daemon: starts on a free port, serves a peer, and stops cleanly on SIGTERM.
TEST(CoordDaemon, ServesAndStopsOnSigterm) {
  test::CoordDaemon daemon({"--listen", "127.0.0.1:0", "--tls", "off"});
  ASSERT_GT(daemon.port(), 0);
  {
    Client peer(daemon.port(), make_config("peer", nullptr), 1);
    ASSERT_TRUE(peer.connect_status().ok()) << peer.connect_status().to_string();
    peer.join();
    auto e = peer.next(MessageType::kEpoch);
    ASSERT_TRUE(e.has_value());
    EXPECT_GT(e->epoch, kBefore2026Us);
  }
  const int status = daemon.terminate(10s);
  ASSERT_NE(status, -1) << "wccl-coord did not stop within 10 s of SIGTERM";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

}  // namespace
}  // namespace wccl::coord
