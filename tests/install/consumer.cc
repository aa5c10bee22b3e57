// A C++ program built the way a user builds against an installed wccl (tests/install/check.sh):
// with CMake's find_package(wccl CONFIG) and with pkg-config. It starts a coordinator, joins three
// peers of one group from threads over loopback and checks their all-reduce's sums.
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "wccl/wccl.h"

namespace {

constexpr int kPeers = 3;
constexpr size_t kCount = 1 << 16;

bool ok(wccl_result_t r, const char *what) {
  if (r == WCCL_OK) return true;
  std::fprintf(stderr, "%s: %s (%s)\n", what, wccl_result_name(r), wccl_last_error());
  return false;
}

// One peer: join, all-reduce (sum of every rank's rank + 1 at each element), check, leave.
bool run_peer(int port) {
  wccl_config_t *cfg = nullptr;
  if (!ok(wccl_config_create(&cfg), "config")) return false;
  const std::string coordinator = "127.0.0.1:" + std::to_string(port);
  bool good = ok(wccl_config_set(cfg, "coordinator", coordinator.c_str()), "coordinator") &&
              ok(wccl_config_set(cfg, "listen", "127.0.0.1:0"), "listen") &&
              ok(wccl_config_set(cfg, "tls", "off"), "tls");
  wccl_comm_t *comm = nullptr;
  good = good && ok(wccl_comm_join(&comm, cfg), "join");
  wccl_config_destroy(cfg);
  if (!good) return false;
  std::vector<float> data(kCount, static_cast<float>(wccl_comm_rank(comm) + 1));
  good = ok(wccl_allreduce(data.data(), data.data(), kCount, WCCL_F32, WCCL_SUM, comm, nullptr),
            "allreduce");
  const float expected = kPeers * (kPeers + 1) / 2.0f;
  for (size_t i = 0; good && i < kCount; ++i) {
    if (data[i] != expected) {
      std::fprintf(stderr, "element %zu is %g, not %g\n", i, data[i], expected);
      good = false;
    }
  }
  good = ok(wccl_comm_leave(comm), "leave") && good;
  wccl_comm_destroy(comm);
  return good;
}

}  // namespace

int main() {
  wccl_config_t *cfg = nullptr;
  if (!ok(wccl_config_create(&cfg), "config")) return 1;
  wccl_coord_t *coord = nullptr;
  const bool started = ok(wccl_config_set(cfg, "listen", "127.0.0.1:0"), "listen") &&
                       ok(wccl_config_set(cfg, "tls", "off"), "tls") &&
                       ok(wccl_config_set(cfg, "min_peers", "3"), "min_peers") &&
                       ok(wccl_coord_start(&coord, cfg), "coordinator");
  wccl_config_destroy(cfg);
  if (!started) return 1;
  std::vector<std::thread> peers;
  bool results[kPeers] = {};
  for (int i = 0; i < kPeers; ++i) {
    peers.emplace_back(
        [&results, i, port = wccl_coord_port(coord)] { results[i] = run_peer(port); });
  }
  for (std::thread &t : peers) t.join();
  wccl_coord_stop(coord);
  for (bool r : results) {
    if (!r) return 1;
  }
  std::printf("wccl %s: %d peers all-reduced %zu floats\n", wccl_version(), kPeers, kCount);
  return 0;
}
