// The loop-thread side of a link: the send queue cut into frames over the streams, the receives
// that frames are placed into, set-up and failure. Everything here runs on the loop thread except
// the Link methods, which post to it.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "net/link_state.h"
#include "net/stream.h"
#include "net/tcp_info.h"
#include "net/transport_core.h"

namespace wccl::net {

LinkState::LinkState(std::shared_ptr<Core> core, bool is_client, int stream_count,
                     Clock::time_point deadline)
    : core_(std::move(core)),
      is_client_(is_client),
      stream_count_(stream_count),
      setup_deadline_(deadline),
      last_rx_(Clock::now()),
      streams_(stream_count, nullptr) {}

bool LinkState::on_loop_thread() const { return core_->loop->in_loop_thread(); }

Status LinkState::send(const MessageKey &key, const void *data, size_t len, Completion done) {
  if (len > kMaxMessageBytes) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "message of %zu bytes exceeds the limit of %llu",
                      len, static_cast<unsigned long long>(kMaxMessageBytes));
  }
  if (data == nullptr && len > 0)
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "send: data is NULL");
  SendOp op{key, static_cast<const uint8_t *>(data), len, 0, false, 0, std::move(done), {}};
  return core_->post(
      [self = shared_from_this(), op = std::move(op)]() mutable { self->do_send(std::move(op)); });
}

Status LinkState::recv(const MessageKey &key, void *data, size_t len, size_t *got,
                       Completion done) {
  if (data == nullptr && len > 0)
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "recv: data is NULL");
  RecvOp op{static_cast<uint8_t *>(data), len, got, got == nullptr, 0, 0, std::move(done)};
  return core_->post([self = shared_from_this(), key, op = std::move(op)]() mutable {
    self->do_recv(key, std::move(op));
  });
}

Status LinkState::run(std::function<void()> fn) { return core_->post(std::move(fn)); }

void LinkState::pace(uint64_t bytes_per_s) {
  if (pace_asked_.exchange(bytes_per_s) == bytes_per_s) return;
  // The loop applies the latest rate asked for, whichever post runs last.
  Status st = core_->post([self = shared_from_this()] {
    self->pace_ = self->pace_asked_.load();
    if (self->state_ == State::kOpen) self->apply_pace();  // else when it opens
  });
  // Not posted (a loop stopped or overloaded): the next call, whatever its rate, tries again.
  if (!st.ok()) pace_asked_.store(kPaceUnknown);
}

void LinkState::apply_pace() {
  // Each stream carries an equal share of a large message (stripe_frame_bytes), so equal shares
  // of the cap keep the link's total at it; a share is at least kMinStreamPace. The kernel takes
  // 64 bits; ~0 is unlimited.
  const uint64_t share =
      pace_ == 0 ? ~uint64_t{0}
                 : std::max(kMinStreamPace,
                            (pace_ + static_cast<uint64_t>(stream_count_) - 1) / stream_count_);
  for (Stream *s : streams_) {
    uv_os_fd_t fd;
    if (s == nullptr || uv_fileno(reinterpret_cast<uv_handle_t *>(&s->tcp_), &fd) != 0) continue;
    if (setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &share, sizeof(share)) != 0 &&
        core_->log.enabled(LogLevel::kWarn)) {
      WCCL_LOG(core_->log, kWarn, "link to %s: pacing at %llu bytes/s: %s", peer_name_.c_str(),
               static_cast<unsigned long long>(share), uv_strerror(uv_translate_sys_error(errno)));
    }
  }
}

void LinkState::close(Status why) {
  if (why.ok()) why = WCCL_ERROR(WCCL_ERR_ABORTED, "link closed locally");
  Status st = core_->post([self = shared_from_this(), why] { self->fail(why); });
  (void)st;  // a stopped loop has already failed every link
}

Status LinkState::on_close(Completion fn) {
  return core_->post([self = shared_from_this(), fn = std::move(fn)]() mutable {
    if (self->state_ == State::kClosed) {
      self->defer([fn = std::move(fn), why = self->error_] { fn(why); });
    } else {
      self->on_close_.push_back(std::move(fn));
    }
  });
}

void LinkState::do_send(SendOp op) {
  if (state_ == State::kClosed || peer_closing_) {
    defer([done = std::move(op.done), err = state_ == State::kClosed ? error_ : peer_closed_why_] {
      done(err);
    });
    return;
  }
  sends_.push_back(std::move(op));
  auto it = std::prev(sends_.end());
  it->self = it;
  if (next_cut_ == sends_.end()) next_cut_ = it;
  pump();
}

