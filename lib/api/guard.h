// The boundary between the C API and the C++ core: every exported function runs its body inside
// api_call(), which records a failing Status as the thread's last error and turns any exception
// that escaped the core into a result code, so that none crosses into C.
#pragma once

#include <new>

#include "core/status.h"

namespace wccl {

// Records status as this thread's wccl_last_error() detail.
void set_last_error(const Status &status);

// The refusal of opts->cuda_stream given with host buffers to `fn`: UNSUPPORTED in a library
// without CUDA, else INVALID_ARGUMENT.
Status stream_with_host_buffers(const char *fn);

template <typename Fn>
wccl_result_t api_call(Fn &&fn) noexcept {
  try {
    Status status = fn();
    if (!status.ok()) set_last_error(status);
    return status.code();
  } catch (const std::bad_alloc &) {
    set_last_error(WCCL_ERROR(WCCL_ERR_NO_MEMORY, "allocation failed"));
    return WCCL_ERR_NO_MEMORY;
  } catch (...) {
    set_last_error(WCCL_ERROR(WCCL_ERR_INTERNAL, "unexpected exception inside wccl"));
    return WCCL_ERR_INTERNAL;
  }
}

}  // namespace wccl

#define WCCL_CHECK_ARG(cond, ...)                                           \
  do {                                                                      \
    if (!(cond)) return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, __VA_ARGS__); \
  } while (0)
