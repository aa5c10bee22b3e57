// Communicators against a real coordinator over TLS on 127.0.0.1: four peers agree, a fifth is
// admitted at update, ring links of each epoch carry messages, a killed or frozen member process
// is detected, graceful leave, abort from another thread, coordinator restart, groups.
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <set>
#include <thread>

#include "comm/communicator.h"
#include "coord/coordinator.h"
#include "support.h"

extern char **environ;

namespace wccl::comm {
namespace {

using namespace std::chrono_literals;
using test::make_config;
using Clock = std::chrono::steady_clock;

class CommTest : public testing::Test {
 protected:
  void SetUp() override {
    coord_files_ = pki_.node("coordinator");
    start_coordinator("127.0.0.1:0");
  }
  void start_coordinator(const std::string &listen) {
    Config cfg = make_config("coordinator", &coord_files_);
    ASSERT_TRUE(cfg.set("listen", listen).ok());
    ASSERT_TRUE(cfg.set("settle_ms", "150").ok());
    ASSERT_TRUE(cfg.set("heartbeat_ms", "100").ok());
    ASSERT_TRUE(cfg.set("peer_timeout_ms", "800").ok());
    ASSERT_TRUE(cfg.set("min_peers", std::to_string(min_peers_)).ok());
    auto c = coord::Coordinator::start(cfg);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    coord_ = std::move(c).value();
    port_ = coord_->port();
  }
  Config peer_config(const std::string &name, const std::string &group = "g") {
    auto files = pki_.node(name);
    Config cfg = make_config(name, &files);
    EXPECT_TRUE(cfg.set("coordinator", "127.0.0.1:" + std::to_string(port_)).ok());
    EXPECT_TRUE(cfg.set("listen", "127.0.0.1:0").ok());
    EXPECT_TRUE(cfg.set("group", group).ok());
    EXPECT_TRUE(cfg.set("heartbeat_ms", "100").ok());
    EXPECT_TRUE(cfg.set("join_timeout_ms", "20000").ok());
    EXPECT_TRUE(cfg.set("op_timeout_ms", "20000").ok());
    return cfg;
  }
  // n communicators joining at once (they form one epoch when min_peers allows).
  std::vector<std::unique_ptr<Communicator>> join_all(int n, int first = 0) {
    std::vector<std::future<Result<std::unique_ptr<Communicator>>>> joining;
    for (int i = 0; i < n; ++i) {
      Config cfg = peer_config("peer" + std::to_string(first + i));
      joining.push_back(std::async(std::launch::async, [cfg] { return Communicator::join(cfg); }));
    }
    std::vector<std::unique_ptr<Communicator>> out;
    for (auto &j : joining) {
      auto c = j.get();
      EXPECT_TRUE(c.ok()) << c.status().to_string();
      if (c.ok()) out.push_back(std::move(c).value());
    }
    return out;
  }

 public:
  static std::vector<Status> update_all(std::vector<Communicator *> comms) {
    std::vector<std::future<Status>> f;
    for (Communicator *c : comms) f.push_back(std::async(std::launch::async, [c] { return c->update(); }));
    std::vector<Status> out;
    for (auto &x : f) out.push_back(x.get());
    return out;
  }
  // Every member agrees on (epoch, size), ranks are 0..n-1, and each ring link carries a message
  // from a rank to the next.
  static void expect_agreed_ring(const std::vector<Communicator *> &comms, uint64_t epoch) {
    std::set<int> ranks;
    for (Communicator *c : comms) {
      EXPECT_EQ(c->epoch(), epoch);
      EXPECT_EQ(c->size(), static_cast<int>(comms.size()));
      ranks.insert(c->rank());
    }
    EXPECT_EQ(ranks.size(), comms.size());
    EXPECT_EQ(*ranks.begin(), 0);
    if (comms.size() < 2) return;
    std::vector<Communicator *> by_rank(comms.size());
    for (Communicator *c : comms) by_rank[static_cast<size_t>(c->rank())] = c;
    for (size_t r = 0; r < by_rank.size(); ++r) {
      std::shared_ptr<net::Link> next, prev, next_of_next, prev_of_next;
      ASSERT_TRUE(by_rank[r]->links(10s, &next, &prev).ok());
      ASSERT_TRUE(by_rank[(r + 1) % by_rank.size()]->links(10s, &next_of_next, &prev_of_next).ok());
      uint64_t sent = epoch * 1000 + r, got = 0;
      ASSERT_TRUE(net::send_sync(*next, {epoch, 1, static_cast<uint32_t>(r)}, &sent, 8, 10s).ok());
      ASSERT_TRUE(net::recv_sync(*prev_of_next, {epoch, 1, static_cast<uint32_t>(r)}, &got, 8, 10s).ok());
      EXPECT_EQ(got, sent) << "rank " << r << " to rank " << (r + 1) % by_rank.size();
    }
  }

