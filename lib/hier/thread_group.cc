#include "hier/thread_group.h"

namespace wccl::hier {

std::vector<std::unique_ptr<ThreadGroup>> ThreadGroup::create(int size) {
  auto shared = std::make_shared<Shared>();
  shared->slots.resize(static_cast<size_t>(size));
  std::vector<std::unique_ptr<ThreadGroup>> out;
  out.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r)
    out.push_back(std::unique_ptr<ThreadGroup>(new ThreadGroup(shared, r)));
  return out;
}

int ThreadGroup::size() const { return static_cast<int>(shared_->slots.size()); }

void ThreadGroup::abandon(const Status &why) {
  std::lock_guard<std::mutex> lock(shared_->mu);
  if (shared_->broken.ok())
    shared_->broken = why.ok() ? WCCL_ERROR(WCCL_ERR_INTERNAL, "local group abandoned") : why;
  shared_->cv.notify_all();
}

Status ThreadGroup::publish(const Slot &slot, Clock::time_point deadline,
                            std::vector<Slot> *slots) {
  Shared &s = *shared_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.broken.ok()) return s.broken;
  s.slots[static_cast<size_t>(rank_)] = slot;
  const uint64_t round = s.publish_round;
  if (++s.published == size()) {
    s.published = 0;
    ++s.publish_round;
    s.cv.notify_all();
  } else if (!s.cv.wait_until(lock, deadline,
                              [&] { return s.publish_round != round || !s.broken.ok(); })) {
    s.broken = WCCL_ERROR(
        WCCL_ERR_TIMEOUT,
        "local rank %d waited past the operation's timeout for the other ranks of its node", rank_);
    s.cv.notify_all();
    return s.broken;
  } else if (s.publish_round == round) {
    return s.broken;  // broken while this rank waited: the round never completes
  }
  *slots = s.slots;  // every rank is past this round's posts; none posts again before drain()
  lock.unlock();
  for (size_t r = 0; r < slots->size(); ++r) {
    const Slot &o = (*slots)[r];
    if (o.kind != slot.kind || o.count != slot.count || o.dtype != slot.dtype ||
        o.host != slot.host) {
      drain();
      return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                        "local rank %zu called another collective, count, dtype or memory (%s) "
                        "than local rank %d (%s)",
                        r, o.host ? "host" : "device", rank_, slot.host ? "host" : "device");
    }
  }
  return Status();
}

void ThreadGroup::drain() {
  Shared &s = *shared_;
  std::unique_lock<std::mutex> lock(s.mu);
  const uint64_t round = s.drain_round;
  if (++s.drained == size()) {
    s.drained = 0;
    ++s.drain_round;
    s.cv.notify_all();
    return;
  }
  s.cv.wait(lock,
            [&] { return s.drain_round != round; });  // bounded: every rank that published comes
}

Status ThreadGroup::reduce_scatter(algo::Memory &m, const void *in, void *shard, size_t shard_count,
                                   codec::Dtype t, codec::RedOp op, Clock::time_point deadline) {
  std::vector<Slot> slots;
  WCCL_RETURN_IF_ERROR(publish({in, 0, 1, shard_count, t, m.host()}, deadline, &slots));
  const size_t bytes = shard_count * codec::dtype_size(t);
  const size_t offset = static_cast<size_t>(rank_) * bytes;
  Status st;
  std::vector<uint8_t> staged;  // another rank's block in host memory, where reduce_into takes it
  for (size_t r = 0; r < slots.size() && st.ok() && bytes > 0; ++r) {
    const auto *block = static_cast<const uint8_t *>(slots[r].data) + offset;
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
  drain();
  return st;
}

Status ThreadGroup::all_gather(algo::Memory &m, const void *shard, void *out, size_t shard_count,
                               codec::Dtype t, Clock::time_point deadline) {
  std::vector<Slot> slots;
  WCCL_RETURN_IF_ERROR(publish({shard, 0, 2, shard_count, t, m.host()}, deadline, &slots));
  const size_t bytes = shard_count * codec::dtype_size(t);
  Status st;
  for (size_t r = 0; r < slots.size() && st.ok() && bytes > 0; ++r) {
    st = m.copy(static_cast<uint8_t *>(out) + r * bytes, slots[r].data, bytes);
  }
  drain();
  return st;
}

Status ThreadGroup::exchange(int32_t mine, std::vector<int32_t> *all, Clock::time_point deadline) {
  std::vector<Slot> slots;
  WCCL_RETURN_IF_ERROR(publish({nullptr, mine, 3, 1, codec::Dtype::kI32, true}, deadline, &slots));
  drain();
  all->clear();
  for (const Slot &s : slots) all->push_back(s.value);
  return Status();
}

}  // namespace wccl::hier
