// Communicators against a real coordinator over TLS on 127.0.0.1: four peers agree, a fifth is
// admitted at update, ring links of each epoch carry messages, a killed or frozen member process
// is detected, graceful leave, abort from another thread, coordinator restart, groups.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <optional>

#include "comm/control_session.h"
#include "comm/link_channel.h"
#include "comm_fixture.h"

namespace wccl::comm {
namespace {

// A failed operation closes its links as closed here (ABORTED, naming the operation and what
// failed), which Member::link_broken does not report: no neighbour is suspected of this
// member's own failure. The neighbour sees its link closed (not ABORTED): that one it reports.
TEST(LinkChannel, AFailedOperationClosesItsLinksAsClosedHere) {
  test::LinkPair p;
  test::open_pair(p, test::make_config("server", nullptr), test::make_config("client", nullptr));
  ASSERT_NE(p.client_link, nullptr);
  test::Done closed_here, closed_there, pending;
  ASSERT_TRUE(p.client_link->on_close(closed_here.callback()).ok());
  ASSERT_TRUE(p.server_link->on_close(closed_there.callback()).ok());
  LinkChannel ch(7, 3, /*call_key=*/0, 0, 2,
                 std::map<int, std::shared_ptr<net::Link>>{{1, p.client_link}});
  std::vector<uint8_t> buf(64);
  size_t got = 0;
  ASSERT_TRUE(ch.recv(1, 5, buf.data(), buf.size(), &got, pending.callback()).ok());
  ch.abort(WCCL_ERROR(WCCL_ERR_TIMEOUT, "the operation did not complete in time"));
  const Status here = closed_here.wait();
  EXPECT_EQ(here.code(), WCCL_ERR_ABORTED) << here.to_string();
  EXPECT_NE(here.message().find("operation 3 of epoch 7 failed here: the operation did not "
                                "complete in time"),
            std::string::npos)
      << here.to_string();
  EXPECT_EQ(pending.wait().code(), WCCL_ERR_ABORTED);
  const Status there = closed_there.wait();
  EXPECT_FALSE(there.ok());
  EXPECT_NE(there.code(), WCCL_ERR_ABORTED) << there.to_string();
}

TEST_F(CommFourTest, FourPeersAgreeAndAFifthIsAdmittedAtUpdate) {
  auto comms = join_all(4);
  ASSERT_EQ(comms.size(), 4u);
  const uint64_t first = comms[0]->epoch();
  expect_agreed_ring(raw(comms), first);
  auto fifth = std::async(std::launch::async,
                          [cfg = peer_config("peer4")] { return Communicator::join(cfg); });
  EXPECT_EQ(fifth.wait_for(300ms), std::future_status::timeout)
      << "a joiner waits for the members' update";
  for (auto &c : comms) EXPECT_EQ(c->pending(), 1) << "members hear that a joiner waits";
  for (const Status &st : update_all(raw(comms))) EXPECT_TRUE(st.ok()) << st.to_string();
  auto joined = fifth.get();
  ASSERT_TRUE(joined.ok()) << joined.status().to_string();
  comms.push_back(std::move(joined).value());
  expect_agreed_ring(raw(comms), first + 1);
  for (auto &c : comms) EXPECT_EQ(c->pending(), 0);
}

enum class Fault { kKill, kStop };

void member_fault(CommFourTest &t, Fault fault, std::vector<std::unique_ptr<Communicator>> &comms,
                  MemberProcess &victim) {
  const uint64_t epoch = comms[0]->epoch();
  const auto t0 = Clock::now();
  victim.signal(fault == Fault::kKill ? SIGKILL : SIGSTOP);
  for (auto &c : comms) {
    ASSERT_TRUE(c->wait_revoked(5s)) << "survivor was not told of the loss";
  }
  const auto waited = Clock::now() - t0;
  if (fault == Fault::kKill) {
    EXPECT_LT(waited, 1s) << "a killed peer must be detected within 1 s";
  } else {
    EXPECT_GE(waited, CommTest::kPeerTimeout - 200ms);
    EXPECT_LT(waited, CommTest::kPeerTimeout + 100ms + 400ms)
        << "peer_timeout_ms + one heartbeat, plus scheduling";
  }
  for (const Status &st : t.update_all(raw(comms))) EXPECT_TRUE(st.ok()) << st.to_string();
  t.expect_agreed_ring(raw(comms), epoch + 1);
}

TEST_F(CommFourTest, KilledMemberProcessIsLostWithinASecond) {
  MemberProcess victim(port_, pki_.node("victim"));
  auto comms = join_all(3);
  ASSERT_EQ(comms.size(), 3u);
  EXPECT_NE(victim.line(10s).find("size 4 epoch " + std::to_string(comms[0]->epoch())),
            std::string::npos);
  member_fault(*this, Fault::kKill, comms, victim);
}

TEST_F(CommFourTest, FrozenMemberProcessIsLostAfterPeerTimeout) {
  MemberProcess victim(port_, pki_.node("victim"));
  auto comms = join_all(3);
  ASSERT_EQ(comms.size(), 3u);
  EXPECT_NE(victim.line(10s).find("size 4 epoch " + std::to_string(comms[0]->epoch())),
            std::string::npos);
  member_fault(*this, Fault::kStop, comms, victim);
}

// A joiner frozen past peer_timeout_ms while it waits for admission is forgotten by the
// coordinator; thawed, it hears so from its next heartbeat and registers again, so the members'
// next update admits it (the churn soak's p63 waited out its 600 s join_timeout_ms instead).
TEST_F(CommFourTest, AJoinerFrozenPastPeerTimeoutIsAdmittedAtTheNextUpdate) {
  auto comms = join_all(4);
  ASSERT_EQ(comms.size(), 4u);
  const uint64_t first = comms[0]->epoch();
  auto every_member_hears = [&](int joiners) {
    return eventually(
        [&] {
          return std::all_of(comms.begin(), comms.end(),
                             [&](const auto &c) { return c->pending() == joiners; });
        },
        5s);
  };
  MemberProcess joiner(port_, pki_.node("joiner"));
  ASSERT_TRUE(every_member_hears(1)) << "the joiner did not register";
  joiner.signal(SIGSTOP);
  ASSERT_TRUE(every_member_hears(0)) << "a joiner silent for peer_timeout_ms is forgotten";
  joiner.signal(SIGCONT);
  EXPECT_TRUE(every_member_hears(1)) << "the thawed joiner did not register again";
  for (const Status &st : update_all(raw(comms))) EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_NE(joiner.line(5s).find("size 5 epoch " + std::to_string(first + 1)), std::string::npos);
  for (auto &c : comms) EXPECT_EQ(c->size(), 5);
}

TEST_F(CommTest, GracefulLeaveFailsNobody) {
  auto comms = group_of(3);
  ASSERT_EQ(comms.size(), 3u);
  const uint64_t first = comms[0]->epoch();
  auto leaving = std::async(std::launch::async, [c = comms[2].get()] { return c->leave(); });
  for (const Status &st : update_all({comms[0].get(), comms[1].get()}))
    EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(leaving.get().ok());
  EXPECT_FALSE(comms[0]->revoked());
  expect_agreed_ring({comms[0].get(), comms[1].get()}, first + 1);
}

// An operation started while this member's own update waits at the barrier is refused: its number
// would follow the barrier, where the epoch and algo=AUTO's crossovers may change, and the others
// would run it in what the answer brings. Nothing is queued; after the update it runs.
TEST_F(CommTest, NoOperationStartsWhileThisMembersUpdateWaits) {
  auto comms = group_of(2);
  ASSERT_EQ(comms.size(), 2u);
  auto updating = std::async(std::launch::async, [c = comms[0].get()] { return c->update(); });
  ASSERT_TRUE(eventually([&] { return comms[1]->update_due(); }, 5s)) << "no BARRIER heard";
  std::vector<float> x(16, 1.0f), y(16, 2.0f);
  auto refused = comms[0]->submit(allreduce(x.data(), x.data(), x.size()), 0ms);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), WCCL_ERR_INVALID_USAGE) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("update is waiting at the barrier"), std::string::npos)
      << refused.status().to_string();
  ASSERT_TRUE(comms[1]->update().ok());
  ASSERT_TRUE(updating.get().ok());
  std::vector<Status> st(2);
  std::thread other(
      [&] { st[1] = run_op(comms[1].get(), allreduce(y.data(), y.data(), y.size())); });
  st[0] = run_op(comms[0].get(), allreduce(x.data(), x.data(), x.size()));
  other.join();
  for (const Status &s : st) EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(x, std::vector<float>(16, 3.0f));
}

