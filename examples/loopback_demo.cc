// wccl-loopback-demo: two processes on 127.0.0.1 joined by one wccl link (TLS 1.3 with mutual
// certificates by default, made for the run), moving messages of growing size and printing the
// bandwidth of each size. Every size's last message is checked byte for byte.
//
//   wccl-loopback-demo [--tls on|off] [--streams N] [--min BYTES] [--max BYTES] [--iters N]
//
// Other WCCL_* environment variables (frame_bytes, sock_buf_bytes, log_level...) apply as usual.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "certgen.h"
#include "core/config.h"
#include "net/transport.h"
#include "pattern.h"

namespace {

using namespace wccl;
using Clock = std::chrono::steady_clock;
constexpr auto kOpTimeout = std::chrono::minutes(2);

struct Args {
  bool tls = true;
  int streams = 0;  // 0: from the configuration (default 4)
  size_t min_bytes = 1 << 20;
  size_t max_bytes = 256 << 20;
  int iters = 0;  // 0: enough to move about 1 GiB per size, at least 3
};

int usage(const char *argv0) {
  std::fprintf(stderr, "usage: %s [--tls on|off] [--streams N] [--min BYTES] [--max BYTES] [--iters N]\n", argv0);
  return 2;
}

bool parse(int argc, char **argv, Args *a) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) return false;
    const char *v = argv[++i];
    if (k == "--tls" && (std::strcmp(v, "on") == 0 || std::strcmp(v, "off") == 0)) {
      a->tls = std::strcmp(v, "on") == 0;
    } else if (k == "--streams") {
      a->streams = std::atoi(v);
    } else if (k == "--min") {
      a->min_bytes = std::strtoull(v, nullptr, 10);
    } else if (k == "--max") {
      a->max_bytes = std::strtoull(v, nullptr, 10);
    } else if (k == "--iters") {
      a->iters = std::atoi(v);
    } else {
      return false;
    }
  }
  return a->min_bytes > 0 && a->min_bytes <= a->max_bytes && a->streams >= 0 && a->iters >= 0;
}

std::vector<size_t> sizes(const Args &a) {
  std::vector<size_t> out;
  for (size_t s = a.min_bytes; s <= a.max_bytes; s *= 4) out.push_back(s);
  return out;
}

int iters_for(const Args &a, size_t size) {
  if (a.iters > 0) return a.iters;
  const size_t n = (size_t{1} << 30) / size;
  return n < 3 ? 3 : static_cast<int>(n > 200 ? 200 : n);
}

Result<Config> node_config(const Args &a, const std::string &name, const devkit::NodeFiles *files) {
  Result<Config> cfg = Config::from_env();
  if (!cfg.ok()) return cfg;
  WCCL_RETURN_IF_ERROR(cfg->set("name", name));
  WCCL_RETURN_IF_ERROR(cfg->set("tls", a.tls ? "on" : "off"));
  if (a.streams > 0) WCCL_RETURN_IF_ERROR(cfg->set("streams", std::to_string(a.streams)));
  if (files != nullptr) {
    WCCL_RETURN_IF_ERROR(cfg->set("tls_cert", files->cert));
    WCCL_RETURN_IF_ERROR(cfg->set("tls_key", files->key));
    WCCL_RETURN_IF_ERROR(cfg->set("tls_ca", files->ca));
  }
  return cfg;
}

// The sending process: for each size, waits for the receiver's "go", then sends its messages.
int run_sender(const Args &a, const Config &cfg, int port_fd) {
  int port = 0;
  if (read(port_fd, &port, sizeof(port)) != sizeof(port) || port <= 0) return 1;  // receiver failed
  auto transport = net::Transport::create(cfg);
  if (!transport.ok()) {
    std::fprintf(stderr, "sender: %s\n", transport.status().to_string().c_str());
    return 1;
  }
  auto link = transport.value()->connect_sync("127.0.0.1:" + std::to_string(port));
  if (!link.ok()) {
    std::fprintf(stderr, "sender: %s\n", link.status().to_string().c_str());
    return 1;
  }
  std::vector<uint8_t> buf(a.max_bytes);
  uint8_t go = 0;
  const std::vector<size_t> all = sizes(a);
  for (uint64_t si = 0; si < all.size(); ++si) {
    devkit::fill_pattern(buf.data(), all[si], si + 1);
    Status st = net::recv_sync(*link.value(), {1, si, 0}, &go, 1, kOpTimeout);
    for (int i = 0; st.ok() && i < iters_for(a, all[si]); ++i) {
      st = net::send_sync(*link.value(), {0, si, static_cast<uint32_t>(i)}, buf.data(), all[si], kOpTimeout);
    }
    if (!st.ok()) {
      std::fprintf(stderr, "sender: %s\n", st.to_string().c_str());
      return 1;
    }
  }
  return 0;
}

