// nccl_group() of a build without NCCL.
#include "hier/nccl_group.h"

namespace wccl::hier {

Result<std::unique_ptr<LocalGroup>> nccl_group(void *) {
  return WCCL_ERROR(WCCL_ERR_UNSUPPORTED,
                    "this wccl was built without NCCL (meson option nccl; the CUDA toolkit and "
                    "NCCL, from the system or "
                    "the nvidia-nccl-cu13 wheel, are needed): use wccl_local_group_threads");
}

}  // namespace wccl::hier
