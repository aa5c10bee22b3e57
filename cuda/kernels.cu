// lib/gpu/kernels.h on CUDA. The arithmetic mirrors lib/codec/kernels_impl.cc step for step with
// explicitly rounded intrinsics (__fmul_rn, __fadd_rn, ...), which nvcc never fuses into a
// multiply-add, so every result matches the CPU kernels bit for bit.
#include <cuda_runtime.h>

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "codec/fp8.h"
#include "codec/half.h"
#include "codec/hash.h"
#include "codec/kernels.h"
#include "codec/wire.h"
#include "gpu/kernels.h"

namespace wccl::gpu {
namespace {

using codec::Dtype;
using codec::RedOp;
using codec::Wire;
using codec::WireKind;

constexpr int kPerThread =
    4;  // block encoders: one thread block per wire block, 4 elements a thread
constexpr int kThreads = 256;

Status cuda_status(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return Status();
  return WCCL_ERROR(WCCL_ERR_CUDA, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

cudaStream_t as_stream(void *s) { return static_cast<cudaStream_t>(s); }

unsigned grid_for(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535u * 32u ? blocks
                                                     : 65535u * 32u);  // grid-stride beyond
}

// --- Block-quantized wires: INT8, INT4, INT2, FP8 ------------------------------------------------

template <WireKind W>
constexpr const codec::BlockFormat &format() {
  if constexpr (W == WireKind::kInt8) return codec::kInt8Format;
  if constexpr (W == WireKind::kInt4) return codec::kInt4Format;
  if constexpr (W == WireKind::kInt2) return codec::kInt2Format;
  return codec::kFp8Format;
}
template <WireKind W>
constexpr int levels() {
  return W == WireKind::kInt8 ? 255 : W == WireKind::kInt4 ? 15 : 3;
}

__device__ int32_t order_key(uint32_t bits) {
  const auto s = static_cast<int32_t>(bits);
  return s ^ ((s >> 31) & 0x7fffffff);
}
__device__ float from_order_key(int32_t key) {
  return __uint_as_float(static_cast<uint32_t>(key ^ ((key >> 31) & 0x7fffffff)));
}

// The scale, offset and quantizing multiplier (0: every code 0) of a wire block from its scan: the
// order keys' minimum and maximum, or (FP8) the largest magnitude's bits in kmax. False: the
// block's range does not fit in a float (INT8, INT4), and nothing of it is encoded.
template <WireKind W>
__device__ bool block_params(int32_t kmin, int32_t kmax, float *scale_out, float *offset_out,
                             float *inv_out) {
  if constexpr (W == WireKind::kFp8) {
    const int e = codec::fp8_scale_exponent(static_cast<uint32_t>(kmax));
    *scale_out = codec::fp8_pow2(e);
    *offset_out = 0.0f;
    *inv_out = codec::fp8_pow2(-e);
    return true;
  } else {
    constexpr auto top = static_cast<float>(levels<W>());
    const float lo = from_order_key(kmin), hi = from_order_key(kmax);
    const float range = __fsub_rn(hi, lo);
    float scale = __fdiv_rn(range, top);
    const float offset = __fadd_rn(lo, 0.0f);
    if (!(range <= FLT_MAX) || !(__fadd_rn(offset, __fmul_rn(top, scale)) <= FLT_MAX)) return false;
    if (!(scale >= FLT_MIN)) scale = 0.0f;
    *scale_out = scale;
    *offset_out = offset;
    *inv_out = scale > 0.0f ? __frcp_rn(scale) : 0.0f;
    return true;
  }
}

// One wire block per group of F.block / kPerThread threads: a thread block of its own (INT8 and
// FP8: 256 threads), or one warp of a thread block of kThreads (INT4, INT2: 32 threads, 8 wire
// blocks a thread block, warp-synchronous, as one warp per thread block left most of each SM idle).
// `bad` receives the smallest index that stops the encoding (ULLONG_MAX if none), as the CPU's
// encoder returns it: the first non-finite element, or the first element of a block that does
// not fit (INT8/INT4: its range exceeds the float range; FP8: a magnitude of 2^127 or more). The
// uniform wires scan the order keys' minimum and maximum, FP8 the largest magnitude's bits (kept
// in kmax).
template <WireKind W>
__global__ void block_encode_kernel(const float *__restrict src, size_t n, uint8_t *__restrict dst,
                                    unsigned long long *bad) {
  constexpr codec::BlockFormat F = format<W>();
  constexpr int kT = static_cast<int>(F.block) / kPerThread;  // threads of one wire block
  constexpr bool kWarp = kT == 32;
  const size_t wire_block =
      kWarp ? static_cast<size_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32 : blockIdx.x;
  const size_t base = wire_block * F.block;
  if (kWarp && base >= n) return;  // the whole warp: past the last wire block
  const int t = static_cast<int>(kWarp ? threadIdx.x % 32 : threadIdx.x);
  const int k = static_cast<int>(n - base < F.block ? n - base : F.block);
  float v[kPerThread];
  int32_t kmin = INT_MAX, kmax = INT_MIN;
  int non_finite = 0, too_big = 0;
  for (int e = 0; e < kPerThread; ++e) {
    const int j = t + e * kT;
    v[e] = 0.0f;
    if (j >= k) continue;
    v[e] = src[base + j];
    const uint32_t u = __float_as_uint(v[e]);
    if constexpr (W == WireKind::kFp8) {
      const auto a = static_cast<int32_t>(u & 0x7fffffffu);
      kmax = kmax < a ? a : kmax;
      too_big |= a >= 0x7f000000;
    } else {
      const int32_t key = order_key(u);
      kmin = key < kmin ? key : kmin;
      kmax = kmax < key ? key : kmax;
    }
    if ((u & 0x7f800000u) == 0x7f800000u) {
      non_finite = 1;
      atomicMin(bad, static_cast<unsigned long long>(base + j));
    }
  }
  if (kWarp ? __any_sync(0xffffffffu, non_finite) : __syncthreads_or(non_finite)) return;
  if (kWarp ? __any_sync(0xffffffffu, too_big) : __syncthreads_or(too_big)) {
    if (t == 0) atomicMin(bad, static_cast<unsigned long long>(base));
    return;
  }
  for (int off = 16; off > 0; off >>= 1) {  // every lane ends with its warp's minimum and maximum
    const int32_t a = __shfl_xor_sync(0xffffffffu, kmin, off),
                  b = __shfl_xor_sync(0xffffffffu, kmax, off);
    kmin = a < kmin ? a : kmin;
    kmax = kmax < b ? b : kmax;
  }
  float scale = 0.0f, offset = 0.0f, inv = 0.0f;
  if constexpr (kWarp) {
    // Every lane holds the block's scan and computes the same parameters.
    if (!block_params<W>(kmin, kmax, &scale, &offset, &inv)) {
      if (t == 0) atomicMin(bad, static_cast<unsigned long long>(base));
      return;
    }
  } else {
    __shared__ int32_t smin[kT / 32], smax[kT / 32];
    __shared__ float params[3];  // scale, offset, inv; scale -1: the block does not fit
    const int warp = t / 32;
    if (t % 32 == 0) {
      smin[warp] = kmin;
      smax[warp] = kmax;
    }
    __syncthreads();
    if (t == 0) {
      for (int w = 1; w < kT / 32; ++w) {
        kmin = smin[w] < kmin ? smin[w] : kmin;
        kmax = kmax < smax[w] ? smax[w] : kmax;
      }
      if (!block_params<W>(kmin, kmax, &params[0], &params[1], &params[2])) {
        atomicMin(bad, static_cast<unsigned long long>(base));
        params[0] = -1.0f;
      }
    }
    __syncthreads();
    scale = params[0];
    offset = params[1];
    inv = params[2];
    if (scale < 0.0f) return;
  }
  uint8_t *out = dst + wire_block * F.block_bytes(F.block);
  if (t == 0) {
    memcpy(out, &scale, 4);
    if constexpr (F.header == 8) memcpy(out + 4, &offset, 4);
  }
  uint8_t *codes = out + F.header;
  for (int e = 0; e < kPerThread; ++e) {
    const int j = t + e * kT;
    uint32_t code = 0;
    if (j < k) {
      if constexpr (W == WireKind::kFp8) {
        code = codec::fp8_from_float(__fmul_rn(v[e], inv));
      } else {
        constexpr auto top = static_cast<float>(levels<W>());
        float q = __fadd_rn(__fmul_rn(__fsub_rn(v[e], offset), inv), 0.5f);
        q = q < top ? q : top;
        code = static_cast<uint32_t>(static_cast<int32_t>(q));
      }
    }
    if constexpr (W == WireKind::kInt4) {
      // Elements j and j + 1 sit in neighbouring lanes (kT is one warp): the even lane packs both.
      const uint32_t high = __shfl_down_sync(0xffffffffu, code, 1);
      if (j % 2 == 0 && j < k) codes[j / 2] = static_cast<uint8_t>(code | (high << 4));
    } else if constexpr (W == WireKind::kInt2) {
      // Elements j..j+3 in four neighbouring lanes: the first packs them, low bits first.
      const uint32_t c1 = __shfl_down_sync(0xffffffffu, code, 1),
                     c2 = __shfl_down_sync(0xffffffffu, code, 2),
                     c3 = __shfl_down_sync(0xffffffffu, code, 3);
      if (j % 4 == 0 && j < k)
        codes[j / 4] = static_cast<uint8_t>(code | (c1 << 2) | (c2 << 4) | (c3 << 6));
    } else {
      if (j < k) codes[j] = static_cast<uint8_t>(code);
    }
  }
}

// TOPK: one warp per wire block of 256, each lane holding elements lane + 32e. The kept elements
// are found one round at a time as the warp's largest key (magnitude + 1, then the index reversed,
// as the CPU's), cleared by the lane that holds it; every lane ends with the same picks, and lane
// 0 writes the block.
__global__ void topk_encode_kernel(const float *__restrict src, size_t n, size_t keep,
                                   uint8_t *__restrict dst, unsigned long long *bad) {
  const codec::BlockFormat F = codec::topk_format(keep);
  constexpr int kPer = static_cast<int>(codec::kTopkBlock) / 32;
  const size_t wire_block = static_cast<size_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  const size_t base = wire_block * F.block;
  if (base >= n) return;  // the whole warp
  const int t = static_cast<int>(threadIdx.x % 32);
  const int k = static_cast<int>(n - base < F.block ? n - base : F.block);
  unsigned long long key[kPer];
  int non_finite = 0, too_big = 0;
  for (int e = 0; e < kPer; ++e) {
    const int j = t + 32 * e;
    key[e] = 0;
    if (j >= k) continue;
    const uint32_t u = __float_as_uint(src[base + j]);
    const uint32_t a = u & 0x7fffffffu;
    too_big |= a >= 0x7f000000u;
    if ((u & 0x7f800000u) == 0x7f800000u) {
      non_finite = 1;
      atomicMin(bad, static_cast<unsigned long long>(base + j));
    }
    key[e] = (static_cast<unsigned long long>(a) + 1) << 8 | static_cast<unsigned>(F.block - 1 - j);
  }
  if (__any_sync(0xffffffffu, non_finite)) return;
  if (__any_sync(0xffffffffu, too_big)) {
    if (t == 0) atomicMin(bad, static_cast<unsigned long long>(base));
    return;
  }
  const int kept = static_cast<int>(F.coded(static_cast<size_t>(k)));
  int pick[codec::kTopkMaxKeep];
  uint32_t amax = 0;
  for (int i = 0; i < kept; ++i) {
    unsigned long long best = 0;
    for (int e = 0; e < kPer; ++e) best = best < key[e] ? key[e] : best;
    for (int off = 16; off > 0; off >>= 1) {
      const unsigned long long other = __shfl_xor_sync(0xffffffffu, best, off);
      best = best < other ? other : best;
    }
    const int j = static_cast<int>(F.block - 1 - (best & 0xffu));
    if (i == 0) amax = static_cast<uint32_t>(best >> 8) - 1;
    for (int e = 0; e < kPer; ++e) {
      if (t + 32 * e == j) key[e] = 0;
    }
    pick[i] = j;
  }
  if (t != 0) return;
  for (int i = 1; i < kept; ++i) {  // ascending index order
    const int v = pick[i];
    int p = i;
    for (; p > 0 && pick[p - 1] > v; --p) pick[p] = pick[p - 1];
    pick[p] = v;
  }
  float scale = __fdiv_rn(__uint_as_float(amax), static_cast<float>(codec::kTopkLevels));
  if (!(scale >= FLT_MIN)) scale = 0.0f;
  const float inv = scale > 0.0f ? __frcp_rn(scale) : 0.0f;
  uint8_t *out = dst + wire_block * F.block_bytes(F.block);
  memcpy(out, &scale, 4);
  uint8_t *index = out + F.header;
  uint8_t *codes = index + kept;
  for (int i = 0; i < (kept + 1) / 2; ++i) codes[i] = 0;
  for (int i = 0; i < kept; ++i) {
    const uint32_t u = __float_as_uint(src[base + pick[i]]);
    float q = __fadd_rn(__fmul_rn(__uint_as_float(u & 0x7fffffffu), inv), 0.5f);
    q = q < static_cast<float>(codec::kTopkLevels) ? q : static_cast<float>(codec::kTopkLevels);
    const uint32_t code = static_cast<uint32_t>(static_cast<int32_t>(q)) | ((u >> 31) << 3);
    index[i] = static_cast<uint8_t>(pick[i]);
    codes[i / 2] = static_cast<uint8_t>(codes[i / 2] | (code << (4 * (i % 2))));
  }
}

// Element i of TOPK data for n elements: its kept value, or 0 (`found` false).
__device__ float topk_element(const uint8_t *src, size_t n, size_t keep, size_t i, bool *found) {
  const codec::BlockFormat F = codec::topk_format(keep);
  const size_t b = i / F.block;
  const uint8_t *block = src + b * F.block_bytes(F.block);
  const size_t k = n - b * F.block < F.block ? n - b * F.block : F.block;
  const size_t kept = F.coded(k), j = i % F.block;
  *found = false;
  for (size_t p = 0; p < kept; ++p) {
    if (block[F.header + p] != j) continue;
    float scale;
    memcpy(&scale, block, 4);
    const uint32_t code = (block[F.header + kept + p / 2] >> (4 * (p % 2))) & 15u;
    const float v = __fmul_rn(static_cast<float>(code & 7u), scale);
    *found = true;
    return (code & 8u) != 0 ? -v : v;
  }
  return 0.0f;
}

__global__ void topk_decode_kernel(const uint8_t *__restrict src, size_t n, size_t keep,
                                   float *__restrict dst) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    bool found;
    const float v = topk_element(src, n, keep, i, &found);
    dst[i] = found ? __fadd_rn(0.0f, v) : 0.0f;
  }
}

__global__ void topk_decode_add_kernel(const uint8_t *__restrict src, size_t n, size_t keep,
                                       float *dst, const float *mine) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    bool found;
    dst[i] = __fadd_rn(mine[i], topk_element(src, n, keep, i, &found));
  }
}

