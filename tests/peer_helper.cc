// A peer in its own process, for tests that kill or freeze one end of a link.
// Usage: wccl-test-peer ADDRESS FIRST_BYTES SECOND_BYTES
// Configured from WCCL_* environment variables. Connects to ADDRESS, sends message (0,0,1) of
// FIRST_BYTES (pattern seed 1) and message (0,0,2) of SECOND_BYTES (seed 2), waits for both.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "net/transport.h"
#include "support.h"

int main(int argc, char **argv) {
  using namespace wccl;
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s ADDRESS FIRST_BYTES SECOND_BYTES\n", argv[0]);
    return 2;
  }
  Result<Config> cfg = Config::from_env();
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", cfg.status().to_string().c_str());
    return 2;
  }
  auto transport = net::Transport::create(cfg.value());
  if (!transport.ok()) {
    std::fprintf(stderr, "%s\n", transport.status().to_string().c_str());
    return 1;
  }
  auto link = transport.value()->connect_sync(argv[1]);
  if (!link.ok()) {
    std::fprintf(stderr, "%s\n", link.status().to_string().c_str());
    return 1;
  }
  const size_t first = std::strtoull(argv[2], nullptr, 10),
               second = std::strtoull(argv[3], nullptr, 10);
  std::vector<uint8_t> a(first), b(second);
  test::fill_pattern(a.data(), a.size(), 1);
  test::fill_pattern(b.data(), b.size(), 2);
  test::Done da, db;
  Status st = link.value()->send({0, 0, 1}, a.data(), a.size(), da.callback());
  if (st.ok()) st = link.value()->send({0, 0, 2}, b.data(), b.size(), db.callback());
  if (st.ok()) st = da.wait(std::chrono::minutes(2));
  if (st.ok()) st = db.wait(std::chrono::minutes(2));
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}
