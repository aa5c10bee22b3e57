// The transport and the Core it shares with its links and streams: listeners, accepted
// connections until their hello, the timeouts sweep and shutdown; and the calls that block a thread
// off the loop until the loop answers. Everything runs on the loop thread except the public entry
// points, which post to it.
#include "net/transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/rand.h>
#include <sys/socket.h>
#include <uv.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <utility>

#include "net/address.h"
#include "net/link_state.h"
#include "net/stream.h"
#include "net/transport_core.h"

namespace wccl::net {
namespace {

constexpr size_t kMaxSetupStreams = 1024;  // accepted connections of links not yet open
// ... of those from one address: enough for the links of a few dozen members behind one NAT
// opening at once, while a client that opens connections and sends nothing holds few slots.
constexpr size_t kMaxSetupStreamsPerAddress = 64;

// The peer's IP address without the port: what set-up connections are counted by.
std::string peer_host(const uv_tcp_t *tcp) {
  std::string text = peer_text(tcp);
  const size_t colon = text.rfind(':');
  return colon == std::string::npos ? text : text.substr(0, colon);
}

// The one way a thread off the loop waits for it: a result the loop thread delivers once, from
// whichever callback finishes the work, and a bounded wait for it.
template <typename T>
class LoopResult {
 public:
  // Starts the work: work gets the loop's side (a callback to call once with the result) and
  // returns an error if it started nothing, which is returned. INVALID_USAGE on the loop thread
  // (what names the call), where waiting would block the work it waits for.
  template <typename Work>
  Status start(bool on_loop_thread, const char *what, Work work) {
    if (on_loop_thread) {
      return WCCL_ERROR(WCCL_ERR_INVALID_USAGE, "blocking %s on the I/O thread would deadlock it",
                        what);
    }
    return work([slot = slot_](T result) {
      std::lock_guard<std::mutex> lock(slot->mu);
      slot->result.emplace(std::move(result));
      slot->cv.notify_all();
    });
  }
  // The result, or nullopt if it has not come within bound (it may still come: wait again).
  std::optional<T> wait(std::chrono::milliseconds bound) {
    std::unique_lock<std::mutex> lock(slot_->mu);
    if (!slot_->cv.wait_for(lock, bound, [&] { return slot_->result.has_value(); }))
      return std::nullopt;
    return std::move(slot_->result);
  }

