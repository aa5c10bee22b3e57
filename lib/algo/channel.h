// The seam between algorithms and the network (DESIGN §2). A Channel connects the `size` peers
// of one operation; an algorithm only sends and receives tagged byte ranges to and from peers by
// rank. Implementations: comm::LinkChannel over the transport's links, and the in-memory
// tests::MemoryChannel with fault injection.
//
// Contract. send and recv return at once; `done` runs exactly once, on any thread, and must not
// block. An error *returned* means nothing happened and done will not run. A (peer, tag) pair
// names one message per direction within an operation, and is used once. With `got` null a
// message may only be received into a buffer of exactly its length; with `got`, into one of at
// least its length (capacity `len`), and *got holds its length before done runs OK (a longer
// message fails the receive with PROTOCOL). Messages from one peer may be delivered in any
// order, but an implementation may hold back a message until the receive for every message sent
// before it on that path has been posted (the transport does): so receives must be posted in the
// order the peer sends, which every algorithm here does. abort() fails every pending operation
// with `why` promptly (the real channel closes the operation's links: the epoch is over).
//
// Time. The operation's thread waits for completions through wait_until: a channel in real time
// blocks on the condition variable its completions notify; the virtual-time channel (lib/sim/)
// runs its clock while every simulated peer waits. Algorithms never see which it is.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>

#include "core/status.h"

namespace wccl::algo {

using Completion = std::function<void(Status)>;

class Channel {
 public:
  virtual ~Channel() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Status send(int peer, uint32_t tag, const void *data, size_t len, Completion done) = 0;
  virtual Status recv(int peer, uint32_t tag, void *data, size_t len, size_t *got,
                      Completion done) = 0;
  virtual void abort(const Status &why) = 0;
  // Blocks the calling thread, which holds `lock`, until ready() (evaluated under it) or the
  // deadline; false at the deadline. Completions notify `cv` under the lock's mutex.
  virtual bool wait_until(std::unique_lock<std::mutex> &lock, std::condition_variable &cv,
                          std::chrono::steady_clock::time_point deadline,
                          const std::function<bool()> &ready) {
    return cv.wait_until(lock, deadline, ready);
  }
};

}  // namespace wccl::algo
