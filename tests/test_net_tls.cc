// TLS 1.3 with mutual certificates, with certificates made at run time: the good pair works;
// wrong CA, expired certificates, a missing client certificate, plaintext/TLS mismatch and garbage
// are rejected with AUTH, and an unauthenticated peer never reaches the data path.
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <poll.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "net/frame.h"
#include "net/seal.h"
#include "support.h"

namespace wccl::test {
namespace {

// A server with the good certificate and an Acceptor, plus one good link to prove members carry on.
class TlsTest : public testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);  // the raw clients below write to connections the server drops
    server_files_ = pki_.node("server");
    auto server = net::Transport::create(make_config("server", &server_files_));
    ASSERT_TRUE(server.ok()) << server.status().to_string();
    server_ = std::move(server).value();
    auto port = server_->listen("127.0.0.1:0", acceptor_.callback());
    ASSERT_TRUE(port.ok());
    address_ = "127.0.0.1:" + std::to_string(port.value());
    port_ = port.value();
  }

  // Connects with config cfg; returns the set-up status.
  Status connect_with(const Config &cfg) {
    auto client = net::Transport::create(cfg);
    if (!client.ok()) return client.status();
    auto link = client.value()->connect_sync(address_);
    return link.status();
  }

  // The server still serves good peers, and accepted exactly `expected` links so far.
  void expect_server_healthy(size_t expected_before) {
    EXPECT_EQ(acceptor_.count(), expected_before)
        << "an unauthenticated peer reached the data path";
    auto good = pki_.node("good-client");
    auto client = net::Transport::create(make_config("good-client", &good));
    ASSERT_TRUE(client.ok());
    auto link = client.value()->connect_sync(address_);
    ASSERT_TRUE(link.ok()) << link.status().to_string();
    auto accepted = acceptor_.wait();
    ASSERT_NE(accepted, nullptr);
    std::vector<uint8_t> src(70000), dst(70000);
    fill_pattern(src.data(), src.size(), 9);
    Done sent;
    ASSERT_TRUE(link.value()->send({0, 0, 1}, src.data(), src.size(), sent.callback()).ok());
    ASSERT_TRUE(net::recv_sync(*accepted, {0, 0, 1}, dst.data(), dst.size(), 10s).ok());
    EXPECT_EQ(check_pattern(dst.data(), dst.size(), 9), dst.size());
    ASSERT_TRUE(sent.wait().ok());
  }

  Pki pki_;
  devkit::NodeFiles server_files_;
  std::unique_ptr<net::Transport> server_;
  Acceptor acceptor_;
  std::string address_;
  int port_ = 0;
};

TEST_F(TlsTest, GoodPairAuthenticatesBothWays) {
  auto cf = pki_.node("client-a");
  auto client = net::Transport::create(make_config("client-a", &cf));
  ASSERT_TRUE(client.ok());
  auto link = client.value()->connect_sync(address_);
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto accepted = acceptor_.wait();
  ASSERT_NE(accepted, nullptr);
  EXPECT_NE(link.value()->peer_subject().find("CN=server"), std::string::npos)
      << link.value()->peer_subject();
  EXPECT_NE(accepted->peer_subject().find("CN=client-a"), std::string::npos)
      << accepted->peer_subject();
  expect_server_healthy(1);
}

void expect_auth(const Status &st, const std::string &reason) {
  EXPECT_EQ(st.code(), WCCL_ERR_AUTH) << st.to_string();
  EXPECT_NE(st.message().find(reason), std::string::npos) << st.message();
}

TEST_F(TlsTest, ClientFromAnotherCaIsRejected) {
  auto foreign = pki_.foreign_node("intruder");
  foreign.ca = server_files_.ca;  // it trusts our CA, but its own certificate is not ours
  expect_auth(connect_with(make_config("intruder", &foreign)), "during link set-up");
  expect_server_healthy(0);
}

TEST_F(TlsTest, ServerFromAnotherCaIsRejectedByTheClient) {
  auto cf = pki_.node("client-b");
  cf.ca = pki_.foreign_node("x").ca;  // the client trusts a different CA than the server's
  expect_auth(connect_with(make_config("client-b", &cf)), "certificate verify failed");
  expect_server_healthy(0);
}

TEST_F(TlsTest, ExpiredClientCertificateIsRejected) {
  auto expired = pki_.node("expired-client", -10, -1);
  expect_auth(connect_with(make_config("expired-client", &expired)), "during link set-up");
  expect_server_healthy(0);
}

