// A GPU as the collectives see it (DESIGN §7): its memory, streams, and the codec kernels, behind
// an interface with two implementations. CudaDevice (device.cc) forwards to gpu/kernels.h, one
// object per CUDA device, found from a pointer with device_of. The other is the test suite's
// emulated device (tests/emulated_device.h): host memory at addresses the CPU cannot dereference,
// streams that run their work only when synchronized, and the CPU kernels, which is how the
// device data path (algo/memory.h) is tested on machines without a GPU.
//
// Every call enqueues on a stream and returns, except encode, which waits for its result
// (to name a value it cannot encode), and synchronize. Encoded input is trusted: callers validate
// the host copy first (codec::validate).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "codec/reduce.h"
#include "codec/wire.h"
#include "core/status.h"

namespace wccl::gpu {

using Stream = void *;  // a cudaStream_t
using Event = void *;   // a cudaEvent_t

class Device {
 public:
  virtual ~Device() = default;
  virtual const std::string &name() const = 0;  // "cuda:0"

  virtual Status alloc(void **p, size_t bytes) = 0;  // device memory
  virtual void free(void *p) = 0;
  virtual Status alloc_pinned(void **p, size_t bytes) = 0;  // page-locked host memory
  virtual void free_pinned(void *p) = 0;

  virtual Status create_stream(Stream *s) = 0;
  virtual void destroy_stream(Stream s) = 0;
  // Any direction between host and this device's memory.
  virtual Status copy(void *dst, const void *src, size_t bytes, Stream s) = 0;
  // Waits for everything enqueued on s. (CUDA offers no timeout for this wait.)
  virtual Status synchronize(Stream s) = 0;
  // An event that completes once the work enqueued on `on` so far has (`on` may be a stream of
  // the caller's, or null: the legacy default stream); `s` waits for it; the event is released.
  virtual Status record(Stream on, Event *e) = 0;
  virtual Status wait(Stream s, Event e) = 0;
  virtual void destroy_event(Event e) = 0;

  // Wire codecs other than kNative: encode count floats into codec::wire_size bytes, decode them.
  // `first` is src[0]'s index in the caller's buffer, for the error message.
  virtual Status encode(codec::Wire w, const float *src, size_t count, uint8_t *dst, size_t first,
                        Stream s) = 0;
  virtual Status decode(codec::Wire w, const uint8_t *src, size_t count, float *dst, Stream s) = 0;
  // dst[i] = mine[i] + decoded element i of a block-quantized wire (INT8, INT4, FP8; dst may
  // equal mine).
  virtual Status decode_add(codec::Wire w, const uint8_t *src, size_t count, float *dst,
                            const float *mine, Stream s) = 0;
  // codec::reduce_into and codec::finish_avg.
  virtual Status reduce_into(codec::Dtype t, codec::RedOp op, void *dst, const void *a,
                             const void *b, size_t count, Stream s) = 0;
  virtual Status finish_avg(codec::Dtype t, void *dst, size_t count, int by, Stream s) = 0;
  // out[i] = codec::hash64 of block i (codec::kHashBlock bytes, the last shorter) of the len
  // bytes at data: codec::hash_blocks(len) hashes into device memory.
  virtual Status hash_blocks(const void *data, size_t len, uint64_t *out, Stream s) = 0;
};

// The device whose memory p points into, or null (host memory, or this build has no CUDA). The
// objects live as long as the process.
Device *device_of(const void *p);

// Devices other than CUDA's (the test suite's emulated GPU): device_of asks the finder first, and
// takes the device it returns unless that is null. One finder at a time; null removes it.
using DeviceFinder = Device *(*)(const void *p);
void set_device_finder(DeviceFinder finder);

}  // namespace wccl::gpu
