// Codec kernels per instruction-set tier, in GB/s of F32 input (10^9 bytes), next to memcpy of
// the same bytes in the same run. Buffers of 256 Ki floats (1 MiB) stay in cache and measure the
// kernels; 16 Mi floats (64 MiB) measure them against memory bandwidth. The GPU kernels follow
// where a GPU is present.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "codec/hash.h"
#include "codec/kernels.h"
#include "codec/wire.h"
#include "gpu/kernels.h"

namespace {

using wccl::codec::Dtype;
using wccl::codec::Kernels;
using wccl::codec::RedOp;
using wccl::codec::Tier;
using wccl::codec::Wire;
using wccl::codec::WireKind;

// TOPK at its default keep (8 of 256) and at 2 and 32, the ends of what trainers keep.
const Wire kBlockWires[] = {WireKind::kInt8, WireKind::kInt4, WireKind::kInt2, WireKind::kFp8,
                            WireKind::kTopk, Wire::topk(2),   Wire::topk(32)};

// A row's wire: its name, and TOPK's keep where it is not the default ("topk2").
std::string row_name(Wire w) {
  std::string name = wccl::codec::wire_name(w);
  if (w != Wire(WireKind::kTopk) && w.kind == WireKind::kTopk) name += std::to_string(w.keep);
  return name;
}

std::vector<float> random_floats(size_t n) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float &x : v) x = d(rng);
  return v;
}

void set_rate(benchmark::State &state, size_t n) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * sizeof(float)));
}

void BM_memcpy(benchmark::State &state) {
  const auto n = static_cast<size_t>(state.range(0));
  const std::vector<float> src = random_floats(n);
  std::vector<float> dst(n);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n * 4);
    benchmark::ClobberMemory();
  }
  set_rate(state, n);
}

// State sync's tensor hash (the description of a member's state, and the check of what it
// received).
void BM_tensor_hash(benchmark::State &state) {
  const auto n = static_cast<size_t>(state.range(0));
  const std::vector<float> src = random_floats(n);
  for (auto _ : state) benchmark::DoNotOptimize(wccl::codec::tensor_hash(src.data(), n * 4));
  set_rate(state, n);
}

// The block-quantized wires (INT8, INT4, INT2, FP8, TOPK), each as its own row per tier.
void BM_block_encode(benchmark::State &state, const Kernels *k, Wire w) {
  const auto n = static_cast<size_t>(state.range(0));
  const std::vector<float> src = random_floats(n);
  std::vector<uint8_t> dst(wccl::codec::wire_size(w, n));
  const wccl::codec::BlockCodec &c = *wccl::codec::block_codec(*k, w);
  const wccl::codec::BlockFormat f = *wccl::codec::block_format(w);
  for (auto _ : state) {
    benchmark::DoNotOptimize(c.encode(f, src.data(), n, dst.data()));
    benchmark::ClobberMemory();
  }
  set_rate(state, n);
}

void BM_block_decode_add(benchmark::State &state, const Kernels *k, Wire w) {
  const auto n = static_cast<size_t>(state.range(0));
  const std::vector<float> src = random_floats(n);
  std::vector<uint8_t> enc(wccl::codec::wire_size(w, n));
  const wccl::codec::BlockCodec &c = *wccl::codec::block_codec(*k, w);
  const wccl::codec::BlockFormat f = *wccl::codec::block_format(w);
  c.encode(f, src.data(), n, enc.data());
  std::vector<float> acc = random_floats(n);
  for (auto _ : state) {
    c.decode_add(f, enc.data(), n, acc.data(), acc.data());
    benchmark::ClobberMemory();
  }
  set_rate(state, n);
}

void BM_block_decode(benchmark::State &state, const Kernels *k, Wire w) {
  const auto n = static_cast<size_t>(state.range(0));
  const std::vector<float> src = random_floats(n);
  std::vector<uint8_t> enc(wccl::codec::wire_size(w, n));
  const wccl::codec::BlockCodec &c = *wccl::codec::block_codec(*k, w);
  const wccl::codec::BlockFormat f = *wccl::codec::block_format(w);
  c.encode(f, src.data(), n, enc.data());
  std::vector<float> out(n);
  for (auto _ : state) {
    c.decode(f, enc.data(), n, out.data());
    benchmark::ClobberMemory();
  }
  set_rate(state, n);
}

void BM_f16_encode(benchmark::State &state, const Kernels *k) {
  const auto n = static_cast<size_t>(state.range(0));
  const std::vector<float> src = random_floats(n);
  std::vector<uint8_t> dst(2 * n);
  for (auto _ : state) {
    k->f16_encode(src.data(), n, dst.data());
    benchmark::ClobberMemory();
  }
  set_rate(state, n);
}

void BM_bf16_encode(benchmark::State &state, const Kernels *k) {
  const auto n = static_cast<size_t>(state.range(0));
  const std::vector<float> src = random_floats(n);
  std::vector<uint8_t> dst(2 * n);
  for (auto _ : state) {
    k->bf16_encode(src.data(), n, dst.data());
    benchmark::ClobberMemory();
  }
  set_rate(state, n);
}

void BM_sum_f32(benchmark::State &state, const Kernels *k) {
  const auto n = static_cast<size_t>(state.range(0));
  const std::vector<float> src = random_floats(n);
  std::vector<float> acc = random_floats(n);
  for (auto _ : state) {
    k->reduce_into(Dtype::kF32, RedOp::kSum, acc.data(), acc.data(), src.data(), n);
    benchmark::ClobberMemory();
  }
  set_rate(state, n);
}

