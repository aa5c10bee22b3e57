// The GPU codec kernels and the device memory helpers around them (DESIGN §7), behind a host
// header with no CUDA types. Built from kernels.cu when Meson finds CUDA; otherwise
// kernels_stubs.cc provides the same functions, which report UNSUPPORTED (and device_ordinal is
// -1), so nothing above this header changes with the build. device.h builds on these.
//
// The kernels compute exactly what the CPU kernels (lib/codec/kernels.h) compute, bit for bit:
// the same block formats and rounding, every multiply and add rounded separately (no fused
// multiply-add), the same 16-bit conversions. The CPU kernels are their test oracle.
//
// Pointers are device memory (or managed memory) of the current device. `stream` is a
// cudaStream_t, null for the default stream. The functions enqueue and return: results are ready
// once the stream has reached them (synchronize), except block_encode, which waits for its own
// result to report a value it cannot encode. Encoded input is trusted: check it with
// codec::validate on the host copy before it goes to the device.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/reduce.h"
#include "codec/wire.h"
#include "core/status.h"

namespace wccl::gpu {

// Built with CUDA, and a device is present (decided once).
bool available();
// The ordinal of the device whose memory p points to (device or managed memory), or -1: host
// memory, pinned host memory, or no CUDA.
int device_ordinal(const void *p);
// Makes `ordinal` the calling thread's current device, on which the calls below allocate and run.
Status set_device(int ordinal);

Status alloc(void **p, size_t bytes);         // device memory
void free(void *p);                           // from alloc; null is ignored
Status alloc_pinned(void **p, size_t bytes);  // page-locked host memory
void free_pinned(void *p);                    // from alloc_pinned; null is ignored
// Copies between any two of host and device memory, then waits for the copy.
Status copy(void *dst, const void *src, size_t bytes);
// Enqueues the copy on the stream.
Status copy_async(void *dst, const void *src, size_t bytes, void *stream);
Status synchronize(void *stream);
// A stream that does not synchronize with the legacy default stream.
Status stream_create(void **stream);
void stream_destroy(void *stream);
// A new event recorded on `stream` (null: the legacy default stream): it completes once the work
// enqueued there so far has. stream_wait makes `stream` wait for it.
Status event_record(void *stream, void **event);
Status stream_wait(void *stream, void *event);
void event_destroy(void *event);

// lib/codec/kernels.h's block-quantized wires (INT8, INT4, FP8: codec::block_format) on the
// device. block_encode returns INVALID_ARGUMENT naming the first element that cannot be encoded,
// as codec::encode does (`first` is src[0]'s index in the caller's buffer). block_decode_add:
// dst[i] = mine[i] + decoded element i (dst may equal mine).
Status block_encode(codec::Wire w, const float *src, size_t n, uint8_t *dst, void *stream,
                    size_t first = 0);
Status block_decode(codec::Wire w, const uint8_t *src, size_t n, float *dst, void *stream);
Status block_decode_add(codec::Wire w, const uint8_t *src, size_t n, float *dst, const float *mine,
                        void *stream);
Status f16_encode(const float *src, size_t n, uint16_t *dst, void *stream);
Status f16_decode(const uint16_t *src, size_t n, float *dst, void *stream);
Status bf16_encode(const float *src, size_t n, uint16_t *dst, void *stream);
Status bf16_decode(const uint16_t *src, size_t n, float *dst, void *stream);
// dst[i] = a[i] (op) b[i] for every dtype and op; dst may equal a. AVG combines as SUM.
Status reduce_into(codec::Dtype t, codec::RedOp op, void *dst, const void *a, const void *b,
                   size_t n, void *stream);
// dst[i] /= by, as codec::finish_avg.
Status finish_avg(codec::Dtype t, void *dst, size_t n, int by, void *stream);
// out[i] = codec::hash64 of block i of the len bytes at data (codec/hash.h: codec::hash_blocks(len)
// blocks of codec::kHashBlock bytes), one thread per block.
Status hash_blocks(const void *data, size_t len, uint64_t *out, void *stream);

}  // namespace wccl::gpu