// update_due: a member idle between calls hears that the group waits for its update, when another
// member arrives at the update barrier and when the epoch is revoked; an update clears it.
TEST_F(CommTest, AnIdleMemberHearsThatTheGroupWaitsForItsUpdate) {
  auto comms = group_of(3);
  ASSERT_EQ(comms.size(), 3u);
  auto all_due = [&](std::vector<Communicator *> cs) {
    return eventually(
        [&] {
          return std::all_of(cs.begin(), cs.end(), [](Communicator *c) { return c->update_due(); });
        },
        5s);
  };
  for (auto &c : comms) EXPECT_FALSE(c->update_due());
  auto first = std::async(std::launch::async, [c = comms[0].get()] { return c->update(); });
  EXPECT_TRUE(all_due({comms[1].get(), comms[2].get()}))
      << "the others hear of the barrier (BARRIER)";
  EXPECT_EQ(first.wait_for(100ms), std::future_status::timeout) << "the barrier waits for them";
  for (const Status &st : update_all({comms[1].get(), comms[2].get()}))
    EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(first.get().ok());
  for (auto &c : comms) EXPECT_FALSE(c->update_due()) << "the epoch confirmed at the barrier";
  comms[2].reset();  // its link closes: lost, and the epoch revoked
  EXPECT_TRUE(all_due({comms[0].get(), comms[1].get()})) << "a revoked epoch waits for an update";
  for (const Status &st : update_all({comms[0].get(), comms[1].get()}))
    EXPECT_TRUE(st.ok()) << st.to_string();
  for (int i = 0; i < 2; ++i) EXPECT_FALSE(comms[i]->update_due());
}

