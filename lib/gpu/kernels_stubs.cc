// lib/gpu/kernels.h in a build without CUDA: the same symbols, reporting UNSUPPORTED.
#include "gpu/kernels.h"

namespace wccl::gpu {
namespace {

Status unsupported() {
  return WCCL_ERROR(WCCL_ERR_UNSUPPORTED, "this build of wccl has no CUDA support");
}

}  // namespace

bool available() { return false; }
int device_ordinal(const void *) { return -1; }
Status set_device(int) { return unsupported(); }
Status alloc(void **p, size_t) {
  *p = nullptr;
  return unsupported();
}
void free(void *) {}
Status alloc_pinned(void **p, size_t) {
  *p = nullptr;
  return unsupported();
}
void free_pinned(void *) {}
Status copy(void *, const void *, size_t) { return unsupported(); }
Status copy_async(void *, const void *, size_t, void *) { return unsupported(); }
Status synchronize(void *) { return unsupported(); }
Status stream_create(void **stream) {
  *stream = nullptr;
  return unsupported();
}
void stream_destroy(void *) {}
Status event_record(void *, void **event) {
  *event = nullptr;
  return unsupported();
}
Status stream_wait(void *, void *) { return unsupported(); }
void event_destroy(void *) {}
Status block_encode(codec::Wire, const float *, size_t, uint8_t *, void *, size_t) {
  return unsupported();
}
Status block_decode(codec::Wire, const uint8_t *, size_t, float *, void *) { return unsupported(); }
Status block_decode_add(codec::Wire, const uint8_t *, size_t, float *, const float *, void *) {
  return unsupported();
}
Status f16_encode(const float *, size_t, uint16_t *, void *) { return unsupported(); }
Status f16_decode(const uint16_t *, size_t, float *, void *) { return unsupported(); }
Status bf16_encode(const float *, size_t, uint16_t *, void *) { return unsupported(); }
Status bf16_decode(const uint16_t *, size_t, float *, void *) { return unsupported(); }
Status reduce_into(codec::Dtype, codec::RedOp, void *, const void *, const void *, size_t, void *) {
  return unsupported();
}
Status finish_avg(codec::Dtype, void *, size_t, int, void *) { return unsupported(); }
Status hash_blocks(const void *, size_t, uint64_t *, void *) { return unsupported(); }

}  // namespace wccl::gpu
