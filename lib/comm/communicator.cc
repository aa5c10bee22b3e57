#include "comm/communicator.h"

#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace wccl::comm {
namespace {

using coord::ControlMessage;
using coord::MessageType;
using Clock = std::chrono::steady_clock;

// Ring links: the connecting side first sends (epoch, its peer id) under this key, so the
// accepting side knows which epoch and neighbour the link belongs to. The sentinel key is never
// sent: a receive posted on it completes only when the link fails, which is how a broken
// neighbour link is noticed and reported.
constexpr net::MessageKey kLinkHello{~0ULL - 1, 0, 0};
constexpr net::MessageKey kLinkSentinel{~0ULL - 1, 0, 1};
constexpr size_t kMaxEarlyLinks = 4;

coord::PeerId random_id() {
  coord::PeerId id = 0;
  while (id == 0) {
    if (RAND_bytes(reinterpret_cast<unsigned char *>(&id), sizeof(id)) != 1) id = 0;
  }
  return id;
}

// Membership calls report a missing coordinator as such, whatever broke the connection.
Status unreachable(const Status &why) {
  if (why.code() == WCCL_ERR_AUTH || why.code() == WCCL_ERR_INVALID_ARGUMENT) return why;
  return WCCL_ERROR(WCCL_ERR_COORDINATOR_UNREACHABLE, "%s", why.message().c_str());
}

}  // namespace

Communicator::Communicator(const Config &cfg)
    : log_(cfg.logger()), id_(random_id()), coordinator_(cfg.str("coordinator")), group_(cfg.str("group")),
      listen_(cfg.str("listen")), heartbeat_(cfg.integer("heartbeat_ms")),
      join_timeout_(cfg.integer("join_timeout_ms")), op_timeout_(cfg.integer("op_timeout_ms")) {
  info_.name = cfg.peer_name();
  info_.address = cfg.str("advertise");
}

Result<std::unique_ptr<Communicator>> Communicator::join(const Config &cfg) {
  if (cfg.str("coordinator").empty()) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "config key coordinator (the coordinator's host:port) is not set");
  }
  std::unique_ptr<Communicator> c(new Communicator(cfg));
  auto transport = net::Transport::create(cfg);
  if (!transport.ok()) return transport.status();
  c->transport_ = std::move(transport).value();
  Communicator *self = c.get();
  auto port = c->transport_->listen(c->listen_, [self](const std::shared_ptr<net::Link> &l) { self->on_peer_link(l); });
  if (!port.ok()) return port.status();
  auto link = c->transport_->connect_sync(c->coordinator_);
  if (!link.ok()) return unreachable(link.status().with_context("coordinator " + c->coordinator_));
  if (c->info_.address.empty()) {
    const std::string &host = link.value()->local_host();
    c->info_.address = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                       std::to_string(port.value());
  }
  auto channel = coord::ControlChannel::open(
      link.value(), [self](const ControlMessage &m) { self->on_control(m); },
      [self](const Status &why) { self->on_control_closed(why); });
  {
    std::lock_guard<std::mutex> lock(c->mu_);
    c->channel_ = std::move(channel);
  }
  ControlMessage hello = c->message(MessageType::kJoin);
  WCCL_RETURN_IF_ERROR(c->send(hello));
  WCCL_RETURN_IF_ERROR(c->transport_->every(c->heartbeat_, [self] { self->on_heartbeat_tick(); }));
  std::unique_lock<std::mutex> lock(c->mu_);
  WCCL_RETURN_IF_ERROR(c->wait(lock, c->join_timeout_, "admission", [&] { return c->epochs_seen_ > 0; }));
  WCCL_LOG(c->log_, kInfo, "joined group \"%s\": epoch %llu, rank %d of %zu", c->group_.c_str(),
           static_cast<unsigned long long>(c->epoch_), c->rank_, c->ring_.size());
  return c;
}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    aborted_ = true;
  }
  cv_.notify_all();
  // The transport's destructor runs this communicator's last callbacks on its loop thread, and
  // they may still call transport_ (its calls then return ABORTED). unique_ptr::reset would null
  // transport_ before that, so the transport is deleted in place and released afterwards.
  if (transport_) {
    delete transport_.get();
    (void)transport_.release();
  }
}

ControlMessage Communicator::message(MessageType type) const {
  ControlMessage m;
  m.type = type;
  m.peer = id_;
  m.group = group_;
  m.info = info_;
  return m;
}

Status Communicator::send(const ControlMessage &m) {
  std::shared_ptr<coord::ControlChannel> ch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ch = channel_;
    if (!ch) return unreachable(control_down_);
  }
  return ch->send(m);
}

