#include "gpu/device.h"

#include <array>
#include <atomic>
#include <mutex>

#include "gpu/kernels.h"

namespace wccl::gpu {
namespace {

// One CUDA device. Every call first makes it the calling thread's current device: the worker
// thread of a communicator may serve buffers on several.
class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal), name_("cuda:" + std::to_string(ordinal)) {}
  const std::string &name() const override { return name_; }

  Status alloc(void **p, size_t bytes) override {
    *p = nullptr;
    WCCL_RETURN_IF_ERROR(set_device(ordinal_));
    return gpu::alloc(p, bytes);
  }
  void free(void *p) override {
    if (p != nullptr && set_device(ordinal_).ok()) gpu::free(p);
  }
  Status alloc_pinned(void **p, size_t bytes) override {
    *p = nullptr;
    WCCL_RETURN_IF_ERROR(set_device(ordinal_));
    return gpu::alloc_pinned(p, bytes);
  }
  void free_pinned(void *p) override { gpu::free_pinned(p); }
  Status create_stream(Stream *s) override {
    *s = nullptr;
    WCCL_RETURN_IF_ERROR(set_device(ordinal_));
    return stream_create(s);
  }
  void destroy_stream(Stream s) override {
    if (s != nullptr && set_device(ordinal_).ok()) stream_destroy(s);
  }
  Status copy(void *dst, const void *src, size_t bytes, Stream s) override {
    WCCL_RETURN_IF_ERROR(set_device(ordinal_));
    return copy_async(dst, src, bytes, s);
  }
  Status synchronize(Stream s) override {
    WCCL_RETURN_IF_ERROR(set_device(ordinal_));
    return gpu::synchronize(s);
  }
  Status record(Stream on, Event *e) override {
    *e = nullptr;
    WCCL_RETURN_IF_ERROR(set_device(ordinal_));
    return event_record(on, e);
  }
  Status wait(Stream s, Event e) override {
    WCCL_RETURN_IF_ERROR(set_device(ordinal_));
    return stream_wait(s, e);
  }
  void destroy_event(Event e) override { event_destroy(e); }

  Status encode(codec::Wire w, const float *src, size_t count, uint8_t *dst, size_t first,
                Stream s) override {
    WCCL_RETURN_IF_ERROR(set_device(ordinal_));
    switch (w.kind) {
      case codec::WireKind::kInt8:
      case codec::WireKind::kInt4:
      case codec::WireKind::kInt2:
      case codec::WireKind::kFp8:
      case codec::WireKind::kTopk:
        return block_encode(w, src, count, dst, s, first);
      case codec::WireKind::kF16:
        return f16_encode(src, count, reinterpret_cast<uint16_t *>(dst), s);
      case codec::WireKind::kBF16:
        return bf16_encode(src, count, reinterpret_cast<uint16_t *>(dst), s);
      case codec::WireKind::kNative:
        break;
    }
    return WCCL_ERROR(WCCL_ERR_INTERNAL, "%s: no kernel encodes the %s wire", name_.c_str(),
                      codec::wire_name(w));
  }
  Status decode(codec::Wire w, const uint8_t *src, size_t count, float *dst, Stream s) override {
    WCCL_RETURN_IF_ERROR(set_device(ordinal_));
    switch (w.kind) {
      case codec::WireKind::kInt8:
      case codec::WireKind::kInt4:
      case codec::WireKind::kInt2:
      case codec::WireKind::kFp8:
      case codec::WireKind::kTopk:
        return block_decode(w, src, count, dst, s);
      case codec::WireKind::kF16:
        return f16_decode(reinterpret_cast<const uint16_t *>(src), count, dst, s);
      case codec::WireKind::kBF16:
        return bf16_decode(reinterpret_cast<const uint16_t *>(src), count, dst, s);
      case codec::WireKind::kNative:
        break;
    }
    return WCCL_ERROR(WCCL_ERR_INTERNAL, "%s: no kernel decodes the %s wire", name_.c_str(),
                      codec::wire_name(w));
  }
  Status decode_add(codec::Wire w, const uint8_t *src, size_t count, float *dst, const float *mine,
                    Stream s) override {
    WCCL_RETURN_IF_ERROR(set_device(ordinal_));
    return gpu::block_decode_add(w, src, count, dst, mine, s);
  }
  Status reduce_into(codec::Dtype t, codec::RedOp op, void *dst, const void *a, const void *b,
                     size_t count, Stream s) override {
    WCCL_RETURN_IF_ERROR(set_device(ordinal_));
    return gpu::reduce_into(t, op, dst, a, b, count, s);
  }
  Status finish_avg(codec::Dtype t, void *dst, size_t count, int by, Stream s) override {
    WCCL_RETURN_IF_ERROR(set_device(ordinal_));
    return gpu::finish_avg(t, dst, count, by, s);
  }
  Status hash_blocks(const void *data, size_t len, uint64_t *out, Stream s) override {
    WCCL_RETURN_IF_ERROR(set_device(ordinal_));
    return gpu::hash_blocks(data, len, out, s);
  }

 private:
  const int ordinal_;
  const std::string name_;
};

constexpr int kMaxDevices = 64;
std::atomic<DeviceFinder> finder{nullptr};

}  // namespace

Device *device_of(const void *p) {
  if (p == nullptr) return nullptr;
  if (DeviceFinder find = finder.load(std::memory_order_acquire); find != nullptr) {
    if (Device *d = find(p); d != nullptr) return d;
  }
  const int ordinal = device_ordinal(p);
  if (ordinal < 0 || ordinal >= kMaxDevices) return nullptr;
  // Never destroyed: communicators' threads may still use them while the process exits.
  static auto *devices = new std::array<CudaDevice *, kMaxDevices>{};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if ((*devices)[ordinal] == nullptr) (*devices)[ordinal] = new CudaDevice(ordinal);
  return (*devices)[ordinal];
}

void set_device_finder(DeviceFinder f) { finder.store(f, std::memory_order_release); }

}  // namespace wccl::gpu
