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
  bool calls_arrived = false;  // a neighbour's call (agree()) arrived since the last check_calls
  static constexpr Ticket kNobody = ~Ticket{0};
};

Exchange::Exchange(Channel &channel, Clock::time_point deadline)
    : ch_(channel), deadline_(deadline), s_(std::make_shared<Shared>()) {}

Exchange::~Exchange() { finish(); }

Exchange::Ticket Exchange::ticket(size_t len, bool any_length, size_t **got) {
  std::lock_guard<std::mutex> lock(s_->mu);
  const Ticket t = s_->states.size();
  s_->states.push_back(State::kPending);
  s_->lengths.push_back(len);
  *got = any_length ? &s_->lengths.back() : nullptr;  // deque: stays put as more are pushed
  ++s_->outstanding;
  return t;
}

void Exchange::start(Ticket t, bool is_send, int peer, uint32_t tag, void *data, size_t len,
                     size_t *got, Message kind) {
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
      if (call_arrives) shared->calls_arrived = true;  // the operation's thread compares it
      --shared->outstanding;
      wake = !st.ok() || call_arrives || shared->awaited == t ||
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
}

Exchange::Ticket Exchange::post(bool is_send, int peer, uint32_t tag, void *data, size_t len,
                                bool any_length, Message kind) {
  size_t *got = nullptr;
  const Ticket t = ticket(len, any_length, &got);
  start(t, is_send, peer, tag, data, len, got, kind);
  return t;
}

void Exchange::agree(const CallBytes &mine, Disagreement why) {
  const int n = size(), r = rank();
  if (agreeing_ || n < 2) return;
  agreeing_ = true;
  mine_ = mine;
  disagreement_ = std::move(why);
  for (int peer : {(r + n - 1) % n, (r + 1) % n}) {
    send_call(peer);
    await_call(peer);
  }
}

void Exchange::send_call(int peer) {
  Neighbour &nb = neighbours_[peer];
  if (nb.sent) return;
  nb.sent = true;
  nb.call_sent = post(true, peer, kCallTag, mine_.data(), mine_.size(), false, Message::kCall);
}

void Exchange::await_call(int peer) {
  Neighbour &nb = neighbours_[peer];
  if (nb.awaited) return;
  nb.awaited = true;
  nb.call_received =
      post(false, peer, kCallTag, nb.theirs.data(), nb.theirs.size(), false, Message::kCall);
}

void Exchange::check_calls(bool forced) {
  if (!agreeing_) return;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (!s_->calls_arrived && !forced) return;
    s_->calls_arrived = false;
  }
  for (auto &[peer, nb] : neighbours_) {
    if (!nb.awaited || nb.checked) continue;
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      if (s_->states[nb.call_received] != State::kOk) continue;  // not yet, or failed (sticky)
    }
    nb.checked = true;
    if (nb.theirs != mine_) {
      cancel(disagreement_(peer, nb.theirs));
      continue;
    }
    for (const Deferred &d : nb.deferred)
      start(d.t, false, peer, d.tag, d.data, d.len, d.got, Message::kData);
    nb.deferred.clear();
  }
}

void Exchange::drop_deferred(const Status &why) {
  std::lock_guard<std::mutex> lock(s_->mu);
  for (auto &[peer, nb] : neighbours_) {
    for (const Deferred &d : nb.deferred) {
      s_->states[d.t] = State::kFailed;
      --s_->outstanding;
      if (s_->failure.ok()) s_->failure = why;
    }
    nb.deferred.clear();
  }
}

Status Exchange::agreed() {
  if (!agreeing_) return Status();
  for (auto &[peer, nb] : neighbours_) {
    if (nb.sent) WCCL_RETURN_IF_ERROR(wait(nb.call_sent));
    if (nb.awaited) WCCL_RETURN_IF_ERROR(wait(nb.call_received));
  }
  check_calls(/*forced=*/true);
  return failure();
}

Exchange::Ticket Exchange::send(int peer, uint32_t tag, const void *data, size_t len) {
  if (agreeing_) send_call(peer);
  return post(true, peer, tag, const_cast<void *>(data), len, false);
}

Exchange::Ticket Exchange::recv(int peer, uint32_t tag, void *data, size_t len, bool any_length) {
  if (agreeing_) {
    check_calls();
    Neighbour &nb = neighbours_[peer];
    if (!nb.checked) {  // held back until the peer's call has arrived and matched
      await_call(peer);
      size_t *got = nullptr;
      const Ticket t = ticket(len, any_length, &got);
      nb.deferred.push_back({t, tag, data, len, got});
      return t;
    }
  }
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

Status Exchange::wait(Ticket t) {
  bool ended;
  for (;;) {
    check_calls();  // a receive held back for a call that has arrived is posted first
    std::unique_lock<std::mutex> lock(s_->mu);
    s_->awaited = t;
    ended = ch_.wait_until(lock, s_->cv, deadline_, [&] {
      return s_->states[t] != State::kPending || !s_->failure.ok() || s_->calls_arrived;
    });
    s_->awaited = Shared::kNobody;
    if (!ended || s_->states[t] != State::kPending || !s_->failure.ok()) break;
  }
  std::unique_lock<std::mutex> lock(s_->mu);
  if (!s_->failure.ok()) return s_->failure;
  if (!ended) {
    s_->failure =
        WCCL_ERROR(WCCL_ERR_TIMEOUT,
                   "the operation did not complete in time (op_timeout_ms / opts.timeout_ms)");
    return s_->failure;
  }
  return Status();
}

bool Exchange::done(Ticket t) const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->states[t] == State::kOk;
}

Status Exchange::wait_all() {
  bool ended;
  for (;;) {
    check_calls();
    std::unique_lock<std::mutex> lock(s_->mu);
    s_->awaiting_all = true;
    ended = ch_.wait_until(lock, s_->cv, deadline_, [&] {
      return s_->outstanding == 0 || !s_->failure.ok() || s_->calls_arrived;
    });
    s_->awaiting_all = false;
    if (!ended || s_->outstanding == 0 || !s_->failure.ok()) break;
  }
  std::unique_lock<std::mutex> lock(s_->mu);
  if (!s_->failure.ok()) return s_->failure;
  if (!ended) {
    s_->failure =
        WCCL_ERROR(WCCL_ERR_TIMEOUT,
                   "the operation did not complete in time (op_timeout_ms / opts.timeout_ms)");
    return s_->failure;
  }
  return Status();
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
  drop_deferred(WCCL_ERROR(WCCL_ERR_ABORTED, "the operation ended with receives not posted"));
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