TEST(TlsExpiry, ExpiredServerCertificateIsNamedInTheError) {
  Pki pki;
  auto sf = pki.node("old-server", -10, -1), cf = pki.node("client");
  LinkPair p;
  auto server = net::Transport::create(make_config("old-server", &sf));
  ASSERT_TRUE(server.ok());
  Acceptor acceptor;
  auto port = server.value()->listen("127.0.0.1:0", acceptor.callback());
  ASSERT_TRUE(port.ok());
  auto client = net::Transport::create(make_config("client", &cf));
  ASSERT_TRUE(client.ok());
  auto link = client.value()->connect_sync("127.0.0.1:" + std::to_string(port.value()));
  expect_auth(link.status(), "certificate has expired");
  EXPECT_EQ(acceptor.count(), 0u);
}

TEST_F(TlsTest, ClientWithoutCertificateNeverReachesTheDataPath) {
  // A hand-made TLS client that trusts our CA but presents no certificate, then writes a valid
  // hello and a data frame as if it had been admitted.
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  ASSERT_NE(ctx, nullptr);
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  ASSERT_EQ(SSL_CTX_load_verify_locations(ctx, server_files_.ca.c_str(), nullptr), 1);
  SSL *ssl = SSL_new(ctx);
  const int fd = connect_loopback(port_);
  SSL_set_fd(ssl, fd);
  const int hs = SSL_connect(ssl);  // TLS 1.3: the client finishes before the server judges it
  if (hs == 1) {
    net::Hello hello;
    hello.link_id[0] = 1;
    hello.stream_count = 1;
    hello.name = "nocert";
    uint8_t buf[net::kFrameHeaderBytes + net::kMaxHelloBytes];
    const size_t n = net::encode_hello(hello, buf + net::kFrameHeaderBytes);
    net::FrameHeader h;
    h.type = net::FrameType::kHello;
    h.length = static_cast<uint32_t>(n);
    h.msg_len = n;
    net::encode_header(h, buf);
    SSL_write(ssl, buf, static_cast<int>(net::kFrameHeaderBytes + n));
    uint8_t data[net::kFrameHeaderBytes + 4] = {};
    net::FrameHeader d;
    d.length = 4;
    d.msg_len = 4;
    net::encode_header(d, data);
    SSL_write(ssl, data, sizeof(data));
    uint8_t reply[64];
    // The server's only answer is an alert and a close, never a hello.
    EXPECT_LE(SSL_read(ssl, reply, sizeof(reply)), 0);
    const unsigned long err = ERR_peek_last_error();
    EXPECT_NE(err, 0u) << "expected an alert from the server";
  }
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  close(fd);
  expect_server_healthy(0);
}

TEST_F(TlsTest, PlaintextClientToTlsServerIsAuth) {
  Status st = connect_with(make_config("plain-client", nullptr));
  EXPECT_EQ(st.code(), WCCL_ERR_AUTH) << st.to_string();
  expect_server_healthy(0);
}

TEST(TlsMismatch, TlsClientToPlaintextServerIsAuth) {
  Pki pki;
  auto cf = pki.node("client");
  auto server = net::Transport::create(make_config("plain-server", nullptr));
  ASSERT_TRUE(server.ok());
  Acceptor acceptor;
  auto port = server.value()->listen("127.0.0.1:0", acceptor.callback());
  ASSERT_TRUE(port.ok());
  auto client = net::Transport::create(make_config("client", &cf));
  ASSERT_TRUE(client.ok());
  auto link = client.value()->connect_sync("127.0.0.1:" + std::to_string(port.value()));
  EXPECT_EQ(link.status().code(), WCCL_ERR_AUTH) << link.status().to_string();
  EXPECT_EQ(acceptor.count(), 0u);
}

