// One TCP connection of a link. Everything here runs on the loop thread.
#include "net/stream.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "net/address.h"
#include "net/link_state.h"
#include "net/transport_core.h"

namespace wccl::net {
namespace {

constexpr size_t kStagingBytes = 256 << 10;  // socket reads land here unless read directly
constexpr size_t kDirectReadMin = 64 << 10;  // payload remainders this large skip staging
constexpr size_t kSpareCiphers = 2;          // sealed frames' buffers kept for the next frames

// Kernel timeouts (keepalive) are timeouts; every other socket error is IO.
wccl_result_t io_code(int uv_error) {
  return uv_error == UV_ETIMEDOUT ? WCCL_ERR_TIMEOUT : WCCL_ERR_IO;
}

}  // namespace

bool Stream::unacknowledged_for(std::chrono::milliseconds limit) const {
  uv_os_fd_t fd;
  if (uv_fileno(reinterpret_cast<const uv_handle_t *>(&tcp_), &fd) != 0) return false;
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return false;
  // Segments in flight: a zero window has none (its probes carry no data and back off to minutes
  // apart), so a receiver that has not posted its receive is never taken for a dead one.
  return info.tcpi_unacked > 0 && info.tcpi_last_ack_recv >= static_cast<uint64_t>(limit.count());
}

struct WriteReq {
  uv_write_t req{};
  Stream *stream = nullptr;
  SendOp *op = nullptr;  // null for hello and handshake bytes
  uint32_t frame_len = 0;
  uint8_t header[kFrameHeaderBytes + kMaxHelloBytes] = {};
  std::vector<uint8_t> cipher;
};

void Stream::start_after_connect() {
  peer_ = peer_text(&tcp_);
  if (link_ != nullptr && index_ == 0) link_->local_host_ = local_host_text(&tcp_);
  if (core_->opt.tls) {
    Result<std::unique_ptr<TlsEngine>> engine = TlsEngine::create(*core_->tls, is_server_);
    if (!engine.ok()) return fail(engine.status());
    tls_ = std::move(engine).value();
  }
  start_reading();
  if (closing_) return;
  if (tls_) {
    phase_ = Phase::kHandshake;
    process();  // a client's first handshake step writes its ClientHello
  } else {
    send_hello();
  }
}

std::string Stream::peer_subject() const { return tls_ ? tls_->peer_subject() : ""; }

void Stream::start_reading() {
  if (reading_ || closing_) return;
  const int rc =
      uv_read_start(reinterpret_cast<uv_stream_t *>(&tcp_), &Stream::on_alloc, &Stream::on_read);
  if (rc != 0)
    return fail(WCCL_ERROR(WCCL_ERR_IO, "read from %s: %s", peer_.c_str(), uv_strerror(rc)));
  reading_ = true;
}

void Stream::stop_reading() {
  if (!reading_) return;
  uv_read_stop(reinterpret_cast<uv_stream_t *>(&tcp_));
  reading_ = false;
}

void Stream::on_alloc(uv_handle_t *h, size_t, uv_buf_t *buf) {
  auto *s = static_cast<Stream *>(h->data);
  const bool records = s->records();
  // A large payload (all of it, to its last bytes) goes straight into the receiver's buffer
  // (plaintext, or a sealed frame opened there in place), once staging is used up; everything
  // else via staging.
  if (!records && s->rx_ == Rx::kPayload && (s->left_ >= kDirectReadMin || s->large_frames_) &&
      s->staging_off_ == s->staging_len_) {
    s->direct_read_ = true;
    *buf = uv_buf_init(reinterpret_cast<char *>(s->dst_),
                       static_cast<unsigned>(std::min<size_t>(s->left_, 1u << 30)));
    return;
  }
  if (!s->staging_) s->staging_.reset(new uint8_t[kStagingBytes]);
  s->direct_read_ = false;
  // Unconsumed bytes (at most a partial TLS record, header or tag: reading stops while a stream is
  // parked) move to the front, and the socket appends after them.
  const size_t left = s->staging_len_ - s->staging_off_;
  if (s->staging_off_ > 0)
    std::memmove(s->staging_.get(), s->staging_.get() + s->staging_off_, left);
  s->staging_off_ = 0;
  s->staging_len_ = left;
  size_t room = kStagingBytes - left;
  // After a large frame, read only up to the next payload (the rest of the tag and the next
  // header), so that the payload is read directly, not into staging and copied out: one read
  // more per large frame instead of a copy of it. Small frames come many to a read.
  if (!records && s->large_frames_ && s->rx_ != Rx::kPayload) {
    const size_t want = (s->rx_ == Rx::kTag ? FrameSeal::kTagBytes - s->tag_got_ : 0) +
                        kFrameHeaderBytes - s->hdr_got_;
    room = std::min(room, want > left ? want - left : size_t{1});
  }
  *buf =
      uv_buf_init(reinterpret_cast<char *>(s->staging_.get() + left), static_cast<unsigned>(room));
}

void Stream::on_read(uv_stream_t *h, ssize_t nread, const uv_buf_t *) {
  auto *s = static_cast<Stream *>(h->data);
  Core *core = s->core_;
  std::shared_ptr<LinkState> keep = s->link_ != nullptr ? s->link_->shared_from_this() : nullptr;
  if (nread < 0) {
    const bool mid_frame = s->mid_frame();
    s->reset_ = nread == UV_ECONNRESET;
    const Status why =
        nread == UV_EOF ? WCCL_ERROR(WCCL_ERR_IO, "peer %s closed the connection%s",
                                     s->peer_.c_str(), mid_frame ? " in the middle of a frame" : "")
                        : WCCL_ERROR(io_code(static_cast<int>(nread)), "read from %s: %s",
                                     s->peer_.c_str(), uv_strerror(static_cast<int>(nread)));
    // The peer's kernel closed this connection between frames: the link's other streams may still
    // hold what the peer wrote before it closed them.
    if (!mid_frame && s->link_ != nullptr && s->link_->state_ == LinkState::State::kOpen &&
        (nread == UV_EOF || s->reset_)) {
      s->stop_reading();
      s->link_->peer_closing(s, why);
    } else {
      s->fail(why);
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
  if (rx_ == Rx::kTag) return {tag_ + tag_got_, FrameSeal::kTagBytes - tag_got_};
  return {dst_, left_};
}

// Runs the receive state machine over the staged bytes. Stops when they are used up, or the
// stream is parked or closed.
void Stream::process() {
  while (phase_ != Phase::kClosed && !closing_ && rx_ != Rx::kAwaitDest) {
    if (phase_ == Phase::kHandshake) {
      if (!handshake_step()) return;
      continue;
    }
    auto [ptr, max] = rx_target();
    Result<size_t> n = read_staged(ptr, max);
    if (!n.ok()) {
      Status st = n.status().with_context(format("from %s", peer_.c_str()));
      // TLS 1.3 clients learn that the server rejected their certificate only now, from the
      // alert that ends the session during the hello.
      if (phase_ == Phase::kHello)
        st = WCCL_ERROR(WCCL_ERR_AUTH, "%s (during link set-up)", st.message().c_str());
      return fail(st);
    }
    if (n.value() == 0) {
      Status st = flush(nullptr);  // the TLS engine may owe the peer a reply (alert, key update)
      if (!st.ok()) fail(st);
      return;
    }
    rx_advance(n.value());
  }
  if (rx_ == Rx::kAwaitDest) stop_reading();  // parked: resume() restarts reading
}

// The read path: staged bytes into dst, copied (plaintext, sealed frames) or decrypted by the TLS
// engine (handshake and hello), which consumes only whole records. 0: nothing more can be taken
// from what is staged.
Result<size_t> Stream::read_staged(uint8_t *dst, size_t max) {
  const uint8_t *staged = staging_.get() + staging_off_;
  const size_t staged_len = staging_len_ - staging_off_;
  if (records()) {
    tls_->set_input(staged, staged_len);
    Result<size_t> n = tls_->read(dst, max);
    staging_off_ = staging_len_ - tls_->input_left();
    return n;
  }
  const size_t n = std::min(max, staged_len);
  if (n > 0) std::memcpy(dst, staged, n);
  staging_off_ += n;
  return n;
}

// One step of the TLS handshake over the staged bytes. False: it needs more, or the stream failed.
bool Stream::handshake_step() {
  tls_->set_input(staging_.get() + staging_off_, staging_len_ - staging_off_);
  Result<bool> done = tls_->handshake();
  staging_off_ = staging_len_ - tls_->input_left();
  Status st = flush(nullptr);
  if (!done.ok()) {
    fail(done.status().with_context(format("TLS with %s", peer_.c_str())));
    return false;
  }
  if (!st.ok()) {
    fail(st);
    return false;
  }
  if (!done.value()) return false;
  WCCL_LOG(core_->log, kDebug, "TLS 1.3 session with %s, peer certificate %s", peer_.c_str(),
           tls_->peer_subject().c_str());
  Result<std::unique_ptr<FrameSeal>> seal = FrameSeal::from_tls(*tls_, /*is_client=*/!is_server_);
  if (!seal.ok()) {
    fail(seal.status());
    return false;
  }
  seal_ = std::move(seal).value();
  send_hello();
  return true;
}

void Stream::rx_advance(size_t n) {
  if (link_ != nullptr && rx_ == Rx::kPayload && cur_.type == FrameType::kData) {
    link_->bytes_received_.fetch_add(n, std::memory_order_relaxed);
  }
  if (rx_ == Rx::kPayload) {
    dst_ += n;
    left_ -= n;
    if (left_ == 0) payload_complete();
    return;
  }
  if (rx_ == Rx::kTag) {
    tag_got_ += n;
    if (tag_got_ < FrameSeal::kTagBytes) return;
    tag_got_ = 0;
    // The header, still in hdr_, is the additional data; the payload opens where it landed.
    Status st = seal_->open(hdr_, kFrameHeaderBytes, dst_ - cur_.length, cur_.length, tag_);
    if (!st.ok()) return fail(st.with_context(format("frame from %s", peer_.c_str())));
    return frame_complete();
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
  if (link_ == nullptr)
    return fail(WCCL_ERROR(WCCL_ERR_INTERNAL, "data frame on a stream without a link"));
  Result<LinkState::RxBegin> r = link_->rx_begin(this, cur_, &dst_);
  if (!r.ok()) return fail(r.status().with_context(format("frame from %s", peer_.c_str())));
  if (r.value() == LinkState::RxBegin::kPark) {
    rx_ = Rx::kAwaitDest;
    link_->stream_parked();
    return;
  }
  left_ = cur_.length;
  large_frames_ = left_ >= kDirectReadMin;
  rx_ = Rx::kPayload;
  if (left_ == 0) payload_complete();
}

// A data frame on a TLS stream is sealed: its tag follows the payload.
void Stream::payload_complete() {
  if (cur_.type == FrameType::kData && tls_) {
    rx_ = Rx::kTag;
    return;
  }
  frame_complete();
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
  if (tls_ && tls_->holds_input()) {  // the hello's record carried more, or the engine read past it
    return fail(WCCL_ERROR(WCCL_ERR_PROTOCOL,
                           "%s sent more than its hello in the hello's TLS record", peer_.c_str()));
  }
  phase_ = Phase::kOpen;
  if (is_server_) {
    core_->on_hello(this, hello);
  } else if (link_ != nullptr) {
    link_->peer_name_ = hello.name;
    link_->peer_subject_ = peer_subject();
    link_->stream_ready();
  }
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
  auto req = std::make_unique<WriteReq>();
  const size_t payload = encode_hello(hello, req->header + kFrameHeaderBytes);
  FrameHeader h;
  h.type = FrameType::kHello;
  h.length = static_cast<uint32_t>(payload);
  h.msg_len = payload;
  encode_header(h, req->header);
  Status st = write(std::move(req), kFrameHeaderBytes + payload, nullptr, 0);
  if (!st.ok()) fail(st);
}

Status Stream::write_frame(const FrameHeader &h, const uint8_t *payload, SendOp *op) {
  auto req = std::make_unique<WriteReq>();
  req->op = op;
  req->frame_len = h.length;
  encode_header(h, req->header);
  if (!tls_) return write(std::move(req), kFrameHeaderBytes, payload, h.length);
  // Sealed: the header as it is, then the payload's ciphertext and tag, sealed from the sender's
  // buffer straight into the bytes the socket writes (a buffer of an earlier frame, reused).
  if (seal_ == nullptr)
    return WCCL_ERROR(WCCL_ERR_INTERNAL, "a data frame before the TLS handshake with %s",
                      peer_.c_str());
  const size_t sealed = h.length + FrameSeal::kTagBytes;
  if (!spare_ciphers_.empty()) {
    req->cipher = std::move(spare_ciphers_.back());
    spare_ciphers_.pop_back();
  }
  if (req->cipher.size() < sealed) req->cipher.resize(sealed);
  WCCL_RETURN_IF_ERROR(seal_->seal(req->header, kFrameHeaderBytes, payload, h.length,
                                   req->cipher.data(), req->cipher.data() + h.length));
  const uv_buf_t bufs[2] = {
      uv_buf_init(reinterpret_cast<char *>(req->header), static_cast<unsigned>(kFrameHeaderBytes)),
      uv_buf_init(reinterpret_cast<char *>(req->cipher.data()), static_cast<unsigned>(sealed))};
  return submit(std::move(req), bufs, 2);
}

// The write path of hellos and plaintext data frames (sealed ones: write_frame): a frame's head
// from req->header (its header, and a hello's payload), then its payload from the sender's
// buffer. Plaintext goes to the socket as it is, in one write (zero copy: the kernel reads the
// payload from the sender's buffer); on a TLS connection the head (a hello) is one TLS record, and
// the same req carries its ciphertext instead.
Status Stream::write(std::unique_ptr<WriteReq> req, size_t head_len, const uint8_t *payload,
                     size_t len) {
  if (tls_) {
    if (len != 0)
      return WCCL_ERROR(WCCL_ERR_INTERNAL, "a payload as a TLS record to %s", peer_.c_str());
    WCCL_RETURN_IF_ERROR(tls_->write(req->header, head_len));
    return flush(std::move(req));
  }
  const uv_buf_t bufs[2] = {
      uv_buf_init(reinterpret_cast<char *>(req->header), static_cast<unsigned>(head_len)),
      uv_buf_init(reinterpret_cast<char *>(const_cast<uint8_t *>(payload)),
                  static_cast<unsigned>(len))};
  return submit(std::move(req), bufs, len > 0 ? 2 : 1);
}

// TLS: moves all ciphertext the engine holds into one socket write, which req (if any) tags with
// the frame it ends. Plaintext holds none.
Status Stream::flush(std::unique_ptr<WriteReq> req) {
  if (!tls_ || tls_->pending() == 0) return Status();
  if (req == nullptr) req = std::make_unique<WriteReq>();
  req->cipher = tls_->take();
  const uv_buf_t buf = uv_buf_init(reinterpret_cast<char *>(req->cipher.data()),
                                   static_cast<unsigned>(req->cipher.size()));
  return submit(std::move(req), &buf, 1);
}

Status Stream::submit(std::unique_ptr<WriteReq> req, const uv_buf_t *bufs, unsigned nbufs) {
  req->stream = this;
  const int rc =
      uv_write(&req->req, reinterpret_cast<uv_stream_t *>(&tcp_), bufs, nbufs, &Stream::on_write);
  if (rc != 0) return WCCL_ERROR(WCCL_ERR_IO, "write to %s: %s", peer_.c_str(), uv_strerror(rc));
  tx_in_flight_ += req.release()->frame_len;  // on_write frees it
  return Status();
}

void Stream::on_write(uv_write_t *r, int status) {
  std::unique_ptr<WriteReq> req(reinterpret_cast<WriteReq *>(r));
  Stream *s = req->stream;
  s->tx_in_flight_ -= req->frame_len;
  LinkState *link = s->link_;
  if (link == nullptr || s->closing_) return;  // the link already failed and released its ops
  if (req->op != nullptr && s->seal_ != nullptr && s->spare_ciphers_.size() < kSpareCiphers) {
    s->spare_ciphers_.push_back(std::move(req->cipher));
  }
  std::shared_ptr<LinkState> keep = link->shared_from_this();
  if (link->peer_closing_) {
    // Its op failed when the peer began closing; the stream's reads end it.
  } else if (status < 0) {
    s->reset_ = status == UV_ECONNRESET || status == UV_EPIPE;
    const Status why =
        WCCL_ERROR(io_code(status), "write to %s: %s", s->peer_.c_str(), uv_strerror(status));
    if (s->reset_ && link->state_ == LinkState::State::kOpen) {
      link->peer_closing(nullptr, why);  // what the peer wrote before it went may still be unread
    } else {
      s->fail(why);
    }
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
    if (phase_ != Phase::kConnecting && phase_ != Phase::kOpen &&
        link_->state_ == LinkState::State::kSetup && why.code() == WCCL_ERR_IO) {
      if (heard_ || !reset_) {
        why = WCCL_ERROR(WCCL_ERR_AUTH,
                         "%s (during link set-up: the peer rejected this side's "
                         "certificate, or tls=on/off differs between the two sides)",
                         why.message().c_str());
      } else {
        why = WCCL_ERROR(WCCL_ERR_IO,
                         "%s before answering anything: it refused the connection (too many "
                         "connections in set-up from this address) or went away",
                         why.message().c_str());
      }
    }
    link_->fail(why);  // closes every stream of the link, this one included
    return;
  }
  if (why.code() == WCCL_ERR_IO && tls_ && phase_ != Phase::kOpen) {
    why = WCCL_ERROR(WCCL_ERR_AUTH, "%s (during the TLS handshake)", why.message().c_str());
  }
  WCCL_LOG(core_->log, kWarn, "rejected connection from %s: %s", peer_.c_str(),
           why.to_string().c_str());
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
  if (!reset || uv_tcp_close_reset(&tcp_, free_stream) != 0)
    uv_close(reinterpret_cast<uv_handle_t *>(&tcp_), free_stream);
}

}  // namespace wccl::net
