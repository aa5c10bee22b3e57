#include "algo/memory.h"

#include <algorithm>
#include <cstring>
#include <new>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "codec/hash.h"

namespace wccl::algo {

void ReturnBytes::operator()(uint8_t *p) const {
  if (p != nullptr && memory != nullptr) memory->give_back(p, device);
}

namespace {

// memcpy with non-temporal stores where the CPU has them (SSE2, which every x86-64 has): a store
// that bypasses the caches need not read the destination's lines in first, so a copy that nobody
// reads soon costs one pass over memory less, and leaves the caches to the data being reduced.
void copy_streaming(uint8_t *dst, const uint8_t *src, size_t n) {
#if defined(__SSE2__)
  const size_t head = std::min(n, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  for (; n >= 64; n -= 64, dst += 64, src += 64) {
    const auto *from = reinterpret_cast<const __m128i *>(src);
    auto *to = reinterpret_cast<__m128i *>(dst);
    const __m128i a = _mm_loadu_si128(from), b = _mm_loadu_si128(from + 1),
                  c = _mm_loadu_si128(from + 2), d = _mm_loadu_si128(from + 3);
    _mm_stream_si128(to, a);
    _mm_stream_si128(to + 1, b);
    _mm_stream_si128(to + 2, c);
    _mm_stream_si128(to + 3, d);
  }
  _mm_sfence();  // ordered before whatever later reads them (a restore on another thread)
#endif
  std::memcpy(dst, src, n);
}

class HostMemory final : public Memory {
 public:
  bool host() const override { return true; }
  const char *name() const override { return "host"; }
  Status host_bytes(size_t n, Bytes *out) override { return scratch(n, out); }
  Status scratch(size_t n, Bytes *out) override {
    out->reset();
    if (n == 0) return Status();
    auto *p = new (std::nothrow) uint8_t[n];
    if (p == nullptr)
      return WCCL_ERROR(WCCL_ERR_NO_MEMORY, "no memory for %zu bytes of host scratch", n);
    *out = Bytes(p, ReturnBytes{this, false});
    return Status();
  }
  Status copy(void *dst, const void *src, size_t n) override {
    if (n != 0 && dst != src) std::memmove(dst, src, n);
    return Status();
  }
  Status to_host(uint8_t *dst, const void *src, size_t n) override { return copy(dst, src, n); }
  Status from_host(void *dst, const uint8_t *src, size_t n) override { return copy(dst, src, n); }
  Status save(void *dst, const void *src, size_t n) override {
    copy_streaming(static_cast<uint8_t *>(dst), static_cast<const uint8_t *>(src), n);
    return Status();
  }
  Status reduce_into(codec::Dtype t, codec::RedOp op, void *dst, const void *mine,
                     const uint8_t *got, size_t count) override {
    codec::reduce_into(t, op, dst, mine, got, count);
    return Status();
  }
  Status finish_avg(codec::Dtype t, void *dst, size_t count, int by) override {
    codec::finish_avg(t, dst, count, by);
    return Status();
  }
  Status encode(codec::Wire w, const float *src, size_t count, uint8_t *wire,
                size_t first) override {
    return codec::encode(w, src, count, wire, first);
  }
  Status decode(codec::Wire w, const uint8_t *wire, size_t len, size_t count, float *dst) override {
    return codec::decode(w, wire, len, count, dst);
  }
  Status decode_reduce(codec::Wire w, codec::RedOp op, const uint8_t *wire, size_t len,
                       size_t count, float *dst, const float *mine) override {
    return codec::decode_reduce(w, op, wire, len, count, dst, mine);
  }
  Status widen(codec::Dtype t, const void *src, size_t count, float *dst) override {
    return codec::decode(codec::half_wire(t), static_cast<const uint8_t *>(src), count * 2, count,
                         dst);
  }

 protected:
  void give_back(uint8_t *p, bool) override { delete[] p; }
};

}  // namespace

Memory &host_memory() {
  static HostMemory *host = new HostMemory;  // never destroyed: scratch may be returned at exit
  return *host;
}

Status GrowingBytes::reserve(Memory &memory, Kind kind, size_t n, uint8_t **at) {
  if (size_ < n) {
    reset();
    WCCL_RETURN_IF_ERROR(kind == Kind::kHost ? memory.host_bytes(n, &bytes_)
                                             : memory.scratch(n, &bytes_));
    size_ = n;
  }
  *at = bytes_.get();
  return Status();
}

// --- DeviceMemory --------------------------------------------------------------------------------

std::unique_ptr<DeviceMemory> DeviceMemory::create(gpu::Device &device, Status *st) {
  gpu::Stream work = nullptr, commit = nullptr;
  *st = device.create_stream(&work);
  if (st->ok()) *st = device.create_stream(&commit);
  if (!st->ok()) {
    device.destroy_stream(work);
    return nullptr;
  }
  return std::unique_ptr<DeviceMemory>(new DeviceMemory(device, work, commit));
}

DeviceMemory::DeviceMemory(gpu::Device &device, gpu::Stream work, gpu::Stream commit)
    : dev_(device), work_(work), commit_(commit) {}

DeviceMemory::~DeviceMemory() {
  (void)dev_.synchronize(work_);
  (void)dev_.synchronize(commit_);
  workspace_.reset();
  decoded_.reset();
  dev_.destroy_stream(work_);
  dev_.destroy_stream(commit_);
  for (uint8_t *p : spare_pinned_) dev_.free_pinned(p);
}

Status DeviceMemory::host_bytes(size_t n, Bytes *out) {
  out->reset();
  if (n == 0) return Status();
  {
    // The smallest spare that fits and is at most twice as large.
    std::lock_guard<std::mutex> lock(mu_);
    auto best = spare_pinned_.end();
    for (auto it = spare_pinned_.begin(); it != spare_pinned_.end(); ++it) {
      const size_t size = pinned_size_[*it];
      if (size >= n && size / 2 <= n && (best == spare_pinned_.end() || size < pinned_size_[*best]))
        best = it;
    }
    if (best != spare_pinned_.end()) {
      *out = Bytes(*best, ReturnBytes{this, false});
      spare_pinned_.erase(best);
      return Status();
    }
  }
  void *p = nullptr;
  const Status st = dev_.alloc_pinned(&p, n);
  if (!st.ok()) {
    return WCCL_ERROR(st.code() == WCCL_ERR_CUDA ? WCCL_ERR_NO_MEMORY : st.code(),
                      "%s: %zu bytes of page-locked memory: %s", name(), n, st.message().c_str());
  }
  std::lock_guard<std::mutex> lock(mu_);
  pinned_size_[static_cast<uint8_t *>(p)] = n;
  *out = Bytes(static_cast<uint8_t *>(p), ReturnBytes{this, false});
  return Status();
}

Status DeviceMemory::scratch(size_t n, Bytes *out) {
  out->reset();
  if (n == 0) return Status();
  void *p = nullptr;
  const Status st = dev_.alloc(&p, n);
  if (!st.ok()) {
    return WCCL_ERROR(st.code() == WCCL_ERR_CUDA ? WCCL_ERR_NO_MEMORY : st.code(),
                      "%s: %zu bytes of device memory: %s", name(), n, st.message().c_str());
  }
  *out = Bytes(static_cast<uint8_t *>(p), ReturnBytes{this, true});
  return Status();
}

void DeviceMemory::give_back(uint8_t *p, bool device) {
  // A call that failed midway may have left work queued that still uses the memory.
  (void)dev_.synchronize(work_);
  (void)dev_.synchronize(commit_);
  if (device) {
    dev_.free(p);
    return;
  }
  uint8_t *evict = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    spare_pinned_.push_back(p);
    if (spare_pinned_.size() > kMaxSparePinned) {
      evict = spare_pinned_.front();
      spare_pinned_.erase(spare_pinned_.begin());
      pinned_size_.erase(evict);
    }
  }
  if (evict != nullptr) dev_.free_pinned(evict);
}

Status DeviceMemory::copy(void *dst, const void *src, size_t n) {
  if (n == 0 || dst == src) return Status();
  WCCL_RETURN_IF_ERROR(dev_.copy(dst, src, n, work_));
  return dev_.synchronize(work_);
}

Status DeviceMemory::to_host(uint8_t *dst, const void *src, size_t n) { return copy(dst, src, n); }

Status DeviceMemory::from_host(void *dst, const uint8_t *src, size_t n) {
  return copy(dst, src, n);
}

Status DeviceMemory::reduce_into(codec::Dtype t, codec::RedOp op, void *dst, const void *mine,
                                 const uint8_t *got, size_t count) {
  if (count == 0) return Status();
  const size_t bytes = count * codec::dtype_size(t);
  uint8_t *ws = nullptr;
  WCCL_RETURN_IF_ERROR(workspace_.reserve(*this, GrowingBytes::Kind::kScratch, bytes, &ws));
  WCCL_RETURN_IF_ERROR(dev_.copy(ws, got, bytes, work_));
  WCCL_RETURN_IF_ERROR(dev_.reduce_into(t, op, dst, mine, ws, count, work_));
  return dev_.synchronize(work_);
}

Status DeviceMemory::finish_avg(codec::Dtype t, void *dst, size_t count, int by) {
  if (count == 0) return Status();
  WCCL_RETURN_IF_ERROR(dev_.finish_avg(t, dst, count, by, work_));
  return dev_.synchronize(work_);
}

Status DeviceMemory::encode(codec::Wire w, const float *src, size_t count, uint8_t *wire,
                            size_t first) {
  if (w.kind == codec::WireKind::kNative) return to_host(wire, src, count * 4);
  if (count == 0) return Status();
  const size_t len = codec::wire_size(w, count);
  uint8_t *ws = nullptr;
  WCCL_RETURN_IF_ERROR(workspace_.reserve(*this, GrowingBytes::Kind::kScratch, len, &ws));
  WCCL_RETURN_IF_ERROR(dev_.encode(w, src, count, ws, first, work_));
  WCCL_RETURN_IF_ERROR(dev_.copy(wire, ws, len, work_));
  return dev_.synchronize(work_);
}

Status DeviceMemory::decode(codec::Wire w, const uint8_t *wire, size_t len, size_t count,
                            float *dst) {
  WCCL_RETURN_IF_ERROR(codec::validate(w, wire, len, count));
  if (w.kind == codec::WireKind::kNative) return from_host(dst, wire, len);
  if (count == 0) return Status();
  uint8_t *ws = nullptr;
  WCCL_RETURN_IF_ERROR(workspace_.reserve(*this, GrowingBytes::Kind::kScratch, len, &ws));
  WCCL_RETURN_IF_ERROR(dev_.copy(ws, wire, len, work_));
  WCCL_RETURN_IF_ERROR(dev_.decode(w, ws, count, dst, work_));
  return dev_.synchronize(work_);
}

Status DeviceMemory::decode_reduce(codec::Wire w, codec::RedOp op, const uint8_t *wire, size_t len,
                                   size_t count, float *dst, const float *mine) {
  WCCL_RETURN_IF_ERROR(codec::validate(w, wire, len, count));
  if (count == 0) return Status();
  uint8_t *ws = nullptr;
  WCCL_RETURN_IF_ERROR(workspace_.reserve(*this, GrowingBytes::Kind::kScratch, len, &ws));
  WCCL_RETURN_IF_ERROR(dev_.copy(ws, wire, len, work_));
  if (codec::block_format(w) != nullptr && (op == codec::RedOp::kSum || op == codec::RedOp::kAvg)) {
    WCCL_RETURN_IF_ERROR(dev_.decode_add(w, ws, count, dst, mine, work_));  // fused, as on the CPU
  } else {
    const float *decoded =
        reinterpret_cast<const float *>(ws);  // the native wire's bytes are floats
    if (w.kind != codec::WireKind::kNative) {
      uint8_t *floats = nullptr;
      WCCL_RETURN_IF_ERROR(
          decoded_.reserve(*this, GrowingBytes::Kind::kScratch, count * sizeof(float), &floats));
      WCCL_RETURN_IF_ERROR(dev_.decode(w, ws, count, reinterpret_cast<float *>(floats), work_));
      decoded = reinterpret_cast<const float *>(floats);
    }
    WCCL_RETURN_IF_ERROR(
        dev_.reduce_into(codec::Dtype::kF32, op, dst, mine, decoded, count, work_));
  }
  return dev_.synchronize(work_);
}

Status DeviceMemory::wait_for(gpu::Event e) {
  Status st = dev_.wait(work_, e);
  dev_.destroy_event(e);
  return st;
}

Status DeviceMemory::hash(const void *data, size_t len, uint64_t *out) {
  const size_t blocks = codec::hash_blocks(len);
  std::vector<uint64_t> hashes(blocks);
  if (blocks != 0) {
    Bytes device_hashes;
    WCCL_RETURN_IF_ERROR(scratch(blocks * sizeof(uint64_t), &device_hashes));
    std::lock_guard<std::mutex> lock(commit_mu_);
    auto *h = reinterpret_cast<uint64_t *>(device_hashes.get());
    WCCL_RETURN_IF_ERROR(dev_.hash_blocks(data, len, h, commit_));
    WCCL_RETURN_IF_ERROR(dev_.copy(hashes.data(), h, blocks * sizeof(uint64_t), commit_));
    WCCL_RETURN_IF_ERROR(dev_.synchronize(commit_));
  }
  *out = codec::combine_block_hashes(hashes.data(), blocks);
  return Status();
}

Status DeviceMemory::widen(codec::Dtype t, const void *src, size_t count, float *dst) {
  if (count == 0) return Status();
  WCCL_RETURN_IF_ERROR(
      dev_.decode(codec::half_wire(t), static_cast<const uint8_t *>(src), count, dst, work_));
  return dev_.synchronize(work_);
}

Status DeviceMemory::narrow_out(codec::Dtype t, const float *src, size_t count, void *dst) {
  if (count == 0) return Status();
  std::lock_guard<std::mutex> lock(commit_mu_);
  WCCL_RETURN_IF_ERROR(
      dev_.encode(codec::half_wire(t), src, count, static_cast<uint8_t *>(dst), 0, commit_));
  return dev_.synchronize(commit_);
}

Status DeviceMemory::copy_out(void *dst, const void *src, size_t n) {
  if (n == 0) return Status();
  std::lock_guard<std::mutex> lock(commit_mu_);
  WCCL_RETURN_IF_ERROR(dev_.copy(dst, src, n, commit_));
  return dev_.synchronize(commit_);
}

}  // namespace wccl::algo