// Element i of W data, as the CPU kernels decode it.
template <WireKind W>
__device__ float block_element(const uint8_t *src, size_t i) {
  constexpr codec::BlockFormat F = format<W>();
  const uint8_t *block = src + (i / F.block) * F.block_bytes(F.block);
  const size_t j = i % F.block;
  float scale;
  memcpy(&scale, block, 4);
  if constexpr (W == WireKind::kFp8) {
    return __fmul_rn(codec::fp8_to_float(block[F.header + j]), scale);
  } else {
    float offset;
    memcpy(&offset, block + 4, 4);
    const uint32_t code = W == WireKind::kInt4   ? (block[F.header + j / 2] >> (4 * (j % 2))) & 15u
                          : W == WireKind::kInt2 ? (block[F.header + j / 4] >> (2 * (j % 4))) & 3u
                                                 : block[F.header + j];
    return __fadd_rn(offset, __fmul_rn(static_cast<float>(code), scale));
  }
}

template <WireKind W>
__global__ void block_decode_kernel(const uint8_t *__restrict src, size_t n,
                                    float *__restrict dst) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = block_element<W>(src, i);
  }
}

template <WireKind W>
__global__ void block_decode_add_kernel(const uint8_t *__restrict src, size_t n, float *dst,
                                        const float *mine) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = __fadd_rn(mine[i], block_element<W>(src, i));
  }
}

