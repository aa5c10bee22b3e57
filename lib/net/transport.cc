// Streams, links and the transport that owns them. Everything here runs on the loop thread except
// the public entry points, which post to it.
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
#include <set>
#include <utility>

#include "net/address.h"
#include "net/loop.h"
#include "net/tls.h"

namespace wccl::net {
namespace {

constexpr size_t kStagingBytes = 256 << 10;     // socket reads land here unless read directly
constexpr size_t kDirectReadMin = 64 << 10;     // payload remainders this large skip staging
constexpr size_t kCoalesceBytes = 16 << 10;     // TLS: smaller payloads share a record with the header
constexpr size_t kMaxSetupStreams = 1024;       // accepted connections of links not yet open
// ... of those from one address: enough for the links of a few dozen members behind one NAT
// opening at once, while a client that opens connections and sends nothing holds few slots.
constexpr size_t kMaxSetupStreamsPerAddress = 64;

std::string sockaddr_text(const sockaddr *sa) {
  char ip[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (sa->sa_family == AF_INET) {
    const auto *in = reinterpret_cast<const sockaddr_in *>(sa);
    uv_ip4_name(in, ip, sizeof(ip));
    port = ntohs(in->sin_port);
    return format("%s:%d", ip, port);
  }
  if (sa->sa_family == AF_INET6) {
    const auto *in6 = reinterpret_cast<const sockaddr_in6 *>(sa);
    uv_ip6_name(in6, ip, sizeof(ip));
    port = ntohs(in6->sin6_port);
    return format("[%s]:%d", ip, port);
  }
  return "?";
}

// Kernel timeouts (TCP_USER_TIMEOUT, keepalive) are timeouts; every other socket error is IO.
wccl_result_t io_code(int uv_error) { return uv_error == UV_ETIMEDOUT ? WCCL_ERR_TIMEOUT : WCCL_ERR_IO; }

std::string local_host_text(const uv_tcp_t *tcp) {
  sockaddr_storage ss{};
  int len = sizeof(ss);
  if (uv_tcp_getsockname(tcp, reinterpret_cast<sockaddr *>(&ss), &len) != 0) return "";
  char ip[INET6_ADDRSTRLEN] = "";
  if (ss.ss_family == AF_INET) uv_ip4_name(reinterpret_cast<sockaddr_in *>(&ss), ip, sizeof(ip));
  if (ss.ss_family == AF_INET6) uv_ip6_name(reinterpret_cast<sockaddr_in6 *>(&ss), ip, sizeof(ip));
  return ip;
}

std::string peer_text(const uv_tcp_t *tcp) {
  sockaddr_storage ss{};
  int len = sizeof(ss);
  if (uv_tcp_getpeername(tcp, reinterpret_cast<sockaddr *>(&ss), &len) != 0) return "?";
  return sockaddr_text(reinterpret_cast<sockaddr *>(&ss));
}

// The peer's IP address without the port: what set-up connections are counted by.
std::string peer_host(const uv_tcp_t *tcp) {
  std::string text = peer_text(tcp);
  const size_t colon = text.rfind(':');
  return colon == std::string::npos ? text : text.substr(0, colon);
}

}  // namespace

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

// State shared by the transport, its links and streams. Lives until the Transport and every Link
// handle are gone; its loop is stopped when the Transport goes.
class Core : public std::enable_shared_from_this<Core> {
 public:
  Logger log;
  Options opt;
  std::shared_ptr<TlsContext> tls;
  std::unique_ptr<Loop> loop;
  uv_timer_t sweep{};  // timeouts of set-ups and stalled links
  std::set<std::shared_ptr<Link>> links;  // set-up or open; closed links leave
  std::set<Stream *> pending;             // accepted, hello not yet received
  std::map<std::string, size_t> pending_from;  // pending streams by peer address
  Clock::time_point next_refusal_log_{};
  std::map<std::string, std::shared_ptr<Link>> accepting;  // link id -> link in set-up
  struct Listener {
    uv_tcp_t tcp;
    Core *core;
    std::function<void(std::shared_ptr<Link>)> on_link;
  };
  std::vector<Listener *> listeners;
  std::set<uv_getaddrinfo_t *> lookups;  // in flight; cancelled at shutdown
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

// One TCP connection of a link: the receive state machine, the TLS engine if any, the write window.
class Stream {
 public:
  Stream(Core *core, bool is_server) : core_(core), is_server_(is_server) {
    tcp_.data = this;
  }

  enum class Phase { kConnecting, kHandshake, kHello, kOpen, kClosed };
  enum class Rx { kHeader, kAwaitDest, kPayload };

  Status init_tls();
  void start_after_connect();
  void start_reading();
  void stop_reading();
  void process();
  void resume();
  Status write_frame(const FrameHeader &h, const uint8_t *payload, Link::SendOp *op);
  void fail(Status why);
  // reset: with a TCP reset (a refusal the peer can tell from a closed connection).
  void close(bool reset = false);
  bool mid_frame() const { return rx_ == Rx::kPayload || (rx_ == Rx::kHeader && hdr_got_ > 0); }

  uv_tcp_t tcp_{};
  Core *core_;
  const bool is_server_;
  Link *link_ = nullptr;
  int index_ = 0;
  Phase phase_ = Phase::kConnecting;
  Clock::time_point deadline_{};  // pending (server) streams only
  std::string host_;              // pending (server) streams only: the peer's address
  bool heard_ = false;            // any byte arrived from the peer
  bool reset_ = false;            // the peer reset the connection (RST)
  std::function<void(std::shared_ptr<Link>)> on_link_;  // pending (server) streams only
  std::string peer_;
  std::unique_ptr<TlsEngine> tls_;
  size_t tx_in_flight_ = 0;
  bool closing_ = false;

 private:
  static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
  static void on_read(uv_stream_t *h, ssize_t nread, const uv_buf_t *buf);
  static void on_write(uv_write_t *req, int status);
  std::pair<uint8_t *, size_t> rx_target();
  void rx_advance(size_t n);
  void begin_data();
  void frame_complete();
  void on_handshake_done();
  void send_hello();
  Status flush_tls(Link::SendOp *op, uint32_t frame_len);
  Status submit(WriteReq *req, const uv_buf_t *bufs, unsigned nbufs);

