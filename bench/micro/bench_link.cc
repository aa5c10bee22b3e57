// Link throughput on 127.0.0.1 next to a raw socket-to-socket copy measured in the same run.
//
//   BM_RawTcp          one TCP connection, a writer thread and a reader thread, 1 MiB writes
//   BM_Link/tls/streams  a wccl link between two transports of this process (two loop threads)
//
// Each iteration moves one 256 MiB message; buffers are touched before timing. bench/link_ratios.py
// runs this and prints the ratios recorded in docs/perf.md.
#include <benchmark/benchmark.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/config.h"
#include "devkit/certgen.h"
#include "net/transport.h"

namespace {

using namespace wccl;
constexpr size_t kMessage = 256u << 20;

std::vector<uint8_t> &source() {
  static std::vector<uint8_t> buf(kMessage, 0x5a);
  return buf;
}
std::vector<uint8_t> &sink() {
  static std::vector<uint8_t> buf(kMessage, 0);
  return buf;
}

void BM_RawTcp(benchmark::State &state) {
  const int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(lfd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr));
  listen(lfd, 1);
  socklen_t len = sizeof(addr);
  getsockname(lfd, reinterpret_cast<sockaddr *>(&addr), &len);
  const int wfd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(wfd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) != 0) {
    state.SkipWithError("connect failed");
    return;
  }
  const int rfd = accept(lfd, nullptr, nullptr);
  const int one = 1;
  setsockopt(wfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const uint8_t *src = source().data();
  uint8_t *dst = sink().data();
  for (auto _ : state) {
    std::thread writer([&] {
      for (size_t off = 0; off < kMessage;) {
        const ssize_t n = write(wfd, src + off, std::min<size_t>(1u << 20, kMessage - off));
        if (n <= 0) return;
        off += static_cast<size_t>(n);
      }
    });
    for (size_t off = 0; off < kMessage;) {
      const ssize_t n = read(rfd, dst + off, kMessage - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    writer.join();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kMessage));
  close(wfd);
  close(rfd);
  close(lfd);
}
BENCHMARK(BM_RawTcp)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

void BM_Link(benchmark::State &state) {
  const bool tls = state.range(0) != 0;
  const int streams = static_cast<int>(state.range(1));
  std::unique_ptr<devkit::TempDir> dir;
  devkit::NodeFiles sf, cf;
  if (tls) {
    dir = std::make_unique<devkit::TempDir>("wccl-bench");
    devkit::Authority ca(dir->path(), "bench");
    sf = ca.issue("server");
    cf = ca.issue("client");
  }
  auto make = [&](const std::string &name, const devkit::NodeFiles &f) {
    Config cfg = Config::defaults();
    (void)cfg.set("name", name);
    (void)cfg.set("streams", std::to_string(streams));
    (void)cfg.set("tls", tls ? "on" : "off");
    (void)cfg.set("log_level", "error");
    if (tls) {
      (void)cfg.set("tls_cert", f.cert);
      (void)cfg.set("tls_key", f.key);
      (void)cfg.set("tls_ca", f.ca);
    }
    return net::Transport::create(cfg);
  };
  auto server = make("server", sf), client = make("client", cf);
  if (!server.ok() || !client.ok()) {
    state.SkipWithError("transport creation failed");
    return;
  }
  std::mutex mu;
  std::condition_variable cv;
  std::shared_ptr<net::Link> accepted;
  auto port = server.value()->listen("127.0.0.1:0", [&](std::shared_ptr<net::Link> l) {
    std::lock_guard<std::mutex> lock(mu);
    accepted = std::move(l);
    cv.notify_all();
  });
  auto link = client.value()->connect_sync("127.0.0.1:" + std::to_string(port.value()));
  if (!link.ok()) {
    state.SkipWithError(link.status().to_string().c_str());
    return;
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return accepted != nullptr; });
  }
  uint32_t tag = 0;
  for (auto _ : state) {
    ++tag;
    Status recv_status;
    std::thread receiver([&] {
      recv_status =
          net::recv_sync(*accepted, {0, 0, tag}, sink().data(), kMessage, std::chrono::minutes(1));
    });
    Status st = net::send_sync(*link.value(), {0, 0, tag}, source().data(), kMessage,
                               std::chrono::minutes(1));
    receiver.join();
    if (!st.ok() || !recv_status.ok()) {
      state.SkipWithError((st.ok() ? recv_status : st).to_string().c_str());
      break;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kMessage));
}
BENCHMARK(BM_Link)
    ->ArgNames({"tls", "streams"})
    ->Args({0, 1})
    ->Args({0, 4})
    ->Args({1, 1})
    ->Args({1, 4})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