std::string human(size_t bytes) {
  if (bytes >= (1u << 30) && bytes % (1u << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

// The receiving process: listens, then times each size from its "go" to its last message.
int run_receiver(const Args &a, const Config &cfg, int port_fd) {
  auto transport = net::Transport::create(cfg);
  int port = 0;
  std::shared_ptr<net::Link> link;
  std::mutex mu;
  std::condition_variable cv;
  if (transport.ok()) {
    auto p = transport.value()->listen("127.0.0.1:0", [&](std::shared_ptr<net::Link> l) {
      std::lock_guard<std::mutex> lock(mu);
      link = std::move(l);
      cv.notify_all();
    });
    if (p.ok()) port = p.value();
    if (!p.ok()) std::fprintf(stderr, "receiver: %s\n", p.status().to_string().c_str());
  } else {
    std::fprintf(stderr, "receiver: %s\n", transport.status().to_string().c_str());
  }
  if (write(port_fd, &port, sizeof(port)) != sizeof(port) || port == 0) return 1;
  {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, transport.value()->connect_timeout() + std::chrono::seconds(5), [&] { return link != nullptr; })) {
      std::fprintf(stderr, "receiver: the sender did not connect\n");
      return 1;
    }
  }
  std::printf("wccl %s loopback demo: 2 processes on 127.0.0.1, one link of %d TCP stream(s), %s\n",
              wccl_version(), link->stream_count(),
              a.tls ? "TLS 1.3 with mutual certificate authentication" : "plaintext (tls=off)");
  if (a.tls) std::printf("peer certificate: %s\n", link->peer_subject().c_str());
  std::printf("%12s %7s %11s %9s %9s %7s\n", "size", "iters", "time(ms)", "GB/s", "Gbit/s", "check");
  std::vector<uint8_t> buf(a.max_bytes);
  std::memset(buf.data(), 0, buf.size());  // fault the pages in before timing
  const std::vector<size_t> all = sizes(a);
  uint8_t go = 1;
  int wrong_total = 0;
  for (uint64_t si = 0; si < all.size(); ++si) {
    const int iters = iters_for(a, all[si]);
    const auto t0 = Clock::now();
    Status st = net::send_sync(*link, {1, si, 0}, &go, 1, kOpTimeout);
    for (int i = 0; st.ok() && i < iters; ++i) {
      st = net::recv_sync(*link, {0, si, static_cast<uint32_t>(i)}, buf.data(), all[si], kOpTimeout);
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!st.ok()) {
      std::fprintf(stderr, "receiver: %s\n", st.to_string().c_str());
      return 1;
    }
    const bool good = devkit::check_pattern(buf.data(), all[si], si + 1) == all[si];
    wrong_total += good ? 0 : 1;
    const double gbps = static_cast<double>(all[si]) * iters / secs / 1e9;
    std::printf("%12s %7d %11.2f %9.3f %9.2f %7s\n", human(all[si]).c_str(), iters, secs * 1e3, gbps,
                gbps * 8, good ? "ok" : "WRONG");
    std::fflush(stdout);
  }
  std::printf("GB = 1e9 bytes; time from the receiver's go to its last message of that size.\n");
  return wrong_total == 0 ? 0 : 1;
}

int run(int argc, char **argv) {
  Args a;
  if (!parse(argc, argv, &a)) return usage(argv[0]);
  std::unique_ptr<devkit::TempDir> dir;
  devkit::NodeFiles recv_files, send_files;
  if (a.tls) {
    // Throwaway PKI for this run: one CA, one certificate per process.
    auto d = devkit::TempDir::create("wccl-demo");
    if (!d.ok()) return std::fprintf(stderr, "%s\n", d.status().to_string().c_str()), 1;
    dir = std::move(d).value();
    auto ca = devkit::Authority::create(dir->path(), "demo");
    if (!ca.ok()) return std::fprintf(stderr, "%s\n", ca.status().to_string().c_str()), 1;
    auto r = ca.value()->issue("receiver"), s = ca.value()->issue("sender");
    if (!r.ok() || !s.ok()) return std::fprintf(stderr, "cannot issue demo certificates\n"), 1;
    recv_files = r.value();
    send_files = s.value();
  }
  auto recv_cfg = node_config(a, "receiver", a.tls ? &recv_files : nullptr);
  auto send_cfg = node_config(a, "sender", a.tls ? &send_files : nullptr);
  if (!recv_cfg.ok() || !send_cfg.ok()) {
    std::fprintf(stderr, "%s\n", (recv_cfg.ok() ? send_cfg.status() : recv_cfg.status()).to_string().c_str());
    return 2;
  }
  int fds[2];
  if (pipe(fds) != 0) return 1;
  std::fflush(stdout);
  // Fork before either side starts a thread; the child sends, the parent receives and reports.
  const pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    close(fds[1]);
    _exit(run_sender(a, send_cfg.value(), fds[0]));
  }
  close(fds[0]);
  const int rc = run_receiver(a, recv_cfg.value(), fds[1]);
  close(fds[1]);
  int status = 0;
  waitpid(child, &status, 0);
  const bool child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!child_ok) std::fprintf(stderr, "the sending process failed\n");
  return rc == 0 && child_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "wccl-loopback-demo: %s\n", e.what());
    return 1;
  }
}