 private:
  struct Slot {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<T> result;
  };
  std::shared_ptr<Slot> slot_ = std::make_shared<Slot>();
};

// Binds and listens on sa (loop thread).
// Asks the kernel for `bytes` of send and of receive buffer on a socket or a listener.
void set_buffer_sizes(uv_handle_t *h, int64_t bytes) {
  int size = static_cast<int>(bytes);
  uv_send_buffer_size(h, &size);
  size = static_cast<int>(bytes);
  uv_recv_buffer_size(h, &size);
}

Result<int> open_listener(Core *c, const sockaddr_storage &sa, const std::string &address,
                          const std::function<void(std::shared_ptr<Link>)> &on_link) {
  auto *l = new Core::Listener();
  l->core = c;
  l->on_link = on_link;
  l->tcp.data = l;
  const int init = uv_tcp_init_ex(c->loop->uv(), &l->tcp, sa.ss_family);
  if (init != 0) {
    delete l;
    return WCCL_ERROR(WCCL_ERR_IO, "listen on %s: %s", address.c_str(), uv_strerror(init));
  }
  auto close_listener = [l] {
    uv_close(reinterpret_cast<uv_handle_t *>(&l->tcp),
             [](uv_handle_t *h) { delete static_cast<Core::Listener *>(h->data); });
  };
  // Buffer sizes set on the listener are inherited by accepted sockets before the handshake,
  // which is when TCP picks its window scale.
  if (c->opt.sock_buf_bytes > 0)
    set_buffer_sizes(reinterpret_cast<uv_handle_t *>(&l->tcp), c->opt.sock_buf_bytes);
  int rc = uv_tcp_bind(&l->tcp, reinterpret_cast<const sockaddr *>(&sa), 0);
  if (rc == 0) {
    // A deep accept queue: a burst of connections (a group forming, or a flood from one address)
    // waits there to be accepted and judged instead of having its SYNs dropped and retried
    // seconds later. The kernel clamps it to net.core.somaxconn.
    rc = uv_listen(reinterpret_cast<uv_stream_t *>(&l->tcp), 4096,
                   [](uv_stream_t *server, int status) {
                     auto *lis = static_cast<Core::Listener *>(server->data);
                     lis->core->on_connection(lis, status);
                     lis->core->run_deferred();
                   });
  }
  if (rc != 0) {
    close_listener();
    return WCCL_ERROR(WCCL_ERR_IO, "listen on %s: %s", address.c_str(), uv_strerror(rc));
  }
  sockaddr_storage bound{};
  int len = sizeof(bound);
  uv_tcp_getsockname(&l->tcp, reinterpret_cast<sockaddr *>(&bound), &len);
  c->listeners.push_back(l);
  const int port = bound.ss_family == AF_INET6
                       ? ntohs(reinterpret_cast<sockaddr_in6 *>(&bound)->sin6_port)
                       : ntohs(reinterpret_cast<sockaddr_in *>(&bound)->sin_port);
  WCCL_LOG(c->log, kInfo, "listening on %s",
           sockaddr_text(reinterpret_cast<sockaddr *>(&bound)).c_str());
  return port;
}

}  // namespace

void Core::run_deferred() {
  if (running_deferred) return;  // the outer call drains what this one would
  running_deferred = true;
  while (!deferred.empty()) {
    std::vector<std::function<void()>> batch;
    batch.swap(deferred);
    for (auto &fn : batch) {
      // An exception escaping a user's callback would end the process from a thread it does not
      // own; it is logged and dropped instead.
      try {
        fn();
      } catch (const std::exception &e) {
        WCCL_LOG(log, kError, "a completion callback threw (ignored): %s", e.what());
      } catch (...) {
        WCCL_LOG(log, kError, "a completion callback threw (ignored)");
      }
    }
  }
  running_deferred = false;
}

void Core::configure_socket(uv_tcp_t *tcp) {
  uv_tcp_nodelay(tcp, 1);
  const unsigned idle_s =
      static_cast<unsigned>(std::max<int64_t>(1, opt.io_timeout.count() / 2000));
  uv_tcp_keepalive(tcp, 1, idle_s);
  uv_os_fd_t fd;
  if (uv_fileno(reinterpret_cast<uv_handle_t *>(tcp), &fd) == 0) {
    // An idle connection to a dead host fails after about io_timeout_ms: idle for half of it, then
    // three unanswered probes spread over the other half (TCP's defaults take over two hours).
    // With data to send, the link's sweep applies the same bound (Stream::unacknowledged_for).
    // TCP_USER_TIMEOUT is not set: Linux also applies it to a zero window, so it would fail a
    // connection to a live peer that is slow to post its receive, which is backpressure.
    const int interval_s = static_cast<int>(std::max<int64_t>(1, opt.io_timeout.count() / 6000));
    const int probes = 3;
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
    setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &kUnsentBytes, sizeof(kUnsentBytes));
  }
  if (opt.sock_buf_bytes > 0) {
    set_buffer_sizes(reinterpret_cast<uv_handle_t *>(tcp), opt.sock_buf_bytes);
    int got = 0;  // Linux reports twice the size it grants
    uv_recv_buffer_size(reinterpret_cast<uv_handle_t *>(tcp), &got);
    if (got / 2 < opt.sock_buf_bytes && log.enabled(LogLevel::kWarn)) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        WCCL_LOG(log, kWarn,
                 "sock_buf_bytes=%lld but the kernel granted %d; raise net.core.rmem_max "
                 "and net.core.wmem_max",
                 static_cast<long long>(opt.sock_buf_bytes), got / 2);
      }
    }
  }
}

