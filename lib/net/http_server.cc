#include "net/http_server.h"

#include <openssl/crypto.h>
#include <uv.h>

#include <algorithm>
#include <future>
#include <set>

#include "net/address.h"
#include "net/loop.h"

namespace wccl::net {
namespace {

using Clock = std::chrono::steady_clock;
// How long a connection stays open after its answer for the client to end its side.
constexpr std::chrono::seconds kLinger{2};

struct Conn;

}  // namespace

struct HttpServer::State {
  Logger log;
  std::string token;
  Handler handler;
  std::chrono::milliseconds request_timeout{};
  std::unique_ptr<Loop> loop;
  uv_tcp_t listener{};
  uv_timer_t sweep{};
  bool handles = false;  // listener and sweep are initialised
  std::set<Conn *> conns;
  Clock::time_point next_refusal_log{};

  void on_connection(int status);
  void sweep_timeouts();
  void close_all();
};

namespace {

struct Conn {
  HttpServer::State *server = nullptr;
  uv_tcp_t tcp{};
  uv_write_t write{};
  uv_shutdown_t shutdown{};
  HttpRequestParser parser;
  std::string out;  // the response, while it is written
  Clock::time_point deadline{};
  bool responding = false;  // the request is decided: what it still sends is read and dropped
  bool shut = false;        // the answer is written and our side shut down
  bool peer_done = false;   // the client's side ended
  bool closing = false;
  char buf[4096];