void LinkState::do_recv(const MessageKey &key, RecvOp op) {
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

// Cuts frames off the queued messages while some stream has room in its write window: less than
// one frame_bytes of its writes unfinished (not yet taken by its socket, which itself holds at most
// kUnsentBytes unsent), so a frame is queued behind little and a slower stream takes fewer.
void LinkState::pump() {
  if (state_ != State::kOpen || peer_closing_) return;
  const size_t window = core_->opt.frame_bytes;
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
    const uint32_t frame = stripe_frame_bytes(op.len, stream_count_, core_->opt.frame_bytes);
    h.length = static_cast<uint32_t>(std::min<uint64_t>(frame, op.len - op.next_offset));
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

void LinkState::frame_sent(SendOp *op, uint32_t length) {
  bytes_sent_.fetch_add(length, std::memory_order_relaxed);
  const auto since = Clock::now() - tcp_sampled_;
  // Large enough that every stream carries a frame of it (stripe_frame_bytes).
  const bool large =
      op->len >= std::max<uint64_t>(kRateMessageBytes, uint64_t{kMinStripeBytes} *
                                                           static_cast<uint64_t>(stream_count_));
  if (since >= std::chrono::seconds(1) || (large && since >= kSampleInterval)) sample_tcp(large);
  if (--op->frames_in_flight == 0 && op->all_cut) {
    defer([done = std::move(op->done)] { done(Status()); });
    sends_.erase(op->self);
  }
  pump();
}

void LinkState::sample_tcp(bool all_streams_busy) {
  tcp_sampled_ = Clock::now();
  uint32_t best = 0;
  uint64_t rate = 0;
  for (Stream *s : streams_) {
    uv_os_fd_t fd;
    if (s == nullptr || uv_fileno(reinterpret_cast<uv_handle_t *>(&s->tcp_), &fd) != 0) continue;
    const TcpSample t = tcp_sample(fd);
    if (t.min_rtt_us != 0 && (best == 0 || t.min_rtt_us < best)) best = t.min_rtt_us;
    rate += t.delivery_rate;
  }
  if (best != 0) min_rtt_us_.store(best, std::memory_order_relaxed);
  // While a large message goes out, every stream carries a share of it (stripe_frame_bytes), so
  // their latest rates are shares of the path at once and add up to the link's. (The kernel flags
  // many such samples application-limited, between a ring step's messages; they still bound the
  // rate from below, which the maximum over samples then approaches.) Streams sampled apart could
  // each have had the path to themselves: their sum would overstate it.
  if (all_streams_busy && pace_ == 0 && rate > delivery_rate_.load(std::memory_order_relaxed)) {
    delivery_rate_.store(rate, std::memory_order_relaxed);
  }
}

Result<LinkState::RxBegin> LinkState::rx_begin(Stream *stream, const FrameHeader &h,
                                               uint8_t **dst) {
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
                      op.sized ? "expects" : "holds at most",
                      static_cast<unsigned long long>(op.len));
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

void LinkState::rx_done(const FrameHeader &h) {
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

void LinkState::open_streams(const ::sockaddr *sa) {
  if (state_ != State::kSetup) return;  // timed out during the lookup
  for (int i = 0; i < stream_count_; ++i) {
    auto *s = new Stream(core_.get(), /*is_server=*/false);
    s->peer_ = peer_address_;
    int rc = uv_tcp_init_ex(core_->loop->uv(), &s->tcp_, sa->sa_family);
    if (rc != 0) {
      delete s;
      return fail(
          WCCL_ERROR(WCCL_ERR_IO, "socket for %s: %s", peer_address_.c_str(), uv_strerror(rc)));
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
      std::shared_ptr<LinkState> keep = st->link_->shared_from_this();
      if (status < 0) {
        st->fail(
            WCCL_ERROR(WCCL_ERR_IO, "connect to %s: %s", st->peer_.c_str(), uv_strerror(status)));
      } else {
        st->start_after_connect();
      }
      st->core_->run_deferred();
    });
    if (rc != 0) {
      delete req;
      return fail(
          WCCL_ERROR(WCCL_ERR_IO, "connect to %s: %s", peer_address_.c_str(), uv_strerror(rc)));
    }
  }
}

void LinkState::attach(Stream *stream, int index) {
  streams_[index] = stream;
  stream->link_ = this;
  stream->index_ = index;
  stream_ready();
}

void LinkState::stream_ready() {
  if (++ready_ < stream_count_) return;
  state_ = State::kOpen;
  last_rx_ = Clock::now();
  if (pace_ != 0) apply_pace();
  sample_tcp(/*all_streams_busy=*/false);
  WCCL_LOG(core_->log, kInfo, "link %s %s (%s) open, %d stream(s)%s", is_client_ ? "to" : "from",
           peer_address_.c_str(), peer_name_.c_str(), stream_count_,
           core_->opt.tls ? ", TLS 1.3" : ", plaintext");
  std::shared_ptr<Link> self = shared_from_this();
  if (is_client_) {
    defer([cb = std::exchange(on_connected_, nullptr), self] { cb(self); });
  } else if (on_accepted_) {
    defer([cb = std::exchange(on_accepted_, nullptr), self] { cb(self); });
  }
  pump();
}

void LinkState::fail(const Status &cause) {
  if (state_ == State::kClosed) return;
  std::shared_ptr<LinkState> keep = shared_from_this();
  const bool was_setup = state_ == State::kSetup;
  state_ = State::kClosed;
  const Status why = about_peer(cause);
  error_ = why;
  const LogLevel level = was_setup ? LogLevel::kWarn : LogLevel::kInfo;
  if (core_->log.enabled(level)) {
    core_->log.log(level, "link %s %s%s failed: %s", is_client_ ? "to" : "from",
                   peer_address_.c_str(), was_setup ? " (set-up)" : "", why.to_string().c_str());
  }
  for (Stream *s : streams_) {
    if (s == nullptr) continue;
    s->link_ = nullptr;
    s->close();
  }
  streams_.assign(stream_count_, nullptr);
  fail_sends(why);
  for (auto &[key, op] : recvs_) defer([done = std::move(op.done), why] { done(why); });
  recvs_.clear();
  for (Completion &fn : on_close_) defer([fn = std::move(fn), why] { fn(why); });
  on_close_.clear();
  parked_.clear();
  if (on_connected_) {
    defer([cb = std::exchange(on_connected_, nullptr), why] { cb(why); });
  }
  on_accepted_ = nullptr;
  if (!is_client_) {
    auto it = core_->accepting.find(
        std::string(reinterpret_cast<const char *>(link_id_), sizeof(link_id_)));
    if (it != core_->accepting.end() && it->second.get() == this) core_->accepting.erase(it);
  }
  core_->links.erase(keep);
}

// Whoever waits on the link learns which peer it led to: a stream's error names an address only.
Status LinkState::about_peer(const Status &cause) const {
  return peer_name_.empty() || cause.message().find(peer_name_) != std::string::npos
             ? cause
             : cause.with_context("link with " + peer_name_);
}

void LinkState::peer_closing(Stream *ended, const Status &why) {
  if (state_ != State::kOpen) return;
  if (ended != nullptr) ended->ended_ = true;
  if (!peer_closing_) {
    peer_closing_ = true;
    peer_closed_why_ = about_peer(why);
    peer_closed_at_ = Clock::now();
    WCCL_LOG(core_->log, kDebug, "link %s %s: the peer is closing (%s); delivering what it sent",
             is_client_ ? "to" : "from", peer_address_.c_str(), why.to_string().c_str());
    fail_sends(peer_closed_why_);  // frames still being written are forgotten: on_write skips them
  }
  // After the completions already due: a callback that posts the next receive resumes a stream
  // parked on it.
  defer([self = shared_from_this()] { self->check_drained(); });
}

void LinkState::fail_sends(const Status &why) {
  for (SendOp &op : sends_) defer([done = std::move(op.done), why] { done(why); });
  sends_.clear();
  next_cut_ = sends_.end();
}

void LinkState::stream_parked() {
  if (peer_closing_) defer([self = shared_from_this()] { self->check_drained(); });
}

void LinkState::check_drained() {
  if (state_ != State::kOpen) return;
  for (Stream *s : streams_) {
    if (s != nullptr && !s->ended_ && !s->parked()) return;
  }
  fail(peer_closed_why_);
}

void LinkState::check_timeouts(Clock::time_point now) {
  if (state_ == State::kSetup) {
    if (now >= setup_deadline_) {
      fail(WCCL_ERROR(WCCL_ERR_TIMEOUT, "link %s %s not established within %lld ms",
                      is_client_ ? "to" : "from", peer_address_.c_str(),
                      static_cast<long long>(core_->opt.connect_timeout.count())));
    }
    return;
  }
  if (state_ == State::kOpen && peer_closing_ && now - peer_closed_at_ >= core_->opt.io_timeout) {
    return fail(peer_closed_why_.with_context(
        format("not drained %lld ms after the peer began closing",
               static_cast<long long>(core_->opt.io_timeout.count()))));
  }
  if (state_ != State::kOpen) return;
  for (Stream *s : streams_) {
    if (s != nullptr && !s->ended_ && s->unacknowledged_for(core_->opt.io_timeout)) {
      return fail(WCCL_ERROR(WCCL_ERR_TIMEOUT,
                             "%s (%s) acknowledged nothing for %lld ms with data to send",
                             peer_address_.c_str(), peer_name_.c_str(),
                             static_cast<long long>(core_->opt.io_timeout.count())));
    }
  }
  if (now - last_rx_ < core_->opt.io_timeout) return;
  // Silence counts only while the peer owes bytes: a frame or a message has started to arrive.
  // (A stream parked on a receive nobody posted is waiting for this side, not for the peer.)
  // A partly received message counts only while no stream is parked: the rest of it may be queued
  // behind a frame that waits for a receive this side has not posted.
  bool mid_message = false;
  if (parked_.empty()) {
    for (const auto &[key, op] : recvs_)
      mid_message = mid_message || (op.received > 0 && op.received < op.len);
  }
  for (Stream *s : streams_) mid_message = mid_message || s->mid_frame();
  if (!mid_message) return;
  fail(WCCL_ERROR(WCCL_ERR_TIMEOUT, "no byte from %s (%s) for %lld ms in the middle of a message",
                  peer_address_.c_str(), peer_name_.c_str(),
                  static_cast<long long>(core_->opt.io_timeout.count())));
}

void LinkState::defer(std::function<void()> fn) { core_->deferred.push_back(std::move(fn)); }

}  // namespace wccl::net