void Core::on_connection(Listener *l, int status) {
  if (status < 0) {
    WCCL_LOG(log, kWarn, "accept: %s", uv_strerror(status));
    return;
  }
  auto *s = new Stream(this, /*is_server=*/true);
  uv_tcp_init(loop->uv(), &s->tcp_);
  if (uv_accept(reinterpret_cast<uv_stream_t *>(&l->tcp),
                reinterpret_cast<uv_stream_t *>(&s->tcp_)) != 0) {
    s->close();
    return;
  }
  size_t in_setup = pending.size();
  for (const auto &[id, link] : accepting) in_setup += static_cast<size_t>(link->ready_);
  const std::string host = peer_host(&s->tcp_);
  auto from = pending_from.find(host);
  const size_t from_host = from == pending_from.end() ? 0 : from->second;
  if (in_setup >= kMaxSetupStreams || from_host >= kMaxSetupStreamsPerAddress) {
    // Refused with a reset, before any byte, so the client can tell this from a TLS rejection.
    // Logged once per burst: an attacker must not fill the log either.
    if (Clock::now() >= next_refusal_log_) {
      WCCL_LOG(
          log, kWarn,
          "refusing connections from %s: %zu connections in set-up (%zu from that address; limits "
          "%zu and %zu)",
          host.c_str(), in_setup, from_host, kMaxSetupStreams, kMaxSetupStreamsPerAddress);
      next_refusal_log_ = Clock::now() + std::chrono::seconds(10);
    }
    s->close(/*reset=*/true);
    return;
  }
  pending.insert(s);
  s->host_ = host;
  ++pending_from[host];
  // An unauthenticated connection gets a few WAN round trips for its TLS handshake and hello.
  s->deadline_ = Clock::now() + opt.hello_timeout;
  s->on_link_ = l->on_link;
  configure_socket(&s->tcp_);
  s->start_after_connect();
}

void Core::forget_pending(Stream *s) {
  if (pending.erase(s) == 0) return;
  auto it = pending_from.find(s->host_);
  if (it != pending_from.end() && --it->second == 0) pending_from.erase(it);
}

// A connection said hello: it joins the link its id names (which opens once all have).
void Core::on_hello(Stream *s, const Hello &hello) {
  forget_pending(s);
  const std::string id(reinterpret_cast<const char *>(hello.link_id), sizeof(hello.link_id));
  std::shared_ptr<LinkState> link;
  auto it = accepting.find(id);
  if (it == accepting.end()) {
    link = std::make_shared<LinkState>(shared_from_this(), /*is_client=*/false, hello.stream_count,
                                       s->deadline_);
    std::memcpy(link->link_id_, hello.link_id, sizeof(link->link_id_));
    link->peer_address_ = s->peer_;
    link->peer_name_ = hello.name;
    link->peer_subject_ = s->peer_subject();
    link->on_accepted_ = s->on_link_;
    accepting.emplace(id, link);
    links.insert(link);
  } else {
    link = it->second;
  }
  if (hello.stream_count != link->stream_count_ || link->streams_[hello.stream_index] != nullptr ||
      s->peer_subject() != link->peer_subject_) {
    s->fail(WCCL_ERROR(WCCL_ERR_PROTOCOL, "hello for stream %u/%u does not fit link from %s",
                       hello.stream_index, hello.stream_count, link->peer_address_.c_str()));
    return;
  }
  link->attach(s, hello.stream_index);
  if (link->state_ == LinkState::State::kOpen) accepting.erase(id);
}

void Core::sweep_timeouts() {
  const Clock::time_point now = Clock::now();
  std::vector<Stream *> expired;
  for (Stream *s : pending) {
    if (now >= s->deadline_) expired.push_back(s);
  }
  for (Stream *s : expired) {
    s->fail(WCCL_ERROR(WCCL_ERR_TIMEOUT, "no hello within %lld ms",
                       static_cast<long long>(opt.hello_timeout.count())));
  }
  std::vector<std::shared_ptr<LinkState>> all(links.begin(), links.end());
  for (auto &link : all) {
    link->check_timeouts(now);
  }
  run_deferred();
}