// --- 16-bit floats and reductions ----------------------------------------------------------------

template <typename In, typename Out, typename F>
__global__ void map_kernel(const In *__restrict src, size_t n, Out *__restrict dst, F f) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = f(src[i]);
  }
}

struct ToHalf {
  __device__ uint16_t operator()(float x) const { return codec::float_to_half(x); }
};
struct FromHalf {
  __device__ float operator()(uint16_t x) const { return codec::half_to_float(x); }
};
struct ToBf16 {
  __device__ uint16_t operator()(float x) const { return codec::float_to_bf16(x); }
};
struct FromBf16 {
  __device__ float operator()(uint16_t x) const { return codec::bf16_to_float(x); }
};

// The CPU kernels' operators: integer SUM and PROD wrap (computed unsigned), MIN and MAX keep
// the first operand unless the second compares strictly smaller / larger.
template <typename T>
__device__ T combine(RedOp op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
    const auto ua = static_cast<U>(static_cast<std::make_unsigned_t<T>>(a));
    const auto ub = static_cast<U>(static_cast<std::make_unsigned_t<T>>(b));
    switch (op) {
      case RedOp::kSum:
      case RedOp::kAvg:
        return static_cast<T>(static_cast<U>(ua + ub));
      case RedOp::kProd:
        return static_cast<T>(static_cast<U>(ua * ub));
      case RedOp::kMin:
        return b < a ? b : a;
      case RedOp::kMax:
        return a < b ? b : a;
    }
  } else {
    switch (op) {
      case RedOp::kSum:
      case RedOp::kAvg:
        if constexpr (std::is_same_v<T, float>)
          return __fadd_rn(a, b);
        else
          return __dadd_rn(a, b);
      case RedOp::kProd:
        if constexpr (std::is_same_v<T, float>)
          return __fmul_rn(a, b);
        else
          return __dmul_rn(a, b);
      case RedOp::kMin:
        return b < a ? b : a;
      case RedOp::kMax:
        return a < b ? b : a;
    }
  }
  return a;
}