template <typename Pred>
Status Communicator::wait(std::unique_lock<std::mutex> &lock, std::chrono::milliseconds timeout, const char *what,
                          Pred done) {
  cv_.wait_for(lock, timeout, [&] { return aborted_ || done() || !channel_; });
  if (aborted_) return WCCL_ERROR(WCCL_ERR_ABORTED, "%s: the communicator was aborted", what);
  if (done()) return Status();
  if (!channel_) return unreachable(control_down_.with_context(what));
  return WCCL_ERROR(WCCL_ERR_TIMEOUT, "%s: no decision from the coordinator within %lld ms", what,
                    static_cast<long long>(timeout.count()));
}

// Sends an UPDATE or LEAVE for the current epoch and waits until `answered` (a counter of the
// coordinator messages that answer it) moves, or the coordinator refuses with ERROR.
Status Communicator::membership_call(MessageType type, const char *what, const uint64_t &answered) {
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) return WCCL_ERROR(WCCL_ERR_ABORTED, "%s: the communicator was aborted", what);
  if (!channel_) return unreachable(control_down_.with_context(what));
  const uint64_t before = answered, errors = errors_seen_;
  ControlMessage m = message(type);
  m.epoch = epoch_;
  std::shared_ptr<coord::ControlChannel> ch = channel_;
  lock.unlock();
  WCCL_RETURN_IF_ERROR(ch->send(m));
  lock.lock();
  WCCL_RETURN_IF_ERROR(wait(lock, op_timeout_, what, [&] { return answered > before || errors_seen_ > errors; }));
  return answered > before ? Status() : last_error_;
}

Status Communicator::update() { return membership_call(MessageType::kUpdate, "update", epochs_seen_); }

Status Communicator::leave() {
  WCCL_RETURN_IF_ERROR(membership_call(MessageType::kLeave, "leave", removals_seen_));
  std::lock_guard<std::mutex> lock(mu_);
  left_ = true;  // no more heartbeats: the coordinator has forgotten this peer
  return Status();
}

void Communicator::abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
  }
  cv_.notify_all();
  (void)transport_->post([this] {
    std::shared_ptr<net::Link> next, prev;
    {
      std::lock_guard<std::mutex> lock(mu_);
      next = next_;
      prev = prev_;
    }
    // Closing runs completions inline on this thread, and they take mu_: never under it.
    for (auto *l : {&next, &prev}) {
      if (*l) (*l)->close(WCCL_ERROR(WCCL_ERR_ABORTED, "the communicator was aborted"));
    }
  });
}

int Communicator::rank() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rank_;
}

int Communicator::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(ring_.size());
}

uint64_t Communicator::epoch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return epoch_;
}

bool Communicator::revoked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return revoked_;
}

std::vector<coord::PeerId> Communicator::ring() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<coord::PeerId> out;
  for (const coord::Member &m : ring_) out.push_back(m.id);
  return out;
}

int Communicator::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

bool Communicator::wait_revoked(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return revoked_; });
}

Status Communicator::links(std::chrono::milliseconds timeout, std::shared_ptr<net::Link> *next,
                           std::shared_ptr<net::Link> *prev) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool open = cv_.wait_for(lock, timeout, [&] { return aborted_ || ring_.size() <= 1 || (next_ && prev_); });
  if (aborted_) return WCCL_ERROR(WCCL_ERR_ABORTED, "links: the communicator was aborted");
  if (!open) {
    return WCCL_ERROR(WCCL_ERR_TIMEOUT, "the links of epoch %llu are not open after %lld ms",
                      static_cast<unsigned long long>(epoch_), static_cast<long long>(timeout.count()));
  }
  *next = next_;
  *prev = prev_;
  return Status();
}

// --- loop thread -------------------------------------------------------------------------------

