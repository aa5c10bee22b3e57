// wccl-sync-peer: one member of the state-sync catch-up benchmark (bench/state_sync_catchup.sh),
// on the public C API. Every setting but its role comes from the WCCL_* environment (coordinator,
// listen, TLS files).
//
//   wccl-sync-peer donor|joiner BYTES [TENSORS]
//
// It joins, then calls wccl_state_sync once over TENSORS (default 16) F32 tensors of BYTES in all:
// a donor's hold weight-like values at revision 1 (about normal, mean 0, deviation 0.02: few
// distinct exponents, random mantissas), the joiner's are zeroed at revision 0, so the joiner
// receives everything, striped over every donor. The joiner checks what it received and prints one
// JSON line: tensor bytes, wire bytes received, seconds for the call, GB/s of tensor bytes (1e9),
// donors, revision. Config key sync_compress (WCCL_SYNC_COMPRESS) turns zstd on or off.
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "wccl/wccl.h"

namespace {

[[noreturn]] void die(const char *what, wccl_result_t r) {
  std::fprintf(stderr, "wccl-sync-peer: %s: %s (%s)\n", what, wccl_result_name(r),
               wccl_last_error());
  std::exit(1);
}

// Tensor t's values: a sum of four uniforms (xorshift64), scaled to deviation 0.02.
void weights(size_t t, float *out, size_t n) {
  uint64_t x = 0x9E3779B97F4A7C15ull * (t + 1);
  auto uniform = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return static_cast<float>(x >> 40) * (1.0f / 16777216.0f);
  };
  for (size_t i = 0; i < n; ++i)
    out[i] = (uniform() + uniform() + uniform() + uniform() - 2.0f) * 0.0346f;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 3 || (std::strcmp(argv[1], "donor") != 0 && std::strcmp(argv[1], "joiner") != 0)) {
    std::fprintf(stderr, "usage: wccl-sync-peer donor|joiner BYTES [TENSORS]\n");
    return 2;
  }
  const bool donor = std::strcmp(argv[1], "donor") == 0;
  const size_t bytes = std::strtoull(argv[2], nullptr, 10);
  const size_t ntensors = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 16;
  if (ntensors == 0 || bytes < ntensors * sizeof(float)) {
    std::fprintf(stderr, "wccl-sync-peer: BYTES must hold at least one float per tensor\n");
    return 2;
  }
  const size_t per = bytes / sizeof(float) / ntensors;
  std::vector<std::vector<float>> data(ntensors, std::vector<float>(per, 0.0f));
  std::vector<std::string> names;
  std::vector<wccl_tensor_t> tensors;
  for (size_t t = 0; t < ntensors; ++t) {
    if (donor) weights(t, data[t].data(), per);
    names.push_back("layer" + std::to_string(t) + ".weight");
  }
  for (size_t t = 0; t < ntensors; ++t)
    tensors.push_back({names[t].c_str(), data[t].data(), per, WCCL_F32, WCCL_DEVICE_HOST});

  wccl_config_t *cfg = nullptr;
  wccl_result_t r = wccl_config_create(&cfg);
  if (r != WCCL_OK) die("config", r);
  wccl_comm_t *comm = nullptr;
  if ((r = wccl_comm_join(&comm, cfg)) != WCCL_OK) die("join", r);
  wccl_config_destroy(cfg);
  uint64_t revision = donor ? 1 : 0;
  wccl_sync_stats_t stats;
  stats.size = sizeof(stats);
  const auto t0 = std::chrono::steady_clock::now();
  r = wccl_state_sync(comm, tensors.data(), tensors.size(), &revision, WCCL_SYNC_POPULAR, &stats);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r != WCCL_OK) die("state_sync", r);
  int status = 0;
  if (!donor) {
    size_t wrong = 0;
    std::vector<float> want(per);
    for (size_t t = 0; t < ntensors; ++t) {
      weights(t, want.data(), per);
      wrong += std::memcmp(want.data(), data[t].data(), per * sizeof(float)) != 0;
    }
    const double tensor_bytes = static_cast<double>(per * ntensors * sizeof(float));
    std::printf("{\"bytes\": %.0f, \"wire_bytes\": %" PRIu64
                ", \"seconds\": %.3f, \"GBps\": %.4f, \"donors\": %u, "
                "\"revision\": %" PRIu64 ", \"wrong_tensors\": %zu}\n",
                tensor_bytes, stats.bytes_received, s, tensor_bytes / s / 1e9, stats.sources,
                revision, wrong);
    status = wrong == 0 && revision == 1 ? 0 : 3;
  }
  if ((r = wccl_comm_leave(comm)) != WCCL_OK) die("leave", r);
  wccl_comm_destroy(comm);
  return status;
}
