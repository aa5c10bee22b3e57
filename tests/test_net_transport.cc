// Links over 127.0.0.1: messages, striping, parking, backpressure, failures and timeouts.
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "support.h"

extern char **environ;

namespace wccl::test {
namespace {

using net::Clock;
using net::Link;
using net::MessageKey;

struct Variant {
  bool tls;
  int streams;
};

std::string variant_name(const testing::TestParamInfo<Variant> &info) {
  return std::string(info.param.tls ? "tls" : "plain") + "_" + std::to_string(info.param.streams) +
         "streams";
}

class TransportTest : public testing::TestWithParam<Variant> {
 protected:
  Config config(const std::string &name) {
    Config cfg = make_config(
        name, GetParam().tls ? &(name == "server" ? server_files_ : client_files_) : nullptr);
    EXPECT_TRUE(cfg.set("streams", std::to_string(GetParam().streams)).ok());
    return cfg;
  }
  void SetUp() override {
    if (GetParam().tls) {
      server_files_ = pki_.node("server");
      client_files_ = pki_.node("client");
    }
  }
  Pki pki_;
  devkit::NodeFiles server_files_, client_files_;
};

// Sends `n` bytes with `seed` from a to b under key and checks what arrives within `timeout`.
void exchange(Link &from, Link &to, const MessageKey &key, size_t n, uint64_t seed,
              std::chrono::milliseconds timeout = 30s) {
  std::vector<uint8_t> src(n), dst(n);
  fill_pattern(src.data(), n, seed);
  Done sent, got;
  ASSERT_TRUE(to.recv(key, dst.data(), n, got.callback()).ok());
  ASSERT_TRUE(from.send(key, src.data(), n, sent.callback()).ok());
  Status s = sent.wait(timeout), r = got.wait(timeout);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_TRUE(r.ok()) << r.to_string();
  EXPECT_EQ(check_pattern(dst.data(), n, seed), n) << "message " << key.to_string() << " of " << n;
}

TEST_P(TransportTest, MessagesOfEverySizeBothWays) {
  LinkPair p;
  open_pair(p, config("server"), config("client"));
  ASSERT_NE(p.server_link, nullptr);
  EXPECT_EQ(p.client_link->stream_count(), GetParam().streams);
  EXPECT_EQ(p.server_link->stream_count(), GetParam().streams);
  EXPECT_EQ(p.server_link->peer_name(), "client");
  EXPECT_EQ(p.client_link->peer_name(), "server");
  uint32_t tag = 0;
  for (size_t n : {size_t{0}, size_t{1}, size_t{47}, size_t{48}, size_t{16385},
                   size_t{(1 << 20) + 3}, size_t{5 << 20}}) {
    ++tag;
    exchange(*p.client_link, *p.server_link, {1, 2, tag}, n, tag);
    ++tag;
    exchange(*p.server_link, *p.client_link, {1, 2, tag}, n, tag);
  }
  EXPECT_GE(p.client_link->stats().bytes_sent, (1u << 20) + 3 + (5u << 20));
  EXPECT_EQ(p.client_link->stats().bytes_sent, p.server_link->stats().bytes_received);
}

TEST_P(TransportTest, ReceivesPostedLateOrOutOfOrderAllComplete) {
  LinkPair p;
  open_pair(p, config("server"), config("client"));
  ASSERT_NE(p.server_link, nullptr);
  constexpr int kMessages = 48;
  std::vector<std::vector<uint8_t>> src(kMessages), dst(kMessages);
  std::vector<Done> sent(kMessages), got(kMessages);
  std::mt19937 rng(42);
  for (int i = 0; i < kMessages; ++i) {
    const size_t n = (i % 3 == 0) ? (3 << 20) + i : static_cast<size_t>(rng() % 100000);
    src[i].resize(n);
    dst[i].resize(n);
    fill_pattern(src[i].data(), n, 100 + i);
    ASSERT_TRUE(
        p.client_link->send({3, static_cast<uint64_t>(i), 9}, src[i].data(), n, sent[i].callback())
            .ok());
  }
  // Frames for keys nobody asked for yet park their streams; receives posted in a shuffled order
  // (the last message first) must release them all.
  std::vector<int> order(kMessages);
  for (int i = 0; i < kMessages; ++i) order[i] = kMessages - 1 - i;
  std::shuffle(order.begin() + 1, order.end(), rng);
  for (int i : order) {
    ASSERT_TRUE(p.server_link
                    ->recv({3, static_cast<uint64_t>(i), 9}, dst[i].data(), dst[i].size(),
                           got[i].callback())
                    .ok());
  }
  for (int i = 0; i < kMessages; ++i) {
    Status r = got[i].wait();
    ASSERT_TRUE(r.ok()) << i << ": " << r.to_string();
    ASSERT_TRUE(sent[i].wait().ok());
    EXPECT_EQ(check_pattern(dst[i].data(), dst[i].size(), 100 + i), dst[i].size())
        << "message " << i;
  }
}

TEST_P(TransportTest, SlowReceiverSlowsTheSenderAndMemoryStaysBounded) {
  LinkPair p;
  open_pair(p, config("server"), config("client"));
  ASSERT_NE(p.server_link, nullptr);
  const size_t n = 512u << 20;
  std::vector<uint8_t> src(n), dst(n);
  fill_pattern(src.data(), n, 7);
  // Touch the destination now so that its pages do not count as growth below.
  std::fill(dst.begin(), dst.end(), 0);
  auto rss_kib = [] {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    }
    return 0L;
  };
  const long before = rss_kib();
  Done sent, got;
  ASSERT_TRUE(p.client_link->send({0, 0, 1}, src.data(), n, sent.callback()).ok());
  // Nobody receives yet: the send cannot finish, and nothing buffers the message in memory.
  EXPECT_EQ(sent.wait(std::chrono::milliseconds(700)).code(), WCCL_ERR_TIMEOUT);
  const long grown_mib = (rss_kib() - before) / 1024;
  EXPECT_LT(grown_mib, 64) << "the transport buffered " << grown_mib
                           << " MiB of an unreceived message";
  ASSERT_TRUE(p.server_link->recv({0, 0, 1}, dst.data(), n, got.callback()).ok());
  ASSERT_TRUE(got.wait().ok());
  ASSERT_TRUE(sent.wait().ok());
  EXPECT_EQ(check_pattern(dst.data(), n, 7), n);
}

// A receiver that is alive but posts its receive late (busy elsewhere: loading a checkpoint, a slow
// step) is backpressure, not a failure, however long it takes: the sender's socket sits on a zero
// window whose probes the receiver's kernel answers. Linux aborts such a connection with ETIMEDOUT
// once the zero window outlasts TCP_USER_TIMEOUT, which is why the link does not set it.
TEST_P(TransportTest, AReceivePostedLongAfterIoTimeoutStillCompletes) {
  Config server = config("server"), client = config("client");
  ASSERT_TRUE(server.set("io_timeout_ms", "1000").ok());
  ASSERT_TRUE(client.set("io_timeout_ms", "1000").ok());
  LinkPair p;
  open_pair(p, server, client);
  ASSERT_NE(p.server_link, nullptr);
  const size_t n =
      64u << 20;  // far more than the socket buffers hold: the sender meets a zero window
  std::vector<uint8_t> src(n), dst(n);
  fill_pattern(src.data(), n, 11);
  Done sent, got;
  ASSERT_TRUE(p.client_link->send({0, 0, 1}, src.data(), n, sent.callback()).ok());
  std::this_thread::sleep_for(3s);  // the receiver is busy elsewhere for three io_timeout_ms
  ASSERT_TRUE(p.server_link->recv({0, 0, 1}, dst.data(), n, got.callback()).ok());
  Status r = got.wait(), s = sent.wait();
  ASSERT_TRUE(r.ok()) << r.to_string();
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(check_pattern(dst.data(), n, 11), n);
}

TEST_P(TransportTest, ClosedLinkFailsPendingAndLaterOperations) {
  LinkPair p;
  open_pair(p, config("server"), config("client"));
  ASSERT_NE(p.server_link, nullptr);
  std::vector<uint8_t> buf(1000);
  Done pending;
  ASSERT_TRUE(p.server_link->recv({0, 0, 5}, buf.data(), buf.size(), pending.callback()).ok());
  p.server_link->close();
  EXPECT_EQ(pending.wait().code(), WCCL_ERR_ABORTED);
  Done later;
  ASSERT_TRUE(p.server_link->send({0, 0, 6}, buf.data(), buf.size(), later.callback()).ok());
  EXPECT_EQ(later.wait().code(), WCCL_ERR_ABORTED);
  // The peer sees the connection go: its pending receive fails with IO.
  Done peer;
  ASSERT_TRUE(p.client_link->recv({0, 0, 7}, buf.data(), buf.size(), peer.callback()).ok());
  Status st = peer.wait(5s);
  EXPECT_EQ(st.code(), WCCL_ERR_IO) << st.to_string();
}

// A link nobody uses still tells its holder when it fails: on_close runs once with the failure
// (ABORTED on the side that closed, IO on the other, with nothing pending on either), and at once
// for a callback registered after it.
TEST_P(TransportTest, OnCloseReportsTheFailureOfAnIdleLinkOnBothSides) {
  LinkPair p;
  open_pair(p, config("server"), config("client"));
  ASSERT_NE(p.server_link, nullptr);
  Done here, there;
  ASSERT_TRUE(p.server_link->on_close(here.callback()).ok());
  ASSERT_TRUE(p.client_link->on_close(there.callback()).ok());
  p.server_link->close(WCCL_ERROR(WCCL_ERR_ABORTED, "epoch over"));
  const Status mine = here.wait(5s), peer = there.wait(5s);
  EXPECT_EQ(mine.code(), WCCL_ERR_ABORTED) << mine.to_string();
  EXPECT_NE(mine.message().find("epoch over"), std::string::npos) << mine.to_string();
  EXPECT_EQ(peer.code(), WCCL_ERR_IO) << peer.to_string();
  Done late;
  ASSERT_TRUE(p.client_link->on_close(late.callback()).ok());
  EXPECT_EQ(late.wait(5s).code(), WCCL_ERR_IO);
}

// A peer that sends and goes at once: its sends complete once its kernel holds them, and its
// streams end one by one behind them. Nothing is received until it has gone; then messages of
// 20 and 140 KiB a stream arrive in several reads a stream, while a stream that has read its share
// finds the end. Every message arrives, and only then does the link fail, naming the close. (The
// first stream to end failed the link, losing what the others had still to read.)
TEST_P(TransportTest, EverythingSentBeforeThePeerClosesArrives) {
  // One round in three lost a message over 4 plaintext streams before; ten rounds.
  for (int round = 0; round < 10; ++round) {
    LinkPair p;
    open_pair(p, config("server"), config("client"));
    ASSERT_NE(p.server_link, nullptr);
    // What the sender's kernel takes while nobody reads: TCP_NOTSENT_LOWAT and the receiver's
    // window.
    const size_t streams = static_cast<size_t>(GetParam().streams);
    const size_t sizes[] = {(20u << 10) * streams, 100, (140u << 10) * streams, 3000};
    constexpr int kMessages = 4;
    std::vector<std::vector<uint8_t>> src(kMessages), dst(kMessages);
    std::vector<Done> sent(kMessages), got(kMessages);
    for (int i = 0; i < kMessages; ++i) {
      src[i].resize(sizes[i]);
      dst[i].resize(sizes[i]);
      fill_pattern(src[i].data(), sizes[i], 500 + i);
      ASSERT_TRUE(
          p.client_link
              ->send({4, static_cast<uint64_t>(i), 1}, src[i].data(), sizes[i], sent[i].callback())
              .ok());
    }
    for (int i = 0; i < kMessages; ++i) ASSERT_TRUE(sent[i].wait().ok()) << i;
    p.client.reset();
    for (int i = 0; i < kMessages; ++i) {
      ASSERT_TRUE(p.server_link
                      ->recv({4, static_cast<uint64_t>(i), 1}, dst[i].data(), dst[i].size(),
                             got[i].callback())
                      .ok());
    }
    for (int i = 0; i < kMessages; ++i) {
      Status r = got[i].wait(10s);
      ASSERT_TRUE(r.ok()) << "round " << round << ", message " << i << " of " << kMessages << ": "
                          << r.to_string();
      EXPECT_EQ(check_pattern(dst[i].data(), dst[i].size(), 500 + i), dst[i].size())
          << "message " << i;
    }
    // Drained: what comes next fails, naming the close.
    std::vector<uint8_t> buf(10);
    Done more, reply;
    ASSERT_TRUE(p.server_link->recv({4, 99, 1}, buf.data(), buf.size(), more.callback()).ok());
    ASSERT_TRUE(p.server_link->send({4, 99, 2}, buf.data(), buf.size(), reply.callback()).ok());
    const Status m = more.wait(10s), r = reply.wait(10s);
    EXPECT_EQ(m.code(), WCCL_ERR_IO) << m.to_string();
    EXPECT_NE(m.message().find("closed the connection"), std::string::npos) << m.to_string();
    EXPECT_EQ(r.code(), WCCL_ERR_IO) << r.to_string();
  }
}

TEST_P(TransportTest, LengthMismatchFailsTheLinkWithProtocol) {
  LinkPair p;
  open_pair(p, config("server"), config("client"));
  ASSERT_NE(p.server_link, nullptr);
  std::vector<uint8_t> src(5000), dst(4000);
  Done sent, got;
  ASSERT_TRUE(p.server_link->recv({0, 0, 1}, dst.data(), dst.size(), got.callback()).ok());
  ASSERT_TRUE(p.client_link->send({0, 0, 1}, src.data(), src.size(), sent.callback()).ok());
  Status st = got.wait();
  EXPECT_EQ(st.code(), WCCL_ERR_PROTOCOL) << st.to_string();
  EXPECT_NE(st.message().find("5000 bytes but its receive expects 4000"), std::string::npos)
      << st.message();
  // The sender's completion releases src: OK if its bytes reached the kernel before the receiver
  // hung up, IO otherwise.
  Status s = sent.wait();
  EXPECT_TRUE(s.ok() || s.code() == WCCL_ERR_IO) << s.to_string();
}

TEST_P(TransportTest, AReceiveWithACapacityTakesAnyShorterMessageAndReportsItsLength) {
  LinkPair p;
  open_pair(p, config("server"), config("client"));
  ASSERT_NE(p.server_link, nullptr);
  // A message of several frames (3 MiB: frame_bytes is at most 1 MiB here), and an empty one.
  const size_t n = 3u << 20;
  std::vector<uint8_t> src(n), dst(n + 1000, 0xEE);
  fill_pattern(src.data(), n, 5);
  size_t len = 12345, empty_len = 12345;
  Done sent, got, sent_empty, got_empty;
  ASSERT_TRUE(p.server_link->recv({0, 0, 1}, dst.data(), dst.size(), &len, got.callback()).ok());
  ASSERT_TRUE(p.client_link->send({0, 0, 1}, src.data(), n, sent.callback()).ok());
  ASSERT_TRUE(
      p.server_link->recv({0, 0, 2}, dst.data(), 10, &empty_len, got_empty.callback()).ok());
  ASSERT_TRUE(p.client_link->send({0, 0, 2}, src.data(), 0, sent_empty.callback()).ok());
  ASSERT_TRUE(got.wait().ok());
  ASSERT_TRUE(got_empty.wait().ok());
  EXPECT_EQ(len, n);
  EXPECT_EQ(empty_len, 0u);
  EXPECT_EQ(check_pattern(dst.data(), n, 5), n);
  EXPECT_EQ(dst[n], 0xEE) << "nothing past the message";
  // A message longer than the capacity fails the link with PROTOCOL, naming both.
  Done too_long, sent_long;
  ASSERT_TRUE(p.server_link->recv({0, 0, 3}, dst.data(), 4000, &len, too_long.callback()).ok());
  ASSERT_TRUE(p.client_link->send({0, 0, 3}, src.data(), 5000, sent_long.callback()).ok());
  const Status st = too_long.wait();
  EXPECT_EQ(st.code(), WCCL_ERR_PROTOCOL) << st.to_string();
  EXPECT_NE(st.message().find("5000 bytes but its receive holds at most 4000"), std::string::npos)
      << st.message();
  (void)sent_long.wait();
}

TEST_P(TransportTest, SecondReceiveOfTheSameKeyIsInvalidUsage) {
  LinkPair p;
  open_pair(p, config("server"), config("client"));
  ASSERT_NE(p.server_link, nullptr);
  std::vector<uint8_t> a(100), b(100), src(100);
  fill_pattern(src.data(), src.size(), 3);
  Done first, second, sent;
  ASSERT_TRUE(p.server_link->recv({0, 0, 1}, a.data(), a.size(), first.callback()).ok());
  ASSERT_TRUE(p.server_link->recv({0, 0, 1}, b.data(), b.size(), second.callback()).ok());
  EXPECT_EQ(second.wait().code(), WCCL_ERR_INVALID_USAGE);
  ASSERT_TRUE(p.client_link->send({0, 0, 1}, src.data(), src.size(), sent.callback()).ok());
  ASSERT_TRUE(first.wait().ok());
  ASSERT_TRUE(sent.wait().ok());
  EXPECT_EQ(check_pattern(a.data(), a.size(), 3), a.size());
}

TEST_P(TransportTest, TransportShutdownAbortsPendingOperations) {
  LinkPair p;
  open_pair(p, config("server"), config("client"));
  ASSERT_NE(p.server_link, nullptr);
  std::vector<uint8_t> buf(100);
  Done pending;
  ASSERT_TRUE(p.server_link->recv({0, 0, 1}, buf.data(), buf.size(), pending.callback()).ok());
  p.server.reset();
  EXPECT_EQ(pending.wait().code(), WCCL_ERR_ABORTED);
  // The handle outlives its transport: calls fail at once instead of crashing.
  Done after;
  EXPECT_EQ(p.server_link->send({0, 0, 2}, buf.data(), buf.size(), after.callback()).code(),
            WCCL_ERR_ABORTED);
}

INSTANTIATE_TEST_SUITE_P(Variants, TransportTest,
                         testing::Values(Variant{false, 1}, Variant{false, 4}, Variant{true, 1},
                                         Variant{true, 4}),
                         variant_name);

// --- a gigabyte, verified ------------------------------------------------------------------------

void gigabyte(const Config &server, const Config &client) {
  LinkPair p;
  open_pair(p, server, client);
  ASSERT_NE(p.server_link, nullptr);
  // A gigabyte, or less under WCCL_TEST_LARGE_BYTES (the sanitizer runs). A gigabyte through 4 KiB
  // socket buffers with TLS took 60 s under ThreadSanitizer on a busy two-core machine; the bound
  // is for liveness, not speed.
  const size_t n = large_bytes(size_t{1} << 30);
  exchange(*p.client_link, *p.server_link, {1, 1, 1}, n, 1234, std::chrono::minutes(3));
  EXPECT_EQ(p.server_link->stats().bytes_received, n);
}

TEST(Gigabyte, PlaintextOverFourStreams) {
  Config s = make_config("server", nullptr), c = make_config("client", nullptr);
  gigabyte(s, c);
}

TEST(Gigabyte, TlsOverFourStreams) {
  Pki pki;
  auto sf = pki.node("server"), cf = pki.node("client");
  gigabyte(make_config("server", &sf), make_config("client", &cf));
}

TEST(Gigabyte, TinySocketBuffersForcePartialReadsAndWrites) {
  Pki pki;
  auto sf = pki.node("server"), cf = pki.node("client");
  Config s = make_config("server", &sf), c = make_config("client", &cf);
  for (Config *cfg : {&s, &c}) {
    ASSERT_TRUE(cfg->set("sock_buf_bytes", "4096").ok());
    ASSERT_TRUE(cfg->set("frame_bytes", "100000").ok());  // frames that straddle every read
  }
  gigabyte(s, c);
}

// --- failures of the other process ---------------------------------------------------------------

// Starts argv[0] with argv and this process's environment, overridden by env ("WCCL_X=y"); its
// pid, or -1 (a test failure) when it cannot be started.
pid_t spawn(std::vector<std::string> argv, std::vector<std::string> env) {
  for (char **e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  std::vector<char *> args, envp;
  for (auto &a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  for (auto &v : env) envp.push_back(v.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), envp.data());
  EXPECT_EQ(rc, 0) << "cannot start " << argv[0];
  return rc == 0 ? pid : -1;
}

class PeerProcess {
 public:
  // Starts the helper connecting to address with env overrides ("WCCL_X=y").
  PeerProcess(const std::string &address, size_t first, size_t second,
              std::vector<std::string> env) {
    const char *helper = std::getenv("WCCL_TEST_PEER");
    if (helper == nullptr) {
      ADD_FAILURE() << "WCCL_TEST_PEER (the helper binary) is not set; run through meson test";
      return;
    }
    pid_ = spawn({helper, address, std::to_string(first), std::to_string(second)}, std::move(env));
  }
  ~PeerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  void signal(int sig) { kill(pid_, sig); }

 private:
  pid_t pid_ = -1;
};

enum class Fault { kKill, kStop };

void peer_fault(bool tls, Fault fault) {
  Pki pki;
  auto sf = pki.node("server"), cf = pki.node("client");
  Config cfg = make_config("server", tls ? &sf : nullptr);
  ASSERT_TRUE(cfg.set("io_timeout_ms", "1000").ok());
  auto server = net::Transport::create(cfg);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  Acceptor acceptor;
  auto port = server.value()->listen("127.0.0.1:0", acceptor.callback());
  ASSERT_TRUE(port.ok());
  std::vector<std::string> env = {"WCCL_NAME=victim", "WCCL_TLS=" + std::string(tls ? "on" : "off"),
                                  "WCCL_TLS_CERT=" + cf.cert, "WCCL_TLS_KEY=" + cf.key,
                                  "WCCL_TLS_CA=" + cf.ca};
  const size_t first = 32u << 20, second = 1u << 30;
  PeerProcess peer("127.0.0.1:" + std::to_string(port.value()), first, second, env);
  auto link = acceptor.wait(10s);
  ASSERT_NE(link, nullptr) << "the helper did not connect";
  std::vector<uint8_t> a(first), b(second);
  ASSERT_TRUE(net::recv_sync(*link, {0, 0, 1}, a.data(), a.size(), 30s).ok());
  EXPECT_EQ(check_pattern(a.data(), a.size(), 1), a.size());
  Done got;
  ASSERT_TRUE(link->recv({0, 0, 2}, b.data(), b.size(), got.callback()).ok());
  // Let part of the second message arrive so that the fault lands in the middle of it.
  const auto deadline = Clock::now() + 10s;
  while (link->stats().bytes_received < first + (8u << 20) && Clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_GT(link->stats().bytes_received, first) << "the second message never started";
  ASSERT_LT(link->stats().bytes_received, first + second) << "the second message finished too soon";
  const auto t0 = Clock::now();
  peer.signal(fault == Fault::kKill ? SIGKILL : SIGSTOP);
  Status st = got.wait(10s);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  if (fault == Fault::kKill) {
    EXPECT_EQ(st.code(), WCCL_ERR_IO) << st.to_string();
    EXPECT_LT(ms, 1000) << "a killed peer's closed connection must be seen at once";
  } else {
    EXPECT_EQ(st.code(), WCCL_ERR_TIMEOUT) << st.to_string();
    EXPECT_GE(ms, 900);
    EXPECT_LT(ms, 2500) << "a silent peer must be detected within io_timeout_ms plus one sweep";
  }
}

// A cut path (a dead host, a failed router) while data is in flight: nothing is acknowledged, and
// the sender's link fails within io_timeout_ms. Run in a child process, in network namespaces of
// its own (root only): the client in one, the server in another, joined by a veth pair whose
// server end is taken down mid-message, so the client's segments leave and are never answered.
// The argument that makes this binary the cut-path child instead of a test run (main below).
constexpr const char *kCutPathChildMode = "--cut-path-child";

int cut_path_child() {
  if (unshare(CLONE_NEWNET) != 0) return 77;
  const std::string ns = "wccl-cut-" + std::to_string(getpid());
  const std::string up =
      "ip link set lo up && ip netns add " + ns +
      " && ip link add wccl-cut-a type veth peer name wccl-cut-b && ip link set wccl-cut-b netns " +
      ns +
      " && ip addr add 10.231.0.1/24 dev wccl-cut-a && ip link set wccl-cut-a up && ip netns "
      "exec " +
      ns +
      " sh -c 'ip link set lo up && ip addr add 10.231.0.2/24 dev wccl-cut-b && ip link set "
      "wccl-cut-b up'";
  struct Cleanup {  // a named namespace outlives the process
    std::string ns;
    ~Cleanup() {
      if (std::system(("ip netns del " + ns + " 2>/dev/null").c_str()) != 0)
        std::fprintf(stderr, "%s: not deleted\n", ns.c_str());
    }
  } cleanup{ns};
  if (std::system(up.c_str()) != 0) return 77;
  const int here = open("/proc/self/ns/net", O_RDONLY),
            there = open(("/run/netns/" + ns).c_str(), O_RDONLY);
  if (here < 0 || there < 0) return 2;
  Config server_cfg = make_config("server", nullptr), client_cfg = make_config("client", nullptr);
  if (!server_cfg.set("io_timeout_ms", "1000").ok() ||
      !client_cfg.set("io_timeout_ms", "1000").ok())
    return 2;
  // Declared before the transports, so freed after them: the server's receive into dst never
  // completes (the path is cut) and its loop thread may still copy bytes into it until the
  // transport is destroyed (ThreadSanitizer saw the buffer freed under it).
  const size_t n = 256u << 20;
  std::vector<uint8_t> src(n), dst(n);
  // The server's loop thread is started from, and so lives in, the server's namespace.
  if (setns(there, CLONE_NEWNET) != 0) return 3;
  auto server = net::Transport::create(server_cfg);
  Acceptor acceptor;
  auto port = server.ok() ? server.value()->listen("10.231.0.2:0", acceptor.callback())
                          : Result<int>(server.status());
  if (setns(here, CLONE_NEWNET) != 0 || !port.ok()) return 3;
  auto client = net::Transport::create(client_cfg);
  if (!client.ok()) return 4;
  auto link = client.value()->connect_sync("10.231.0.2:" + std::to_string(port.value()));
  auto server_link = acceptor.wait(10s);
  if (!link.ok() || server_link == nullptr) return 5;
  Done sent, got;
  if (!server_link->recv({0, 0, 1}, dst.data(), n, got.callback()).ok()) return 6;
  if (!link.value()->send({0, 0, 1}, src.data(), n, sent.callback()).ok()) return 6;
  const auto deadline = Clock::now() + 10s;
  while (server_link->stats().bytes_received < (8u << 20) && Clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  if (std::system(("ip netns exec " + ns + " ip link set wccl-cut-b down").c_str()) != 0) return 7;
  const auto t0 = Clock::now();
  Status st = sent.wait(10s);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  std::fprintf(stderr, "after %lld ms: %s\n", static_cast<long long>(ms), st.to_string().c_str());
  if (st.code() != WCCL_ERR_TIMEOUT ||
      st.to_string().find("acknowledged nothing") == std::string::npos)
    return 8;
  return ms >= 900 && ms < 2500 ? 0 : 9;
}

TEST(PeerFailure, ACutPathWithDataInFlightTimesOut) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces of its own)";
  // The child is this binary again in its cut-path mode (main below): a fresh process, since a fork
  // of a process that has run threads could not start new ones under ThreadSanitizer.
  const pid_t pid = spawn({"/proc/self/exe", kCutPathChildMode}, {});
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "no network namespace or no ip (iproute2)";
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "see the child's line above: 8 wrong error, 9 wrong time, else set-up";
}

TEST(PeerFailure, KilledMidTransferGivesIoPlaintext) { peer_fault(false, Fault::kKill); }
TEST(PeerFailure, KilledMidTransferGivesIoTls) { peer_fault(true, Fault::kKill); }
TEST(PeerFailure, StoppedMidTransferGivesTimeout) { peer_fault(true, Fault::kStop); }

// --- set-up failures -----------------------------------------------------------------------------

TEST(Connect, SilentListenerTimesOut) {
  // A socket that listens but never accepts: TCP connects through the backlog, then nothing.
  int port = 0;
  const int fd = loopback_listener(&port);
  ASSERT_GE(fd, 0);
  for (bool tls : {false, true}) {
    Pki pki;
    auto cf = pki.node("client");
    Config cfg = make_config("client", tls ? &cf : nullptr);
    ASSERT_TRUE(cfg.set("connect_timeout_ms", "400").ok());
    auto t = net::Transport::create(cfg);
    ASSERT_TRUE(t.ok());
    const auto t0 = Clock::now();
    auto link = t.value()->connect_sync("127.0.0.1:" + std::to_string(port));
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    EXPECT_EQ(link.status().code(), WCCL_ERR_TIMEOUT) << link.status().to_string();
    EXPECT_NE(link.status().message().find("not established within 400 ms"), std::string::npos);
    EXPECT_GE(ms, 390);
    EXPECT_LT(ms, 1500);
  }
  close(fd);
}

TEST(Connect, RefusedIsIo) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len);
  close(fd);  // the port is now closed
  auto t = net::Transport::create(make_config("client", nullptr));
  ASSERT_TRUE(t.ok());
  auto link = t.value()->connect_sync("127.0.0.1:" + std::to_string(ntohs(addr.sin_port)));
  EXPECT_EQ(link.status().code(), WCCL_ERR_IO) << link.status().to_string();
  EXPECT_NE(link.status().message().find("connect to 127.0.0.1"), std::string::npos);
}