 protected:
  std::vector<std::string> daemon_flags(const std::string &listen) {
    return {"--listen", listen, "--tls-cert", coord_files_.cert, "--tls-key", coord_files_.key,
            "--tls-ca", coord_files_.ca, "--min-peers", "2", "--settle-ms", "150",
            "--heartbeat-ms", "100", "--peer-timeout-ms", "800"};
  }
  int min_peers_ = 1;
  test::Pki pki_;
  devkit::NodeFiles coord_files_;
  std::unique_ptr<coord::Coordinator> coord_;
  int port_ = 0;
};

// What a training loop does while the coordinator is away: retry update with a pause.
Status update_until_reconnected(Communicator *c) {
  Status st;
  const auto deadline = Clock::now() + 15s;
  do {
    st = c->update();
    if (st.code() == WCCL_ERR_COORDINATOR_UNREACHABLE) std::this_thread::sleep_for(100ms);
  } while (st.code() == WCCL_ERR_COORDINATOR_UNREACHABLE && Clock::now() < deadline);
  return st;
}

std::vector<Communicator *> raw(const std::vector<std::unique_ptr<Communicator>> &v) {
  std::vector<Communicator *> out;
  for (auto &c : v) out.push_back(c.get());
  return out;
}

class CommFourTest : public CommTest {
 protected:
  void SetUp() override {
    min_peers_ = 4;
    CommTest::SetUp();
  }
};

TEST_F(CommFourTest, FourPeersAgreeAndAFifthIsAdmittedAtUpdate) {
  auto comms = join_all(4);
  ASSERT_EQ(comms.size(), 4u);
  expect_agreed_ring(raw(comms), 1);
  auto fifth = std::async(std::launch::async, [cfg = peer_config("peer4")] { return Communicator::join(cfg); });
  EXPECT_EQ(fifth.wait_for(300ms), std::future_status::timeout) << "a joiner waits for the members' update";
  for (auto &c : comms) EXPECT_EQ(c->pending(), 1) << "members hear that a joiner waits";
  for (const Status &st : update_all(raw(comms))) EXPECT_TRUE(st.ok()) << st.to_string();
  auto joined = fifth.get();
  ASSERT_TRUE(joined.ok()) << joined.status().to_string();
  comms.push_back(std::move(joined).value());
  expect_agreed_ring(raw(comms), 2);
  for (auto &c : comms) EXPECT_EQ(c->pending(), 0);
}

// A member in another process, killed or frozen while the others wait.
class MemberProcess {
 public:
  MemberProcess(int port, const devkit::NodeFiles &files) {
    const char *bin = std::getenv("WCCL_TEST_MEMBER");
    if (bin == nullptr) {
      ADD_FAILURE() << "WCCL_TEST_MEMBER is not set; run through meson test";
      return;
    }
    std::vector<std::string> env = {"WCCL_COORDINATOR=127.0.0.1:" + std::to_string(port), "WCCL_LISTEN=127.0.0.1:0",
                                    "WCCL_GROUP=g", "WCCL_NAME=victim", "WCCL_HEARTBEAT_MS=100",
                                    "WCCL_TLS_CERT=" + files.cert, "WCCL_TLS_KEY=" + files.key, "WCCL_TLS_CA=" + files.ca};
    for (char **e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    std::vector<char *> envp;
    for (auto &s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    int in[2], out[2];
    EXPECT_EQ(pipe(in), 0);
    EXPECT_EQ(pipe(out), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, in[1]);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    char *argv[] = {const_cast<char *>(bin), nullptr};
    EXPECT_EQ(posix_spawn(&pid_, bin, &actions, nullptr, argv, envp.data()), 0);
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  ~MemberProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(stdin_);
    close(stdout_);
  }
  // Its "joined ..." line, or "" if none within the timeout.
  std::string joined_line(std::chrono::milliseconds timeout) {
    std::string line;
    pollfd pfd{stdout_, POLLIN, 0};
    char c = 0;
    while (line.find('\n') == std::string::npos && poll(&pfd, 1, static_cast<int>(timeout.count())) == 1 &&
           read(stdout_, &c, 1) == 1) {
      line += c;
    }
    return line;
  }
  void signal(int sig) { kill(pid_, sig); }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1;
};

enum class Fault { kKill, kStop };

void member_fault(CommFourTest &t, Fault fault, std::vector<std::unique_ptr<Communicator>> &comms, MemberProcess &victim) {
  const auto t0 = Clock::now();
  victim.signal(fault == Fault::kKill ? SIGKILL : SIGSTOP);
  for (auto &c : comms) {
    ASSERT_TRUE(c->wait_revoked(5s)) << "survivor was not told of the loss";
  }
  const auto waited = Clock::now() - t0;
  if (fault == Fault::kKill) {
    EXPECT_LT(waited, 1s) << "a killed peer must be detected within 1 s";
  } else {
    EXPECT_GE(waited, 600ms);
    EXPECT_LT(waited, 800ms + 100ms + 400ms) << "peer_timeout_ms + one heartbeat, plus scheduling";
  }
  for (const Status &st : t.update_all(raw(comms))) EXPECT_TRUE(st.ok()) << st.to_string();
  t.expect_agreed_ring(raw(comms), 2);
}

TEST_F(CommFourTest, KilledMemberProcessIsLostWithinASecond) {
  MemberProcess victim(port_, pki_.node("victim"));
  auto comms = join_all(3);
  ASSERT_EQ(comms.size(), 3u);
  EXPECT_NE(victim.joined_line(10s).find("size 4 epoch 1"), std::string::npos);
  member_fault(*this, Fault::kKill, comms, victim);
}

TEST_F(CommFourTest, FrozenMemberProcessIsLostAfterPeerTimeout) {
  MemberProcess victim(port_, pki_.node("victim"));
  auto comms = join_all(3);
  ASSERT_EQ(comms.size(), 3u);
  EXPECT_NE(victim.joined_line(10s).find("size 4 epoch 1"), std::string::npos);
  member_fault(*this, Fault::kStop, comms, victim);
}

TEST_F(CommTest, GracefulLeaveFailsNobody) {
  min_peers_ = 3;
  coord_.reset();
  start_coordinator("127.0.0.1:0");
  auto comms = join_all(3);
  ASSERT_EQ(comms.size(), 3u);
  auto leaving = std::async(std::launch::async, [c = comms[2].get()] { return c->leave(); });
  for (const Status &st : update_all({comms[0].get(), comms[1].get()})) EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(leaving.get().ok());
  EXPECT_FALSE(comms[0]->revoked());
  expect_agreed_ring({comms[0].get(), comms[1].get()}, 2);
}

TEST_F(CommTest, AbortFromAnotherThreadUnblocksAWaitingUpdate) {
  min_peers_ = 2;
  coord_.reset();
  start_coordinator("127.0.0.1:0");
  auto comms = join_all(2);
  ASSERT_EQ(comms.size(), 2u);
  auto waiting = std::async(std::launch::async, [c = comms[0].get()] { return c->update(); });  // peer 1 never updates
  EXPECT_EQ(waiting.wait_for(200ms), std::future_status::timeout);
  const auto t0 = Clock::now();
  comms[0]->abort();
  EXPECT_EQ(waiting.get().code(), WCCL_ERR_ABORTED);
  EXPECT_LT(Clock::now() - t0, 1s);
  EXPECT_EQ(comms[0]->update().code(), WCCL_ERR_ABORTED) << "and every later call";
}

TEST_F(CommTest, MembersKeepTheirEpochAcrossACoordinatorRestart) {
  min_peers_ = 2;
  coord_.reset();
  start_coordinator("127.0.0.1:0");
  auto comms = join_all(2);
  ASSERT_EQ(comms.size(), 2u);
  const std::string listen = "127.0.0.1:" + std::to_string(port_);
  coord_.reset();  // the coordinator dies
  Status down;
  for (int i = 0; i < 100 && (down = comms[0]->update()).ok(); ++i) {
  }
  EXPECT_EQ(down.code(), WCCL_ERR_COORDINATOR_UNREACHABLE) << down.to_string();
  EXPECT_EQ(comms[0]->epoch(), 1u) << "members keep their epoch";
  start_coordinator(listen);  // back on the same address
  // Both retry as a training loop would; they reconnect with backoff and rejoin at epoch 1.
  auto a = std::async(std::launch::async, update_until_reconnected, comms[0].get());
  auto b = std::async(std::launch::async, update_until_reconnected, comms[1].get());
  Status sa = a.get(), sb = b.get();
  ASSERT_TRUE(sa.ok()) << sa.to_string();
  ASSERT_TRUE(sb.ok()) << sb.to_string();
  EXPECT_EQ(comms[0]->epoch(), 1u) << "numbering continues from the members' report";
  expect_agreed_ring(raw(comms), 1);
}

TEST_F(CommTest, MembersKeepTheirEpochWhenTheCoordinatorDaemonIsKilledAndRestarted) {
  auto daemon = std::make_unique<test::CoordDaemon>(daemon_flags("127.0.0.1:0"));
  port_ = daemon->port();
  ASSERT_GT(port_, 0);
  auto comms = join_all(2);
  ASSERT_EQ(comms.size(), 2u);
  expect_agreed_ring(raw(comms), 1);
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
  EXPECT_EQ(comms[0]->epoch(), 1u) << "members keep their epoch; the next update succeeds";
  expect_agreed_ring(raw(comms), 1);
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

TEST_F(CommTest, JoinWithoutCoordinatorOrWithABadCertificateFails) {
  Config cfg = peer_config("nobody");
  ASSERT_TRUE(cfg.set("coordinator", "").ok());
  EXPECT_EQ(Communicator::join(cfg).status().code(), WCCL_ERR_INVALID_ARGUMENT);
  ASSERT_TRUE(cfg.set("coordinator", "127.0.0.1:1").ok());
  EXPECT_EQ(Communicator::join(cfg).status().code(), WCCL_ERR_COORDINATOR_UNREACHABLE);
  auto foreign = pki_.foreign_node("intruder");
  foreign.ca = coord_files_.ca;
  Config bad = make_config("intruder", &foreign);
  ASSERT_TRUE(bad.set("coordinator", "127.0.0.1:" + std::to_string(port_)).ok());
  ASSERT_TRUE(bad.set("listen", "127.0.0.1:0").ok());
  EXPECT_EQ(Communicator::join(bad).status().code(), WCCL_ERR_AUTH);
}

}  // namespace
}  // namespace wccl::comm