template <typename T>
__global__ void reduce_kernel(RedOp op, T *dst, const T *a, const T *b, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = combine(op, a[i], b[i]);
  }
}

template <bool kBf16>
__global__ void reduce16_kernel(RedOp op, uint16_t *dst, const uint16_t *a, const uint16_t *b,
                                size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = kBf16 ? codec::bf16_to_float(a[i]) : codec::half_to_float(a[i]);
    const float y = kBf16 ? codec::bf16_to_float(b[i]) : codec::half_to_float(b[i]);
    const float r = combine(op, x, y);
    dst[i] = kBf16 ? codec::float_to_bf16(r) : codec::float_to_half(r);
  }
}

// codec::finish_avg: integers divide in 64 bits, floats with one correctly rounded division.
template <typename T>
__global__ void divide_kernel(T *d, size_t n, int by) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if constexpr (std::is_integral_v<T>) {
      d[i] = static_cast<T>(static_cast<long long>(d[i]) / static_cast<long long>(by));
    } else if constexpr (std::is_same_v<T, float>) {
      d[i] = __fdiv_rn(d[i], static_cast<float>(by));
    } else {
      d[i] = __ddiv_rn(d[i], static_cast<double>(by));
    }
  }
}

template <bool kBf16>
__global__ void divide16_kernel(uint16_t *d, size_t n, int by) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = kBf16 ? codec::bf16_to_float(d[i]) : codec::half_to_float(d[i]);
    const float r = __fdiv_rn(x, static_cast<float>(by));
    d[i] = kBf16 ? codec::float_to_bf16(r) : codec::float_to_half(r);
  }
}