  uv_stream_t *stream() { return reinterpret_cast<uv_stream_t *>(&tcp); }
  void close();
  void respond(std::string response);
  void answer();  // once the parser is done: the handler's response, or the parser's error
  bool authorized(const HttpRequest &r) const;
};

void Conn::close() {
  if (closing) return;
  closing = true;
  server->conns.erase(this);
  uv_close(reinterpret_cast<uv_handle_t *>(&tcp),
           [](uv_handle_t *h) { delete static_cast<Conn *>(h->data); });
}

// The answer is written, then our side shut down (FIN). The connection closes once the client's
// side ends too, or kLinger later: closing while the client still sends (a body, the rest of an
// oversized head) would reset the connection, and the reset can discard the answer before the
// client reads it.
void Conn::respond(std::string response) {
  responding = true;
  deadline = Clock::now() + server->request_timeout;  // to write it
  out = std::move(response);
  uv_buf_t b = uv_buf_init(out.data(), static_cast<unsigned>(out.size()));
  const int rc = uv_write(&write, stream(), &b, 1, [](uv_write_t *w, int status) {
    auto *c = static_cast<Conn *>(w->handle->data);
    if (status < 0) return c->close();
    if (uv_shutdown(&c->shutdown, c->stream(), [](uv_shutdown_t *s, int st) {
          auto *conn = static_cast<Conn *>(s->handle->data);
          conn->shut = true;
          if (st < 0 || conn->peer_done) return conn->close();
          conn->deadline = std::min(conn->deadline, Clock::now() + kLinger);
        }) != 0) {
      c->close();
    }
  });
  if (rc != 0) close();
}

bool token_matches(const std::string &given, const std::string &token) {
  return given.size() == token.size() &&
         CRYPTO_memcmp(given.data(), token.data(), token.size()) == 0;
}

bool Conn::authorized(const HttpRequest &r) const {
  const std::string &token = server->token;
  if (token.empty()) return true;
  static const std::string kBearer = "Bearer ";
  if (r.authorization.compare(0, kBearer.size(), kBearer) == 0 &&
      token_matches(r.authorization.substr(kBearer.size()), token)) {
    return true;
  }
  size_t start = 0;
  while (start <= r.query.size()) {
    size_t end = r.query.find('&', start);
    if (end == std::string::npos) end = r.query.size();
    const std::string param = r.query.substr(start, end - start);
    if (param.compare(0, 6, "token=") == 0 && token_matches(param.substr(6), token)) return true;
    start = end + 1;
  }
  return false;
}

void Conn::answer() {
  if (parser.state() == HttpRequestParser::State::kFailed) {
    const int status = parser.error_status();
    respond(http_response(status, "text/plain; charset=utf-8", parser.error() + "\n"));
    return;
  }
  const HttpRequest &r = parser.request();
  const bool head = r.method == "HEAD";
  if (!authorized(r)) {
    respond(http_response(401, "text/plain; charset=utf-8",
                          "a bearer token is required (Authorization: Bearer TOKEN)\n", head,
                          "WWW-Authenticate: Bearer\r\n"));
    return;
  }
  HttpServer::Response res = server->handler(r);
  respond(http_response(res.status, res.content_type, res.body, head));
}

}  // namespace

void HttpServer::State::on_connection(int status) {
  if (status < 0) {
    WCCL_LOG(log, kWarn, "http accept: %s", uv_strerror(status));
    return;
  }
  auto *c = new Conn();
  c->server = this;
  c->tcp.data = c;
  uv_tcp_init(loop->uv(), &c->tcp);
  conns.insert(c);
  if (uv_accept(reinterpret_cast<uv_stream_t *>(&listener), c->stream()) != 0) return c->close();
  if (conns.size() > HttpServer::kMaxConnections) {
    if (Clock::now() >= next_refusal_log) {
      WCCL_LOG(log, kWarn, "http: %zu connections open; closing new ones as they come",
               HttpServer::kMaxConnections);
      next_refusal_log = Clock::now() + std::chrono::seconds(10);
    }
    return c->close();
  }
  c->deadline = Clock::now() + request_timeout;
  uv_read_start(
      c->stream(),
      [](uv_handle_t *h, size_t, uv_buf_t *b) {
        auto *conn = static_cast<Conn *>(h->data);
        *b = uv_buf_init(conn->buf, sizeof(conn->buf));
      },
      [](uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
        auto *conn = static_cast<Conn *>(s->data);
        if (n < 0) {
          conn->peer_done = true;
          uv_read_stop(s);
          // Gone before its request was whole, or after our answer: else the answer is still
          // being written, and the connection closes once it is.
          if (!conn->responding || conn->shut) conn->close();
          return;
        }
        if (conn->responding) return;  // dropped
        if (conn->parser.feed(b->base, static_cast<size_t>(n)) !=
            HttpRequestParser::State::kReading) {
          conn->answer();
        }
      });
}

void HttpServer::State::sweep_timeouts() {
  const auto now = Clock::now();
  std::vector<Conn *> late;
  for (Conn *c : conns) {
    if (now >= c->deadline) late.push_back(c);
  }
  for (Conn *c : late) {
    if (!c->responding) {
      c->respond(http_response(408, "text/plain; charset=utf-8",
                               "no whole request within the time limit\n"));
    } else {
      c->close();  // a client that does not read its answer, or lingers after it
    }
  }
}

void HttpServer::State::close_all() {
  if (!handles) return;
  std::vector<Conn *> all(conns.begin(), conns.end());
  for (Conn *c : all) c->close();
  uv_close(reinterpret_cast<uv_handle_t *>(&listener), nullptr);
  uv_close(reinterpret_cast<uv_handle_t *>(&sweep), nullptr);
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string &address,
                                                      const std::string &token, const Logger &log,
                                                      Handler handler,
                                                      std::chrono::milliseconds request_timeout) {
  const bool port_only =
      !address.empty() && address.find_first_not_of("0123456789") == std::string::npos;
  WCCL_ASSIGN_OR_RETURN(HostPort hp, parse_address(port_only ? "127.0.0.1:" + address : address));
  if (hp.host == "localhost") hp.host = "127.0.0.1";
  sockaddr_storage sa{};
  if (uv_ip4_addr(hp.host.c_str(), hp.port, reinterpret_cast<sockaddr_in *>(&sa)) != 0 &&
      uv_ip6_addr(hp.host.c_str(), hp.port, reinterpret_cast<sockaddr_in6 *>(&sa)) != 0) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                      "http address %s: the host must be an IP address or localhost",
                      address.c_str());
  }
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->state_ = std::make_unique<State>();
  State *st = server->state_.get();
  st->log = log;
  st->token = token;
  st->handler = std::move(handler);
  st->request_timeout = request_timeout;
  WCCL_ASSIGN_OR_RETURN(st->loop, Loop::start(log));
  std::promise<Result<int>> bound;
  std::future<Result<int>> result = bound.get_future();
  WCCL_RETURN_IF_ERROR(st->loop->post([st, &sa, &address, &bound] {
    uv_tcp_init_ex(st->loop->uv(), &st->listener, sa.ss_family);
    st->listener.data = st;
    uv_timer_init(st->loop->uv(), &st->sweep);
    st->sweep.data = st;
    st->handles = true;
    int rc = uv_tcp_bind(&st->listener, reinterpret_cast<const sockaddr *>(&sa), 0);
    if (rc == 0) {
      rc = uv_listen(
          reinterpret_cast<uv_stream_t *>(&st->listener), 128,
          [](uv_stream_t *l, int status) { static_cast<State *>(l->data)->on_connection(status); });
    }
    if (rc != 0) {
      bound.set_value(
          WCCL_ERROR(WCCL_ERR_IO, "http: listen on %s: %s", address.c_str(), uv_strerror(rc)));
      return;
    }
    // A deadline is noticed at most a quarter of the timeout late.
    const auto period =
        static_cast<uint64_t>(std::clamp<int64_t>(st->request_timeout.count() / 4, 10, 1000));
    uv_timer_start(
        &st->sweep, [](uv_timer_t *t) { static_cast<State *>(t->data)->sweep_timeouts(); }, period,
        period);
    sockaddr_storage local{};
    int len = sizeof(local);
    uv_tcp_getsockname(&st->listener, reinterpret_cast<sockaddr *>(&local), &len);
    bound.set_value(local.ss_family == AF_INET6
                        ? ntohs(reinterpret_cast<sockaddr_in6 *>(&local)->sin6_port)
                        : ntohs(reinterpret_cast<sockaddr_in *>(&local)->sin_port));
  }));
  Result<int> port = result.get();  // the loop runs the task; it cannot be refused before stop()
  if (!port.ok()) return port.status();  // the destructor closes the handles
  server->port_ = port.value();
  return server;
}

HttpServer::~HttpServer() {
  if (state_ && state_->loop) {
    State *st = state_.get();
    st->loop->stop([st] { st->close_all(); });
  }
}

}  // namespace wccl::net
