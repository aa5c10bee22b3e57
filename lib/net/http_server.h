// A small HTTP/1.1 server for operator endpoints (the coordinator's /metrics and /status), on a
// loop thread of its own so that no number of HTTP clients slows the control plane. One request a
// connection; bounded in every way a client could stretch it: at most kMaxConnections at once
// (further ones are closed as accepted), kRequestTimeout for the request, as long again for the
// answer, then at most 2 s for the client to end its side (what it still sends is dropped: closing
// sooner would reset the answer away), a request head of at most kMaxHttpHeadBytes (net/http.h).
// Plain TCP: TLS is not offered here (docs/operations.md).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "core/log.h"
#include "core/status.h"
#include "net/http.h"

namespace wccl::net {

class HttpServer {
 public:
  static constexpr size_t kMaxConnections = 64;
  static constexpr std::chrono::milliseconds kRequestTimeout{10000};
  struct Response {
    int status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
  };
  // Runs on the server's loop thread for each request that parsed (and carried the token).
  using Handler = std::function<Response(const HttpRequest &)>;

  // Listens on `address`: "HOST:PORT" with HOST an IP address or localhost, or "PORT" alone
  // (127.0.0.1). A non-empty `token` must come with each request, as "Authorization: Bearer
  // TOKEN" or as the query parameter token=TOKEN; else 401. INVALID_ARGUMENT for a bad address,
  // IO if it cannot be bound.
  // `request_timeout` bounds each connection's request, and then its response's writing.
  static Result<std::unique_ptr<HttpServer>> start(
      const std::string &address, const std::string &token, const Logger &log, Handler handler,
      std::chrono::milliseconds request_timeout = kRequestTimeout);
  ~HttpServer();  // closes every connection and joins the loop thread
  HttpServer(const HttpServer &) = delete;
  HttpServer &operator=(const HttpServer &) = delete;

  int port() const { return port_; }

  struct State;  // the loop thread's (http_server.cc)

 private:
  HttpServer() = default;
  std::unique_ptr<State> state_;
  int port_ = 0;
};

}  // namespace wccl::net