TEST_F(CommTest, AbortFromAnotherThreadUnblocksAWaitingUpdate) {
  auto comms = group_of(2);
  ASSERT_EQ(comms.size(), 2u);
  auto waiting = std::async(std::launch::async,
                            [c = comms[0].get()] { return c->update(); });  // peer 1 never updates
  EXPECT_EQ(waiting.wait_for(200ms), std::future_status::timeout);
  const auto t0 = Clock::now();
  comms[0]->abort();
  EXPECT_EQ(waiting.get().code(), WCCL_ERR_ABORTED);
  EXPECT_LT(Clock::now() - t0, 1s);
  EXPECT_EQ(comms[0]->update().code(), WCCL_ERR_ABORTED) << "and every later call";
}

TEST_F(CommTest, MembersKeepTheirEpochAcrossACoordinatorRestart) {
  auto comms = group_of(2);
  ASSERT_EQ(comms.size(), 2u);
  const uint64_t epoch = comms[0]->epoch();
  const std::string listen = "127.0.0.1:" + std::to_string(port_);
  coord_.reset();  // the coordinator dies
  Status down;
  for (int i = 0; i < 100 && (down = comms[0]->update()).ok(); ++i) {
  }
  EXPECT_EQ(down.code(), WCCL_ERR_COORDINATOR_UNREACHABLE) << down.to_string();
  EXPECT_EQ(comms[0]->epoch(), epoch) << "members keep their epoch";
  start_coordinator(listen);  // back on the same address
  // Both retry as a training loop would; they reconnect with backoff and rejoin with their epoch.
  auto a = std::async(std::launch::async, update_until_reconnected, comms[0].get());
  auto b = std::async(std::launch::async, update_until_reconnected, comms[1].get());
  Status sa = a.get(), sb = b.get();
  ASSERT_TRUE(sa.ok()) << sa.to_string();
  ASSERT_TRUE(sb.ok()) << sb.to_string();
  EXPECT_EQ(comms[0]->epoch(), epoch) << "numbering continues from the members' report";
  expect_agreed_ring(raw(comms), epoch);
}

TEST_F(CommTest, MembersKeepTheirEpochWhenTheCoordinatorDaemonIsKilledAndRestarted) {
  auto daemon = std::make_unique<test::CoordDaemon>(daemon_flags("127.0.0.1:0"));
  port_ = daemon->port();
  ASSERT_GT(port_, 0);
  auto comms = join_all(2);
  ASSERT_EQ(comms.size(), 2u);
  const uint64_t epoch = comms[0]->epoch();
  expect_agreed_ring(raw(comms), epoch);
  daemon->kill_now();  // SIGKILL: no goodbye, the kernel closes its sockets
  Status down;
  for (int i = 0; i < 100 && (down = comms[0]->update()).ok(); ++i) {
  }
  EXPECT_EQ(down.code(), WCCL_ERR_COORDINATOR_UNREACHABLE) << down.to_string();
  daemon = std::make_unique<test::CoordDaemon>(daemon_flags("127.0.0.1:" + std::to_string(port_)));
  ASSERT_EQ(daemon->port(), port_);
  auto a = std::async(std::launch::async, update_until_reconnected, comms[0].get());
  auto b = std::async(std::launch::async, update_until_reconnected, comms[1].get());
  Status sa = a.get(), sb = b.get();
  ASSERT_TRUE(sa.ok()) << sa.to_string();
  ASSERT_TRUE(sb.ok()) << sb.to_string();
  EXPECT_EQ(comms[0]->epoch(), epoch) << "members keep their epoch; the next update succeeds";
  expect_agreed_ring(raw(comms), epoch);
}

