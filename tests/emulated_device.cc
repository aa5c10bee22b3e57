#include "emulated_device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "codec/hash.h"
#include "codec/kernels.h"

namespace wccl::test {
namespace {

// Bit 62 set and bit 63 clear: not a canonical x86-64 (or arm64 user) address, so a dereference
// faults.
constexpr uintptr_t kBase = uintptr_t{0x5a} << 56;
constexpr uintptr_t kSpan = uintptr_t{1} << 44;
constexpr uintptr_t kGap = 4096;  // between allocations, so an overrun never lands in a neighbour

std::atomic<EmulatedGpu *> installed{nullptr};

gpu::Device *find_installed(const void *p) {
  EmulatedGpu *gpu = installed.load(std::memory_order_acquire);
  return gpu != nullptr && gpu->holds(p) ? gpu : nullptr;
}

}  // namespace

void EmulatedGpu::install() {
  installed.store(this, std::memory_order_release);
  gpu::set_device_finder(find_installed);
}

void EmulatedGpu::uninstall() {
  EmulatedGpu *self = this;
  if (installed.compare_exchange_strong(self, nullptr)) gpu::set_device_finder(nullptr);
}

EmulatedGpu::EmulatedGpu() {
  static_assert(sizeof(uintptr_t) == 8, "the emulated GPU needs 64-bit addresses");
}

EmulatedGpu::~EmulatedGpu() {
  uninstall();
  for (auto &[p, n] : pinned_) delete[] static_cast<uint8_t *>(p);
}

bool EmulatedGpu::holds(const void *p) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return a >= kBase && a < kBase + kSpan;
}

size_t EmulatedGpu::live_allocations() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return blocks_.size();
}

uint8_t *EmulatedGpu::at(const void *p, size_t bytes) {
  if (!holds(p)) return static_cast<uint8_t *>(const_cast<void *>(p));
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::recursive_mutex> lock(mu_);
  auto it = sizes_.upper_bound(a);
  if (it == sizes_.begin()) {
    ADD_FAILURE() << "emulated GPU: access at " << p << " outside any allocation";
    return nullptr;
  }
  --it;
  if (a + bytes > it->first + it->second) {
    ADD_FAILURE() << "emulated GPU: " << bytes << " bytes at offset " << a - it->first
                  << " overrun an allocation of " << it->second;
    return nullptr;
  }
  return blocks_[it->first].get() + (a - it->first);
}

Status EmulatedGpu::fault(const char *what) {
  ++calls_;
  long left = fail_countdown_.load();
  while (left >= 0 && !fail_countdown_.compare_exchange_weak(left, left - 1)) {
  }
  if (left == 0)
    return WCCL_ERROR(WCCL_ERR_CUDA, "%s: an injected fault of the emulated GPU", what);
  return Status();
}

Status EmulatedGpu::alloc(void **p, size_t bytes) {
  *p = nullptr;
  WCCL_RETURN_IF_ERROR(fault("alloc"));
  *p = allocate(bytes);
  return Status();
}

void *EmulatedGpu::allocate(size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const uintptr_t a = kBase + next_;
  next_ += (bytes + kGap + 255) / 256 * 256;
  blocks_[a].reset(new uint8_t[bytes == 0 ? 1 : bytes]);
  sizes_[a] = bytes;
  return reinterpret_cast<void *>(a);
}

void EmulatedGpu::free(void *p) {
  if (p == nullptr) return;
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const auto a = reinterpret_cast<uintptr_t>(p);
  EXPECT_EQ(sizes_.count(a), 1u) << "emulated GPU: free of " << p << ", which alloc did not return";
  blocks_.erase(a);
  sizes_.erase(a);
}

Status EmulatedGpu::alloc_pinned(void **p, size_t bytes) {
  *p = nullptr;
  WCCL_RETURN_IF_ERROR(fault("alloc_pinned"));
  std::lock_guard<std::recursive_mutex> lock(mu_);
  *p = new uint8_t[bytes == 0 ? 1 : bytes];
  pinned_[*p] = bytes;
  ++pinned_allocs_;
  return Status();
}

