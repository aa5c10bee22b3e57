#include "algo/exchange.h"

namespace wccl::algo {

struct Exchange::Shared {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<State> states;
  // Per ticket, its length; an any-length receive's channel writes the message's length here
  // (this outlives every completion, unlike the caller's stack).
  std::deque<size_t> lengths;
  size_t outstanding = 0;
  uint64_t received = 0;  // bytes of the receives completed
  Status failure;
  // What the operation's thread waits for, so that a completion wakes it only when that is done:
  // one ticket (kNobody: none), or the last outstanding one (awaiting_all). A wake-up for a
  // completion it does not wait for (most sends) would cost it a futex call and a context switch.
  Ticket awaited = kNobody;
  bool awaiting_all = false;
  // The call check (agree()): this member's call, its predecessor's as received, and whether the
  // two differ, which the completion that receives it finds (so a call that matches wakes no one).
  CallBytes mine{}, theirs{};
  bool call_differs = false;
  static constexpr Ticket kNobody = ~Ticket{0};
};

Exchange::Exchange(Channel &channel, Clock::time_point deadline)
    : ch_(channel), deadline_(deadline), s_(std::make_shared<Shared>()) {}

Exchange::~Exchange() { finish(); }

Exchange::Ticket Exchange::post(bool is_send, int peer, uint32_t tag, void *data, size_t len,
                                bool any_length, Message kind) {
  Ticket t;
  size_t *got = nullptr;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    t = s_->states.size();
    s_->states.push_back(State::kPending);
    s_->lengths.push_back(len);
    if (any_length) got = &s_->lengths.back();  // deque: stays put as more are pushed
    ++s_->outstanding;
  }
  auto shared = s_;
  const bool counted = kind == Message::kData;
  const bool call_arrives = kind == Message::kCall && !is_send;
  Completion done = [shared, t, is_send, counted, call_arrives](const Status &st) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->states[t] = st.ok() ? State::kOk : State::kFailed;
      if (st.ok() && !is_send && counted) shared->received += shared->lengths[t];
      if (!st.ok() && shared->failure.ok()) shared->failure = st;
      if (call_arrives && st.ok()) shared->call_differs = shared->theirs != shared->mine;
      --shared->outstanding;
      wake = !st.ok() || shared->call_differs || shared->awaited == t ||
             (shared->awaiting_all && shared->outstanding == 0);
    }
    if (wake) shared->cv.notify_all();
  };
  // Not under mu: a channel may complete inline.
  Status st = is_send ? ch_.send(peer, tag, data, len, std::move(done))
                      : ch_.recv(peer, tag, data, len, got, std::move(done));
  if (!st.ok()) {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->states[t] = State::kFailed;
    if (s_->failure.ok()) s_->failure = st;
    --s_->outstanding;
  } else if (is_send && counted) {
    bytes_sent_ += len;
  }
  return t;
}

void Exchange::agree(const CallBytes &mine, Disagreement why) {
  const int n = size(), r = rank();
  if (agreeing_ || n < 2) return;
  agreeing_ = true;
  s_->mine = mine;  // no completion runs yet
  disagreement_ = std::move(why);
  predecessor_ = (r + n - 1) % n;
  call_sent_ =
      post(true, (r + 1) % n, kCallTag, s_->mine.data(), s_->mine.size(), false, Message::kCall);
  call_received_ = post(false, predecessor_, kCallTag, s_->theirs.data(), s_->theirs.size(), false,
                        Message::kCall);
}

void Exchange::check_call() {
  if (!agreeing_ || checked_) return;
  CallBytes theirs;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (!s_->call_differs) return;
    theirs = s_->theirs;
  }
  checked_ = true;
  cancel(disagreement_(predecessor_, theirs));
}

Status Exchange::agreed() {
  if (!agreeing_) return Status();
  WCCL_RETURN_IF_ERROR(wait(call_sent_));
  WCCL_RETURN_IF_ERROR(wait(call_received_));
  check_call();
  return failure();
}

Exchange::Ticket Exchange::send(int peer, uint32_t tag, const void *data, size_t len) {
  return post(true, peer, tag, const_cast<void *>(data), len, false);
}

Exchange::Ticket Exchange::recv(int peer, uint32_t tag, void *data, size_t len, bool any_length) {
  return post(false, peer, tag, data, len, any_length);
}

size_t Exchange::length(Ticket t) const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->lengths[t];
}

uint64_t Exchange::bytes_received() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->received;
}

Status Exchange::wait(Ticket t) { return block(t); }

bool Exchange::done(Ticket t) const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->states[t] == State::kOk;
}

Status Exchange::wait_all() { return block(Shared::kNobody); }

// Waits for ticket t (kNobody: every posted operation). Between wake-ups it compares a call that
// has arrived and differs (check_call), which ends the wait with MISMATCH.
Status Exchange::block(Ticket t) {
  const bool all = t == Shared::kNobody;
  std::unique_lock<std::mutex> lock(s_->mu);
  auto complete = [&] { return all ? s_->outstanding == 0 : s_->states[t] != State::kPending; };
  for (;;) {
    if (all)
      s_->awaiting_all = true;
    else
      s_->awaited = t;
    const bool ended = ch_.wait_until(lock, s_->cv, deadline_, [&] {
      return complete() || !s_->failure.ok() || (s_->call_differs && !checked_);
    });
    s_->awaiting_all = false;
    s_->awaited = Shared::kNobody;
    if (!s_->failure.ok()) return s_->failure;
    if (complete()) return Status();
    if (!ended) {
      s_->failure =
          WCCL_ERROR(WCCL_ERR_TIMEOUT,
                     "the operation did not complete in time (op_timeout_ms / opts.timeout_ms)");
      return s_->failure;
    }
    lock.unlock();
    check_call();  // the predecessor's call differs: the next wake-up sees the failure
    lock.lock();
  }
}

void Exchange::cancel(const Status &why) {
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->failure.ok()) s_->failure = why;
  }
  s_->cv.notify_all();
}

Status Exchange::failure() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->failure;
}

void Exchange::finish() {
  if (finished_) return;
  finished_ = true;
  Status why;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->outstanding == 0) return;
    why = s_->failure.ok()
              ? WCCL_ERROR(WCCL_ERR_ABORTED, "the operation ended with messages in flight")
              : s_->failure;
  }
  ch_.abort(why);
  // abort() completes every pending operation promptly; the bound only guards against a bug.
  std::unique_lock<std::mutex> lock(s_->mu);
  s_->awaiting_all = true;
  if (!s_->cv.wait_for(lock, std::chrono::seconds(30), [&] { return s_->outstanding == 0; })) {
    std::fprintf(stderr, "wccl: BUG: %zu transfers still pending 30 s after abort\n",
                 s_->outstanding);
    std::abort();
  }
}

}  // namespace wccl::algo