TEST_F(CommTest, TwoGroupsInOneProcessAreIndependent) {
  auto cfg_a = peer_config("a", "gpu0"), cfg_b = peer_config("b", "gpu1");
  auto a = Communicator::join(cfg_a), b = Communicator::join(cfg_b);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a.value()->size(), 1);
  EXPECT_EQ(b.value()->size(), 1);
  EXPECT_EQ(a.value()->rank(), 0);
  EXPECT_EQ(b.value()->rank(), 0);
}

// Issue 15: anyone who reaches the coordinator's port opens thousands of connections from one
// address and sends nothing; a member from another address still joins, at once.
TEST_F(CommTest, IdleConnectionsFromOneAddressDoNotLockOutAMember) {
  std::vector<int> idle;
  sockaddr_in from{}, to{};
  from.sin_family = to.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl(0x7f000002);  // 127.0.0.2
  to.sin_addr.s_addr = htonl(0x7f000001);
  to.sin_port = htons(static_cast<uint16_t>(port_));
  for (int i = 0; i < 3000; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr *>(&from), sizeof(from)), 0);
    (void)connect(fd, reinterpret_cast<sockaddr *>(&to), sizeof(to));  // EINPROGRESS
    idle.push_back(fd);
  }
  const auto start = Clock::now();
  Config cfg = peer_config("member");
  auto joined = Communicator::join(cfg);
  ASSERT_TRUE(joined.ok()) << joined.status().to_string();
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_EQ(joined.value()->size(), 1);
  // The coordinator kept few of them, and those only for a short hello deadline
  // (hello_timeout_ms, 3 s): every one is closed by the coordinator well within 10 s.
  std::vector<pollfd> watched(idle.size());
  for (size_t i = 0; i < idle.size(); ++i) watched[i] = pollfd{idle[i], POLLIN, 0};
  const auto deadline = Clock::now() + 10s;
  size_t closed = 0;
  while (closed < watched.size() && Clock::now() < deadline) {
    if (poll(watched.data(), watched.size(), 200) <= 0) continue;
    for (auto &p : watched) {
      if (p.fd < 0 || p.revents == 0) continue;
      char byte;
      const ssize_t n = recv(p.fd, &byte, 1, 0);
      EXPECT_LE(n, 0) << "the coordinator sends nothing to a connection that never said hello";
      if (n == 0 || (n < 0 && errno != EAGAIN)) {
        ++closed;
        p.fd = -p.fd - 1;  // poll skips negative descriptors
      }
    }
  }
  for (int fd : idle) close(fd);
  EXPECT_EQ(closed, idle.size())
      << "connections beyond the per-address limit are refused, the rest time out";
}

TEST_F(CommTest, JoinWithoutCoordinatorOrWithABadCertificateFails) {
  Config cfg = peer_config("nobody");
  ASSERT_TRUE(cfg.set("coordinator", "").ok());
  EXPECT_EQ(Communicator::join(cfg).status().code(), WCCL_ERR_INVALID_ARGUMENT);
  ASSERT_TRUE(cfg.set("coordinator", "127.0.0.1:1").ok());
  ASSERT_TRUE(
      cfg.set("join_timeout_ms", "1000").ok());  // a refused connection is retried until then
  const auto start = std::chrono::steady_clock::now();
  const Status unreachable = Communicator::join(cfg).status();
  EXPECT_EQ(unreachable.code(), WCCL_ERR_COORDINATOR_UNREACHABLE);
  EXPECT_NE(unreachable.message().find("attempts"), std::string::npos) << unreachable.to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  auto foreign = pki_.foreign_node("intruder");
  foreign.ca = coord_files_.ca;
  Config bad = make_config("intruder", &foreign);
  ASSERT_TRUE(bad.set("coordinator", "127.0.0.1:" + std::to_string(port_)).ok());
  ASSERT_TRUE(bad.set("listen", "127.0.0.1:0").ok());
  EXPECT_EQ(Communicator::join(bad).status().code(), WCCL_ERR_AUTH);
}