  bool reading_ = false;
  Rx rx_ = Rx::kHeader;
  uint8_t hdr_[kFrameHeaderBytes] = {};
  size_t hdr_got_ = 0;
  FrameHeader cur_;
  uint8_t *dst_ = nullptr;
  size_t left_ = 0;
  uint8_t hello_buf_[kMaxHelloBytes] = {};
  std::unique_ptr<uint8_t[]> staging_;
  size_t staging_off_ = 0, staging_len_ = 0;
  bool direct_read_ = false;
};

struct WriteReq {
  uv_write_t req{};
  Stream *stream = nullptr;
  Link::SendOp *op = nullptr;  // null for hello and handshake bytes
  uint32_t frame_len = 0;
  uint8_t header[kFrameHeaderBytes + kMaxHelloBytes] = {};
  std::vector<uint8_t> cipher;
};

// ---------------------------------------------------------------------------------------------
// Stream

Status Stream::init_tls() {
  if (!core_->opt.tls) return Status();
  Result<std::unique_ptr<TlsEngine>> engine = TlsEngine::create(*core_->tls, is_server_);
  if (!engine.ok()) return engine.status();
  tls_ = std::move(engine).value();
  return Status();
}

// The connection is up (connected or accepted): TLS handshake first, or hello straight away.
void Stream::start_after_connect() {
  peer_ = peer_text(&tcp_);
  if (link_ != nullptr && index_ == 0) link_->local_host_ = local_host_text(&tcp_);
  Status st = init_tls();
  if (!st.ok()) return fail(st);
  start_reading();
  if (closing_) return;
  if (tls_) {
    phase_ = Phase::kHandshake;
    process();  // a client's first handshake step writes its ClientHello
  } else {
    send_hello();
  }
}

void Stream::start_reading() {
  if (reading_ || closing_) return;
  const int rc = uv_read_start(reinterpret_cast<uv_stream_t *>(&tcp_), &Stream::on_alloc, &Stream::on_read);
  if (rc != 0) return fail(WCCL_ERROR(WCCL_ERR_IO, "read from %s: %s", peer_.c_str(), uv_strerror(rc)));
  reading_ = true;
}

void Stream::stop_reading() {
  if (!reading_) return;
  uv_read_stop(reinterpret_cast<uv_stream_t *>(&tcp_));
  reading_ = false;
}

void Stream::on_alloc(uv_handle_t *h, size_t, uv_buf_t *buf) {
  auto *s = static_cast<Stream *>(h->data);
  // Plaintext payload goes straight into the receiver's buffer; everything else via staging.
  if (!s->tls_ && s->rx_ == Rx::kPayload && s->left_ >= kDirectReadMin &&
      s->staging_off_ == s->staging_len_) {
    s->direct_read_ = true;
    *buf = uv_buf_init(reinterpret_cast<char *>(s->dst_),
                       static_cast<unsigned>(std::min<size_t>(s->left_, 1u << 30)));
    return;
  }
  if (!s->staging_) s->staging_.reset(new uint8_t[kStagingBytes]);
  s->direct_read_ = false;
  // Unconsumed bytes (at most a partial TLS record: reading stops while a stream is parked) move
  // to the front, and the socket appends after them.
  const size_t left = s->staging_len_ - s->staging_off_;
  if (s->staging_off_ > 0) std::memmove(s->staging_.get(), s->staging_.get() + s->staging_off_, left);
  s->staging_off_ = 0;
  s->staging_len_ = left;
  *buf = uv_buf_init(reinterpret_cast<char *>(s->staging_.get() + left), static_cast<unsigned>(kStagingBytes - left));
}

void Stream::on_read(uv_stream_t *h, ssize_t nread, const uv_buf_t *) {
  auto *s = static_cast<Stream *>(h->data);
  Core *core = s->core_;
  std::shared_ptr<Link> keep = s->link_ != nullptr ? s->link_->shared_from_this() : nullptr;
  if (nread < 0) {
    const bool mid_frame = s->mid_frame();
    s->reset_ = nread == UV_ECONNRESET;
    if (nread == UV_EOF) {
      s->fail(WCCL_ERROR(WCCL_ERR_IO, "peer %s closed the connection%s", s->peer_.c_str(),
                         mid_frame ? " in the middle of a frame" : ""));
    } else {
      s->fail(WCCL_ERROR(io_code(static_cast<int>(nread)), "read from %s: %s", s->peer_.c_str(),
                         uv_strerror(static_cast<int>(nread))));
    }
  } else if (nread > 0) {
    const size_t n = static_cast<size_t>(nread);
    s->heard_ = true;
    if (s->link_ != nullptr) s->link_->last_rx_ = Clock::now();
    if (s->direct_read_) {
      s->rx_advance(n);
    } else {
      s->staging_len_ += n;
      s->process();
    }
  }
  core->run_deferred();
}

std::pair<uint8_t *, size_t> Stream::rx_target() {
  if (rx_ == Rx::kHeader) return {hdr_ + hdr_got_, kFrameHeaderBytes - hdr_got_};
  return {dst_, left_};
}

// Runs the receive state machine over the staged bytes: plaintext, or ciphertext that the TLS
// engine decrypts in place. Stops when they are used up, or the stream is parked or closed.
void Stream::process() {
  while (phase_ != Phase::kClosed && !closing_ && rx_ != Rx::kAwaitDest) {
    if (tls_) {
      tls_->set_input(staging_.get() + staging_off_, staging_len_ - staging_off_);
      // Whatever the engine reads from the lent bytes is consumed, on every path out of here.
      struct Consume {
        Stream *s;
        ~Consume() { s->staging_off_ = s->staging_len_ - s->tls_->input_left(); }
      } consume{this};
      if (!tls_->handshake_done()) {
        Result<bool> done = tls_->handshake();
        Status st = flush_tls(nullptr, 0);
        if (!done.ok()) return fail(done.status().with_context(format("TLS with %s", peer_.c_str())));
        if (!st.ok()) return fail(st);
        if (!done.value()) return;
        on_handshake_done();
        continue;
      }
      auto [ptr, max] = rx_target();
      Result<size_t> n = tls_->read(ptr, max);
      if (!n.ok()) {
        Status st = n.status().with_context(format("from %s", peer_.c_str()));
        // TLS 1.3 clients learn that the server rejected their certificate only now, from the
        // alert that ends the session during the hello.
        if (phase_ == Phase::kHello) st = WCCL_ERROR(WCCL_ERR_AUTH, "%s (during link set-up)", st.message().c_str());
        return fail(st);
      }
      if (n.value() == 0) {
        Status st = flush_tls(nullptr, 0);  // the engine may owe the peer a reply (alert, key update)
        if (!st.ok()) fail(st);
        return;
      }
      rx_advance(n.value());
    } else {
      if (staging_off_ == staging_len_) return;
      auto [ptr, max] = rx_target();
      const size_t n = std::min(max, staging_len_ - staging_off_);
      std::memcpy(ptr, staging_.get() + staging_off_, n);
      staging_off_ += n;
      rx_advance(n);
    }
  }
  if (rx_ == Rx::kAwaitDest) stop_reading();  // parked: resume() restarts reading
}

void Stream::rx_advance(size_t n) {
  if (link_ != nullptr && rx_ == Rx::kPayload && cur_.type == FrameType::kData) {
    link_->bytes_received_.fetch_add(n, std::memory_order_relaxed);
  }
  if (rx_ == Rx::kPayload) {
    dst_ += n;
    left_ -= n;
    if (left_ == 0) frame_complete();
    return;
  }
  hdr_got_ += n;
  if (hdr_got_ < kFrameHeaderBytes) return;
  hdr_got_ = 0;
  Status st = decode_header(hdr_, kMaxFramePayload, &cur_);
  if (!st.ok()) return fail(st.with_context(format("frame from %s", peer_.c_str())));
  if (cur_.type == FrameType::kHello) {
    if (phase_ != Phase::kHello) {
      return fail(WCCL_ERROR(WCCL_ERR_PROTOCOL, "%s sent a second hello", peer_.c_str()));
    }
    dst_ = hello_buf_;
    left_ = cur_.length;
    rx_ = Rx::kPayload;
    return;
  }
  if (phase_ != Phase::kOpen) {
    return fail(WCCL_ERROR(WCCL_ERR_PROTOCOL, "%s sent data before its hello", peer_.c_str()));
  }
  begin_data();
}

// Finds where the data frame in cur_ goes, or parks the stream until a receive for it is posted.
void Stream::begin_data() {
  // An open stream that is not closing always belongs to a link; the check keeps that visible.
  if (link_ == nullptr) return fail(WCCL_ERROR(WCCL_ERR_INTERNAL, "data frame on a stream without a link"));
  Result<Link::RxBegin> r = link_->rx_begin(this, cur_, &dst_);
  if (!r.ok()) return fail(r.status().with_context(format("frame from %s", peer_.c_str())));
  if (r.value() == Link::RxBegin::kPark) {
    rx_ = Rx::kAwaitDest;
    return;
  }
  left_ = cur_.length;
  rx_ = Rx::kPayload;
  if (left_ == 0) frame_complete();
}

void Stream::resume() {
  if (rx_ != Rx::kAwaitDest || closing_) return;
  link_->last_rx_ = Clock::now();  // the silence while parked was this side's
  begin_data();
  if (closing_) return;
  process();
  if (rx_ != Rx::kAwaitDest) start_reading();
}

void Stream::frame_complete() {
  rx_ = Rx::kHeader;
  if (cur_.type == FrameType::kData) {
    if (link_ != nullptr) link_->rx_done(cur_);
    return;
  }
  Hello hello;
  Status st = decode_hello(hello_buf_, cur_.length, /*from_connector=*/is_server_, &hello);
  if (!st.ok()) return fail(st.with_context(format("hello from %s", peer_.c_str())));
  phase_ = Phase::kOpen;
  if (is_server_) {
    core_->on_hello(this, hello);
  } else if (link_ != nullptr) {
    link_->peer_name_ = hello.name;
    if (tls_) link_->peer_subject_ = tls_->peer_subject();
    link_->stream_ready();
  }
}

void Stream::on_handshake_done() {
  WCCL_LOG(core_->log, kDebug, "TLS 1.3 session with %s, peer certificate %s", peer_.c_str(),
           tls_->peer_subject().c_str());
  send_hello();
}

void Stream::send_hello() {
  phase_ = Phase::kHello;
  Hello hello;
  if (!is_server_) {
    std::memcpy(hello.link_id, link_->link_id_, sizeof(hello.link_id));
    hello.stream_index = static_cast<uint16_t>(index_);
    hello.stream_count = static_cast<uint16_t>(link_->stream_count_);
  }
  hello.name = core_->opt.name;
  auto *req = new WriteReq();
  req->stream = this;
  const size_t payload = encode_hello(hello, req->header + kFrameHeaderBytes);
  FrameHeader h;
  h.type = FrameType::kHello;
  h.length = static_cast<uint32_t>(payload);
  h.msg_len = payload;
  encode_header(h, req->header);
  const size_t total = kFrameHeaderBytes + payload;
  if (tls_) {
    Status st = tls_->write(req->header, total);
    delete req;
    if (!st.ok()) return fail(st);
    st = flush_tls(nullptr, 0);
    if (!st.ok()) fail(st);
    return;
  }
  const uv_buf_t buf = uv_buf_init(reinterpret_cast<char *>(req->header), static_cast<unsigned>(total));
  Status st = submit(req, &buf, 1);
  if (!st.ok()) fail(st);
}

// Moves all ciphertext the engine holds into one socket write, tagged with the frame it ends.
Status Stream::flush_tls(Link::SendOp *op, uint32_t frame_len) {
  if (tls_->pending() == 0) return Status();
  auto *req = new WriteReq();
  req->stream = this;
  req->op = op;
  req->frame_len = frame_len;
  req->cipher = tls_->take();
  const uv_buf_t buf = uv_buf_init(reinterpret_cast<char *>(req->cipher.data()), static_cast<unsigned>(req->cipher.size()));
  return submit(req, &buf, 1);
}

Status Stream::submit(WriteReq *req, const uv_buf_t *bufs, unsigned nbufs) {
  tx_in_flight_ += req->frame_len;
  const int rc = uv_write(&req->req, reinterpret_cast<uv_stream_t *>(&tcp_), bufs, nbufs, &Stream::on_write);
  if (rc != 0) {
    tx_in_flight_ -= req->frame_len;
    delete req;
    return WCCL_ERROR(WCCL_ERR_IO, "write to %s: %s", peer_.c_str(), uv_strerror(rc));
  }
  return Status();
}

Status Stream::write_frame(const FrameHeader &h, const uint8_t *payload, Link::SendOp *op) {
  if (!tls_) {
    auto *req = new WriteReq();
    req->stream = this;
    req->op = op;
    req->frame_len = h.length;
    encode_header(h, req->header);
    // Zero copy: the kernel reads the payload from the caller's buffer.
    uv_buf_t bufs[2] = {uv_buf_init(reinterpret_cast<char *>(req->header), kFrameHeaderBytes),
                        uv_buf_init(reinterpret_cast<char *>(const_cast<uint8_t *>(payload)), h.length)};
    return submit(req, bufs, h.length > 0 ? 2 : 1);
  }
  uint8_t head[kFrameHeaderBytes + kCoalesceBytes];
  encode_header(h, head);
  Status st;
  if (h.length <= kCoalesceBytes) {
    if (h.length > 0) std::memcpy(head + kFrameHeaderBytes, payload, h.length);
    st = tls_->write(head, kFrameHeaderBytes + h.length);
  } else {
    st = tls_->write(head, kFrameHeaderBytes);
    if (st.ok()) st = tls_->write(payload, h.length);
  }
  if (!st.ok()) return st;
  return flush_tls(op, h.length);
}

void Stream::on_write(uv_write_t *r, int status) {
  std::unique_ptr<WriteReq> req(reinterpret_cast<WriteReq *>(r));
  Stream *s = req->stream;
  s->tx_in_flight_ -= req->frame_len;
  Link *link = s->link_;
  if (link == nullptr || s->closing_) return;  // the link already failed and released its ops
  std::shared_ptr<Link> keep = link->shared_from_this();
  if (status < 0) {
    s->reset_ = status == UV_ECONNRESET || status == UV_EPIPE;
    s->fail(WCCL_ERROR(io_code(status), "write to %s: %s", s->peer_.c_str(), uv_strerror(status)));
  } else if (req->op != nullptr) {
    link->frame_sent(req->op, req->frame_len);
  }
  s->core_->run_deferred();
}

void Stream::fail(Status why) {
  if (closing_) return;
  if (link_ != nullptr) {
    // A peer that hangs up after the TCP connect but before its hello refused us: it rejected our
    // certificate, or one side has tls=off. One that resets it without a byte refused the
    // connection itself (too many connections in set-up from this address), or died: worth
    // retrying, and no certificate's fault.
    if (phase_ != Phase::kConnecting && phase_ != Phase::kOpen && link_->state_ == Link::State::kSetup &&
        why.code() == WCCL_ERR_IO) {
      if (heard_ || !reset_) {
        why = WCCL_ERROR(WCCL_ERR_AUTH, "%s (during link set-up: the peer rejected this side's "
                         "certificate, or tls=on/off differs between the two sides)", why.message().c_str());
      } else {
        why = WCCL_ERROR(WCCL_ERR_IO, "%s before answering anything: it refused the connection (too many "
                         "connections in set-up from this address) or went away", why.message().c_str());
      }
    }
    link_->fail(why);  // closes every stream of the link, this one included
    return;
  }
  if (why.code() == WCCL_ERR_IO && tls_ && phase_ != Phase::kOpen) {
    why = WCCL_ERROR(WCCL_ERR_AUTH, "%s (during the TLS handshake)", why.message().c_str());
  }
  WCCL_LOG(core_->log, kWarn, "rejected connection from %s: %s", peer_.c_str(), why.to_string().c_str());
  close();
}

void Stream::close(bool reset) {
  if (closing_) return;
  closing_ = true;
  phase_ = Phase::kClosed;
  core_->forget_pending(this);
  stop_reading();
  // The fd closes now; queued writes complete with ECANCELED before on-close frees the stream.
  const uv_close_cb free_stream = [](uv_handle_t *h) { delete static_cast<Stream *>(h->data); };
  if (!reset || uv_tcp_close_reset(&tcp_, free_stream) != 0) uv_close(reinterpret_cast<uv_handle_t *>(&tcp_), free_stream);
}

// ---------------------------------------------------------------------------------------------
// Link

Link::Link(std::shared_ptr<Core> core, bool is_client, int stream_count, Clock::time_point deadline)
    : core_(std::move(core)), is_client_(is_client), stream_count_(stream_count),
      setup_deadline_(deadline), last_rx_(Clock::now()), streams_(stream_count, nullptr) {}

Link::~Link() = default;

bool Link::on_loop_thread() const { return core_->loop->in_loop_thread(); }

Status Link::send(const MessageKey &key, const void *data, size_t len, Completion done) {
  if (len > kMaxMessageBytes) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "message of %zu bytes exceeds the limit of %llu", len,
                      static_cast<unsigned long long>(kMaxMessageBytes));
  }
  if (data == nullptr && len > 0) return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "send: data is NULL");
  SendOp op{key, static_cast<const uint8_t *>(data), len, 0, false, 0, std::move(done), {}};
  return core_->post([self = shared_from_this(), op = std::move(op)]() mutable { self->do_send(std::move(op)); });
}

