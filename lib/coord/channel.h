// Control messages over one link. Each message travels as two transport messages, its length (u32,
// little-endian) and its encoding, under keys (kControlEpoch, n, 1) and (kControlEpoch, n, 2)
// numbered from 0 in each direction, so a receiver allocates exactly what each message needs.
//
// Messages arrive on the transport's loop thread, in order. A message that fails to decode, or a
// length over kMaxControlBytes, closes the link with PROTOCOL. on_close runs once, on the loop
// thread, with the reason the link ended; after it nothing else is delivered.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "coord/messages.h"
#include "net/transport.h"

namespace wccl::coord {

inline constexpr uint64_t kControlEpoch = ~0ULL;

class ControlChannel : public std::enable_shared_from_this<ControlChannel> {
 public:
  using OnMessage = std::function<void(ControlMessage)>;
  using OnClose = std::function<void(Status)>;

  // Starts receiving on link. The callbacks may hold the channel; it lives while the link is open.
  static std::shared_ptr<ControlChannel> open(std::shared_ptr<net::Link> link, OnMessage on_message,
                                              OnClose on_close);
  // Queues m for sending; any thread. Messages go out in the order they reach the loop thread. A
  // failure afterwards closes the link (seen in on_close).
  Status send(const ControlMessage &m);
  // Sends m, then closes the link with `why` once m is handed to the kernel (or failed): a refusal
  // the peer reads before the link goes.
  Status send_then_close(const ControlMessage &m, const Status &why);
  // Waits until every message sent so far was handed to the kernel (or the link closed), at most
  // `timeout`; false if that ran out. Not on the link's loop thread. Destroying a transport drops
  // the frames it has not written yet: a peer flushes what it last said before it goes.
  bool flush(std::chrono::milliseconds timeout);
  // Closes the link with `why`; on_close follows.
  void close(const Status &why);
  net::Link &link() { return *link_; }

 private:
  ControlChannel(std::shared_ptr<net::Link> link, OnMessage on_message, OnClose on_close)
      : link_(std::move(link)),
        on_message_(std::move(on_message)),
        on_close_(std::move(on_close)) {}
  Status queue(const ControlMessage &m, std::function<void()> then);
  void receive_next();
  void finish(const Status &why);
  void written();  // one message handed to the kernel, or given up on

  std::shared_ptr<net::Link> link_;
  OnMessage on_message_;
  OnClose on_close_;
  uint64_t tx_seq_ = 0;  // loop thread only
  uint64_t rx_seq_ = 0;  // loop thread only, as are the two below
  uint8_t rx_len_[4] = {};
  std::vector<uint8_t> rx_body_;
  std::atomic<bool> finished_{false};
  std::mutex unsent_mu_;
  std::condition_variable unsent_cv_;
  uint64_t unsent_ = 0;  // messages sent and not yet handed to the kernel, under unsent_mu_
};

}  // namespace wccl::coord
