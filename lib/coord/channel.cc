#include "coord/channel.h"

namespace wccl::coord {
namespace {

constexpr uint32_t kLengthTag = 1;
constexpr uint32_t kBodyTag = 2;

}  // namespace

std::shared_ptr<ControlChannel> ControlChannel::open(std::shared_ptr<net::Link> link,
                                                     OnMessage on_message, OnClose on_close) {
  std::shared_ptr<ControlChannel> ch(
      new ControlChannel(std::move(link), std::move(on_message), std::move(on_close)));
  ch->receive_next();
  return ch;
}

Status ControlChannel::send(const ControlMessage &m) { return queue(m, nullptr); }

Status ControlChannel::send_then_close(const ControlMessage &m, const Status &why) {
  std::weak_ptr<ControlChannel> weak = shared_from_this();
  Status st = queue(m, [weak, why] {
    if (auto self = weak.lock()) self->close(why);
  });
  if (!st.ok()) close(why);
  return st;
}

Status ControlChannel::queue(const ControlMessage &m, std::function<void()> then) {
  struct Outgoing {
    uint8_t length[4];
    std::vector<uint8_t> body;
  };
  auto out = std::make_shared<Outgoing>();
  out->body = encode(m);
  if (out->body.size() > kMaxControlBytes) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                      "control message of %zu bytes exceeds the limit of %zu", out->body.size(),
                      kMaxControlBytes);
  }
  const uint32_t n = static_cast<uint32_t>(out->body.size());
  for (int i = 0; i < 4; ++i) out->length[i] = static_cast<uint8_t>(n >> (8 * i));
  // Numbers are given on the loop thread as the frames go out, so the wire carries messages in
  // their numbered order; the receiver asks for them in that order, and a message that overtook
  // an earlier one would wait behind it for ever.
  {
    std::lock_guard<std::mutex> lock(unsent_mu_);
    ++unsent_;
  }
  Status posted = link_->run([self = shared_from_this(), out, then = std::move(then)] {
    const uint64_t seq = self->tx_seq_++;
    // Completions keep the buffers alive and count the message out (a failed send fails the link,
    // which on_close reports).
    Status st = self->link_->send({kControlEpoch, seq, kLengthTag}, out->length, 4,
                                  [out](const Status &) {});
    if (st.ok()) {
      st = self->link_->send({kControlEpoch, seq, kBodyTag}, out->body.data(), out->body.size(),
                             [self, out, then](const Status &) {
                               self->written();
                               if (then) then();
                             });
    }
    if (!st.ok()) {
      self->written();
      self->link_->close(st);
    }
  });
  if (!posted.ok()) written();
  return posted;
}

void ControlChannel::written() {
  {
    std::lock_guard<std::mutex> lock(unsent_mu_);
    --unsent_;
  }
  unsent_cv_.notify_all();
}

bool ControlChannel::flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(unsent_mu_);
  return unsent_cv_.wait_for(lock, timeout, [this] { return unsent_ == 0 || finished_; });
}

void ControlChannel::close(const Status &why) { link_->close(why); }

void ControlChannel::receive_next() {
  auto self = shared_from_this();
  Status st = link_->recv(
      {kControlEpoch, rx_seq_, kLengthTag}, rx_len_, sizeof(rx_len_), [self](const Status &got) {
        if (!got.ok()) return self->finish(got);
        const uint32_t n = static_cast<uint32_t>(self->rx_len_[0]) |
                           static_cast<uint32_t>(self->rx_len_[1]) << 8 |
                           static_cast<uint32_t>(self->rx_len_[2]) << 16 |
                           static_cast<uint32_t>(self->rx_len_[3]) << 24;
        if (n > kMaxControlBytes) {
          // No receive is pending now, so closing the link reports nothing back: finish here.
          const Status too_long =
              WCCL_ERROR(WCCL_ERR_PROTOCOL, "control message of %u bytes exceeds the limit of %zu",
                         n, kMaxControlBytes);
          self->close(too_long);
          return self->finish(too_long);
        }
        self->rx_body_.resize(n);
        Status posted = self->link_->recv(
            {kControlEpoch, self->rx_seq_, kBodyTag}, self->rx_body_.data(), n,
            [self](const Status &body) {
              if (!body.ok()) return self->finish(body);
              ControlMessage m;
              Status decoded = decode(self->rx_body_.data(), self->rx_body_.size(), &m);
              std::vector<uint8_t>().swap(self->rx_body_);  // hold no large buffer between messages
              if (!decoded.ok()) {
                self->close(decoded);
                return self->finish(decoded);
              }
              ++self->rx_seq_;
              // Posted before delivery, so that a handler that closes still ends it.
              self->receive_next();
              if (!self->finished_) self->on_message_(std::move(m));
            });
        if (!posted.ok()) self->finish(posted);
      });
  if (!st.ok()) finish(st);
}

void ControlChannel::finish(const Status &why) {
  if (finished_.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(unsent_mu_);  // a flush waiting on this link ends with it
  }
  unsent_cv_.notify_all();
  auto on_close = std::move(on_close_);
  on_message_ = nullptr;  // the callbacks may hold this channel: break the cycle
  if (on_close) on_close(why);
}

}  // namespace wccl::coord