TEST(Connect, BadAddressesAreInvalidArguments) {
  auto t = net::Transport::create(make_config("client", nullptr));
  ASSERT_TRUE(t.ok());
  for (const char *bad : {"127.0.0.1", "127.0.0.1:", "127.0.0.1:99999", ":80", "::1:80", "[::1]80",
                          "[::1:80", "h:p"}) {
    auto link = t.value()->connect_sync(bad);
    EXPECT_EQ(link.status().code(), WCCL_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(link.status().message().find(bad), std::string::npos) << link.status().message();
  }
  auto port = t.value()->listen("not an address", nullptr);
  EXPECT_EQ(port.status().code(), WCCL_ERR_INVALID_ARGUMENT);
}

TEST(Connect, Ipv6AndHostNames) {
  auto server = net::Transport::create(make_config("server", nullptr));
  auto client = net::Transport::create(make_config("client", nullptr));
  ASSERT_TRUE(server.ok() && client.ok());
  Acceptor acceptor;
  auto port6 = server.value()->listen("[::1]:0", acceptor.callback());
  if (!port6.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << port6.status().to_string();
  auto link = client.value()->connect_sync("[::1]:" + std::to_string(port6.value()));
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto accepted = acceptor.wait();
  ASSERT_NE(accepted, nullptr);
  EXPECT_EQ(accepted->peer_address().rfind("[::1]:", 0), 0u) << accepted->peer_address();
  exchange(*link.value(), *accepted, {0, 0, 1}, 100000, 5);
  auto port4 = server.value()->listen("localhost:0", acceptor.callback());
  ASSERT_TRUE(port4.ok()) << port4.status().to_string();
  auto by_name = client.value()->connect_sync("localhost:" + std::to_string(port4.value()));
  ASSERT_TRUE(by_name.ok()) << by_name.status().to_string();
  ASSERT_NE(acceptor.wait(), nullptr);
}

}  // namespace
}  // namespace wccl::test