Status Link::recv(const MessageKey &key, void *data, size_t len, Completion done) {
  return recv(key, data, len, nullptr, std::move(done));
}

Status Link::recv(const MessageKey &key, void *data, size_t len, size_t *got, Completion done) {
  if (data == nullptr && len > 0) return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "recv: data is NULL");
  RecvOp op{static_cast<uint8_t *>(data), len, got, got == nullptr, 0, 0, std::move(done)};
  return core_->post([self = shared_from_this(), key, op = std::move(op)]() mutable { self->do_recv(key, std::move(op)); });
}

Status Link::run(std::function<void()> fn) { return core_->post(std::move(fn)); }

void Link::close(Status why) {
  if (why.ok()) why = WCCL_ERROR(WCCL_ERR_ABORTED, "link closed locally");
  Status st = core_->post([self = shared_from_this(), why] { self->fail(why); });
  (void)st;  // a stopped loop has already failed every link
}

void Link::do_send(SendOp op) {
  if (state_ == State::kClosed) {
    defer([done = std::move(op.done), err = error_] { done(err); });
    return;
  }
  sends_.push_back(std::move(op));
  auto it = std::prev(sends_.end());
  it->self = it;
  if (next_cut_ == sends_.end()) next_cut_ = it;
  pump();
}

void Link::do_recv(const MessageKey &key, RecvOp op) {
  if (state_ == State::kClosed) {
    defer([done = std::move(op.done), err = error_] { done(err); });
    return;
  }
  if (recvs_.count(key) != 0) {
    defer([done = std::move(op.done), k = key] {
      done(WCCL_ERROR(WCCL_ERR_INVALID_USAGE, "a receive of message %s is already waiting",
                      k.to_string().c_str()));
    });
    return;
  }
  recvs_.emplace(key, std::move(op));
  auto parked = parked_.find(key);
  if (parked == parked_.end()) return;
  std::vector<Stream *> streams = std::move(parked->second);
  parked_.erase(parked);
  for (Stream *s : streams) {
    if (state_ == State::kClosed) break;
    s->resume();
  }
}