void Communicator::on_control(const ControlMessage &m) {
  switch (m.type) {
    case MessageType::kEpoch: {
      std::shared_ptr<net::Link> old_next, old_prev;
      {
        std::lock_guard<std::mutex> lock(mu_);
        // The epoch and its links change together: nobody may see the new epoch with old links.
        old_next = std::move(next_);
        old_prev = std::move(prev_);
        next_.reset();
        prev_.reset();
        epoch_ = m.epoch;
        ring_ = m.ring;
        rank_ = -1;
        for (size_t i = 0; i < ring_.size(); ++i) {
          if (ring_[i].id == id_) rank_ = static_cast<int>(i);
        }
        revoked_ = false;
        pending_ = 0;  // admission takes every waiting joiner; later ones are announced anew
        ++epochs_seen_;
      }
      const Status ended = WCCL_ERROR(WCCL_ERR_ABORTED, "epoch ended");
      if (old_next) old_next->close(ended);
      if (old_prev) old_prev->close(ended);
      cv_.notify_all();
      open_ring_links();
      break;
    }
    case MessageType::kRevoked: {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (m.epoch != epoch_) break;
        revoked_ = true;
      }
      WCCL_LOG(log_, kWarn, "epoch %llu revoked: %s", static_cast<unsigned long long>(m.epoch), m.text.c_str());
      cv_.notify_all();
      break;
    }
    case MessageType::kRemoved: {
      {
        std::lock_guard<std::mutex> lock(mu_);
        // Declared lost (or the epoch moved on without us): this epoch is over for us too.
        if (m.text != "left") revoked_ = true;
        ++removals_seen_;
      }
      cv_.notify_all();
      break;
    }
    case MessageType::kProbe:
      (void)send(message(MessageType::kHeartbeat));
      break;
    case MessageType::kPending: {
      std::lock_guard<std::mutex> lock(mu_);
      if (m.epoch == epoch_) pending_ = static_cast<int>(m.count);
      break;
    }
    case MessageType::kError: {
      {
        std::lock_guard<std::mutex> lock(mu_);
        const auto code = static_cast<wccl_result_t>(m.code);
        last_error_ = WCCL_ERROR(code == WCCL_OK ? WCCL_ERR_PROTOCOL : code, "the coordinator refused: %s", m.text.c_str());
        ++errors_seen_;
      }
      cv_.notify_all();
      break;
    }
    default:
      break;
  }
}

void Communicator::on_control_closed(const Status &why) {
  bool closing;
  {
    std::lock_guard<std::mutex> lock(mu_);
    channel_.reset();
    control_down_ = why;
    backoff_ = std::chrono::milliseconds(0);
    next_attempt_ = Clock::now();
    closing = closing_;
  }
  if (!closing) WCCL_LOG(log_, kWarn, "lost the coordinator: %s; reconnecting", why.to_string().c_str());
  cv_.notify_all();
}

void Communicator::on_heartbeat_tick() {
  bool connected;
  {
    std::lock_guard<std::mutex> lock(mu_);
    connected = channel_ != nullptr;
    if (aborted_ || left_) return;
  }
  if (connected) {
    (void)send(message(MessageType::kHeartbeat));
  } else {
    reconnect();
  }
}

// With the coordinator gone, try again with exponential backoff (up to 8 heartbeats); once back,
// REJOIN with the epoch and ring this peer holds, so a restarted coordinator continues from them.
void Communicator::reconnect() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_ || reconnecting_ || Clock::now() < next_attempt_) return;
    reconnecting_ = true;
    backoff_ = std::min(std::max(backoff_ * 2, heartbeat_), heartbeat_ * 8);
    next_attempt_ = Clock::now() + backoff_;
  }
  Status st = transport_->connect(coordinator_, [this](Result<std::shared_ptr<net::Link>> link) {
    if (!link.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      reconnecting_ = false;
      control_down_ = link.status();
      return;
    }
    ControlMessage again = message(MessageType::kRejoin);
    auto channel = coord::ControlChannel::open(
        link.value(), [this](const ControlMessage &m) { on_control(m); },
        [this](const Status &why) { on_control_closed(why); });
    {
      std::lock_guard<std::mutex> lock(mu_);
      reconnecting_ = false;
      again.epoch = epoch_;
      again.ring = ring_;
      channel_ = std::move(channel);
    }
    WCCL_LOG(log_, kInfo, "reconnected to the coordinator; rejoining at epoch %llu",
             static_cast<unsigned long long>(again.epoch));
    (void)send(again);
    cv_.notify_all();
  });
  if (!st.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    reconnecting_ = false;
  }
}