namespace wccl::test {
namespace {

// A hand-made plaintext peer: says hello as stream 0 of 1, then writes whatever frames a test
// gives.
class RawPeer {
 public:
  explicit RawPeer(int port, uint16_t version = net::kProtocolVersion) {
    signal(SIGPIPE, SIG_IGN);
    fd_ = connect_loopback(port);
    net::Hello hello;
    hello.link_id[0] = 42;
    hello.stream_count = 1;
    hello.name = "raw";
    uint8_t payload[net::kMaxHelloBytes];
    const size_t n = net::encode_hello(hello, payload);
    net::FrameHeader h;
    h.type = net::FrameType::kHello;
    h.length = static_cast<uint32_t>(n);
    h.msg_len = n;
    uint8_t hdr[net::kFrameHeaderBytes];
    net::encode_header(h, hdr);
    hdr[4] = static_cast<uint8_t>(version);  // the version field (little-endian, < 256 here)
    send_bytes(hdr, sizeof(hdr));
    send_bytes(payload, n);
  }
  ~RawPeer() { close(fd_); }
  void write_frame(const net::FrameHeader &h, const uint8_t *payload) {
    uint8_t hdr[net::kFrameHeaderBytes];
    net::encode_header(h, hdr);
    send_bytes(hdr, sizeof(hdr));
    if (h.length > 0) send_bytes(payload, h.length);
  }
  void send_bytes(const uint8_t *p, size_t n) { (void)!write(fd_, p, n); }
  // Reads until the server closes the connection; true if it did within the timeout.
  bool closed_by_server() {
    uint8_t buf[4096];
    ssize_t n;
    do {
      n = read(fd_, buf, sizeof(buf));
    } while (n > 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }

 private:
  int fd_ = -1;
};

TEST(BadFrames, RepeatedFrameFailsOnlyThatLinkWithProtocol) {
  auto server = net::Transport::create(make_config("server", nullptr));
  ASSERT_TRUE(server.ok());
  Acceptor acceptor;
  auto port = server.value()->listen("127.0.0.1:0", acceptor.callback());
  ASSERT_TRUE(port.ok());
  // A good link that must survive.
  auto client = net::Transport::create(make_config("client", nullptr));
  ASSERT_TRUE(client.ok());
  auto good = client.value()->connect_sync("127.0.0.1:" + std::to_string(port.value()));
  ASSERT_TRUE(good.ok());
  auto good_accepted = acceptor.wait();
  ASSERT_NE(good_accepted, nullptr);

  RawPeer raw(port.value());
  auto link = acceptor.wait();
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> dst(150, 0xee);
  Done got;
  ASSERT_TRUE(link->recv({0, 0, 1}, dst.data(), dst.size(), got.callback()).ok());
  uint8_t payload[100];
  std::memset(payload, 0x11, sizeof(payload));
  net::FrameHeader h;
  h.key = {0, 0, 1};
  h.length = 100;
  h.msg_len = 150;
  raw.write_frame(h, payload);
  raw.write_frame(h, payload);  // the same 100 bytes again: 200 > 150
  Status st = got.wait(10s);
  EXPECT_EQ(st.code(), WCCL_ERR_PROTOCOL) << st.to_string();
  EXPECT_NE(st.message().find("more bytes than its length"), std::string::npos) << st.message();
  EXPECT_TRUE(raw.closed_by_server());
  exchange(*good.value(), *good_accepted, {0, 0, 2}, 70000, 3);
}

TEST(BadFrames, OtherProtocolVersionIsRejectedAtHello) {
  auto server = net::Transport::create(make_config("server", nullptr));
  ASSERT_TRUE(server.ok());
  Acceptor acceptor;
  auto port = server.value()->listen("127.0.0.1:0", acceptor.callback());
  ASSERT_TRUE(port.ok());
  RawPeer raw(port.value(), /*version=*/net::kProtocolVersion + 1);
  EXPECT_TRUE(raw.closed_by_server());
  EXPECT_EQ(acceptor.wait(200ms), nullptr) << "a peer of another protocol version was admitted";
}

}  // namespace
}  // namespace wccl::test

// gtest's own main, except in the cut-path child's mode:
// PeerFailure.ACutPathWithDataInFlightTimesOut starts this binary with kCutPathChildMode, and its
// exit status is the child's verdict.
int main(int argc, char **argv) {
  if (argc == 2 && std::strcmp(argv[1], wccl::test::kCutPathChildMode) == 0)
    return wccl::test::cut_path_child();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