// Cuts frames off the queued messages while some stream has room in its write window.
void Link::pump() {
  if (state_ != State::kOpen) return;
  const size_t window = 2 * static_cast<size_t>(core_->opt.frame_bytes);
  while (next_cut_ != sends_.end()) {
    Stream *s = nullptr;
    for (int i = 0; i < stream_count_; ++i) {
      Stream *c = streams_[(next_stream_ + i) % stream_count_];
      if (c->tx_in_flight_ < window) {
        s = c;
        next_stream_ = (next_stream_ + i + 1) % stream_count_;
        break;
      }
    }
    if (s == nullptr) return;  // every window full: on_write calls back in
    SendOp &op = *next_cut_;
    FrameHeader h;
    h.type = FrameType::kData;
    h.key = op.key;
    h.offset = op.next_offset;
    h.msg_len = op.len;
    h.length = static_cast<uint32_t>(std::min<uint64_t>(core_->opt.frame_bytes, op.len - op.next_offset));
    op.next_offset += h.length;
    op.frames_in_flight++;
    if (op.next_offset == op.len) {
      op.all_cut = true;
      ++next_cut_;
    }
    Status st = s->write_frame(h, op.data + h.offset, &op);
    if (!st.ok()) return fail(st);
  }
}

void Link::frame_sent(SendOp *op, uint32_t length) {
  bytes_sent_.fetch_add(length, std::memory_order_relaxed);
  if (--op->frames_in_flight == 0 && op->all_cut) {
    defer([done = std::move(op->done)] { done(Status()); });
    sends_.erase(op->self);
  }
  pump();
}

