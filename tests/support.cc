#include "support.h"

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

extern char **environ;

namespace wccl::test {

Pki::Pki()
    : dir_(std::make_unique<devkit::TempDir>("wccl-test-pki")),
      ca_(std::make_unique<devkit::Authority>(dir_->path(), "testca")),
      other_ca_(std::make_unique<devkit::Authority>(dir_->path(), "otherca")) {}

devkit::NodeFiles Pki::node(const std::string &name, int not_before_days, int not_after_days) {
  return ca_->issue(name, not_before_days, not_after_days);
}

devkit::NodeFiles Pki::foreign_node(const std::string &name) { return other_ca_->issue(name); }

int loopback_listener(int *port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 16) != 0 || getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

Config make_config(const std::string &name, const devkit::NodeFiles *tls) {
  Result<Config> env = Config::from_env();  // honours WCCL_LOG_LEVEL while debugging
  Config cfg = env.ok() ? env.value() : Config::defaults();
  EXPECT_TRUE(cfg.set("name", name).ok());
  EXPECT_TRUE(cfg.set("connect_timeout_ms", "5000").ok());
  EXPECT_TRUE(cfg.set("io_timeout_ms", "5000").ok());
  if (tls != nullptr) {
    EXPECT_TRUE(cfg.set("tls", "on").ok());
    EXPECT_TRUE(cfg.set("tls_cert", tls->cert).ok());
    EXPECT_TRUE(cfg.set("tls_key", tls->key).ok());
    EXPECT_TRUE(cfg.set("tls_ca", tls->ca).ok());
  } else {
    EXPECT_TRUE(cfg.set("tls", "off").ok());
  }
  return cfg;
}

std::function<void(std::shared_ptr<net::Link>)> Acceptor::callback() {
  return [this](std::shared_ptr<net::Link> link) {
    std::lock_guard<std::mutex> lock(mu_);
    links_.push_back(std::move(link));
    cv_.notify_all();
  };
}

std::shared_ptr<net::Link> Acceptor::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return links_.size() > taken_; })) return nullptr;
  return links_[taken_++];
}

size_t Acceptor::count() {
  std::lock_guard<std::mutex> lock(mu_);
  return links_.size();
}

void open_pair(LinkPair &pair, const Config &server_cfg, const Config &client_cfg) {
  auto server = net::Transport::create(server_cfg);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  pair.server = std::move(server).value();
  auto client = net::Transport::create(client_cfg);
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  pair.client = std::move(client).value();
  auto port = pair.server->listen("127.0.0.1:0", pair.acceptor.callback());
  ASSERT_TRUE(port.ok()) << port.status().to_string();
  auto link = pair.client->connect_sync("127.0.0.1:" + std::to_string(port.value()));
  ASSERT_TRUE(link.ok()) << link.status().to_string();
  pair.client_link = link.value();
  pair.server_link = pair.acceptor.wait();
  ASSERT_NE(pair.server_link, nullptr) << "the server did not report the link";
}

net::Completion Done::callback() {
  return [s = state_](Status st) {
    std::lock_guard<std::mutex> lock(s->mu);
    s->status = std::move(st);
    s->done = true;
    s->cv.notify_all();
  };
}

Status Done::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [&] { return state_->done; })) {
    return WCCL_ERROR(WCCL_ERR_TIMEOUT, "test wait of %lld ms expired",
                      static_cast<long long>(timeout.count()));
  }
  return state_->status;
}

size_t large_bytes(size_t full) {
  const char *cap = std::getenv("WCCL_TEST_LARGE_BYTES");
  return cap != nullptr ? std::min<size_t>(full, std::strtoull(cap, nullptr, 10)) : full;
}

int connect_loopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) != 0) {
    ADD_FAILURE() << "cannot connect to 127.0.0.1:" << port;
    close(fd);
    return -1;
  }
  return fd;
}

CoordDaemon::CoordDaemon(std::vector<std::string> flags) {
  const char *bin = std::getenv("WCCL_COORD_BIN");
  if (bin == nullptr) {
    ADD_FAILURE() << "WCCL_COORD_BIN is not set; run through meson test";
    return;
  }
  flags.insert(flags.begin(), bin);
  std::vector<char *> argv;
  for (auto &f : flags) argv.push_back(f.data());
  argv.push_back(nullptr);
  int out[2];
  if (pipe(out) != 0) return;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  EXPECT_EQ(posix_spawn(&pid_, bin, &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  // Its first line names the port.
  std::string line;
  pollfd pfd{out[0], POLLIN, 0};
  char c = 0;
  while (line.find('\n') == std::string::npos && poll(&pfd, 1, 10000) == 1 &&
         read(out[0], &c, 1) == 1)
    line += c;
  close(out[0]);
  const size_t at = line.find("listening on port ");
  EXPECT_NE(at, std::string::npos) << "wccl-coord said: " << line;
  if (at != std::string::npos) port_ = std::atoi(line.c_str() + at + 18);
}

CoordDaemon::~CoordDaemon() { kill_now(); }

void CoordDaemon::kill_now() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

int CoordDaemon::terminate(std::chrono::milliseconds timeout) {
  if (pid_ <= 0 || kill(pid_, SIGTERM) != 0) return -1;
  // Wait for the exit without polling: a pidfd becomes readable when the process ends.
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
  if (pidfd < 0) return -1;
  pollfd exited{pidfd, POLLIN, 0};
  const int ready = poll(&exited, 1, static_cast<int>(timeout.count()));
  close(pidfd);
  if (ready != 1) return -1;
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

}  // namespace wccl::test