void EmulatedGpu::free_pinned(void *p) {
  if (p == nullptr) return;
  std::lock_guard<std::recursive_mutex> lock(mu_);
  EXPECT_EQ(pinned_.erase(p), 1u) << "emulated GPU: free_pinned of " << p
                                  << ", which alloc_pinned did not return";
  delete[] static_cast<uint8_t *>(p);
}

EmulatedGpu::Queue *EmulatedGpu::queue(gpu::Stream s) {
  return s == nullptr ? &legacy_ : static_cast<Queue *>(s);
}

Status EmulatedGpu::create_stream(gpu::Stream *s) {
  *s = nullptr;
  WCCL_RETURN_IF_ERROR(fault("create_stream"));
  *s = new Queue;
  return Status();
}

void EmulatedGpu::destroy_stream(gpu::Stream s) {
  if (s == nullptr) return;
  Queue *q = queue(s);
  run_until(q, q->enqueued);  // a destroyed stream still finishes its work
  delete q;
}

void EmulatedGpu::enqueue(gpu::Stream s, std::function<void()> f) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Queue *q = queue(s);
  q->work.push_back(std::move(f));
  ++q->enqueued;
}

void EmulatedGpu::run_until(Queue *q, uint64_t at) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  while (q->done < at && !q->work.empty()) {
    std::function<void()> f = std::move(q->work.front());
    q->work.pop_front();
    ++q->done;
    f();
  }
}

Status EmulatedGpu::copy(void *dst, const void *src, size_t bytes, gpu::Stream s) {
  WCCL_RETURN_IF_ERROR(fault("copy"));
  if (bytes == 0) return Status();
  if (holds(dst) && !holds(src)) h2d_ += bytes;
  if (!holds(dst) && holds(src)) d2h_ += bytes;
  enqueue(s, [this, dst, src, bytes] {
    uint8_t *d = at(dst, bytes);
    const uint8_t *from = at(src, bytes);
    if (d != nullptr && from != nullptr) std::memmove(d, from, bytes);
  });
  return Status();
}

// Never an injected fault of its own: the library ignores the result of the synchronizations it
// makes while cleaning up, and a fault landing there would be lost, which would make the count of
// fail_after depend on how the ranks' threads interleave.
Status EmulatedGpu::synchronize(gpu::Stream s) {
  Queue *q = queue(s);
  run_until(q, q->enqueued);
  return Status();
}

Status EmulatedGpu::record(gpu::Stream on, gpu::Event *e) {
  *e = nullptr;
  WCCL_RETURN_IF_ERROR(fault("record"));
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Queue *q = queue(on);
  *e = new Mark{q, q->enqueued};
  return Status();
}

Status EmulatedGpu::wait(gpu::Stream s, gpu::Event e) {
  WCCL_RETURN_IF_ERROR(fault("wait"));
  const Mark m = *static_cast<Mark *>(e);
  enqueue(s, [this, m] { run_until(m.q, m.at); });
  return Status();
}

void EmulatedGpu::destroy_event(gpu::Event e) { delete static_cast<Mark *>(e); }

Status EmulatedGpu::encode(codec::Wire w, const float *src, size_t count, uint8_t *dst,
                           size_t first, gpu::Stream s) {
  WCCL_RETURN_IF_ERROR(fault("encode"));
  // As the CUDA kernels: a block-quantized wire waits for its result, to name a value it cannot
  // encode.
  WCCL_RETURN_IF_ERROR(synchronize(s));
  const auto *in = reinterpret_cast<const float *>(at(src, count * 4));
  uint8_t *out = at(dst, codec::wire_size(w, count));
  if (in == nullptr || out == nullptr)
    return WCCL_ERROR(WCCL_ERR_CUDA, "emulated GPU: bad pointer");
  return codec::encode(w, in, count, out, first);
}