void Core::shutdown() {
  std::vector<std::shared_ptr<LinkState>> all(links.begin(), links.end());
  for (auto &link : all) {
    link->fail(WCCL_ERROR(WCCL_ERR_ABORTED, "the transport is shutting down"));
  }
  run_deferred();
  std::vector<Stream *> streams(pending.begin(), pending.end());
  for (Stream *s : streams) s->close();
  resolver.cancel_all();
  for (Listener *l : listeners) {
    uv_close(reinterpret_cast<uv_handle_t *>(&l->tcp),
             [](uv_handle_t *h) { delete static_cast<Listener *>(h->data); });
  }
  listeners.clear();
  for (Periodic *p : periodics) {
    uv_close(reinterpret_cast<uv_handle_t *>(&p->timer),
             [](uv_handle_t *h) { delete static_cast<Periodic *>(h->data); });
  }
  periodics.clear();
  uv_close(reinterpret_cast<uv_handle_t *>(&sweep), nullptr);
}

Result<std::unique_ptr<Transport>> Transport::create(const Config &cfg) {
  auto core = std::make_shared<Core>();
  core->log = cfg.logger();
  core->opt.tls = cfg.flag("tls");
  core->opt.streams = static_cast<int>(cfg.integer("streams"));
  core->opt.frame_bytes = static_cast<uint32_t>(cfg.integer("frame_bytes"));
  core->opt.sock_buf_bytes = cfg.integer("sock_buf_bytes");
  core->opt.connect_timeout = std::chrono::milliseconds(cfg.integer("connect_timeout_ms"));
  // An accepted connection's deadline: never longer than a whole link's set-up.
  core->opt.hello_timeout = std::min(std::chrono::milliseconds(cfg.integer("hello_timeout_ms")),
                                     core->opt.connect_timeout);
  core->opt.io_timeout = std::chrono::milliseconds(cfg.integer("io_timeout_ms"));
  core->opt.name = cfg.peer_name();
  if (core->opt.tls) {
    WCCL_ASSIGN_OR_RETURN(core->tls, TlsContext::create(cfg));
  }
  WCCL_ASSIGN_OR_RETURN(core->loop, Loop::start(core->log));
  // Timeouts are checked by one timer; a timeout fires at most one period late.
  const auto shortest = std::min(core->opt.hello_timeout, core->opt.io_timeout).count();
  const uint64_t period = static_cast<uint64_t>(std::clamp<int64_t>(shortest / 4, 5, 250));
  Core *c = core.get();
  Status st = core->loop->post([c, period] {
    uv_timer_init(c->loop->uv(), &c->sweep);
    c->sweep.data = c;
    uv_timer_start(
        &c->sweep, [](uv_timer_t *t) { static_cast<Core *>(t->data)->sweep_timeouts(); }, period,
        period);
  });
  if (!st.ok()) return st;
  return std::unique_ptr<Transport>(new Transport(std::move(core)));
}

Transport::~Transport() {
  Core *c = core_.get();
  core_->loop->stop([c] { c->shutdown(); });
}

const Logger &Transport::log() const { return core_->log; }

Status Transport::post(std::function<void()> fn) { return core_->post(std::move(fn)); }

Status Transport::every(std::chrono::milliseconds period, std::function<void()> fn) {
  Core *c = core_.get();
  const uint64_t ms = static_cast<uint64_t>(std::max<int64_t>(1, period.count()));
  return core_->loop->post([c, ms, fn = std::move(fn)]() mutable {
    auto *p = new Core::Periodic{{}, c, std::move(fn)};
    uv_timer_init(c->loop->uv(), &p->timer);
    p->timer.data = p;
    c->periodics.push_back(p);
    uv_timer_start(
        &p->timer,
        [](uv_timer_t *t) {
          auto *self = static_cast<Core::Periodic *>(t->data);
          self->fn();
          self->core->run_deferred();
        },
        ms, ms);
  });
}

std::chrono::milliseconds Transport::connect_timeout() const { return core_->opt.connect_timeout; }

