// A LocalGroup of threads of one process (wccl_local_group_threads): the ranks meet at a barrier
// and each reads the others' buffers directly, through the Memory the buffers are in (host memory,
// or one GPU's, whose bytes reach the reduction through host memory). The host twin of an NCCL
// communicator: the CPU tests run the hierarchical schedule over it.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "hier/local_group.h"

namespace wccl::hier {

class ThreadGroup final : public LocalGroup {
 public:
  // `size` members sharing one group; member i has rank i.
  static std::vector<std::unique_ptr<ThreadGroup>> create(int size);

  int rank() const override { return rank_; }
  int size() const override;
  const char *kind() const override { return "threads"; }
  Status takes(const gpu::Device *) const override { return Status(); }
  Status reduce_scatter(algo::Memory &m, const void *in, void *shard, size_t shard_count, codec::Dtype t,
                        codec::RedOp op, Clock::time_point deadline) override;
  Status all_gather(algo::Memory &m, const void *shard, void *out, size_t shard_count, codec::Dtype t,
                    Clock::time_point deadline) override;
  Status exchange(int32_t mine, std::vector<int32_t> *all, Clock::time_point deadline) override;

 private:
  // What the members publish to one another for one collective.
  struct Slot {
    const void *data = nullptr;
    int32_t value = 0;
  };
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Slot> slots;
    int arrived = 0;
    uint64_t generation = 0;
    Status broken;  // set once a member gave up waiting: every later call fails with it
  };
  ThreadGroup(std::shared_ptr<Shared> shared, int rank) : shared_(std::move(shared)), rank_(rank) {}
  // Publishes `slot` and waits until every member has published (a barrier), or fails.
  Status publish(const Slot &slot, Clock::time_point deadline);
  // Waits until every member has reached this point (their reads of the published data are done).
  Status barrier(Clock::time_point deadline);
  Status arrive(std::unique_lock<std::mutex> &lock, Clock::time_point deadline);
  const void *published(int rank) const;

  std::shared_ptr<Shared> shared_;
  int rank_;
};

}  // namespace wccl::hier