Result<Link::RxBegin> Link::rx_begin(Stream *stream, const FrameHeader &h, uint8_t **dst) {
  auto it = recvs_.find(h.key);
  if (it == recvs_.end()) {
    parked_[h.key].push_back(stream);
    return RxBegin::kPark;
  }
  RecvOp &op = it->second;
  if (!op.sized && h.msg_len <= op.len) {  // the first frame of a receive with a capacity
    op.len = h.msg_len;
    op.sized = true;
  }
  if (h.msg_len != op.len) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "message %s is %llu bytes but its receive %s %llu",
                      h.key.to_string().c_str(), static_cast<unsigned long long>(h.msg_len),
                      op.sized ? "expects" : "holds at most", static_cast<unsigned long long>(op.len));
  }
  // Counting bytes as frames begin (not as they finish) means that once a message is complete no
  // other stream can still be writing into its buffer, whatever a faulty peer repeats.
  if (h.length > op.len - op.reserved) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "message %s received more bytes than its length",
                      h.key.to_string().c_str());
  }
  op.reserved += h.length;
  *dst = op.data + h.offset;
  return RxBegin::kGo;
}

void Link::rx_done(const FrameHeader &h) {
  auto it = recvs_.find(h.key);
  if (it == recvs_.end()) return;  // cannot happen: ops leave only when complete or failed
  RecvOp &op = it->second;
  op.received += h.length;
  if (op.received == op.len) {
    if (op.got != nullptr) *op.got = op.len;
    defer([done = std::move(op.done)] { done(Status()); });
    recvs_.erase(it);
  }
}

void Link::attach(Stream *stream, int index) {
  streams_[index] = stream;
  stream->link_ = this;
  stream->index_ = index;
  stream_ready();
}

void Link::stream_ready() {
  if (++ready_ < stream_count_) return;
  state_ = State::kOpen;
  last_rx_ = Clock::now();
  WCCL_LOG(core_->log, kInfo, "link %s %s (%s) open, %d stream(s)%s", is_client_ ? "to" : "from",
           peer_address_.c_str(), peer_name_.c_str(), stream_count_,
           core_->opt.tls ? ", TLS 1.3" : ", plaintext");
  if (is_client_) {
    defer([cb = std::exchange(on_connected_, nullptr), self = shared_from_this()] { cb(self); });
  } else if (on_accepted_) {
    defer([cb = std::exchange(on_accepted_, nullptr), self = shared_from_this()] { cb(self); });
  }
  pump();
}

void Link::fail(const Status &why) {
  if (state_ == State::kClosed) return;
  std::shared_ptr<Link> keep = shared_from_this();
  const bool was_setup = state_ == State::kSetup;
  state_ = State::kClosed;
  error_ = why;
  const LogLevel level = was_setup ? LogLevel::kWarn : LogLevel::kInfo;
  if (core_->log.enabled(level)) {
    core_->log.log(level, "link %s %s%s failed: %s", is_client_ ? "to" : "from", peer_address_.c_str(),
                   was_setup ? " (set-up)" : "", why.to_string().c_str());
  }
  for (Stream *s : streams_) {
    if (s == nullptr) continue;
    s->link_ = nullptr;
    s->close();
  }
  streams_.assign(stream_count_, nullptr);
  for (SendOp &op : sends_) defer([done = std::move(op.done), why] { done(why); });
  sends_.clear();
  next_cut_ = sends_.end();
  for (auto &[key, op] : recvs_) defer([done = std::move(op.done), why] { done(why); });
  recvs_.clear();
  parked_.clear();
  if (on_connected_) {
    defer([cb = std::exchange(on_connected_, nullptr), why] { cb(why); });
  }
  on_accepted_ = nullptr;
  if (!is_client_) {
    auto it = core_->accepting.find(std::string(reinterpret_cast<const char *>(link_id_), sizeof(link_id_)));
    if (it != core_->accepting.end() && it->second.get() == this) core_->accepting.erase(it);
  }
  core_->links.erase(keep);
}

void Link::check_timeouts(Clock::time_point now) {
  if (state_ == State::kSetup) {
    if (now >= setup_deadline_) {
      fail(WCCL_ERROR(WCCL_ERR_TIMEOUT, "link %s %s not established within %lld ms",
                      is_client_ ? "to" : "from", peer_address_.c_str(),
                      static_cast<long long>(core_->opt.connect_timeout.count())));
    }
    return;
  }
  if (state_ != State::kOpen || now - last_rx_ < core_->opt.io_timeout) return;
  // Silence counts only while the peer owes bytes: a frame or a message has started to arrive.
  // (A stream parked on a receive nobody posted is waiting for this side, not for the peer.)
  // A partly received message counts only while no stream is parked: the rest of it may be queued
  // behind a frame that waits for a receive this side has not posted.
  bool mid_message = false;
  if (parked_.empty()) {
    for (const auto &[key, op] : recvs_) mid_message = mid_message || (op.received > 0 && op.received < op.len);
  }
  for (Stream *s : streams_) mid_message = mid_message || s->mid_frame();
  if (!mid_message) return;
  fail(WCCL_ERROR(WCCL_ERR_TIMEOUT, "no byte from %s (%s) for %lld ms in the middle of a message",
                  peer_address_.c_str(), peer_name_.c_str(),
                  static_cast<long long>(core_->opt.io_timeout.count())));
}