// A new epoch: the previous epoch's links close; this peer opens the link to the next peer of
// the ring and waits for the previous peer to open its own.
void Communicator::open_ring_links() {
  coord::Member next;
  coord::PeerId prev_id = 0;
  uint64_t epoch;
  std::shared_ptr<net::Link> early_prev;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return;
    epoch = epoch_;
    if (rank_ < 0 || ring_.size() <= 1) {
      early_.clear();
      next.id = 0;
    } else {
      next = ring_[(static_cast<size_t>(rank_) + 1) % ring_.size()];
      prev_id = ring_[(static_cast<size_t>(rank_) + ring_.size() - 1) % ring_.size()].id;
      auto early = early_.find(epoch);
      if (early != early_.end() && early->second.first == prev_id) prev_ = early_prev = early->second.second;
      early_.erase(early_.begin(), early_.upper_bound(epoch));
    }
  }
  if (early_prev) watch(early_prev, prev_id, epoch);
  cv_.notify_all();
  if (next.id == 0) return;
  const coord::PeerId next_id = next.id;
  Status st = transport_->connect(next.info.address, [this, epoch, next_id](Result<std::shared_ptr<net::Link>> link) {
    bool stale;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stale = epoch != epoch_;
    }
    if (stale) {
      if (link.ok()) link.value()->close(WCCL_ERROR(WCCL_ERR_ABORTED, "epoch ended"));
      return;
    }
    if (link.ok()) {
      // The hello goes out before the link is handed to anyone, so it is the first message.
      auto hello = std::make_shared<std::array<uint8_t, 16>>();
      std::memcpy(hello->data(), &epoch, 8);
      std::memcpy(hello->data() + 8, &id_, 8);
      (void)link.value()->send(kLinkHello, hello->data(), hello->size(), [hello](const Status &) {});
      {
        std::lock_guard<std::mutex> lock(mu_);
        stale = epoch != epoch_;  // checked again with the assignment, under one lock
        if (!stale) next_ = link.value();
      }
      if (stale) {
        link.value()->close(WCCL_ERROR(WCCL_ERR_ABORTED, "epoch ended"));
        return;
      }
      watch(link.value(), next_id, epoch);
      cv_.notify_all();
      return;
    }
    WCCL_LOG(log_, kWarn, "cannot open the ring link to peer %016llx: %s", static_cast<unsigned long long>(next_id),
             link.status().to_string().c_str());
    ControlMessage broken = message(MessageType::kLinkBroken);
    broken.other = next_id;
    (void)send(broken);
  });
  if (!st.ok()) WCCL_LOG(log_, kWarn, "cannot open the ring link: %s", st.to_string().c_str());
}

// The previous peer of some epoch opened its link to us: it says which epoch and who it is.
void Communicator::on_peer_link(const std::shared_ptr<net::Link> &link) {
  auto hello = std::make_shared<std::array<uint8_t, 16>>();
  Status st = link->recv(kLinkHello, hello->data(), hello->size(), [this, link, hello](const Status &got) {
    if (!got.ok()) return;
    uint64_t epoch;
    coord::PeerId from;
    std::memcpy(&epoch, hello->data(), 8);
    std::memcpy(&from, hello->data() + 8, 8);
    adopt_prev(epoch, from, link);
  });
  if (!st.ok()) link->close(st);
}

void Communicator::adopt_prev(uint64_t epoch, coord::PeerId from, const std::shared_ptr<net::Link> &link) {
  bool adopted = false;
  std::shared_ptr<net::Link> replaced;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (epoch == epoch_ && rank_ >= 0 && ring_.size() > 1 &&
        ring_[(static_cast<size_t>(rank_) + ring_.size() - 1) % ring_.size()].id == from) {
      replaced = std::move(prev_);
      prev_ = link;
      adopted = true;
    } else if (epoch > epoch_ && early_.size() < kMaxEarlyLinks) {
      early_[epoch] = {from, link};  // its EPOCH message reached the neighbour before us
      return;
    }
  }
  if (replaced) replaced->close(WCCL_ERROR(WCCL_ERR_ABORTED, "replaced by a newer link"));
  if (!adopted) {
    // A link for an epoch that is over (or from a peer that is not our neighbour): its frames
    // are never applied.
    link->close(WCCL_ERROR(WCCL_ERR_ABORTED, "ring link for epoch %llu, not the current one",
                           static_cast<unsigned long long>(epoch)));
    return;
  }
  watch(link, from, epoch);
  cv_.notify_all();
}

// Reports a neighbour link of the current epoch that breaks, so the coordinator probes that peer.
void Communicator::watch(const std::shared_ptr<net::Link> &link, coord::PeerId peer, uint64_t epoch) {
  auto never = std::make_shared<uint8_t>(0);
  (void)link->recv(kLinkSentinel, never.get(), 1, [this, peer, epoch, never](const Status &why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (epoch != epoch_ || aborted_ || why.code() == WCCL_ERR_ABORTED) return;
    }
    WCCL_LOG(log_, kWarn, "ring link to peer %016llx broke: %s", static_cast<unsigned long long>(peer),
             why.to_string().c_str());
    ControlMessage broken = message(MessageType::kLinkBroken);
    broken.other = peer;
    (void)send(broken);
  });
}

}  // namespace wccl::comm