void BM_sum_bf16(benchmark::State &state, const Kernels *k) {
  const auto n = static_cast<size_t>(state.range(0));
  std::vector<uint16_t> src(n, 0x3f80), acc(n, 0x3f00);
  for (auto _ : state) {
    k->reduce_into(Dtype::kBF16, RedOp::kSum, acc.data(), acc.data(), src.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * 2));
}

// GPU kernels (lib/gpu/kernels.h) on 1 GiB of F32 on the device, registered only where a GPU is
// present. Ten launches per iteration, then a wait for the stream; block_encode also waits for
// its own error check at each call, which this figure includes.
constexpr int kGpuLaunches = 10;

template <typename Launch>
void gpu_run(benchmark::State &state, size_t n, Launch launch) {
  for (auto _ : state) {
    for (int i = 0; i < kGpuLaunches; ++i) {
      if (!launch().ok()) state.SkipWithError("kernel failed");
    }
    if (!wccl::gpu::synchronize(nullptr).ok()) state.SkipWithError("synchronize failed");
  }
  state.SetBytesProcessed(
      static_cast<int64_t>(state.iterations() * kGpuLaunches * n * sizeof(float)));
}

struct DeviceFloats {
  DeviceFloats(size_t count, Wire w) : n(count) {
    static std::vector<float>
        host;  // drawn once: Google Benchmark builds this for every run of a row
    if (host.size() != n) host = random_floats(n);
    ok =
        wccl::gpu::alloc(&x, n * 4).ok() && wccl::gpu::copy(x, host.data(), n * 4).ok() &&
        wccl::gpu::alloc(&acc, n * 4).ok() && wccl::gpu::copy(acc, host.data(), n * 4).ok() &&
        wccl::gpu::alloc(&enc, wccl::codec::wire_size(w, n)).ok() &&
        wccl::gpu::block_encode(w, static_cast<float *>(x), n, static_cast<uint8_t *>(enc), nullptr)
            .ok();
  }
  ~DeviceFloats() {
    wccl::gpu::free(x);
    wccl::gpu::free(acc);
    wccl::gpu::free(enc);
  }
  size_t n;
  void *x = nullptr, *acc = nullptr, *enc = nullptr;
  bool ok = false;
};

void BM_gpu_block_encode(benchmark::State &state, Wire w) {
  DeviceFloats d(static_cast<size_t>(state.range(0)), w);
  if (!d.ok) return state.SkipWithError("device setup failed");
  gpu_run(state, d.n, [&] {
    return wccl::gpu::block_encode(w, static_cast<float *>(d.x), d.n, static_cast<uint8_t *>(d.enc),
                                   nullptr);
  });
}

void BM_gpu_block_decode_add(benchmark::State &state, Wire w) {
  DeviceFloats d(static_cast<size_t>(state.range(0)), w);
  if (!d.ok) return state.SkipWithError("device setup failed");
  gpu_run(state, d.n, [&] {
    return wccl::gpu::block_decode_add(w, static_cast<uint8_t *>(d.enc), d.n,
                                       static_cast<float *>(d.acc), static_cast<float *>(d.acc),
                                       nullptr);
  });
}

void BM_gpu_copy(benchmark::State &state) {  // device-to-device copy of the F32 bytes, for scale
  DeviceFloats d(static_cast<size_t>(state.range(0)), WireKind::kInt8);
  if (!d.ok) return state.SkipWithError("device setup failed");
  gpu_run(state, d.n, [&] { return wccl::gpu::copy(d.acc, d.x, d.n * 4); });
}

const int kSizes[] = {256 << 10, 16 << 20};

int register_all() {
  for (int n : kSizes) benchmark::RegisterBenchmark("memcpy", BM_memcpy)->Arg(n);
  for (int n : kSizes) benchmark::RegisterBenchmark("tensor_hash", BM_tensor_hash)->Arg(n);
  for (Tier t : wccl::codec::kTiers) {
    const Kernels *k = wccl::codec::kernels_for(t);
    if (k == nullptr) continue;
    const std::string tier = k->name;
    for (int n : kSizes) {
      for (Wire w : kBlockWires) {
        const std::string wire = row_name(w);
        benchmark::RegisterBenchmark((wire + "_encode/" + tier).c_str(), BM_block_encode, k, w)
            ->Arg(n);
        benchmark::RegisterBenchmark((wire + "_decode_add/" + tier).c_str(), BM_block_decode_add, k,
                                     w)
            ->Arg(n);
        benchmark::RegisterBenchmark((wire + "_decode/" + tier).c_str(), BM_block_decode, k, w)
            ->Arg(n);
      }
      benchmark::RegisterBenchmark(("f16_encode/" + tier).c_str(), BM_f16_encode, k)->Arg(n);
      benchmark::RegisterBenchmark(("bf16_encode/" + tier).c_str(), BM_bf16_encode, k)->Arg(n);
      benchmark::RegisterBenchmark(("sum_f32/" + tier).c_str(), BM_sum_f32, k)->Arg(n);
      benchmark::RegisterBenchmark(("sum_bf16/" + tier).c_str(), BM_sum_bf16, k)->Arg(n);
    }
  }
  if (wccl::gpu::available()) {
    const int n = 256 << 20;
    benchmark::RegisterBenchmark("gpu_copy", BM_gpu_copy)->Arg(n)->UseRealTime();
    for (Wire w : kBlockWires) {
      const std::string wire = row_name(w);
      benchmark::RegisterBenchmark(("gpu_" + wire + "_encode").c_str(), BM_gpu_block_encode, w)
          ->Arg(n)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("gpu_" + wire + "_decode_add").c_str(), BM_gpu_block_decode_add,
                                   w)
          ->Arg(n)
          ->UseRealTime();
    }
  }
  return 0;
}
const int kRegistered = register_all();

}  // namespace

BENCHMARK_MAIN();
