// The caller's NCCL communicator as a LocalGroup (wccl_local_group_nccl): device buffers on the
// communicator's GPU, collectives on a stream of the group's own. Built from cuda/nccl_group.cc
// when NCCL is found (meson option `nccl`); otherwise nccl_group() is UNSUPPORTED.
#pragma once

#include <memory>

#include "core/status.h"
#include "hier/local_group.h"

namespace wccl::hier {

// nccl_comm is an ncclComm_t, which the caller keeps and must not use while an operation of the
// group is in flight; it must outlive the group.
Result<std::unique_ptr<LocalGroup>> nccl_group(void *nccl_comm);

}  // namespace wccl::hier
