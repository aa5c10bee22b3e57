// Exchange: an operation's view of its Channel, for algorithm code written as the textbook
// steps on one worker thread. Sends and receives are posted asynchronously and return a ticket;
// wait(ticket) blocks until that one completes. Every wait ends at the operation's deadline
// (TIMEOUT) or when cancel() is called from another thread (the communicator does so when the
// epoch is revoked or the communicator aborted). The first failure is sticky: later waits return
// it. finish() must be called before the buffers the operation used are released: it aborts the
// channel if anything failed and waits until no completion can touch them any more.
//
// The call check (algo/call.h, docs/protocol.md "Agreeing on the call"): after agree(mine), the
// exchange sends this member's call to its ring successor (rank r + 1) and receives its
// predecessor's (rank r - 1), which it compares with its own as soon as it arrives: a call that
// differs fails the operation with MISMATCH naming both. Around the ring every member's call is
// compared with every other's. agreed() waits for both. (No message of a call that differs is
// ever read into this member's buffers: the channel keys an operation's messages by its call,
// comm::LinkChannel.)
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

#include "algo/channel.h"

namespace wccl::algo {

// A member's call as the call check sends it (algo/call.h encodes it), under kCallTag on each
// link (no schedule's tag: check() keeps theirs below it).
inline constexpr size_t kCallBytes = 40;
inline constexpr uint32_t kCallTag = UINT32_MAX;
using CallBytes = std::array<uint8_t, kCallBytes>;
// Why peer's call `theirs` is not this member's (MISMATCH naming both; PROTOCOL if it does not
// decode).
using Disagreement = std::function<Status(int peer, const CallBytes &theirs)>;

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

  // The call check (above); before the first send or receive, at most once. `why` says what
  // differs when the predecessor's call is not `mine`.
  void agree(const CallBytes &mine, Disagreement why);
  // Once the schedule has succeeded: waits until this member's call went out and the
  // predecessor's arrived and matched, then the first failure if any. OK without agree().
  Status agreed();

  uint64_t bytes_sent() const { return bytes_sent_; }  // the calls compared are not counted
  uint64_t bytes_received() const;

 private:
  struct Shared;  // outlives the Exchange if a completion is somehow still due
  enum class State : uint8_t { kPending, kOk, kFailed };
  enum class Message : uint8_t { kData, kCall };  // kCall: the call check's, not counted
  Ticket post(bool is_send, int peer, uint32_t tag, void *data, size_t len, bool any_length,
              Message kind = Message::kData);
  // wait() and wait_all() (kNobody: every operation).
  Status block(Ticket t);
  // Fails the exchange with MISMATCH once the predecessor's call has arrived and differs (on the
  // operation's thread).
  void check_call();

  // The call check's state, on the operation's thread only (the calls are in Shared).
  bool agreeing_ = false;
  bool checked_ = false;  // a call that differs was reported
  int predecessor_ = -1;
  Ticket call_sent_ = 0, call_received_ = 0;
  Disagreement disagreement_;

  Channel &ch_;
  Clock::time_point deadline_;
  std::shared_ptr<Shared> s_;
  uint64_t bytes_sent_ = 0;
  bool finished_ = false;
};

}  // namespace wccl::algo