// A coordinator's side of control links, recording what arrives on them in order.
class FakeCoordinator {
 public:
  FakeCoordinator(const Config &cfg, const std::string &listen) {
    auto t = net::Transport::create(cfg);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (!t.ok()) return;
    transport_ = std::move(t).value();
    auto port = transport_->listen(listen, [this](std::shared_ptr<net::Link> link) {
      auto channel = coord::ControlChannel::open(
          std::move(link),
          [this](coord::ControlMessage m) {
            std::lock_guard<std::mutex> lock(mu_);
            got_.push_back(std::move(m));
            cv_.notify_all();
          },
          [](Status) {});
      std::lock_guard<std::mutex> lock(mu_);
      channels_.push_back(std::move(channel));
    });
    EXPECT_TRUE(port.ok()) << port.status().to_string();
    port_ = port.ok() ? port.value() : 0;
  }
  ~FakeCoordinator() { transport_.reset(); }
  int port() const { return port_; }
  // The first message any link brought, waiting up to `timeout`.
  std::optional<coord::ControlMessage> first(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !got_.empty(); })) return std::nullopt;
    return got_.front();
  }

 private:
  std::unique_ptr<net::Transport> transport_;
  int port_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<coord::ControlMessage> got_;
  std::vector<std::shared_ptr<coord::ControlChannel>> channels_;
};

// After a reconnection, a message another thread sends once the new connection is up (here a
// DONE, sent while the REJOIN is being made) reaches the restarted coordinator only after the
// REJOIN: a restarted coordinator refuses what a peer says before it has rejoined. (The REJOIN
// is sent on the control loop thread, where a send runs at once; the other thread's send is
// posted behind it.)
TEST_F(CommTest, TheRejoinReachesARestartedCoordinatorBeforeAnyOtherMessage) {
  Config coord_cfg = make_config("coordinator", &coord_files_);
  auto a = std::make_unique<FakeCoordinator>(coord_cfg, "127.0.0.1:0");
  const int port = a->port();
  ASSERT_NE(port, 0);
  auto files = pki_.node("member");
  Config cfg = make_config("member", &files);
  ASSERT_TRUE(cfg.set("coordinator", "127.0.0.1:" + std::to_string(port)).ok());
  std::unique_ptr<ControlSession> session;
  coord::ControlMessage done;
  done.type = coord::MessageType::kDone;
  done.peer = 42;
  done.epoch = 5;
  done.seq = 3;
  coord::ControlMessage rejoin;
  rejoin.type = coord::MessageType::kRejoin;
  rejoin.peer = 42;
  rejoin.group = "g";
  rejoin.info = {"member", "127.0.0.1:7000", ""};
  rejoin.epoch = 5;
  ControlSession::Events events;
  events.message = [](const coord::ControlMessage &) {};
  events.lost = [](const Status &) {};
  events.reconnected = [&] {
    std::thread other(
        [&] { (void)session->send(done); });  // e.g. the worker finishing an operation
    other.join();
    return std::vector<coord::ControlMessage>{rejoin};
  };
  events.tick = [&] {
    if (!session->connected()) session->reconnect();
  };
  struct StopFirst {  // the session's callbacks use the locals above: it stops before they go
    std::unique_ptr<ControlSession> &session;
    ~StopFirst() {
      if (session) session->stop();
    }
  } stop_first{session};
  auto opened =
      ControlSession::open(cfg, Clock::now() + 10s, Logger(LogLevel::kError, "member"), events);
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  session = std::move(opened).value();
  ASSERT_TRUE(session->start(50ms).ok());
  a.reset();  // the coordinator goes, and comes back on the same port
  ASSERT_TRUE(eventually([&] { return !session->connected(); }, 10s));
  FakeCoordinator b(coord_cfg, "127.0.0.1:" + std::to_string(port));
  const auto first = b.first(10s);
  ASSERT_TRUE(first.has_value()) << "nothing reached the restarted coordinator";
  EXPECT_EQ(first->type, coord::MessageType::kRejoin)
      << "type " << static_cast<int>(first->type) << " came first";
}

}  // namespace
}  // namespace wccl::comm
