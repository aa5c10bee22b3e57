// Exchange: an operation's view of its Channel, for algorithm code written as the textbook
// steps on one worker thread. Sends and receives are posted asynchronously and return a ticket;
// wait(ticket) blocks until that one completes. Every wait ends at the operation's deadline
// (TIMEOUT) or when cancel() is called from another thread (the communicator does so when the
// epoch is revoked or the communicator aborted). The first failure is sticky: later waits return
// it. finish() must be called before the buffers the operation used are released: it aborts the
// channel if anything failed and waits until no completion can touch them any more.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include "algo/channel.h"

namespace wccl::algo {

class Exchange {
 public:
  using Clock = std::chrono::steady_clock;
  using Ticket = size_t;
  Exchange(Channel &channel, Clock::time_point deadline);
  ~Exchange();  // calls finish()
  Exchange(const Exchange &) = delete;
  Exchange &operator=(const Exchange &) = delete;

  int rank() const { return ch_.rank(); }
  int size() const { return ch_.size(); }

  Ticket send(int peer, uint32_t tag, const void *data, size_t len);
  // With any_length, len is a capacity: a message of at most len bytes is accepted, and length(t)
  // gives its length once the ticket completed (Channel::recv). Received bytes are counted as
  // receives complete.
  Ticket recv(int peer, uint32_t tag, void *data, size_t len, bool any_length = false);
  size_t length(Ticket t) const;  // a completed receive's length (a send's: its length)
  Status wait(Ticket t);
  bool done(Ticket t) const;  // completed successfully (no waiting)
  // Waits for every posted operation; the first failure if any.
  Status wait_all();
  // Any thread: makes current and later waits return `why` (the first cause wins).
  void cancel(const Status &why);
  // The first failure so far (OK if none).
  Status failure() const;
  // Aborts the channel if anything failed, then waits (bounded) for every completion.
  void finish();

  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t bytes_received() const;

 private:
  struct Shared;  // outlives the Exchange if a completion is somehow still due
  enum class State : uint8_t { kPending, kOk, kFailed };
  Ticket post(bool is_send, int peer, uint32_t tag, void *data, size_t len, bool any_length);

  Channel &ch_;
  Clock::time_point deadline_;
  std::shared_ptr<Shared> s_;
  uint64_t bytes_sent_ = 0;
  bool finished_ = false;
};

}  // namespace wccl::algo
