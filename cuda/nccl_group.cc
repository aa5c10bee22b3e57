// hier/nccl_group.h over NCCL and the CUDA runtime. Each collective is enqueued on the group's own
// stream and waited for: NCCL offers no wait with a timeout, so the wait polls the stream and the
// communicator's asynchronous error every 100 us (as NCCL's own blocking calls do) until the
// operation's deadline.
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>
#include <thread>

#include "hier/nccl_group.h"

namespace wccl::hier {
namespace {

Status cuda_error(cudaError_t e, const char *what) {
  return WCCL_ERROR(WCCL_ERR_CUDA, "%s: %s", what, cudaGetErrorString(e));
}

Status nccl_error(ncclResult_t r, const char *what) {
  return WCCL_ERROR(WCCL_ERR_CUDA, "%s: NCCL %s", what, ncclGetErrorString(r));
}

#define WCCL_CUDA_OK(call, what)                        \
  do {                                                  \
    const cudaError_t e_ = (call);                      \
    if (e_ != cudaSuccess) return cuda_error(e_, what); \
  } while (0)
#define WCCL_NCCL_OK(call, what)                        \
  do {                                                  \
    const ncclResult_t r_ = (call);                     \
    if (r_ != ncclSuccess) return nccl_error(r_, what); \
  } while (0)

ncclDataType_t nccl_type(codec::Dtype t) {
  switch (t) {
    case codec::Dtype::kF32:
      return ncclFloat32;
    case codec::Dtype::kF64:
      return ncclFloat64;
    case codec::Dtype::kF16:
      return ncclFloat16;
    case codec::Dtype::kBF16:
      return ncclBfloat16;
    case codec::Dtype::kI8:
      return ncclInt8;
    case codec::Dtype::kU8:
      return ncclUint8;
    case codec::Dtype::kI32:
      return ncclInt32;
    case codec::Dtype::kI64:
      return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(codec::RedOp op) {
  switch (op) {
    case codec::RedOp::kSum:
    case codec::RedOp::kAvg:
      return ncclSum;  // the schedule divides once, after the last step
    case codec::RedOp::kMin:
      return ncclMin;
    case codec::RedOp::kMax:
      return ncclMax;
    case codec::RedOp::kProd:
      return ncclProd;
  }
  return ncclSum;
}

class NcclGroup final : public LocalGroup {
 public:
  NcclGroup(ncclComm_t comm, int rank, int size, int device, cudaStream_t stream, int32_t *outcomes,
            int32_t *host_outcomes)
      : comm_(comm),
        rank_(rank),
        size_(size),
        device_(device),
        stream_(stream),
        outcomes_(outcomes),
        host_outcomes_(host_outcomes) {}
  // A broken group may still have a collective on its stream that never ends (until the caller's
  // ncclCommAbort): its stream and buffers are then left as they are.
  ~NcclGroup() override {
    if (!broken_.ok()) return;
    (void)cudaSetDevice(device_);
    (void)cudaStreamSynchronize(stream_);
    (void)cudaFree(outcomes_);
    (void)cudaFreeHost(host_outcomes_);
    (void)cudaStreamDestroy(stream_);
  }
  NcclGroup(const NcclGroup &) = delete;
  NcclGroup &operator=(const NcclGroup &) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char *kind() const override { return "NCCL"; }

  Status takes(const gpu::Device *device) const override {
    const std::string mine = "cuda:" + std::to_string(device_);
    if (device != nullptr && device->name() == mine) return Status();
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                      "an NCCL local group takes buffers in its communicator's GPU (%s), not %s",
                      mine.c_str(), device != nullptr ? device->name().c_str() : "host memory");
  }

  Status reduce_scatter(algo::Memory &, const void *in, void *shard, size_t shard_count,
                        codec::Dtype t, codec::RedOp op, Clock::time_point deadline) override {
    WCCL_RETURN_IF_ERROR(usable());
    WCCL_NCCL_OK(
        ncclReduceScatter(in, shard, shard_count, nccl_type(t), nccl_op(op), comm_, stream_),
        "ncclReduceScatter");
    return finish(deadline, "the node's reduce-scatter");
  }

  Status all_gather(algo::Memory &, const void *shard, void *out, size_t shard_count,
                    codec::Dtype t, Clock::time_point deadline) override {
    WCCL_RETURN_IF_ERROR(usable());
    WCCL_NCCL_OK(ncclAllGather(shard, out, shard_count, nccl_type(t), comm_, stream_),
                 "ncclAllGather");
    return finish(deadline, "the node's all-gather");
  }

  // Through page-locked host memory, so that no copy blocks the thread before finish() polls.
  Status exchange(int32_t mine, std::vector<int32_t> *all, Clock::time_point deadline) override {
    WCCL_RETURN_IF_ERROR(usable());
    const size_t bytes = static_cast<size_t>(size_) * sizeof(int32_t);
    host_outcomes_[rank_] = mine;
    WCCL_CUDA_OK(cudaMemcpyAsync(outcomes_ + rank_, host_outcomes_ + rank_, sizeof(int32_t),
                                 cudaMemcpyHostToDevice, stream_),
                 "cudaMemcpyAsync");
    WCCL_NCCL_OK(ncclAllGather(outcomes_ + rank_, outcomes_, 1, ncclInt32, comm_, stream_),
                 "ncclAllGather");
    WCCL_CUDA_OK(cudaMemcpyAsync(host_outcomes_, outcomes_, bytes, cudaMemcpyDeviceToHost, stream_),
                 "cudaMemcpyAsync");
    WCCL_RETURN_IF_ERROR(finish(deadline, "the node's exchange of outcomes"));
    all->assign(host_outcomes_, host_outcomes_ + size_);
    return Status();
  }

  void abandon(const Status &why) override {
    if (broken_.ok()) broken_ = why;
  }

 private:
  Status usable() {
    if (!broken_.ok()) return broken_;
    WCCL_CUDA_OK(cudaSetDevice(device_), "cudaSetDevice");
    return Status();
  }

  // Waits for the stream; a failed or overdue collective breaks the group (the NCCL
  // communicator is then the caller's to abort: ncclCommAbort).
  Status finish(Clock::time_point deadline, const char *what) {
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return Status();
      if (q != cudaErrorNotReady) return broken_ = cuda_error(q, what);
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
          async != ncclInProgress) {
        return broken_ = nccl_error(async, what);
      }
      if (Clock::now() >= deadline) {
        return broken_ = WCCL_ERROR(WCCL_ERR_TIMEOUT,
                                    "%s did not finish within the operation's timeout (the NCCL "
                                    "communicator must be aborted: ncclCommAbort)",
                                    what);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  ncclComm_t comm_;
  int rank_, size_, device_;
  cudaStream_t stream_;
  int32_t *outcomes_;       // device memory: one outcome per rank
  int32_t *host_outcomes_;  // page-locked host memory: the same
  Status broken_;
};

}  // namespace

Result<std::unique_ptr<LocalGroup>> nccl_group(void *nccl_comm) {
  auto comm = static_cast<ncclComm_t>(nccl_comm);
  int rank = 0, size = 0, device = 0;
  WCCL_NCCL_OK(ncclCommUserRank(comm, &rank), "ncclCommUserRank");
  WCCL_NCCL_OK(ncclCommCount(comm, &size), "ncclCommCount");
  WCCL_NCCL_OK(ncclCommCuDevice(comm, &device), "ncclCommCuDevice");
  WCCL_CUDA_OK(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  WCCL_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
               "cudaStreamCreateWithFlags");
  const size_t bytes = static_cast<size_t>(size) * sizeof(int32_t);
  void *outcomes = nullptr, *host_outcomes = nullptr;
  cudaError_t e = cudaMalloc(&outcomes, bytes);
  if (e == cudaSuccess) e = cudaMallocHost(&host_outcomes, bytes);
  if (e != cudaSuccess) {
    (void)cudaFree(outcomes);
    (void)cudaStreamDestroy(stream);
    return cuda_error(e, "cudaMalloc");
  }
  return std::unique_ptr<LocalGroup>(new NcclGroup(comm, rank, size, device, stream,
                                                   static_cast<int32_t *>(outcomes),
                                                   static_cast<int32_t *>(host_outcomes)));
}

}  // namespace wccl::hier