template <typename T>
Status launch_divide(void *dst, size_t n, int by, void *stream) {
  divide_kernel<T><<<grid_for(n), kThreads, 0, as_stream(stream)>>>(static_cast<T *>(dst), n, by);
  return cuda_status(cudaGetLastError(), "average kernel");
}

template <typename T>
Status launch_reduce(RedOp op, void *dst, const void *a, const void *b, size_t n, void *stream) {
  reduce_kernel<T><<<grid_for(n), kThreads, 0, as_stream(stream)>>>(
      op, static_cast<T *>(dst), static_cast<const T *>(a), static_cast<const T *>(b), n);
  return cuda_status(cudaGetLastError(), "reduce kernel");
}

template <typename In, typename Out, typename F>
Status launch_map(const In *src, size_t n, Out *dst, F f, void *stream, const char *what) {
  if (n == 0) return Status();
  map_kernel<<<grid_for(n), kThreads, 0, as_stream(stream)>>>(src, n, dst, f);
  return cuda_status(cudaGetLastError(), what);
}

}  // namespace

bool available() {
  static const bool yes = [] {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  }();
  return yes;
}

int device_ordinal(const void *p) {
  if (p == nullptr || !available()) return -1;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();  // unregistered host memory reports an error on older runtimes
    return -1;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ? attr.device : -1;
}

