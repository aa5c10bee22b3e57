// Helpers shared by the transport tests and the peer helper process.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/config.h"
#include "devkit/certgen.h"
#include "net/transport.h"
#include "pattern.h"

namespace wccl::test {

using namespace std::chrono_literals;

// A CA and certificates for a few node names, in a temporary directory.
class Pki {
 public:
  Pki();
  devkit::NodeFiles node(const std::string &name, int not_before_days = -1,
                         int not_after_days = 30);
  // A second, unrelated CA's node certificate (for wrong-CA tests).
  devkit::NodeFiles foreign_node(const std::string &name);
  const std::string &dir() const { return dir_->path(); }

 private:
  std::unique_ptr<devkit::TempDir> dir_;
  std::unique_ptr<devkit::Authority> ca_, other_ca_;
};

// A configuration for tests: short timeouts, the given name, TLS files when given.
Config make_config(const std::string &name, const devkit::NodeFiles *tls);

// A TCP socket listening on 127.0.0.1 at a port the kernel chose (*port); -1 on failure.
int loopback_listener(int *port);

// Collects the links a listener accepts.
class Acceptor {
 public:
  std::function<void(std::shared_ptr<net::Link>)> callback();
  // The next accepted link, or null after timeout.
  std::shared_ptr<net::Link> wait(std::chrono::milliseconds timeout = 10s);
  size_t count();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<net::Link>> links_;
  size_t taken_ = 0;
};

// Two transports in this process with a link between them.
struct LinkPair {
  std::unique_ptr<net::Transport> server, client;
  Acceptor acceptor;
  std::shared_ptr<net::Link> server_link, client_link;
};
// Fails the calling test (ASSERT-style, via ADD_FAILURE + null links) when the link cannot open.
void open_pair(LinkPair &pair, const Config &server_cfg, const Config &client_cfg);

struct DoneState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
};

// Completion a test thread can wait on.
class Done {
 public:
  net::Completion callback();
  // The status, or TIMEOUT if it did not complete in time.
  Status wait(std::chrono::milliseconds timeout = 30s);

 private:
  std::shared_ptr<DoneState> state_ = std::make_shared<DoneState>();
};

// The size of a test's large transfer: `full`, or less where WCCL_TEST_LARGE_BYTES caps it. The
// sanitizer runs in CI cap it: the same schedules and code paths, with fewer bytes to check.
size_t large_bytes(size_t full);

// A plain TCP socket connected to 127.0.0.1:port, reads timing out after 10 s (for hand-made
// peers that speak raw bytes). -1 (and a test failure) if it cannot connect.
int connect_loopback(int port);

// The wccl-coord daemon (WCCL_COORD_BIN, set by meson test) in its own process.
class CoordDaemon {
 public:
  // Starts it with these flags and reads the port it prints; port() is 0 if that failed.
  explicit CoordDaemon(std::vector<std::string> flags);
  ~CoordDaemon();  // SIGKILL if still running
  int port() const { return port_; }
  void kill_now();  // SIGKILL, reaped
  // SIGTERM, then its exit status once it exits; -1 if it is still running after `timeout`.
  int terminate(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace wccl::test
