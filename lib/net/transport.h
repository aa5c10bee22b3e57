// The transport: links between two peers (net/link.h has their contract), each made of `streams`
// TCP connections (TLS 1.3 unless tls=off), carrying messages identified by a MessageKey.
// docs/protocol.md specifies the wire; this header and net/link.h are the contract for the layers
// above.
//
// Threading. A Transport owns one libuv loop thread, on which every link it opens or accepts does
// its work and runs its completion callbacks (net/link.h). The blocking calls here (listen,
// connect_sync, send_sync, recv_sync) wait for that thread and so must not be called on it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "core/config.h"
#include "core/status.h"
#include "net/frame.h"
#include "net/link.h"

namespace wccl::net {

class Core;

class Transport {
 public:
  // Reads tls, tls_cert, tls_key, tls_ca, streams, frame_bytes, sock_buf_bytes,
  // connect_timeout_ms, io_timeout_ms, name and log_level from cfg and starts the loop thread.
  static Result<std::unique_ptr<Transport>> create(const Config &cfg);
  // Fails every link with ABORTED, closes listeners, joins the loop thread.
  ~Transport();
  Transport(const Transport &) = delete;
  Transport &operator=(const Transport &) = delete;

  // Listens on address ("host:port", "[v6]:port"; port 0 picks one) and returns the bound port
  // (INVALID_USAGE on the loop thread).
  // on_link runs on the loop thread for each link whose streams have all arrived and said hello.
  Result<int> listen(const std::string &address,
                     std::function<void(std::shared_ptr<Link>)> on_link);
  // Opens a link of `streams` connections to address; done runs on the loop thread with the open
  // link or the error (IO, TIMEOUT, AUTH, PROTOCOL; INVALID_ARGUMENT for a bad address).
  Status connect(const std::string &address,
                 std::function<void(Result<std::shared_ptr<Link>>)> done);
  // connect() and wait for it (INVALID_USAGE on the loop thread).
  Result<std::shared_ptr<Link>> connect_sync(const std::string &address);

  // Runs fn on the loop thread (before returning, when called there). ABORTED after shutdown.
  Status post(std::function<void()> fn);
  // Runs fn on the loop thread every period until the transport shuts down.
  Status every(std::chrono::milliseconds period, std::function<void()> fn);

  const Logger &log() const;
  std::chrono::milliseconds connect_timeout() const;

 private:
  explicit Transport(std::shared_ptr<Core> core) : core_(std::move(core)) {}
  std::shared_ptr<Core> core_;
};

// Blocking send/recv for callers off the loop thread (INVALID_USAGE on it). If the operation has
// not completed within timeout, the link is closed with TIMEOUT (so the buffer is released) and
// that is returned.
Status send_sync(Link &link, const MessageKey &key, const void *data, size_t len,
                 std::chrono::milliseconds timeout);
Status recv_sync(Link &link, const MessageKey &key, void *data, size_t len,
                 std::chrono::milliseconds timeout);

}  // namespace wccl::net