Status set_device(int ordinal) { return cuda_status(cudaSetDevice(ordinal), "cudaSetDevice"); }

Status alloc(void **p, size_t bytes) {
  *p = nullptr;
  return cuda_status(cudaMalloc(p, bytes), "cudaMalloc");
}

void free(void *p) {
  if (p != nullptr) (void)cudaFree(p);
}

Status alloc_pinned(void **p, size_t bytes) {
  *p = nullptr;
  return cuda_status(cudaHostAlloc(p, bytes, cudaHostAllocPortable), "cudaHostAlloc");
}

void free_pinned(void *p) {
  if (p != nullptr) (void)cudaFreeHost(p);
}

Status copy(void *dst, const void *src, size_t bytes) {
  if (bytes == 0) return Status();
  return cuda_status(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
}

Status copy_async(void *dst, const void *src, size_t bytes, void *stream) {
  if (bytes == 0) return Status();
  return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream)),
                     "cudaMemcpyAsync");
}

Status stream_create(void **stream) {
  cudaStream_t s = nullptr;
  const Status st = cuda_status(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                                "cudaStreamCreateWithFlags");
  *stream = st.ok() ? s : nullptr;
  return st;
}

void stream_destroy(void *stream) {
  if (stream != nullptr) (void)cudaStreamDestroy(as_stream(stream));
}

Status event_record(void *stream, void **event) {
  *event = nullptr;
  cudaEvent_t e = nullptr;
  WCCL_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                                   "cudaEventCreateWithFlags"));
  const Status st =
      cuda_status(cudaEventRecord(e, stream != nullptr ? as_stream(stream) : cudaStreamLegacy),
                  "cudaEventRecord");
  if (!st.ok()) {
    (void)cudaEventDestroy(e);
    return st;
  }
  *event = e;
  return Status();
}

Status stream_wait(void *stream, void *event) {
  return cuda_status(cudaStreamWaitEvent(as_stream(stream), static_cast<cudaEvent_t>(event), 0),
                     "cudaStreamWaitEvent");
}

void event_destroy(void *event) {
  if (event != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

Status synchronize(void *stream) {
  return cuda_status(cudaStreamSynchronize(as_stream(stream)), "cudaStreamSynchronize");
}

template <WireKind W>
Status launch_encode(const float *src, size_t n, uint8_t *dst, void *stream,
                     unsigned long long *bad) {
  constexpr codec::BlockFormat F = format<W>();
  constexpr unsigned kT = F.block / kPerThread;  // threads of one wire block (see the kernel)
  const size_t blocks = (n + F.block - 1) / F.block;
  const size_t per_cta = kT == 32 ? kThreads / 32 : 1;
  block_encode_kernel<W><<<static_cast<unsigned>((blocks + per_cta - 1) / per_cta),
                           kT == 32 ? kThreads : kT, 0, as_stream(stream)>>>(src, n, dst, bad);
  return cuda_status(cudaGetLastError(), "block encode kernel");
}

Status block_encode(Wire w, const float *src, size_t n, uint8_t *dst, void *stream, size_t first) {
  WCCL_RETURN_IF_ERROR(codec::check_keep(w));
  const codec::BlockFormat *f = codec::block_format(w);
  if (f == nullptr)
    return WCCL_ERROR(WCCL_ERR_INTERNAL, "the %s wire is not block-quantized", codec::wire_name(w));
  if (n == 0) return Status();
  if ((n + f->block - 1) / f->block > INT_MAX)
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "%zu elements are too many for one encode", n);
  unsigned long long *bad = nullptr;
  WCCL_RETURN_IF_ERROR(
      cuda_status(cudaMallocAsync(reinterpret_cast<void **>(&bad), sizeof(*bad), as_stream(stream)),
                  "cudaMallocAsync"));
  unsigned long long first_bad = ULLONG_MAX;
  const Status st = [&]() -> Status {
    WCCL_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(bad, 0xff, sizeof(*bad), as_stream(stream)),
                                     "cudaMemsetAsync"));
    switch (w.kind) {
      case WireKind::kInt8:
        WCCL_RETURN_IF_ERROR(launch_encode<WireKind::kInt8>(src, n, dst, stream, bad));
        break;
      case WireKind::kInt4:
        WCCL_RETURN_IF_ERROR(launch_encode<WireKind::kInt4>(src, n, dst, stream, bad));
        break;
      case WireKind::kInt2:
        WCCL_RETURN_IF_ERROR(launch_encode<WireKind::kInt2>(src, n, dst, stream, bad));
        break;
      case WireKind::kTopk: {
        const size_t blocks = (n + codec::kTopkBlock - 1) / codec::kTopkBlock,
                     per_cta = kThreads / 32;
        topk_encode_kernel<<<static_cast<unsigned>((blocks + per_cta - 1) / per_cta), kThreads, 0,
                             as_stream(stream)>>>(src, n, w.keep, dst, bad);
        WCCL_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "topk encode kernel"));
        break;
      }
      default:
        WCCL_RETURN_IF_ERROR(launch_encode<WireKind::kFp8>(src, n, dst, stream, bad));
        break;
    }
    return cuda_status(cudaMemcpyAsync(&first_bad, bad, sizeof(first_bad), cudaMemcpyDeviceToHost,
                                       as_stream(stream)),
                       "cudaMemcpyAsync");
  }();
  (void)cudaFreeAsync(bad, as_stream(stream));
  WCCL_RETURN_IF_ERROR(st);
  WCCL_RETURN_IF_ERROR(synchronize(stream));
  if (first_bad == ULLONG_MAX) return Status();
  float value = 0;
  WCCL_RETURN_IF_ERROR(copy_async(&value, src + first_bad, sizeof(value), stream));
  WCCL_RETURN_IF_ERROR(synchronize(stream));
  return codec::unencodable(w, value, first + first_bad, n - first_bad);
}

