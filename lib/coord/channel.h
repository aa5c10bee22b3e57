// Control messages over one link. Each message travels as two transport messages, its length (u32,
// little-endian) and its encoding, under keys (kControlEpoch, n, 1) and (kControlEpoch, n, 2)
// numbered from 0 in each direction, so a receiver allocates exactly what each message needs.
//
// Messages arrive on the transport's loop thread, in order. A message that fails to decode, or a
// length over kMaxControlBytes, closes the link with PROTOCOL. on_close runs once, on the loop
// thread, with the reason the link ended; after it nothing else is delivered.
#pragma once

#include <atomic>
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
  // Closes the link with `why`; on_close follows.
  void close(const Status &why);
  net::Link &link() { return *link_; }

 private:
  ControlChannel(std::shared_ptr<net::Link> link, OnMessage on_message, OnClose on_close)
      : link_(std::move(link)), on_message_(std::move(on_message)), on_close_(std::move(on_close)) {}
  void receive_next();
  void finish(const Status &why);

  std::shared_ptr<net::Link> link_;
  OnMessage on_message_;
  OnClose on_close_;
  uint64_t tx_seq_ = 0;  // loop thread only
  uint64_t rx_seq_ = 0;  // loop thread only, as are the two below
  uint8_t rx_len_[4] = {};
  std::vector<uint8_t> rx_body_;
  std::atomic<bool> finished_{false};
};

}  // namespace wccl::coord
