// Internal: the state a Transport shares with its links and streams, and the loop-thread work that
// is no single link's (listeners, accepted connections before their hello, timeouts, shutdown).
#pragma once

#include <uv.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/log.h"
#include "net/frame.h"
#include "net/link.h"
#include "net/loop.h"
#include "net/resolve.h"
#include "net/tls.h"

namespace wccl::net {

class LinkState;
class Stream;

struct Options {
  bool tls = true;
  int streams = 4;
  uint32_t frame_bytes = 1 << 20;
  int64_t sock_buf_bytes = 0;
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds hello_timeout{3000};
  std::chrono::milliseconds io_timeout{10000};
  std::string name;
};

// Lives until the Transport and every Link handle are gone; its loop is stopped when the Transport
// goes. Everything but post() runs on the loop thread.
class Core : public std::enable_shared_from_this<Core> {
 public:
  Logger log;
  Options opt;
  std::shared_ptr<TlsContext> tls;
  std::unique_ptr<Loop> loop;
  Resolver resolver;                           // lookups in flight are cancelled at shutdown
  uv_timer_t sweep{};                          // timeouts of set-ups and stalled links
  std::set<std::shared_ptr<LinkState>> links;  // set-up or open; closed links leave
  std::set<Stream *> pending;                  // accepted, hello not yet received
  std::map<std::string, size_t> pending_from;  // pending streams by peer address
  Clock::time_point next_refusal_log_{};
  std::map<std::string, std::shared_ptr<LinkState>> accepting;  // link id -> link in set-up
  struct Listener {
    uv_tcp_t tcp;
    Core *core;
    std::function<void(std::shared_ptr<Link>)> on_link;
  };
  std::vector<Listener *> listeners;
  struct Periodic {
    uv_timer_t timer;
    Core *core;
    std::function<void()> fn;
  };
  std::vector<Periodic *> periodics;  // closed at shutdown

  // User callbacks wait here until the loop callback that produced them has finished changing
  // state; every entry point from libuv or post() ends with run_deferred().
  std::vector<std::function<void()>> deferred;
  bool running_deferred = false;
  void run_deferred();
  // Runs fn on the loop thread, then the user callbacks it produced. Any thread.
  Status post(std::function<void()> fn) {
    return loop->post([this, fn = std::move(fn)] {
      fn();
      run_deferred();
    });
  }

  void on_connection(Listener *l, int status);
  void on_hello(Stream *s, const Hello &hello);
  void forget_pending(Stream *s);  // s is no longer in set-up (hello received, or closed)
  void sweep_timeouts();
  void shutdown();
  void configure_socket(uv_tcp_t *tcp);
};

}  // namespace wccl::net
