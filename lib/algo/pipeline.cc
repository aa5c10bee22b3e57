#include "algo/pipeline.h"

#include <algorithm>

#include "algo/payload.h"

namespace wccl::algo {
namespace {

using Ticket = Exchange::Ticket;
constexpr Ticket kNotIssued = std::numeric_limits<Ticket>::max();
constexpr Ticket kNothingSent = std::numeric_limits<Ticket>::max() - 1;

// A free index of a pool (frames or copies), growing the pool by one where none is free.
template <typename Pool>
size_t take(Pool &pool, std::vector<size_t> &free) {
  if (free.empty()) {
    pool.emplace_back();
    free.push_back(pool.size() - 1);
  }
  const size_t i = free.back();
  free.pop_back();
  return i;
}

}  // namespace

Outbox::Outbox(Exchange &ex, Memory &mem, size_t slots, size_t es, Compress compress)
    : ex_(ex), mem_(mem), slots_(slots, kNotIssued), es_(es), codec_(compress, 1) {}

Status Outbox::send(size_t slot, int peer, uint32_t tag, const void *data, size_t len,
                    bool from_buffer) {
  Ticket t = kNothingSent;
  if (len != 0) {
    reap();
    size_t copy = kNone;
    if (from_buffer && !mem_.host()) {
      copy = take(copies_, free_copies_);
      uint8_t *bytes = nullptr;
      Status copied = copies_[copy].reserve(mem_, GrowingBytes::Kind::kHost, len, &bytes);
      if (copied.ok()) copied = mem_.to_host(bytes, data, len);
      if (!copied.ok()) {
        free_copies_.push_back(copy);
        return copied;
      }
      data = bytes;
    }
    const size_t frame = take(frames_, free_frames_);
    size_t wire = len;
    const uint8_t *bytes =
        codec_.encode(0, static_cast<const uint8_t *>(data), len, es_, &frames_[frame], &wire);
    const bool raw = wire == len;
    if (raw) free_frames_.push_back(frame);
    if (!raw && copy != kNone) {  // the frame holds the bytes now
      free_copies_.push_back(copy);
      copy = kNone;
    }
    t = ex_.send(peer, tag, bytes, wire);
    in_flight_.push_back({t, wire, raw ? kNone : frame, copy});
  }
  if (slot != kNoSlot) slots_[slot] = t;
  return Status();
}

Status Outbox::wait(size_t slot) {
  const Ticket t = slots_[slot];
  if (t == kNotIssued)
    return WCCL_ERROR(WCCL_ERR_INTERNAL, "a step waits for send slot %zu, never issued", slot);
  return t == kNothingSent ? Status() : ex_.wait(t);
}

bool Outbox::done(size_t slot) const {
  const Ticket t = slots_[slot];
  return t == kNothingSent || (t != kNotIssued && ex_.done(t));
}

// Sends complete in order on each link but not across links: retire the finished ones at the
// front, telling the codec (its link probe) and freeing what they read.
void Outbox::reap() {
  while (!in_flight_.empty() && ex_.done(in_flight_.front().ticket)) {
    const InFlight &f = in_flight_.front();
    codec_.sent(f.wire, f.frame == kNone);
    if (f.frame != kNone) free_frames_.push_back(f.frame);
    if (f.copy != kNone) free_copies_.push_back(f.copy);
    in_flight_.pop_front();
  }
}

Pipeline::Pipeline(Exchange &ex, const Collective &c, Undo *undo, size_t slots, size_t es)
    : ex_(ex),
      mem_(c.memory != nullptr ? *c.memory : host_memory()),
      undo_(undo),
      outbox_(ex, mem_, slots, es, c.compress),
      es_(es),
      payload_(make_payload(*this, c.wire, c.dtype, c.op)) {}

Pipeline::~Pipeline() { ex_.finish(); }

void Pipeline::receive(int peer, uint32_t tag, size_t len, Action then) {
  steps_.push_back({peer, tag, nullptr, len, false, kNoSlot, std::move(then)});
}

void Pipeline::land(int peer, uint32_t tag, uint8_t *dst, size_t len, bool in_buffer, size_t gate,
                    Action then) {
  steps_.push_back({peer, tag, dst, len, in_buffer, gate, std::move(then)});
}

Status Pipeline::run() {
  // A failure of this member's own (a NaN the wire cannot carry) becomes the exchange's, so the
  // channel's abort at ~Pipeline names it rather than the messages left in flight.
  Status st = run_steps();
  if (!st.ok()) ex_.cancel(st);
  return st;
}

Status Pipeline::run_steps() {
  const bool device = !mem_.host();
  auto staged = [&](const Step &s) { return s.dst == nullptr || (s.in_buffer && device); };
  size_t slot_bytes = 0;
  for (const Step &s : steps_) {
    if (staged(s)) slot_bytes = std::max(slot_bytes, s.len);
  }
  WCCL_RETURN_IF_ERROR(mem_.host_bytes(slot_bytes * kWindow, &staging_));
  auto landing = [&](size_t k) {
    return staged(steps_[k]) ? staging_.get() + (k % kWindow) * slot_bytes : steps_[k].dst;
  };
  std::vector<Ticket> recvs(steps_.size(), kNotIssued);
  size_t posted = 0;
  auto post = [&](size_t k) -> Status {
    const Step &s = steps_[k];
    if (s.len == 0) {
      recvs[k] = kNothingSent;
      return Status();
    }
    if (s.in_buffer && !device) WCCL_RETURN_IF_ERROR(will_write(s.dst, s.len));
    recvs[k] = ex_.recv(s.peer, s.tag, landing(k), s.len, /*any_length=*/true);
    return Status();
  };
  for (size_t k = 0; k < steps_.size(); ++k) {
    while (posted < steps_.size() && posted < k + kWindow &&
           (steps_[posted].gate == kNoSlot || outbox_.done(steps_[posted].gate))) {
      WCCL_RETURN_IF_ERROR(post(posted++));
    }
    if (posted == k) {
      if (steps_[k].gate != kNoSlot) WCCL_RETURN_IF_ERROR(outbox_.wait(steps_[k].gate));
      WCCL_RETURN_IF_ERROR(post(posted++));
    }
    const Step &s = steps_[k];
    uint8_t *at = landing(k);
    if (recvs[k] != kNothingSent) {
      WCCL_RETURN_IF_ERROR(ex_.wait(recvs[k]));
      const size_t got = ex_.length(recvs[k]);
      if (got != s.len) WCCL_RETURN_IF_ERROR(unzstd_.decompress(at, got, es_, at, s.len));
      if (s.dst != nullptr && at != s.dst) {  // a device buffer, through host staging
        WCCL_RETURN_IF_ERROR(will_write(s.dst, s.len));
        WCCL_RETURN_IF_ERROR(mem_.from_host(s.dst, at, s.len));
      }
    }
    WCCL_RETURN_IF_ERROR(s.then(at));
  }
  return ex_.wait_all();
}

}  // namespace wccl::algo
