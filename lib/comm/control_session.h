// A member's session with the coordinator (DESIGN §4): the communicator's shell around its control
// link. One connection, on a transport of its own (control messages are small, and a data thread
// saturated by bulk TLS then never delays a heartbeat); the heartbeat timer; and, once the
// connection drops, reconnection with backoff, so that a restarted coordinator is rejoined.
//
// Threading: any thread. Its mutex is taken inside the communicator's and never held while
// calling the channel, the transport or an event; events run on the control thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "coord/channel.h"
#include "core/config.h"
#include "core/log.h"
#include "net/transport.h"

namespace wccl::comm {

class ControlSession {
 public:
  using Clock = std::chrono::steady_clock;
  struct Events {
    std::function<void(const coord::ControlMessage &)> message;  // from the coordinator
    std::function<void(const Status &why)> lost;                 // the connection dropped
    // A new connection is up and sends from now on go over it: the messages that must go first
    // (the REJOIN, DONE again), sent before anything else the event's caller sends afterwards.
    std::function<std::vector<coord::ControlMessage>()> reconnected;
    std::function<void()> tick;  // every heartbeat period
  };

  // Connects to the config's coordinator (its transport keys, one stream), trying again with
  // backoff (50 ms doubling to 2 s) while it is not listening or refuses connections for load,
  // until `deadline`. COORDINATOR_UNREACHABLE naming the attempts and the last cause; AUTH or
  // INVALID_ARGUMENT at once.
  static Result<std::unique_ptr<ControlSession>> open(const Config &cfg, Clock::time_point deadline,
                                                      Logger log, Events events);
  ~ControlSession();
  ControlSession(const ControlSession &) = delete;
  ControlSession &operator=(const ControlSession &) = delete;

  // This side's address on the first connection, as the coordinator sees it.
  const std::string &local_host() const { return local_host_; }
  // COORDINATOR_UNREACHABLE (with why the link is down) while it is.
  Status send(const coord::ControlMessage &m) const;
  bool connected() const;
  // Why there is no connection (OK while there is one), as send() reports it.
  Status down() const;
  // Starts the heartbeat timer: events.tick every `period`.
  Status start(std::chrono::milliseconds period);
  // From tick, while not connected: connects again, at most once per backoff (one heartbeat
  // period, doubling to eight after each attempt).
  void reconnect();
  // Waits until what was sent is in the kernel, at most `timeout`; false if not.
  bool flush(std::chrono::milliseconds timeout) const;
  // No more reconnection, and the transport goes: its last callbacks (events) run now.
  void stop();

 private:
  ControlSession(std::string coordinator, Logger log, Events events)
      : coordinator_(std::move(coordinator)), log_(std::move(log)), events_(std::move(events)) {}
  // One connection's channel, and whether it closed (guarded by mu_): its close may come before
  // it is published, from the loop thread.
  struct Connection {
    std::shared_ptr<coord::ControlChannel> channel;
    bool closed = false;
    Status why;
  };
  // A connected link's channel, not published yet.
  std::shared_ptr<Connection> adopt(const std::shared_ptr<net::Link> &link);
  // Makes it the session's channel: false (down_ set) if it has closed already.
  bool publish(const std::shared_ptr<Connection> &conn);
  void closed(const std::shared_ptr<Connection> &conn, const Status &why);

  const std::string coordinator_;
  Logger log_;
  const Events events_;
  std::unique_ptr<net::Transport> transport_;
  std::string local_host_;
  std::chrono::milliseconds period_{1000};
  mutable std::mutex mu_;
  bool stopped_ = false;
  std::shared_ptr<Connection>
      current_;  // the published connection; null while the coordinator is away
  Status down_;  // why current_ is null
  bool reconnecting_ = false;
  std::chrono::milliseconds backoff_{0};
  Clock::time_point next_attempt_{};
};

// A missing coordinator as membership calls report it, whatever broke the connection.
Status unreachable(const Status &why);

}  // namespace wccl::comm