void Link::defer(std::function<void()> fn) { core_->deferred.push_back(std::move(fn)); }

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

// ---------------------------------------------------------------------------------------------
// Core

void Core::configure_socket(uv_tcp_t *tcp) {
  uv_tcp_nodelay(tcp, 1);
  const unsigned idle_s = static_cast<unsigned>(std::max<int64_t>(1, opt.io_timeout.count() / 2000));
  uv_tcp_keepalive(tcp, 1, idle_s);
  uv_os_fd_t fd;
  if (uv_fileno(reinterpret_cast<uv_handle_t *>(tcp), &fd) == 0) {
    // Data the peer's kernel leaves unacknowledged this long fails the connection (a dead host or
    // a cut path), instead of TCP's default of about 15 minutes.
    const unsigned user_timeout = static_cast<unsigned>(opt.io_timeout.count());
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout));
  }
  if (opt.sock_buf_bytes > 0) {
    int size = static_cast<int>(opt.sock_buf_bytes);
    uv_send_buffer_size(reinterpret_cast<uv_handle_t *>(tcp), &size);
    size = static_cast<int>(opt.sock_buf_bytes);
    uv_recv_buffer_size(reinterpret_cast<uv_handle_t *>(tcp), &size);
    int got = 0;  // Linux reports twice the size it grants
    uv_recv_buffer_size(reinterpret_cast<uv_handle_t *>(tcp), &got);
    if (got / 2 < opt.sock_buf_bytes && log.enabled(LogLevel::kWarn)) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        WCCL_LOG(log, kWarn, "sock_buf_bytes=%lld but the kernel granted %d; raise net.core.rmem_max "
                 "and net.core.wmem_max", static_cast<long long>(opt.sock_buf_bytes), got / 2);
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
  if (uv_accept(reinterpret_cast<uv_stream_t *>(&l->tcp), reinterpret_cast<uv_stream_t *>(&s->tcp_)) != 0) {
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
      WCCL_LOG(log, kWarn, "refusing connections from %s: %zu connections in set-up (%zu from that address; limits "
               "%zu and %zu)", host.c_str(), in_setup, from_host, kMaxSetupStreams, kMaxSetupStreamsPerAddress);
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
  std::shared_ptr<Link> link;
  auto it = accepting.find(id);
  if (it == accepting.end()) {
    link.reset(new Link(shared_from_this(), /*is_client=*/false, hello.stream_count, s->deadline_));
    std::memcpy(link->link_id_, hello.link_id, sizeof(link->link_id_));
    link->peer_address_ = s->peer_;
    link->peer_name_ = hello.name;
    if (s->tls_) link->peer_subject_ = s->tls_->peer_subject();
    link->on_accepted_ = s->on_link_;
    accepting.emplace(id, link);
    links.insert(link);
  } else {
    link = it->second;
  }
  const std::string subject = s->tls_ ? s->tls_->peer_subject() : "";
  if (hello.stream_count != link->stream_count_ || link->streams_[hello.stream_index] != nullptr ||
      subject != link->peer_subject_) {
    s->fail(WCCL_ERROR(WCCL_ERR_PROTOCOL, "hello for stream %u/%u does not fit link from %s",
                       hello.stream_index, hello.stream_count, link->peer_address_.c_str()));
    return;
  }
  link->attach(s, hello.stream_index);
  if (link->state_ == Link::State::kOpen) accepting.erase(id);
}

void Core::sweep_timeouts() {
  const Clock::time_point now = Clock::now();
  std::vector<Stream *> expired;
  for (Stream *s : pending) {
    if (now >= s->deadline_) expired.push_back(s);
  }
  for (Stream *s : expired) {
    s->fail(WCCL_ERROR(WCCL_ERR_TIMEOUT, "no hello within %lld ms", static_cast<long long>(opt.hello_timeout.count())));
  }
  std::vector<std::shared_ptr<Link>> all(links.begin(), links.end());
  for (auto &link : all) {
    link->check_timeouts(now);
  }
  run_deferred();
}

void Core::shutdown() {
  std::vector<std::shared_ptr<Link>> all(links.begin(), links.end());
  for (auto &link : all) {
    link->fail(WCCL_ERROR(WCCL_ERR_ABORTED, "the transport is shutting down"));
  }
  run_deferred();
  std::vector<Stream *> streams(pending.begin(), pending.end());
  for (Stream *s : streams) s->close();
  // A lookup still queued is cancelled (its callback runs with ECANCELED); one already running on
  // libuv's thread pool finishes first.
  for (uv_getaddrinfo_t *req : lookups) uv_cancel(reinterpret_cast<uv_req_t *>(req));
  for (Listener *l : listeners) {
    uv_close(reinterpret_cast<uv_handle_t *>(&l->tcp), [](uv_handle_t *h) { delete static_cast<Listener *>(h->data); });
  }
  listeners.clear();
  for (Periodic *p : periodics) {
    uv_close(reinterpret_cast<uv_handle_t *>(&p->timer), [](uv_handle_t *h) { delete static_cast<Periodic *>(h->data); });
  }
  periodics.clear();
  uv_close(reinterpret_cast<uv_handle_t *>(&sweep), nullptr);
}

// ---------------------------------------------------------------------------------------------
// Transport

Result<std::unique_ptr<Transport>> Transport::create(const Config &cfg) {
  auto core = std::make_shared<Core>();
  core->log = cfg.logger();
  core->opt.tls = cfg.flag("tls");
  core->opt.streams = static_cast<int>(cfg.integer("streams"));
  core->opt.frame_bytes = static_cast<uint32_t>(cfg.integer("frame_bytes"));
  core->opt.sock_buf_bytes = cfg.integer("sock_buf_bytes");
  core->opt.connect_timeout = std::chrono::milliseconds(cfg.integer("connect_timeout_ms"));
  // An accepted connection's deadline: never longer than a whole link's set-up.
  core->opt.hello_timeout =
      std::min(std::chrono::milliseconds(cfg.integer("hello_timeout_ms")), core->opt.connect_timeout);
  core->opt.io_timeout = std::chrono::milliseconds(cfg.integer("io_timeout_ms"));
  core->opt.name = cfg.peer_name();
  if (core->opt.tls) {
    Result<std::shared_ptr<TlsContext>> tls = TlsContext::create(cfg);
    if (!tls.ok()) return tls.status();
    core->tls = std::move(tls).value();
  } else {
    WCCL_LOG(core->log, kWarn, "tls=off: links are neither encrypted nor authenticated");
  }
  Result<std::unique_ptr<Loop>> loop = Loop::start(core->log);
  if (!loop.ok()) return loop.status();
  core->loop = std::move(loop).value();
  // Timeouts are checked by one timer; a timeout fires at most one period late.
  const auto shortest = std::min(core->opt.hello_timeout, core->opt.io_timeout).count();
  const uint64_t period = static_cast<uint64_t>(std::clamp<int64_t>(shortest / 4, 5, 250));
  Core *c = core.get();
  Status st = core->loop->post([c, period] {
    uv_timer_init(c->loop->uv(), &c->sweep);
    c->sweep.data = c;
    uv_timer_start(&c->sweep, [](uv_timer_t *t) { static_cast<Core *>(t->data)->sweep_timeouts(); },
                   period, period);
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
    uv_timer_start(&p->timer, [](uv_timer_t *t) {
      auto *self = static_cast<Core::Periodic *>(t->data);
      self->fn();
      self->core->run_deferred();
    }, ms, ms);
  });
}

std::chrono::milliseconds Transport::connect_timeout() const { return core_->opt.connect_timeout; }

namespace {

addrinfo resolve_hints(bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : AI_ADDRCONFIG;
  return hints;
}

Status resolve_error(const std::string &address, const std::string &host, int rc) {
  // A resolver that is unreachable or busy says nothing about the address.
  const wccl_result_t code = rc == UV_EAI_AGAIN || rc == UV_ECANCELED ? WCCL_ERR_IO : WCCL_ERR_INVALID_ARGUMENT;
  return WCCL_ERROR(code, "address \"%s\": cannot resolve \"%s\": %s",
                    address.c_str(), host.c_str(), uv_strerror(rc));
}

// Runs start on the loop and waits for the result it delivers (possibly from a later callback).
template <typename T>
Result<T> run_on_loop(Loop &loop, std::function<void(std::function<void(Result<T>)>)> start) {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Result<T>> result;
  };
  auto shared = std::make_shared<Shared>();
  Status st = loop.post([shared, start = std::move(start)] {
    start([shared](Result<T> r) {
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->result.emplace(std::move(r));
      shared->cv.notify_all();
    });
  });
  if (!st.ok()) return st;
  std::unique_lock<std::mutex> lock(shared->mu);
  // Name lookups are bounded by the resolver's own timeouts; a minute means the loop is wedged.
  if (!shared->cv.wait_for(lock, std::chrono::minutes(1), [&] { return shared->result.has_value(); })) {
    return WCCL_ERROR(WCCL_ERR_TIMEOUT, "the I/O loop did not answer within a minute");
  }
  return std::move(*shared->result);
}

}  // namespace

