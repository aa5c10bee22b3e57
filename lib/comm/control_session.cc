#include "comm/control_session.h"

#include <algorithm>
#include <thread>

namespace wccl::comm {

Status unreachable(const Status &why) {
  if (why.code() == WCCL_ERR_AUTH || why.code() == WCCL_ERR_INVALID_ARGUMENT) return why;
  return WCCL_ERROR(WCCL_ERR_COORDINATOR_UNREACHABLE, "%s", why.message().c_str());
}

Result<std::unique_ptr<ControlSession>> ControlSession::open(const Config &cfg,
                                                             Clock::time_point deadline, Logger log,
                                                             Events events) {
  std::unique_ptr<ControlSession> s(
      new ControlSession(cfg.str("coordinator"), std::move(log), std::move(events)));
  Config control_cfg = cfg;  // control messages are small: one connection carries them
  WCCL_RETURN_IF_ERROR(control_cfg.set("streams", "1"));
  WCCL_ASSIGN_OR_RETURN(s->transport_, net::Transport::create(control_cfg));
  // A coordinator that is not listening yet, or that refuses connections while too many from this
  // address are in set-up, is tried again with backoff until the deadline; the last cause is what
  // the caller hears. A TLS rejection (AUTH) or a bad address is final at once.
  auto backoff = std::chrono::milliseconds(50);
  int attempts = 1;
  auto link = s->transport_->connect_sync(s->coordinator_);
  while (!link.ok() &&
         (link.status().code() == WCCL_ERR_IO || link.status().code() == WCCL_ERR_TIMEOUT) &&
         Clock::now() + backoff < deadline) {
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
    ++attempts;
    link = s->transport_->connect_sync(s->coordinator_);
  }
  if (!link.ok()) {
    return unreachable(
        link.status().with_context(format("coordinator %s (%d attempt%s)", s->coordinator_.c_str(),
                                          attempts, attempts == 1 ? "" : "s")));
  }
  s->local_host_ = link.value()->local_host();
  if (!s->publish(s->adopt(link.value()))) return s->down();
  return s;
}

ControlSession::~ControlSession() { stop(); }

std::shared_ptr<ControlSession::Connection> ControlSession::adopt(
    const std::shared_ptr<net::Link> &link) {
  auto conn = std::make_shared<Connection>();
  auto channel = coord::ControlChannel::open(
      link, [this](const coord::ControlMessage &m) { events_.message(m); },
      [this, conn](const Status &why) { closed(conn, why); });
  std::lock_guard<std::mutex> lock(mu_);
  conn->channel = std::move(channel);
  return conn;
}

bool ControlSession::publish(const std::shared_ptr<Connection> &conn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (conn->closed) {
    down_ = conn->why;
    return false;
  }
  current_ = conn;
  return true;
}

void ControlSession::closed(const std::shared_ptr<Connection> &conn, const Status &why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    conn->closed = true;
    conn->why = why;
    if (current_ != conn) return;  // not published yet (publish sees it), or replaced already
    current_.reset();
    down_ = why;
    backoff_ = std::chrono::milliseconds(0);
    next_attempt_ = Clock::now();
  }
  events_.lost(why);
}

Status ControlSession::send(const coord::ControlMessage &m) const {
  std::shared_ptr<coord::ControlChannel> ch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!current_) return unreachable(down_);
    ch = current_->channel;
  }
  return ch->send(m);
}

bool ControlSession::connected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_ != nullptr;
}

Status ControlSession::down() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_ ? Status() : unreachable(down_);
}

Status ControlSession::start(std::chrono::milliseconds period) {
  period_ = period;
  return transport_->every(period, [this] { events_.tick(); });
}

// With the coordinator gone, try again with exponential backoff (up to 8 heartbeats); once back,
// the communicator REJOINs with the epoch and ring it holds, so a restarted coordinator continues
// from them.
void ControlSession::reconnect() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_ || current_ || reconnecting_ || Clock::now() < next_attempt_) return;
    reconnecting_ = true;
    backoff_ = std::min(std::max(backoff_ * 2, period_), period_ * 8);
    next_attempt_ = Clock::now() + backoff_;
  }
  Status st = transport_->connect(coordinator_, [this](Result<std::shared_ptr<net::Link>> link) {
    if (!link.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      reconnecting_ = false;
      down_ = link.status();
      return;
    }
    const std::shared_ptr<Connection> conn = adopt(link.value());
    {
      std::lock_guard<std::mutex> lock(mu_);
      reconnecting_ = false;
    }
    if (!publish(conn)) return;  // closed at once: the next heartbeat tries again
    // The REJOIN goes out before anything another thread sends once the channel is published:
    // this runs on the control loop thread, where a channel's send runs at once, while another
    // thread's send is posted to the loop and runs after this callback returns.
    const std::shared_ptr<coord::ControlChannel> channel = conn->channel;
    const std::vector<coord::ControlMessage> again = events_.reconnected();
    if (!again.empty()) {
      WCCL_LOG(log_, kInfo, "reconnected to the coordinator; rejoining at epoch %llu",
               static_cast<unsigned long long>(again.front().epoch));
    }
    for (const coord::ControlMessage &m : again) (void)channel->send(m);
  });
  if (!st.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    reconnecting_ = false;
  }
}

bool ControlSession::flush(std::chrono::milliseconds timeout) const {
  std::shared_ptr<coord::ControlChannel> ch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (current_) ch = current_->channel;
  }
  return !ch || ch->flush(timeout);
}

void ControlSession::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  // The transport's destructor runs the last callbacks on its loop thread, and they may still call
  // it (its calls then return ABORTED): unique_ptr::reset would null the pointer first, so it is
  // deleted in place and released afterwards.
  if (transport_) {
    delete transport_.get();
    (void)transport_.release();
  }
}

}  // namespace wccl::comm
