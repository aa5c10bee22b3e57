#include "hier/thread_group.h"

#include <cstring>

namespace wccl::hier {

std::vector<std::unique_ptr<ThreadGroup>> ThreadGroup::create(int size) {
  auto shared = std::make_shared<Shared>();
  shared->slots.resize(static_cast<size_t>(size));
  std::vector<std::unique_ptr<ThreadGroup>> out;
  out.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) out.push_back(std::unique_ptr<ThreadGroup>(new ThreadGroup(shared, r)));
  return out;
}

int ThreadGroup::size() const { return static_cast<int>(shared_->slots.size()); }

Status ThreadGroup::arrive(std::unique_lock<std::mutex> &lock, Clock::time_point deadline) {
  Shared &s = *shared_;
  if (!s.broken.ok()) return s.broken;
  const uint64_t generation = s.generation;
  if (++s.arrived == size()) {
    s.arrived = 0;
    ++s.generation;
    s.cv.notify_all();
    return Status();
  }
  if (s.cv.wait_until(lock, deadline, [&] { return s.generation != generation || !s.broken.ok(); })) {
    return s.generation != generation ? Status() : s.broken;
  }
  s.broken = WCCL_ERROR(WCCL_ERR_TIMEOUT, "local rank %d waited past the operation's timeout for the other ranks of its node's group",
                        rank_);
  s.cv.notify_all();
  return s.broken;
}

Status ThreadGroup::publish(const Slot &slot, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(shared_->mu);
  if (!shared_->broken.ok()) return shared_->broken;
  shared_->slots[static_cast<size_t>(rank_)] = slot;
  return arrive(lock, deadline);
}

Status ThreadGroup::barrier(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(shared_->mu);
  return arrive(lock, deadline);
}

// Written by its member before the barrier that publish() passed, read after it: the barrier's
// mutex orders the two.
const void *ThreadGroup::published(int rank) const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->slots[static_cast<size_t>(rank)].data;
}

Status ThreadGroup::reduce_scatter(algo::Memory &m, const void *in, void *shard, size_t shard_count, codec::Dtype t,
                                   codec::RedOp op, Clock::time_point deadline) {
  WCCL_RETURN_IF_ERROR(publish({in, 0}, deadline));
  const size_t bytes = shard_count * codec::dtype_size(t);
  const size_t offset = static_cast<size_t>(rank_) * bytes;
  Status st;
  std::vector<uint8_t> staged;  // another rank's block in host memory, where reduce_into takes it
  for (int r = 0; r < size() && st.ok() && bytes > 0; ++r) {
    const auto *block = static_cast<const uint8_t *>(published(r)) + offset;
    if (r == 0) {
      st = m.copy(shard, block, bytes);
      continue;
    }
    const uint8_t *got = block;
    if (!m.host()) {
      staged.resize(bytes);
      st = m.to_host(staged.data(), block, bytes);
      got = staged.data();
    }
    if (st.ok()) st = m.reduce_into(t, op, shard, shard, got, shard_count);
  }
  // Every rank waits until the others have read its input, even after an error of its own.
  const Status met = barrier(deadline);
  return st.ok() ? met : st;
}

Status ThreadGroup::all_gather(algo::Memory &m, const void *shard, void *out, size_t shard_count, codec::Dtype t,
                               Clock::time_point deadline) {
  WCCL_RETURN_IF_ERROR(publish({shard, 0}, deadline));
  const size_t bytes = shard_count * codec::dtype_size(t);
  Status st;
  for (int r = 0; r < size() && st.ok() && bytes > 0; ++r) {
    st = m.copy(static_cast<uint8_t *>(out) + static_cast<size_t>(r) * bytes, published(r), bytes);
  }
  const Status met = barrier(deadline);
  return st.ok() ? met : st;
}

Status ThreadGroup::exchange(int32_t mine, std::vector<int32_t> *all, Clock::time_point deadline) {
  WCCL_RETURN_IF_ERROR(publish({nullptr, mine}, deadline));
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    all->clear();
    for (const Slot &s : shared_->slots) all->push_back(s.value);
  }
  return barrier(deadline);
}

}  // namespace wccl::hier