namespace {

// Binds and listens on sa (loop thread).
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
    uv_close(reinterpret_cast<uv_handle_t *>(&l->tcp), [](uv_handle_t *h) { delete static_cast<Core::Listener *>(h->data); });
  };
  // Buffer sizes set on the listener are inherited by accepted sockets before the handshake,
  // which is when TCP picks its window scale.
  if (c->opt.sock_buf_bytes > 0) {
    int size = static_cast<int>(c->opt.sock_buf_bytes);
    uv_recv_buffer_size(reinterpret_cast<uv_handle_t *>(&l->tcp), &size);
    size = static_cast<int>(c->opt.sock_buf_bytes);
    uv_send_buffer_size(reinterpret_cast<uv_handle_t *>(&l->tcp), &size);
  }
  int rc = uv_tcp_bind(&l->tcp, reinterpret_cast<const sockaddr *>(&sa), 0);
  if (rc == 0) {
    rc = uv_listen(reinterpret_cast<uv_stream_t *>(&l->tcp), 512, [](uv_stream_t *server, int status) {
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
  const int port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6 *>(&bound)->sin6_port)
                                               : ntohs(reinterpret_cast<sockaddr_in *>(&bound)->sin_port);
  WCCL_LOG(c->log, kInfo, "listening on %s", sockaddr_text(reinterpret_cast<sockaddr *>(&bound)).c_str());
  return port;
}

}  // namespace

Result<int> Transport::listen(const std::string &address,
                              std::function<void(std::shared_ptr<Link>)> on_link) {
  Result<HostPort> hp = parse_address(address);
  if (!hp.ok()) return hp.status();
  Core *c = core_.get();
  // The address resolves on this transport's loop (libuv's thread pool does the lookup).
  return run_on_loop<int>(*core_->loop, [c, hp = hp.value(), address, on_link = std::move(on_link)](
                                            std::function<void(Result<int>)> deliver) {
    struct Lookup {
      uv_getaddrinfo_t req{};
      Core *core;
      std::string address, host;
      std::function<void(std::shared_ptr<Link>)> on_link;
      std::function<void(Result<int>)> deliver;
    };
    auto *lookup = new Lookup{{}, c, address, hp.host, on_link, std::move(deliver)};
    lookup->req.data = lookup;
    c->lookups.insert(&lookup->req);
    const addrinfo hints = resolve_hints(/*passive=*/true);
    const std::string port = std::to_string(hp.port);
    const int rc = uv_getaddrinfo(c->loop->uv(), &lookup->req, [](uv_getaddrinfo_t *req, int status, addrinfo *res) {
      std::unique_ptr<Lookup> l(static_cast<Lookup *>(req->data));
      l->core->lookups.erase(req);
      if (status != 0 || res == nullptr) {
        l->deliver(resolve_error(l->address, l->host, status));
      } else {
        sockaddr_storage sa{};
        std::memcpy(&sa, res->ai_addr, res->ai_addrlen);
        l->deliver(open_listener(l->core, sa, l->address, l->on_link));
      }
      uv_freeaddrinfo(res);
    }, hp.host.c_str(), port.c_str(), &hints);
    if (rc != 0) {
      c->lookups.erase(&lookup->req);
      auto done = std::move(lookup->deliver);
      delete lookup;
      done(resolve_error(address, hp.host, rc));
    }
  });
}

