// The ranks of one node as the hierarchical all-reduce sees them (docs/algorithms.md,
// "Hierarchical all-reduce"): the collectives it runs inside the node, with two implementations,
// ThreadGroup (threads of one process, any memory: hier/thread_group.h) and the caller's NCCL
// communicator (cuda/nccl_group.cc). The schedule (hier/hier_allreduce.h) is written once over
// this interface, so the CPU tests run the code a GPU node runs.
//
// Each call returns once its result is in place, or fails: TIMEOUT past `deadline`, CUDA for a
// device error, INVALID_ARGUMENT when the ranks' calls do not match. Every rank of the group calls
// the same collectives in the same order; a rank that cannot (an error of its own between two
// collectives) abandons the group, and from then on every call of every rank fails: the ranks never
// pair one collective with another. A group that failed stays broken.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "algo/memory.h"
#include "codec/reduce.h"
#include "core/status.h"
#include "gpu/device.h"

namespace wccl::hier {

class LocalGroup {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~LocalGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char *kind() const = 0;  // "threads", "NCCL": for messages
  // OK if the group can work on buffers in `device`'s memory (null: host memory); else
  // INVALID_ARGUMENT naming what it takes.
  virtual Status takes(const gpu::Device *device) const = 0;
  // shard (shard_count elements in m) = block rank() of the reduction over the group's ranks of
  // `in` (size() * shard_count elements in m). AVG combines as SUM (the caller divides).
  virtual Status reduce_scatter(algo::Memory &m, const void *in, void *shard, size_t shard_count,
                                codec::Dtype t, codec::RedOp op, Clock::time_point deadline) = 0;
  // out (size() * shard_count elements in m) = every rank's shard, in rank order.
  virtual Status all_gather(algo::Memory &m, const void *shard, void *out, size_t shard_count,
                            codec::Dtype t, Clock::time_point deadline) = 0;
  // *all = every rank's `mine`, by rank.
  virtual Status exchange(int32_t mine, std::vector<int32_t> *all, Clock::time_point deadline) = 0;
  // Breaks the group (if not broken already): every rank's current and later calls fail with `why`.
  virtual void abandon(const Status &why) = 0;
};

}  // namespace wccl::hier