Status EmulatedGpu::decode(codec::Wire w, const uint8_t *src, size_t count, float *dst,
                           gpu::Stream s) {
  WCCL_RETURN_IF_ERROR(fault("decode"));
  enqueue(s, [this, w, src, count, dst] {
    const size_t len = codec::wire_size(w, count);
    const uint8_t *in = at(src, len);
    auto *out = reinterpret_cast<float *>(at(dst, count * 4));
    if (in == nullptr || out == nullptr) return;
    const codec::Kernels &k = codec::kernels();
    switch (w.kind) {
      case codec::WireKind::kInt8:
      case codec::WireKind::kInt4:
      case codec::WireKind::kInt2:
      case codec::WireKind::kFp8:
      case codec::WireKind::kTopk:
        codec::block_codec(k, w)->decode(*codec::block_format(w), in, count, out);
        break;
      case codec::WireKind::kF16:
        k.f16_decode(in, count, out);
        break;
      case codec::WireKind::kBF16:
        k.bf16_decode(in, count, out);
        break;
      case codec::WireKind::kNative:
        ADD_FAILURE() << "emulated GPU: no kernel decodes the native wire";
        break;
    }
  });
  return Status();
}

Status EmulatedGpu::decode_add(codec::Wire w, const uint8_t *src, size_t count, float *dst,
                               const float *mine, gpu::Stream s) {
  WCCL_RETURN_IF_ERROR(fault("decode_add"));
  const codec::BlockCodec *blocks = codec::block_codec(codec::kernels(), w);
  if (blocks == nullptr)
    return WCCL_ERROR(WCCL_ERR_INTERNAL, "emulated GPU: the %s wire is not block-quantized",
                      codec::wire_name(w));
  enqueue(s, [this, w, blocks, src, count, dst, mine] {
    const uint8_t *in = at(src, codec::wire_size(w, count));
    auto *out = reinterpret_cast<float *>(at(dst, count * 4));
    const auto *m = reinterpret_cast<const float *>(at(mine, count * 4));
    if (in != nullptr && out != nullptr && m != nullptr)
      blocks->decode_add(*codec::block_format(w), in, count, out, m);
  });
  return Status();
}

Status EmulatedGpu::reduce_into(codec::Dtype t, codec::RedOp op, void *dst, const void *a,
                                const void *b, size_t count, gpu::Stream s) {
  WCCL_RETURN_IF_ERROR(fault("reduce_into"));
  enqueue(s, [this, t, op, dst, a, b, count] {
    const size_t bytes = count * codec::dtype_size(t);
    uint8_t *d = at(dst, bytes);
    const uint8_t *x = at(a, bytes), *y = at(b, bytes);
    if (d != nullptr && x != nullptr && y != nullptr) codec::reduce_into(t, op, d, x, y, count);
  });
  return Status();
}

Status EmulatedGpu::finish_avg(codec::Dtype t, void *dst, size_t count, int by, gpu::Stream s) {
  WCCL_RETURN_IF_ERROR(fault("finish_avg"));
  enqueue(s, [this, t, dst, count, by] {
    uint8_t *d = at(dst, count * codec::dtype_size(t));
    if (d != nullptr) codec::finish_avg(t, d, count, by);
  });
  return Status();
}

Status EmulatedGpu::hash_blocks(const void *data, size_t len, uint64_t *out, gpu::Stream s) {
  WCCL_RETURN_IF_ERROR(fault("hash_blocks"));
  enqueue(s, [this, data, len, out] {
    const size_t blocks = codec::hash_blocks(len);
    const uint8_t *in = at(data, len);
    auto *h = reinterpret_cast<uint64_t *>(at(out, blocks * sizeof(uint64_t)));
    if (in == nullptr || h == nullptr) return;
    for (size_t i = 0; i < blocks; ++i) {
      const size_t from = i * codec::kHashBlock;
      h[i] = codec::hash64(in + from, std::min(codec::kHashBlock, len - from));
    }
  });
  return Status();
}

void *EmulatedGpu::alloc_copy(const void *host, size_t bytes) {
  void *p = allocate(bytes);  // not a call of the code under test: never faults
  write(p, host, bytes);
  return p;
}

std::vector<uint8_t> EmulatedGpu::read(const void *p, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  std::vector<uint8_t> out(bytes);
  const uint8_t *from = at(p, bytes);
  if (from != nullptr && bytes != 0) std::memcpy(out.data(), from, bytes);
  return out;
}

void EmulatedGpu::write(void *p, const void *host, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  uint8_t *to = at(p, bytes);
  if (to != nullptr && bytes != 0) std::memcpy(to, host, bytes);
}

}  // namespace wccl::test