Status block_decode(Wire w, const uint8_t *src, size_t n, float *dst, void *stream) {
  WCCL_RETURN_IF_ERROR(codec::check_keep(w));
  if (n == 0) return Status();
  switch (w.kind) {
    case WireKind::kInt8:
      block_decode_kernel<WireKind::kInt8>
          <<<grid_for(n), kThreads, 0, as_stream(stream)>>>(src, n, dst);
      break;
    case WireKind::kInt4:
      block_decode_kernel<WireKind::kInt4>
          <<<grid_for(n), kThreads, 0, as_stream(stream)>>>(src, n, dst);
      break;
    case WireKind::kInt2:
      block_decode_kernel<WireKind::kInt2>
          <<<grid_for(n), kThreads, 0, as_stream(stream)>>>(src, n, dst);
      break;
    case WireKind::kTopk:
      topk_decode_kernel<<<grid_for(n), kThreads, 0, as_stream(stream)>>>(src, n, w.keep, dst);
      break;
    case WireKind::kFp8:
      block_decode_kernel<WireKind::kFp8>
          <<<grid_for(n), kThreads, 0, as_stream(stream)>>>(src, n, dst);
      break;
    default:
      return WCCL_ERROR(WCCL_ERR_INTERNAL, "the %s wire is not block-quantized",
                        codec::wire_name(w));
  }
  return cuda_status(cudaGetLastError(), "block decode kernel");
}

Status block_decode_add(Wire w, const uint8_t *src, size_t n, float *dst, const float *mine,
                        void *stream) {
  WCCL_RETURN_IF_ERROR(codec::check_keep(w));
  if (n == 0) return Status();
  switch (w.kind) {
    case WireKind::kInt8:
      block_decode_add_kernel<WireKind::kInt8>
          <<<grid_for(n), kThreads, 0, as_stream(stream)>>>(src, n, dst, mine);
      break;
    case WireKind::kInt4:
      block_decode_add_kernel<WireKind::kInt4>
          <<<grid_for(n), kThreads, 0, as_stream(stream)>>>(src, n, dst, mine);
      break;
    case WireKind::kInt2:
      block_decode_add_kernel<WireKind::kInt2>
          <<<grid_for(n), kThreads, 0, as_stream(stream)>>>(src, n, dst, mine);
      break;
    case WireKind::kTopk:
      topk_decode_add_kernel<<<grid_for(n), kThreads, 0, as_stream(stream)>>>(src, n, w.keep, dst,
                                                                              mine);
      break;
    case WireKind::kFp8:
      block_decode_add_kernel<WireKind::kFp8>
          <<<grid_for(n), kThreads, 0, as_stream(stream)>>>(src, n, dst, mine);
      break;
    default:
      return WCCL_ERROR(WCCL_ERR_INTERNAL, "the %s wire is not block-quantized",
                        codec::wire_name(w));
  }
  return cuda_status(cudaGetLastError(), "block decode-add kernel");
}

