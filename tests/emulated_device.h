// The CPU twin of a GPU (a gpu::Device that gpu::device_of finds), for testing the device data path
// where there is none. It is strict where a real GPU would be:
//   - its memory lives at non-canonical addresses, so host code that dereferences a device
//     pointer crashes at once, and every access is checked against the allocation it falls in
//     (an overrun fails the test);
//   - a stream runs its work only when synchronized (or when a stream waiting on it is), so a
//     caller that reads a result before synchronizing reads stale bytes;
//   - kernels are the CPU kernels, which the GPU's match bit for bit (test_gpu_kernels).
// It counts the bytes that cross "PCIe" in each direction, and can fail its Nth call (any but
// synchronize) with WCCL_ERR_CUDA, as a GPU fault would.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/device.h"

namespace wccl::test {

class EmulatedGpu final : public gpu::Device {
 public:
  EmulatedGpu();
  ~EmulatedGpu() override;
  EmulatedGpu(const EmulatedGpu &) = delete;
  EmulatedGpu &operator=(const EmulatedGpu &) = delete;

  // device_of() finds this device (and only one at a time) while it is installed.
  void install();
  void uninstall();
  // p points into this device's memory.
  bool holds(const void *p) const;

  // Test helpers: device memory written from / read into host vectors (synchronously).
  void *alloc_copy(const void *host, size_t bytes);
  std::vector<uint8_t> read(const void *p, size_t bytes);
  void write(void *p, const void *host, size_t bytes);

  uint64_t to_device_bytes() const { return h2d_; }
  uint64_t to_host_bytes() const { return d2h_; }
  uint64_t pinned_allocations() const { return pinned_allocs_; }
  size_t live_allocations() const;
  // The call after `calls` more fails with WCCL_ERR_CUDA (negative: never).
  void fail_after(long calls) { fail_countdown_ = calls; }
  uint64_t calls() const { return calls_; }  // so far, of those fail_after counts

  // gpu::Device
  const std::string &name() const override { return name_; }
  Status alloc(void **p, size_t bytes) override;
  void free(void *p) override;
  Status alloc_pinned(void **p, size_t bytes) override;
  void free_pinned(void *p) override;
  Status create_stream(gpu::Stream *s) override;
  void destroy_stream(gpu::Stream s) override;
  Status copy(void *dst, const void *src, size_t bytes, gpu::Stream s) override;
  Status synchronize(gpu::Stream s) override;
  Status record(gpu::Stream on, gpu::Event *e) override;
  Status wait(gpu::Stream s, gpu::Event e) override;
  void destroy_event(gpu::Event e) override;
  Status encode(codec::Wire w, const float *src, size_t count, uint8_t *dst, size_t first,
                gpu::Stream s) override;
  Status decode(codec::Wire w, const uint8_t *src, size_t count, float *dst,
                gpu::Stream s) override;
  Status decode_add(codec::Wire w, const uint8_t *src, size_t count, float *dst, const float *mine,
                    gpu::Stream s) override;
  Status reduce_into(codec::Dtype t, codec::RedOp op, void *dst, const void *a, const void *b,
                     size_t count, gpu::Stream s) override;
  Status finish_avg(codec::Dtype t, void *dst, size_t count, int by, gpu::Stream s) override;
  Status hash_blocks(const void *data, size_t len, uint64_t *out, gpu::Stream s) override;

 private:
  struct Queue {
    std::deque<std::function<void()>> work;
    uint64_t enqueued = 0, done = 0;
  };
  struct Mark {
    Queue *q;
    uint64_t at;
  };
  Queue *queue(gpu::Stream s);
  Status fault(const char *what);
  void enqueue(gpu::Stream s, std::function<void()> f);
  void run_until(Queue *q, uint64_t at);
  // The host bytes behind [p, p + bytes) of device memory; fails the test (and returns null)
  // outside an allocation. Host pointers pass through.
  uint8_t *at(const void *p, size_t bytes);
  void *allocate(size_t bytes);

  const std::string name_ = "emulated-gpu";
  mutable std::recursive_mutex mu_;
  std::map<uintptr_t, std::unique_ptr<uint8_t[]>> blocks_;  // by device address
  std::map<uintptr_t, size_t> sizes_;
  uintptr_t next_ = 0;
  std::map<void *, size_t> pinned_;
  Queue legacy_;  // the null stream
  std::atomic<uint64_t> h2d_{0}, d2h_{0}, pinned_allocs_{0};
  std::atomic<long> fail_countdown_{-1};
  std::atomic<uint64_t> calls_{0};
};

}  // namespace wccl::test
