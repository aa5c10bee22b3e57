// Where an operation's buffers live, host memory or a GPU's, and the work the algorithms do on
// them (DESIGN §7). Messages always travel from and to host memory; everything that touches the
// caller's buffers and the algorithms' scratch goes through a Memory:
//
//   host_memory()  the buffers are host memory: the CPU kernels, and the algorithms send from and
//                  receive into the buffers directly.
//   DeviceMemory   the buffers are one GPU's memory. Elements are reduced, encoded and decoded
//                  on the GPU: a send copies the message's bytes (wire bytes with a codec) to
//                  page-locked host memory, a received message is copied to the GPU and decoded
//                  or combined there. Each call enqueues its copies and kernels on the memory's
//                  stream and waits for them, so its results are in place when it returns; the
//                  network keeps receiving ahead meanwhile (the schedule's window).
//
// Calls return a Status (a GPU can fail); the host implementation always succeeds. Wire bytes
// handed to decode are validated on the host before any of them reach a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "codec/reduce.h"
#include "codec/wire.h"
#include "core/status.h"
#include "gpu/device.h"

namespace wccl::algo {

class Memory;

// Bytes a Memory lent: host memory, page-locked host memory, or device memory.
struct ReturnBytes {
  Memory *memory = nullptr;
  bool device = false;
  void operator()(uint8_t *p) const;
};
using Bytes = std::unique_ptr<uint8_t[], ReturnBytes>;

class Memory {
 public:
  virtual ~Memory() = default;
  // The buffers are host memory, which algorithms may use directly.
  virtual bool host() const = 0;
  virtual const char *name() const = 0;

  // Host memory for messages (page-locked where a GPU copies to and from it); zero bytes give null.
  virtual Status host_bytes(size_t n, Bytes *out) = 0;
  // Scratch in this memory (device memory for a GPU).
  virtual Status scratch(size_t n, Bytes *out) = 0;

  // Copies within this memory, from it to host memory, from host memory to it.
  virtual Status copy(void *dst, const void *src, size_t n) = 0;
  virtual Status to_host(uint8_t *dst, const void *src, size_t n) = 0;
  virtual Status from_host(void *dst, const uint8_t *src, size_t n) = 0;
  // Copies within this memory bytes that are read again only if the operation fails (the Undo's
  // saved bytes). The host writes them past its caches; elsewhere this is copy().
  virtual Status save(void *dst, const void *src, size_t n) { return copy(dst, src, n); }

  // codec::reduce_into with `got` (count elements) in host memory; dst may equal mine.
  virtual Status reduce_into(codec::Dtype t, codec::RedOp op, void *dst, const void *mine,
                             const uint8_t *got, size_t count) = 0;
  virtual Status finish_avg(codec::Dtype t, void *dst, size_t count, int by) = 0;
  // codec::encode, decode and decode_reduce, with the wire bytes in host memory.
  virtual Status encode(codec::Wire w, const float *src, size_t count, uint8_t *wire,
                        size_t first) = 0;
  virtual Status decode(codec::Wire w, const uint8_t *wire, size_t len, size_t count,
                        float *dst) = 0;
  virtual Status decode_reduce(codec::Wire w, codec::RedOp op, const uint8_t *wire, size_t len,
                               size_t count, float *dst, const float *mine) = 0;
  // dst = the count F16 or BF16 (t) elements at src as F32, exactly; both in this memory.
  virtual Status widen(codec::Dtype t, const void *src, size_t count, float *dst) = 0;

 protected:
  friend struct ReturnBytes;
  virtual void give_back(uint8_t *p, bool device) = 0;
};

Memory &host_memory();

// Bytes of a Memory that grow to the largest size asked for; growing does not keep the contents.
class GrowingBytes {
 public:
  enum class Kind { kHost, kScratch };  // from Memory::host_bytes or Memory::scratch
  // At least n bytes at *at.
  Status reserve(Memory &memory, Kind kind, size_t n, uint8_t **at);
  void reset() {
    bytes_.reset();
    size_ = 0;
  }

 private:
  Bytes bytes_;
  size_t size_ = 0;
};

// One GPU's memory, for the operations of one communicator: the worker thread runs the data
// phases, a caller's thread the copies of committed results (copy_out, on a stream of its own).
// Keeps a few page-locked blocks for reuse, since allocating them is slow.
class DeviceMemory final : public Memory {
 public:
  // Null (and the cause in *st) if the device cannot make its streams.
  static std::unique_ptr<DeviceMemory> create(gpu::Device &device, Status *st);
  ~DeviceMemory() override;
  DeviceMemory(const DeviceMemory &) = delete;
  DeviceMemory &operator=(const DeviceMemory &) = delete;

  gpu::Device &device() const { return dev_; }
  bool host() const override { return false; }
  const char *name() const override { return dev_.name().c_str(); }
  Status host_bytes(size_t n, Bytes *out) override;
  Status scratch(size_t n, Bytes *out) override;
  Status copy(void *dst, const void *src, size_t n) override;
  Status to_host(uint8_t *dst, const void *src, size_t n) override;
  Status from_host(void *dst, const uint8_t *src, size_t n) override;
  Status reduce_into(codec::Dtype t, codec::RedOp op, void *dst, const void *mine,
                     const uint8_t *got, size_t count) override;
  Status finish_avg(codec::Dtype t, void *dst, size_t count, int by) override;
  Status encode(codec::Wire w, const float *src, size_t count, uint8_t *wire,
                size_t first) override;
  Status decode(codec::Wire w, const uint8_t *wire, size_t len, size_t count, float *dst) override;
  Status decode_reduce(codec::Wire w, codec::RedOp op, const uint8_t *wire, size_t len,
                       size_t count, float *dst, const float *mine) override;
  Status widen(codec::Dtype t, const void *src, size_t count, float *dst) override;

  // codec::tensor_hash of len bytes of this device's memory, hashed by the GPU, on the caller's
  // thread (the commit's stream).
  Status hash(const void *data, size_t len, uint64_t *out);
  // Makes the data phase's stream wait for `e` (an event of the caller's stream); e is released.
  Status wait_for(gpu::Event e);
  // The commit: copies n bytes between any two of this device's memory and host memory, on the
  // caller's thread, and waits for the copy.
  Status copy_out(void *dst, const void *src, size_t n);
  // The commit of a widened operation: dst (count F16 or BF16 elements, t) = src (F32) rounded,
  // both in this device's memory, on the caller's thread, waited for.
  Status narrow_out(codec::Dtype t, const float *src, size_t count, void *dst);

  static constexpr size_t kMaxSparePinned = 8;  // page-locked blocks kept for reuse

 private:
  DeviceMemory(gpu::Device &device, gpu::Stream work, gpu::Stream commit);
  void give_back(uint8_t *p, bool device) override;

  gpu::Device &dev_;
  gpu::Stream work_, commit_;
  // Device memory of the data phase (the worker thread's).
  GrowingBytes workspace_;  // where host bytes land before a kernel reads them
  GrowingBytes decoded_;    // decode_reduce's floats when it cannot fuse
  std::mutex mu_;           // the pinned blocks
  std::map<uint8_t *, size_t> pinned_size_;
  std::vector<uint8_t *> spare_pinned_;  // oldest first
  std::mutex commit_mu_;
};

}  // namespace wccl::algo