TEST_F(TlsTest, GarbageSpeakerIsDroppedAndOthersCarryOn) {
  const int fd = connect_loopback(port_);
  std::vector<uint8_t> junk(4096);
  fill_pattern(junk.data(), junk.size(), 77);
  EXPECT_EQ(write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
  uint8_t reply[256];
  ssize_t n;
  do {
    n = read(fd, reply, sizeof(reply));  // until the server closes (an alert may come first)
  } while (n > 0);
  EXPECT_EQ(n, 0) << "the server should close the connection, not leave it hanging";
  close(fd);
  expect_server_healthy(0);
}

// --- Sealed frames (net/seal.h) -----------------------------------------------------------------

std::unique_ptr<net::FrameSeal> seal_of(uint8_t send, uint8_t recv,
                                        uint64_t rekey = net::FrameSeal::kRekeyBytes) {
  uint8_t a[net::FrameSeal::kSecretBytes], b[net::FrameSeal::kSecretBytes];
  std::memset(a, send, sizeof(a));
  std::memset(b, recv, sizeof(b));
  auto s = net::FrameSeal::create(a, b, rekey);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

struct Sealed {
  uint8_t header[net::kFrameHeaderBytes];
  std::vector<uint8_t> body;  // ciphertext
  uint8_t tag[net::FrameSeal::kTagBytes];
};

Sealed seal_frame(net::FrameSeal &s, size_t n, uint32_t seed) {
  Sealed f;
  for (size_t i = 0; i < sizeof(f.header); ++i) f.header[i] = static_cast<uint8_t>(seed + i);
  std::vector<uint8_t> plain(n);
  fill_pattern(plain.data(), n, seed);
  f.body.resize(n);
  EXPECT_TRUE(s.seal(f.header, sizeof(f.header), plain.data(), n, f.body.data(), f.tag).ok());
  return f;
}

Status open_frame(net::FrameSeal &s, Sealed f) {  // a copy: opened in place
  return s.open(f.header, sizeof(f.header), f.body.data(), f.body.size(), f.tag);
}

TEST(FrameSeal, FramesOpenInPlaceInOrderAndHidePayloads) {
  auto tx = seal_of(1, 2), rx = seal_of(2, 1);
  for (size_t n : {size_t{0}, size_t{1}, size_t{4096}, size_t{300001}}) {
    Sealed f = seal_frame(*tx, n, static_cast<uint32_t>(n));
    std::vector<uint8_t> plain(n);
    fill_pattern(plain.data(), n, static_cast<uint32_t>(n));
    if (n >= 16) {
      EXPECT_NE(std::memcmp(f.body.data(), plain.data(), 16), 0) << "the payload went out in clear";
    }
    ASSERT_TRUE(rx->open(f.header, sizeof(f.header), f.body.data(), n, f.tag).ok()) << n;
    EXPECT_EQ(check_pattern(f.body.data(), n, static_cast<uint32_t>(n)), n);
  }
}

TEST(FrameSeal, AnyChangedByteReplayOrReorderFailsWithProtocol) {
  struct Case {
    const char *what;
    std::function<Status(net::FrameSeal &tx, net::FrameSeal &rx)> run;
  };
  const Case cases[] = {
      {"header",
       [](net::FrameSeal &tx, net::FrameSeal &rx) {
         Sealed f = seal_frame(tx, 5000, 1);
         f.header[12] ^= 1;
         return open_frame(rx, f);
       }},
      {"payload",
       [](net::FrameSeal &tx, net::FrameSeal &rx) {
         Sealed f = seal_frame(tx, 5000, 1);
         f.body[4321] ^= 0x80;
         return open_frame(rx, f);
       }},
      {"tag",
       [](net::FrameSeal &tx, net::FrameSeal &rx) {
         Sealed f = seal_frame(tx, 5000, 1);
         f.tag[15] ^= 1;
         return open_frame(rx, f);
       }},
      {"replay",
       [](net::FrameSeal &tx, net::FrameSeal &rx) {
         Sealed f = seal_frame(tx, 100, 1);
         EXPECT_TRUE(open_frame(rx, f).ok());
         return open_frame(rx, f);
       }},
      {"reorder",
       [](net::FrameSeal &tx, net::FrameSeal &rx) {
         Sealed a = seal_frame(tx, 100, 1), b = seal_frame(tx, 100, 2);
         (void)a;
         return open_frame(rx, b);
       }},
      {"own direction",
       [](net::FrameSeal &tx, net::FrameSeal &) { return open_frame(tx, seal_frame(tx, 100, 1)); }},
  };
  for (const Case &c : cases) {
    auto tx = seal_of(1, 2), rx = seal_of(2, 1);
    Status st = c.run(*tx, *rx);
    EXPECT_EQ(st.code(), WCCL_ERR_PROTOCOL) << c.what << ": " << st.to_string();
  }
}

TEST(FrameSeal, BothEndsMoveToTheNextKeyAfterTheSameFrame) {
  // Rekeying every 1000 bytes: frames 0-3 (1200 bytes) are under the first key, the rest under
  // later ones; the receiver follows, and a sender that never rekeys shows the key did change.
  auto tx = seal_of(1, 2, 1000), rx = seal_of(2, 1, 1000), same_key = seal_of(1, 2);
  for (uint32_t i = 0; i < 12; ++i) {
    Sealed f = seal_frame(*tx, 300, i), g = seal_frame(*same_key, 300, i);
    EXPECT_EQ(std::memcmp(f.tag, g.tag, sizeof(f.tag)) == 0, i < 4) << "frame " << i;
    ASSERT_TRUE(open_frame(*rx, f).ok()) << "frame " << i;
  }
}

// A relay between a client and the server that flips one bit of the client's bytes at `at`
// (counted over each connection from its first byte), like an attacker on the path.
class FlippingRelay {
 public:
  FlippingRelay(int server_port, size_t at) : server_port_(server_port), at_(at) {
    listen_fd_ = loopback_listener(&port_);
    EXPECT_GE(listen_fd_, 0);
    thread_ = std::thread([this] { run(); });
  }
  ~FlippingRelay() {
    stop_ = true;
    thread_.join();
    close(listen_fd_);
  }
  int port() const { return port_; }
  bool flipped() const { return flipped_; }

 private:
  void run() {
    std::vector<pollfd> fds;  // pairs: [2k] client side, [2k+1] server side
    std::vector<size_t> from_client;
    char buf[65536];
    while (!stop_) {
      std::vector<pollfd> all = fds;
      all.push_back({listen_fd_, POLLIN, 0});
      if (poll(all.data(), all.size(), 50) <= 0) continue;
      if (all.back().revents & POLLIN) {
        const int c = accept(listen_fd_, nullptr, nullptr);
        const int s = connect_loopback(server_port_);
        if (c < 0 || s < 0) return;
        fds.push_back({c, POLLIN, 0});
        fds.push_back({s, POLLIN, 0});
        from_client.push_back(0);
      }
      for (size_t i = 0; i + 1 < all.size(); ++i) {  // the pairs polled (not one just accepted)
        if (fds[i].fd < 0 || !(all[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
        const int to = fds[i ^ 1].fd;
        if (n <= 0) {  // one side ended: end both
          close(fds[i].fd);
          close(to);
          fds[i].fd = fds[i ^ 1].fd = -1;
          continue;
        }
        if (i % 2 == 0) {
          size_t &count = from_client[i / 2];
          if (!flipped_ && count <= at_ && at_ < count + static_cast<size_t>(n)) {
            buf[at_ - count] ^= 0x10;
            flipped_ = true;
          }
          count += static_cast<size_t>(n);
        }
        for (ssize_t off = 0; off < n;) {
          const ssize_t w = write(to, buf + off, static_cast<size_t>(n - off));
          if (w <= 0) break;
          off += w;
        }
      }
    }
    for (const pollfd &p : fds) {
      if (p.fd >= 0) close(p.fd);
    }
  }
  int server_port_;
  size_t at_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> flipped_{false};
  std::thread thread_;
};

TEST_F(TlsTest, ABitChangedOnThePathFailsTheLinkInsteadOfDeliveringIt) {
  // One stream, so that the bit lands in the one 1 MiB data frame's payload, well after the
  // handshake and the hello.
  FlippingRelay relay(port_, 600000);
  auto cf = pki_.node("client-a");
  Config cfg = make_config("client-a", &cf);
  ASSERT_TRUE(cfg.set("streams", "1").ok());
  auto client = net::Transport::create(cfg);
  ASSERT_TRUE(client.ok());
  auto link = client.value()->connect_sync("127.0.0.1:" + std::to_string(relay.port()));
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  auto accepted = acceptor_.wait();
  ASSERT_NE(accepted, nullptr);
  const size_t n = 1u << 20;
  std::vector<uint8_t> src(n), dst(n);
  fill_pattern(src.data(), n, 5);
  Done sent;
  ASSERT_TRUE(link.value()->send({0, 0, 1}, src.data(), n, sent.callback()).ok());
  const Status got = net::recv_sync(*accepted, {0, 0, 1}, dst.data(), n, 10s);
  EXPECT_TRUE(relay.flipped());
  EXPECT_EQ(got.code(), WCCL_ERR_PROTOCOL) << got.to_string();
  EXPECT_NE(got.message().find("did not authenticate"), std::string::npos) << got.message();
  expect_server_healthy(1);
}

TEST(TlsConfig, MissingOrBadFilesAreNamed) {
  Pki pki;
  auto nf = pki.node("n");
  Config cfg = make_config("n", &nf);
  ASSERT_TRUE(cfg.set("tls_key", "").ok());
  auto t = net::Transport::create(cfg);
  EXPECT_EQ(t.status().code(), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(t.status().message().find("tls_key"), std::string::npos) << t.status().message();

  ASSERT_TRUE(cfg.set("tls_key", pki.dir() + "/missing.key").ok());
  t = net::Transport::create(cfg);
  EXPECT_EQ(t.status().code(), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(t.status().message().find("missing.key"), std::string::npos) << t.status().message();

  auto other = pki.node("other");
  ASSERT_TRUE(cfg.set("tls_key", other.key).ok());  // a key that is not the certificate's
  t = net::Transport::create(cfg);
  EXPECT_EQ(t.status().code(), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(t.status().message().find("match"), std::string::npos) << t.status().message();
}

}  // namespace
}  // namespace wccl::test