Status f16_encode(const float *src, size_t n, uint16_t *dst, void *stream) {
  return launch_map(src, n, dst, ToHalf{}, stream, "f16 encode kernel");
}
Status f16_decode(const uint16_t *src, size_t n, float *dst, void *stream) {
  return launch_map(src, n, dst, FromHalf{}, stream, "f16 decode kernel");
}
Status bf16_encode(const float *src, size_t n, uint16_t *dst, void *stream) {
  return launch_map(src, n, dst, ToBf16{}, stream, "bf16 encode kernel");
}
Status bf16_decode(const uint16_t *src, size_t n, float *dst, void *stream) {
  return launch_map(src, n, dst, FromBf16{}, stream, "bf16 decode kernel");
}

Status reduce_into(Dtype t, RedOp op, void *dst, const void *a, const void *b, size_t n,
                   void *stream) {
  if (n == 0) return Status();
  switch (t) {
    case Dtype::kF32:
      return launch_reduce<float>(op, dst, a, b, n, stream);
    case Dtype::kF64:
      return launch_reduce<double>(op, dst, a, b, n, stream);
    case Dtype::kI8:
      return launch_reduce<int8_t>(op, dst, a, b, n, stream);
    case Dtype::kU8:
      return launch_reduce<uint8_t>(op, dst, a, b, n, stream);
    case Dtype::kI32:
      return launch_reduce<int32_t>(op, dst, a, b, n, stream);
    case Dtype::kI64:
      return launch_reduce<int64_t>(op, dst, a, b, n, stream);
    case Dtype::kF16:
    case Dtype::kBF16: {
      auto *d = static_cast<uint16_t *>(dst);
      const auto *x = static_cast<const uint16_t *>(a);
      const auto *y = static_cast<const uint16_t *>(b);
      if (t == Dtype::kBF16) {
        reduce16_kernel<true><<<grid_for(n), kThreads, 0, as_stream(stream)>>>(op, d, x, y, n);
      } else {
        reduce16_kernel<false><<<grid_for(n), kThreads, 0, as_stream(stream)>>>(op, d, x, y, n);
      }
      return cuda_status(cudaGetLastError(), "reduce kernel");
    }
  }
  return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "unknown dtype %d", static_cast<int>(t));
}

__global__ void hash_blocks_kernel(const uint8_t *data, size_t len, uint64_t *out, size_t blocks) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < blocks;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t at = i * codec::kHashBlock;
    out[i] = codec::hash64(data + at, len - at < codec::kHashBlock ? len - at : codec::kHashBlock);
  }
}

Status hash_blocks(const void *data, size_t len, uint64_t *out, void *stream) {
  const size_t blocks = codec::hash_blocks(len);
  if (blocks == 0) return Status();
  hash_blocks_kernel<<<grid_for(blocks), kThreads, 0, as_stream(stream)>>>(
      static_cast<const uint8_t *>(data), len, out, blocks);
  return cuda_status(cudaGetLastError(), "hash kernel");
}

Status finish_avg(Dtype t, void *dst, size_t n, int by, void *stream) {
  if (n == 0) return Status();
  switch (t) {
    case Dtype::kF32:
      return launch_divide<float>(dst, n, by, stream);
    case Dtype::kF64:
      return launch_divide<double>(dst, n, by, stream);
    case Dtype::kI8:
      return launch_divide<int8_t>(dst, n, by, stream);
    case Dtype::kU8:
      return launch_divide<uint8_t>(dst, n, by, stream);
    case Dtype::kI32:
      return launch_divide<int32_t>(dst, n, by, stream);
    case Dtype::kI64:
      return launch_divide<int64_t>(dst, n, by, stream);
    case Dtype::kF16:
    case Dtype::kBF16: {
      auto *d = static_cast<uint16_t *>(dst);
      if (t == Dtype::kBF16) {
        divide16_kernel<true><<<grid_for(n), kThreads, 0, as_stream(stream)>>>(d, n, by);
      } else {
        divide16_kernel<false><<<grid_for(n), kThreads, 0, as_stream(stream)>>>(d, n, by);
      }
      return cuda_status(cudaGetLastError(), "average kernel");
    }
  }
  return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "unknown dtype %d", static_cast<int>(t));
}

}  // namespace wccl::gpu
