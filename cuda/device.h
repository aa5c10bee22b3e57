// The GPU codec kernels and the device memory helpers around them (DESIGN §7), behind a host
// header with no CUDA types. Built from cuda/kernels.cu when Meson finds CUDA; otherwise
// cuda/stubs.cc provides the same functions, which report UNSUPPORTED (and is_device_pointer is
// false), so nothing above this header changes with the build.
//
// The kernels compute exactly what the CPU kernels (lib/codec/kernels.h) compute, bit for bit:
// the same INT8 format and rounding, every multiply and add rounded separately (no fused
// multiply-add), the same 16-bit conversions. The CPU kernels are their test oracle.
//
// Pointers are device memory (or managed memory). `stream` is a cudaStream_t, null for the
// default stream. The functions enqueue and return: results are ready once the stream has
// reached them (synchronize), except int8_encode, which waits for its own result to report a
// value it cannot encode. Encoded input is trusted: check it with codec::validate on the host
// copy before it goes to the device.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/reduce.h"
#include "core/status.h"

namespace wccl::gpu {

// Built with CUDA, and a device is present (decided once).
bool available();
// p points to device memory (not host, not pinned host memory). False without CUDA.
bool is_device_pointer(const void *p);

Status alloc(void **p, size_t bytes);  // device memory
void free(void *p);                    // from alloc; null is ignored
// Copies between any two of host and device memory, then waits for the copy.
Status copy(void *dst, const void *src, size_t bytes);
Status synchronize(void *stream);

// lib/codec/kernels.h's kernels on the device. int8_encode returns INVALID_ARGUMENT naming the
// first element that cannot be encoded, as codec::encode does.
Status int8_encode(const float *src, size_t n, uint8_t *dst, void *stream);
Status int8_decode(const uint8_t *src, size_t n, float *dst, void *stream);
Status int8_decode_add(const uint8_t *src, size_t n, float *dst, const float *mine, void *stream);
Status f16_encode(const float *src, size_t n, uint16_t *dst, void *stream);
Status f16_decode(const uint16_t *src, size_t n, float *dst, void *stream);
Status bf16_encode(const float *src, size_t n, uint16_t *dst, void *stream);
Status bf16_decode(const uint16_t *src, size_t n, float *dst, void *stream);
// dst[i] = a[i] (op) b[i] for every dtype and op; dst may equal a. AVG combines as SUM.
Status reduce_into(codec::Dtype t, codec::RedOp op, void *dst, const void *a, const void *b, size_t n, void *stream);

}  // namespace wccl::gpu
