// The operator endpoints' HTTP: the request parser (net/http.h) on its own, and the server
// (net/http_server.h) over loopback sockets.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "net/http.h"
#include "net/http_server.h"
#include "support.h"

namespace wccl::net {
namespace {

using namespace std::chrono_literals;
using State = HttpRequestParser::State;

HttpRequestParser parse(const std::string &text) {
  HttpRequestParser p;
  p.feed(text.data(), text.size());
  return p;
}

TEST(HttpParser, ParsesARequestWhateverTheSplit) {
  const std::string text =
      "GET /metrics?token=abc&x=1 HTTP/1.1\r\nHost: localhost\r\nAuthorization:  Bearer t0k \r\n"
      "Accept: */*\r\n\r\nGET /ignored HTTP/1.1\r\n\r\n";
  for (size_t split = 1; split <= text.size(); ++split) {
    HttpRequestParser p;
    State s = State::kReading;
    for (size_t i = 0; i < text.size() && s == State::kReading; i += split) {
      s = p.feed(text.data() + i, std::min(split, text.size() - i));
    }
    ASSERT_EQ(s, State::kComplete) << "split " << split;
    EXPECT_EQ(p.request().method, "GET");
    EXPECT_EQ(p.request().path, "/metrics");
    EXPECT_EQ(p.request().query, "token=abc&x=1");
    EXPECT_EQ(p.request().authorization, "Bearer t0k");
  }
}

TEST(HttpParser, TakesBareLineFeedsHeadAndLeadingEmptyLines) {
  HttpRequestParser p = parse("\r\n\nHEAD /status HTTP/1.0\nContent-Length: 0\n\n");
  ASSERT_EQ(p.state(), State::kComplete);
  EXPECT_EQ(p.request().method, "HEAD");
  EXPECT_EQ(p.request().path, "/status");
  EXPECT_EQ(p.request().query, "");
}

TEST(HttpParser, IncompleteHeadKeepsReading) {
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: x\r\n").state(), State::kReading);
  EXPECT_EQ(parse("GET / HTT").state(), State::kReading);
}

TEST(HttpParser, RefusesWhatItDoesNotServeWithTheRightStatus) {
  const struct {
    std::string text;
    int status;
  } cases[] = {
      {"GARBAGE\r\n\r\n", 400},
      {"GET  / HTTP/1.1\r\n\r\n", 400},
      {"GET http://x/ HTTP/1.1\r\n\r\n", 400},
      {"GET /a\x01 HTTP/1.1\r\n\r\n", 400},
      {"G(T / HTTP/1.1\r\n\r\n", 400},
      {std::string("GE\0T / HTTP/1.1\r\n\r\n", 19), 400},
      {std::string("GET / HTTP/1.1\r\nA\0: b\r\n\r\n", 25), 400},
      {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nA: b\x7f\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nAuthorization: a\r\nauthorization: b\r\n\r\n", 400},
      {"GET / FTP/1.1\r\n\r\n", 400},
      {"POST /metrics HTTP/1.1\r\n\r\n", 405},
      {"GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 413},
      {"GET /" + std::string(kMaxHttpTargetBytes, 'a') + " HTTP/1.1\r\n\r\n", 414},
      {"GET /" + std::string(kMaxHttpHeadBytes, 'a'), 414},
      {"GET / HTTP/1.1\r\nX: " + std::string(kMaxHttpHeadBytes, 'a') + "\r\n\r\n", 431},
      {"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501},
      {"GET / HTTP/2.0\r\n\r\n", 505},
  };
  for (const auto &c : cases) {
    HttpRequestParser p = parse(c.text);
    EXPECT_EQ(p.state(), State::kFailed) << c.text.substr(0, 60);
    EXPECT_EQ(p.error_status(), c.status) << c.text.substr(0, 60) << ": " << p.error();
    EXPECT_FALSE(p.error().empty());
  }
  std::string many = "GET / HTTP/1.1\r\n";
  for (size_t i = 0; i <= kMaxHttpHeaders; ++i) many += "A: b\r\n";
  EXPECT_EQ(parse(many + "\r\n").error_status(), 431);
}

TEST(HttpParser, TakesNoMoreOnceDecided) {
  HttpRequestParser p = parse("GARBAGE\r\n");
  ASSERT_EQ(p.state(), State::kFailed);
  EXPECT_EQ(p.feed("GET / HTTP/1.1\r\n\r\n", 18), State::kFailed);
}

TEST(HttpResponse, SaysItsLengthAndCloses) {
  EXPECT_EQ(http_response(200, "text/plain", "hi"),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\nhi");
  const std::string head = http_response(404, "text/plain", "gone", /*head_only=*/true, "X: y\r\n");
  EXPECT_EQ(head.substr(0, 24), "HTTP/1.1 404 Not Found\r\n");
  EXPECT_NE(
      head.find("Content-Length: 4\r\nCache-Control: no-store\r\nConnection: close\r\nX: y\r\n"
                "\r\n"),
      std::string::npos);
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n");
}

// Sends `data` on a new connection and reads until the server closes it.
std::string exchange(int port, const std::string &data) {
  const int fd = test::connect_loopback(port);
  if (fd < 0) return "connect failed";
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (!data.empty() && ::send(fd, data.data(), data.size(), MSG_NOSIGNAL) < 0) {
    ::close(fd);
    return "send failed";
  }
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void start(const std::string &token = "", std::chrono::milliseconds timeout = 10s) {
    auto s = HttpServer::start(
        "127.0.0.1:0", token, Logger(LogLevel::kError, "http-test"),
        [this](const HttpRequest &r) {
          ++handled_;
          HttpServer::Response res;
          res.body = "path=" + r.path + "\n";
          if (r.path == "/missing") res.status = 404;
          return res;
        },
        timeout);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    server_ = std::move(s).value();
  }
  std::unique_ptr<HttpServer> server_;
  std::atomic<int> handled_{0};
};

TEST_F(HttpServerTest, AnswersOneRequestAConnection) {
  start();
  const std::string got = exchange(server_->port(), "GET /hello?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(got.substr(0, 17), "HTTP/1.1 200 OK\r\n") << got;
  EXPECT_NE(got.find("\r\n\r\npath=/hello\n"), std::string::npos) << got;
  EXPECT_EQ(exchange(server_->port(), "GET /missing HTTP/1.1\r\n\r\n").substr(0, 12),
            "HTTP/1.1 404");
  const std::string head = exchange(server_->port(), "HEAD /hello HTTP/1.1\r\n\r\n");
  EXPECT_NE(head.find("Content-Length: 12\r\n"), std::string::npos) << head;
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n") << "no body after a HEAD";
  const std::string bad = exchange(server_->port(), "BREW /pot HTTP/1.1\r\n\r\n");
  EXPECT_EQ(bad.substr(0, 12), "HTTP/1.1 405") << bad;
  // Refused while the client still sends its body: the answer is not reset away.
  const std::string body = exchange(server_->port(),
                                    "GET /upload HTTP/1.1\r\nContent-Length: "
                                    "1000000\r\n\r\n" +
                                        std::string(1000000, 'x'));
  EXPECT_EQ(body.substr(0, 12), "HTTP/1.1 413") << body.substr(0, 100);
  EXPECT_EQ(handled_.load(), 3) << "a refused request never reaches the handler";
}

TEST_F(HttpServerTest, TheTokenComesAsABearerHeaderOrInTheQuery) {
  start("t0ken");
  EXPECT_EQ(exchange(server_->port(), "GET / HTTP/1.1\r\n\r\n").substr(0, 12), "HTTP/1.1 401");
  EXPECT_EQ(exchange(server_->port(), "GET / HTTP/1.1\r\nAuthorization: Bearer t0ke\r\n\r\n")
                .substr(0, 12),
            "HTTP/1.1 401");
  EXPECT_EQ(exchange(server_->port(), "GET /?token=t0kenX HTTP/1.1\r\n\r\n").substr(0, 12),
            "HTTP/1.1 401");
  EXPECT_EQ(exchange(server_->port(), "GET / HTTP/1.1\r\nAuthorization: Bearer t0ken\r\n\r\n")
                .substr(0, 12),
            "HTTP/1.1 200");
  EXPECT_EQ(exchange(server_->port(), "GET /s?a=b&token=t0ken HTTP/1.1\r\n\r\n").substr(0, 12),
            "HTTP/1.1 200");
  EXPECT_EQ(handled_.load(), 2);
}

TEST_F(HttpServerTest, ASlowClientGetsRequestTimeout) {
  start("", 300ms);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string got = exchange(server_->port(), "GET / HTTP/1.1\r\nHost:");
  EXPECT_EQ(got.substr(0, 12), "HTTP/1.1 408") << got;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

// A flood of connections that send nothing holds at most kMaxConnections; the rest are closed as
// they come, and once the flood is gone the server answers again.
TEST_F(HttpServerTest, AFloodOfIdleConnectionsIsBoundedAndPasses) {
  // Fewer than the listener's backlog of 128, so none waits for a SYN retry, and all are accepted
  // well within the timeout: every one past the limit finds the limit still full.
  constexpr int kFlood = 124;
  start("", 2s);
  std::vector<int> flood;
  for (int i = 0; i < kFlood; ++i) {
    const int fd = test::connect_loopback(server_->port());
    ASSERT_GE(fd, 0);
    flood.push_back(fd);
  }
  // Each connection past the limit is closed as it is accepted: a read sees its end without an
  // answer. The ones held get 408 once the timeout passes.
  std::vector<int> decided(flood.size(), -1);  // 0: closed without an answer, 1: answered
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  size_t open = flood.size();
  while (open > 0 && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < flood.size(); ++i) {
      if (decided[i] >= 0) continue;
      char c;
      const ssize_t n = ::recv(flood[i], &c, 1, MSG_DONTWAIT);
      if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {  // a reset is a close too
        decided[i] = n > 0 ? 1 : 0;
        --open;
      }
    }
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(open, 0u) << "every connection is closed or answered";
  const auto answered = std::count(decided.begin(), decided.end(), 1);
  EXPECT_EQ(answered, static_cast<long>(HttpServer::kMaxConnections));
  // With the flood gone, the server answers again.
  std::string after;
  for (int attempt = 0; attempt < 50 && after.empty(); ++attempt) {
    after = exchange(server_->port(), "GET /after HTTP/1.1\r\n\r\n");
    if (after.substr(0, 12) != "HTTP/1.1 200") {
      after.clear();
      std::this_thread::sleep_for(100ms);
    }
  }
  EXPECT_NE(after.find("path=/after"), std::string::npos);
  for (int fd : flood) ::close(fd);
}

TEST(HttpServerStart, NamesABadAddress) {
  const auto handler = [](const HttpRequest &) { return HttpServer::Response(); };
  const Logger log(LogLevel::kError, "http-test");
  auto bad = HttpServer::start("example.com:80", "", log, handler);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(bad.status().message().find("IP address"), std::string::npos);
  auto first = HttpServer::start("0", "", log, handler);  // PORT alone: 127.0.0.1
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto taken = HttpServer::start(std::to_string(first.value()->port()), "", log, handler);
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.status().code(), WCCL_ERR_IO);
}

}  // namespace
}  // namespace wccl::net