Result<int> Transport::listen(const std::string &address,
                              std::function<void(std::shared_ptr<Link>)> on_link) {
  WCCL_ASSIGN_OR_RETURN(HostPort hp, parse_address(address));
  Core *c = core_.get();
  LoopResult<Result<int>> port;
  WCCL_RETURN_IF_ERROR(port.start(
      c->loop->in_loop_thread(), "listen", [&](std::function<void(Result<int>)> deliver) {
        return c->post(
            [c, hp, address, on_link = std::move(on_link), deliver = std::move(deliver)] {
              c->resolver.resolve(c->loop->uv(), address, hp, /*passive=*/true,
                                  [c, address, on_link, deliver](Result<sockaddr_storage> sa) {
                                    deliver(sa.ok() ? open_listener(c, sa.value(), address, on_link)
                                                    : Result<int>(sa.status()));
                                  });
            });
      }));
  // Name lookups are bounded by the resolver's own timeouts; a minute means the loop is wedged.
  std::optional<Result<int>> result = port.wait(std::chrono::minutes(1));
  if (!result) return WCCL_ERROR(WCCL_ERR_TIMEOUT, "the I/O loop did not answer within a minute");
  return std::move(*result);
}

Status Transport::connect(const std::string &address,
                          std::function<void(Result<std::shared_ptr<Link>>)> done) {
  WCCL_ASSIGN_OR_RETURN(HostPort hp, parse_address(address));
  std::shared_ptr<Core> core = core_;
  return core_->post([core, hp = std::move(hp), address, done = std::move(done)]() mutable {
    auto link = std::make_shared<LinkState>(core, /*is_client=*/true, core->opt.streams,
                                            Clock::now() + core->opt.connect_timeout);
    link->on_connected_ = std::move(done);
    link->peer_address_ = address;
    core->links.insert(link);
    if (RAND_bytes(link->link_id_, sizeof(link->link_id_)) != 1) {
      link->fail(WCCL_ERROR(WCCL_ERR_INTERNAL, "no random bytes for a link id: %s",
                            openssl_errors().c_str()));
      return;
    }
    // The link's set-up deadline covers the lookup.
    core->resolver.resolve(core->loop->uv(), address, hp, /*passive=*/false,
                           [core, link](Result<sockaddr_storage> sa) {
                             if (sa.ok()) {
                               link->open_streams(reinterpret_cast<const sockaddr *>(&sa.value()));
                             } else {
                               link->fail(sa.status());
                             }
                             core->run_deferred();
                           });
  });
}

Result<std::shared_ptr<Link>> Transport::connect_sync(const std::string &address) {
  LoopResult<Result<std::shared_ptr<Link>>> link;
  WCCL_RETURN_IF_ERROR(link.start(core_->loop->in_loop_thread(), "connect",
                                  [&](std::function<void(Result<std::shared_ptr<Link>>)> deliver) {
                                    return connect(address, std::move(deliver));
                                  }));
  // The link's own set-up deadline fires first; the margin covers the timer's period.
  std::optional<Result<std::shared_ptr<Link>>> result =
      link.wait(core_->opt.connect_timeout + std::chrono::seconds(5));
  if (!result)
    return WCCL_ERROR(WCCL_ERR_INTERNAL, "connect to %s: the set-up deadline did not fire",
                      address.c_str());
  return std::move(*result);
}

namespace {

// send_sync and recv_sync: start is the operation, given its completion.
template <typename Start>
Status wait_op(Link &link, std::chrono::milliseconds timeout, const char *what, Start start) {
  LoopResult<Status> done;
  WCCL_RETURN_IF_ERROR(done.start(link.on_loop_thread(), what, start));
  if (std::optional<Status> st = done.wait(timeout)) return *st;
  link.close(WCCL_ERROR(WCCL_ERR_TIMEOUT, "%s did not complete within %lld ms", what,
                        static_cast<long long>(timeout.count())));
  // Closing completes the operation at once on the loop thread; the buffer is free after that.
  std::optional<Status> st = done.wait(std::chrono::minutes(1));
  if (!st) std::abort();
  return *st;
}

}  // namespace

Status send_sync(Link &link, const MessageKey &key, const void *data, size_t len,
                 std::chrono::milliseconds timeout) {
  return wait_op(link, timeout, "send",
                 [&](Completion cb) { return link.send(key, data, len, std::move(cb)); });
}

Status recv_sync(Link &link, const MessageKey &key, void *data, size_t len,
                 std::chrono::milliseconds timeout) {
  return wait_op(link, timeout, "recv",
                 [&](Completion cb) { return link.recv(key, data, len, std::move(cb)); });
}

}  // namespace wccl::net
