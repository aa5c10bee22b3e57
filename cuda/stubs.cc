// cuda/device.h in a build without CUDA: the same symbols, reporting UNSUPPORTED.
#include "device.h"

namespace wccl::gpu {
namespace {

Status unsupported() { return WCCL_ERROR(WCCL_ERR_UNSUPPORTED, "this build of wccl has no CUDA support"); }

}  // namespace

bool available() { return false; }
bool is_device_pointer(const void *) { return false; }
Status alloc(void **p, size_t) {
  *p = nullptr;
  return unsupported();
}
void free(void *) {}
Status copy(void *, const void *, size_t) { return unsupported(); }
Status synchronize(void *) { return unsupported(); }
Status int8_encode(const float *, size_t, uint8_t *, void *) { return unsupported(); }
Status int8_decode(const uint8_t *, size_t, float *, void *) { return unsupported(); }
Status int8_decode_add(const uint8_t *, size_t, float *, const float *, void *) { return unsupported(); }
Status f16_encode(const float *, size_t, uint16_t *, void *) { return unsupported(); }
Status f16_decode(const uint16_t *, size_t, float *, void *) { return unsupported(); }
Status bf16_encode(const float *, size_t, uint16_t *, void *) { return unsupported(); }
Status bf16_decode(const uint16_t *, size_t, float *, void *) { return unsupported(); }
Status reduce_into(codec::Dtype, codec::RedOp, void *, const void *, const void *, size_t, void *) { return unsupported(); }

}  // namespace wccl::gpu
