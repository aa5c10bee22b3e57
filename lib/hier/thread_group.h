// A LocalGroup of threads of one process (wccl_local_group_threads): the ranks meet at a barrier
// and each reads the others' buffers directly, through the Memory the buffers are in (host memory,
// or one GPU's, whose bytes reach the reduction through host memory). The host twin of an NCCL
// communicator: the CPU tests run the hierarchical schedule over it.
//
// Each collective has two meetings: `publish`, where every rank posts its buffer and its call (and
// which fails for all of them or for none: past a rank's deadline, or once the group is broken),
// then the reads, then `drain`, where each rank waits until every rank has finished reading, so
// that no buffer is released or reused while another rank reads it. Every rank that passed publish
// reaches drain after its bounded reads, so drain waits without a deadline, even in a broken group.
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
  Status reduce_scatter(algo::Memory &m, const void *in, void *shard, size_t shard_count,
                        codec::Dtype t, codec::RedOp op, Clock::time_point deadline) override;
  Status all_gather(algo::Memory &m, const void *shard, void *out, size_t shard_count,
                    codec::Dtype t, Clock::time_point deadline) override;
  Status exchange(int32_t mine, std::vector<int32_t> *all, Clock::time_point deadline) override;
  void abandon(const Status &why) override;

 private:
  // What a rank posts for one collective: its buffer or value, and its call, which must match.
  struct Slot {
    const void *data = nullptr;
    int32_t value = 0;
    int kind = 0;  // 1 reduce-scatter, 2 all-gather, 3 exchange
    size_t count = 0;
    codec::Dtype dtype = codec::Dtype::kF32;
    bool host = true;
  };
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Slot> slots;
    int published = 0, drained = 0;
    uint64_t publish_round = 0, drain_round = 0;
    Status broken;  // once set, every later publish fails with it
  };
  ThreadGroup(std::shared_ptr<Shared> shared, int rank) : shared_(std::move(shared)), rank_(rank) {}
  // Posts `slot` and waits until every rank has; then checks that their calls match. On success
  // *slots is every rank's post.
  Status publish(const Slot &slot, Clock::time_point deadline, std::vector<Slot> *slots);
  void drain();

  std::shared_ptr<Shared> shared_;
  int rank_;
};

}  // namespace wccl::hier