Status Transport::connect(const std::string &address,
                          std::function<void(Result<std::shared_ptr<Link>>)> done) {
  Result<HostPort> hp = parse_address(address);
  if (!hp.ok()) return hp.status();
  std::shared_ptr<Core> core = core_;
  return core_->post([core, hp = hp.value(), address, done = std::move(done)]() mutable {
    std::shared_ptr<Link> link(new Link(core, /*is_client=*/true, core->opt.streams,
                                        Clock::now() + core->opt.connect_timeout));
    link->on_connected_ = std::move(done);
    link->peer_address_ = address;
    core->links.insert(link);
    if (RAND_bytes(link->link_id_, sizeof(link->link_id_)) != 1) {
      link->fail(WCCL_ERROR(WCCL_ERR_INTERNAL, "no random bytes for a link id: %s", openssl_errors().c_str()));
      return;
    }
    // Host names resolve on libuv's thread pool; the link's set-up deadline covers the lookup.
    struct Lookup {
      uv_getaddrinfo_t req{};
      std::shared_ptr<Link> link;
      std::string host;
    };
    auto *lookup = new Lookup();
    lookup->req.data = lookup;
    core->lookups.insert(&lookup->req);
    lookup->link = link;
    lookup->host = hp.host;
    const addrinfo hints = resolve_hints(/*passive=*/false);
    const std::string port = std::to_string(hp.port);
    const int rc = uv_getaddrinfo(core->loop->uv(), &lookup->req, [](uv_getaddrinfo_t *req, int status, addrinfo *res) {
      std::unique_ptr<Lookup> l(static_cast<Lookup *>(req->data));
      l->link->core_->lookups.erase(req);
      if (status == 0 && res != nullptr) {
        l->link->open_streams(res->ai_addr);
      } else {
        l->link->fail(resolve_error(l->link->peer_address_, l->host, status));
      }
      uv_freeaddrinfo(res);
      l->link->core_->run_deferred();
    }, hp.host.c_str(), port.c_str(), &hints);
    if (rc != 0) {
      core->lookups.erase(&lookup->req);
      delete lookup;
      link->fail(resolve_error(address, hp.host, rc));
    }
  });
}

// Client set-up, once the address is known: one connection per stream.
void Link::open_streams(const ::sockaddr *sa) {
  if (state_ != State::kSetup) return;  // timed out during the lookup
  for (int i = 0; i < stream_count_; ++i) {
    auto *s = new Stream(core_.get(), /*is_server=*/false);
    s->peer_ = peer_address_;
    int rc = uv_tcp_init_ex(core_->loop->uv(), &s->tcp_, sa->sa_family);
    if (rc != 0) {
      delete s;
      return fail(WCCL_ERROR(WCCL_ERR_IO, "socket for %s: %s", peer_address_.c_str(), uv_strerror(rc)));
    }
    s->link_ = this;
    s->index_ = i;
    streams_[i] = s;
    core_->configure_socket(&s->tcp_);  // buffer sizes before the SYN fix the window scale
    auto *req = new uv_connect_t();
    req->data = s;
    rc = uv_tcp_connect(req, &s->tcp_, sa, [](uv_connect_t *r, int status) {
      auto *st = static_cast<Stream *>(r->data);
      delete r;
      if (st->closing_) return;  // the link failed meanwhile
      std::shared_ptr<Link> keep = st->link_->shared_from_this();
      if (status < 0) {
        st->fail(WCCL_ERROR(WCCL_ERR_IO, "connect to %s: %s", st->peer_.c_str(), uv_strerror(status)));
      } else {
        st->start_after_connect();
      }
      st->core_->run_deferred();
    });
    if (rc != 0) {
      delete req;
      return fail(WCCL_ERROR(WCCL_ERR_IO, "connect to %s: %s", peer_address_.c_str(), uv_strerror(rc)));
    }
  }
}

namespace {

// Completion that a thread off the loop can wait on.
class Waiter : public std::enable_shared_from_this<Waiter> {
 public:
  Completion callback() {
    return [self = shared_from_this()](Status st) {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->status_ = std::move(st);
      self->done_ = true;
      self->cv_.notify_all();
    };
  }
  bool wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return done_; });
  }
  Status status() {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
};

template <typename Start>
Status wait_op(Link &link, std::chrono::milliseconds timeout, const char *what, Start start) {
  if (link.on_loop_thread()) {
    return WCCL_ERROR(WCCL_ERR_INVALID_USAGE, "blocking %s on the I/O thread would deadlock it", what);
  }
  auto waiter = std::make_shared<Waiter>();
  WCCL_RETURN_IF_ERROR(start(waiter->callback()));
  if (waiter->wait(timeout)) return waiter->status();
  link.close(WCCL_ERROR(WCCL_ERR_TIMEOUT, "%s did not complete within %lld ms", what,
                        static_cast<long long>(timeout.count())));
  // Closing completes the operation at once on the loop thread; the buffer is free after that.
  if (!waiter->wait(std::chrono::minutes(1))) std::abort();
  return waiter->status();
}

}  // namespace

Result<std::shared_ptr<Link>> Transport::connect_sync(const std::string &address) {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Result<std::shared_ptr<Link>>> result;
  };
  if (core_->loop->in_loop_thread()) {
    return WCCL_ERROR(WCCL_ERR_INVALID_USAGE, "blocking connect on the I/O thread would deadlock it");
  }
  auto shared = std::make_shared<Shared>();
  WCCL_RETURN_IF_ERROR(connect(address, [shared](Result<std::shared_ptr<Link>> r) {
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->result.emplace(std::move(r));
    shared->cv.notify_all();
  }));
  std::unique_lock<std::mutex> lock(shared->mu);
  // The link's own set-up deadline fires first; the margin covers the timer's period.
  if (!shared->cv.wait_for(lock, core_->opt.connect_timeout + std::chrono::seconds(5),
                           [&] { return shared->result.has_value(); })) {
    return WCCL_ERROR(WCCL_ERR_INTERNAL, "connect to %s: the set-up deadline did not fire", address.c_str());
  }
  return std::move(*shared->result);
}

Status send_sync(Link &link, const MessageKey &key, const void *data, size_t len,
                 std::chrono::milliseconds timeout) {
  return wait_op(link, timeout, "send", [&](Completion cb) { return link.send(key, data, len, std::move(cb)); });
}

Status recv_sync(Link &link, const MessageKey &key, void *data, size_t len,
                 std::chrono::milliseconds timeout) {
  return wait_op(link, timeout, "recv", [&](Completion cb) { return link.recv(key, data, len, std::move(cb)); });
}

}  // namespace wccl::net
