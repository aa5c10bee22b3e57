// The communicator's membership: joining, the coordinator's messages, update, leave, its view of
// the epoch and its links. operations.cc has its operations.
#include "comm/communicator.h"

#include <openssl/rand.h>

namespace wccl::comm {
namespace {

using coord::ControlMessage;
using coord::MessageType;
using Clock = std::chrono::steady_clock;

// How long destroying a communicator waits for its last control messages to reach the kernel.
constexpr std::chrono::milliseconds kCloseFlush{1000};

coord::PeerId random_id() {
  coord::PeerId id = 0;
  while (id == 0) {
    if (RAND_bytes(reinterpret_cast<unsigned char *>(&id), sizeof(id)) != 1) id = 0;
  }
  return id;
}

}  // namespace

Communicator::Communicator(const Config &cfg)
    : log_(cfg.logger()),
      id_(random_id()),
      group_(cfg.str("group")),
      listen_(cfg.str("listen")),
      heartbeat_(cfg.integer("heartbeat_ms")),
      join_timeout_(cfg.integer("join_timeout_ms")),
      op_timeout_(cfg.integer("op_timeout_ms")),
      chunk_bytes_(static_cast<size_t>(cfg.integer("chunk_bytes"))),
      sync_compress_(cfg.flag("sync_compress")),
      tree_max_bytes_(static_cast<size_t>(cfg.integer("tree_max_bytes"))) {
  info_.name = cfg.peer_name();
  info_.address = cfg.str("advertise");
  info_.node = cfg.str("node");
  info_.node_groups = static_cast<uint32_t>(cfg.integer("node_groups"));
}

Result<std::unique_ptr<Communicator>> Communicator::join(const Config &cfg) {
  if (cfg.str("coordinator").empty()) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                      "config key coordinator (the coordinator's host:port) is not set");
  }
  if (cfg.integer("node_groups") > 0 && cfg.str("node").empty()) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                      "config key node_groups is %lld but node (the node's name) is not set",
                      static_cast<long long>(cfg.integer("node_groups")));
  }
  std::unique_ptr<Communicator> c(new Communicator(cfg));
  if (!cfg.flag("tls"))
    WCCL_LOG(c->log_, kWarn, "tls=off: links are neither encrypted nor authenticated");
  WCCL_ASSIGN_OR_RETURN(c->transport_, net::Transport::create(cfg));
  Communicator *self = c.get();
  c->links_ = std::make_unique<EpochLinks>(
      *c->transport_, c->id_, c->log_,
      EpochLinks::Events{
          [self] { self->wake(); },
          [self](uint64_t epoch, coord::PeerId peer, const Status &why, bool connecting) {
            self->on_link_broken(epoch, peer, why, connecting);
          }});
  WCCL_ASSIGN_OR_RETURN(
      const int port,
      c->transport_->listen(
          c->listen_, [self](const std::shared_ptr<net::Link> &l) { self->links_->accepted(l); }));
  WCCL_ASSIGN_OR_RETURN(
      c->control_,
      ControlSession::open(
          cfg, Clock::now() + c->join_timeout_, c->log_,
          ControlSession::Events{[self](const ControlMessage &m) { self->on_control(m); },
                                 [self](const Status &why) { self->on_control_lost(why); },
                                 [self] { return self->on_reconnected(); },
                                 [self] { self->on_heartbeat_tick(); }}));
  if (c->info_.address.empty()) {
    const std::string &host = c->control_->local_host();
    c->info_.address = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                       std::to_string(port);
  }
  ControlMessage hello;
  {
    std::lock_guard<std::mutex> lock(c->mu_);  // the control thread may already read view_
    c->view_ = std::make_unique<Member>(c->id_, c->group_, c->info_);
    hello = c->view_->begin_join();
  }
  WCCL_RETURN_IF_ERROR(c->send(hello));
  WCCL_RETURN_IF_ERROR(c->control_->start(c->heartbeat_));
  std::unique_lock<std::mutex> lock(c->mu_);
  // Once the coordinator has registered this joiner for a job's epoch, losing the coordinator
  // does not end the wait: the heartbeat timer reconnects and REJOINs naming that epoch, so that a
  // restarted coordinator waits for the job's members rather than form an epoch of joiners alone.
  // Before that, a lost coordinator (or one that refused this peer) ends the join at once.
  WCCL_RETURN_IF_ERROR(c->wait(
      lock, c->join_timeout_, "admission", [&] { return c->view_->call_answered(); },
      [&] { return c->view_->awaited_epoch() != 0; }));
  WCCL_RETURN_IF_ERROR(c->view_->call_status());
  WCCL_LOG(c->log_, kInfo, "joined group \"%s\": epoch %llu, rank %d of %d", c->group_.c_str(),
           static_cast<unsigned long long>(c->view_->epoch()), c->view_->rank(), c->view_->size());
  lock.unlock();
  c->worker_ = std::thread([self] { self->work(); });
  return c;
}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    stop_ = true;
    if (links_) links_->stop();
    if (view_)
      (void)apply(view_->abort(WCCL_ERROR(WCCL_ERR_ABORTED, "the communicator was destroyed")));
  }
  cv_.notify_all();
  // The worker's data phase, cancelled above, closes its links and drains on the data thread,
  // which still runs.
  if (worker_.joinable()) worker_.join();
  // What this member last told the coordinator (an operation's failure, its DONE) goes out before
  // the link closes, or the coordinator would hear only the close and blame this member.
  if (control_ && !control_->flush(kCloseFlush)) {
    WCCL_LOG(log_, kWarn, "closing with control messages unsent after %lld ms",
             static_cast<long long>(kCloseFlush.count()));
  }
  // A transport's destructor runs this communicator's last callbacks on its loop thread, and
  // they may still call either transport (whose calls then return ABORTED). unique_ptr::reset
  // would null the pointer before that, so each is deleted in place and released afterwards. The
  // control side goes first: no heartbeat or coordinator message reaches a half-closed peer.
  if (control_) control_->stop();
  if (transport_) {
    delete transport_.get();
    (void)transport_.release();
  }
}

Status Communicator::send(const ControlMessage &m) { return control_->send(m); }

template <typename Pred, typename Through>
Status Communicator::wait(std::unique_lock<std::mutex> &lock, std::chrono::milliseconds timeout,
                          const char *what, Pred done, Through through_loss) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const bool woke = cv_.wait_until(lock, deadline, [&] {
      return view_->aborted() || done() || (!control_->connected() && !through_loss());
    });
    if (view_->aborted())
      return WCCL_ERROR(WCCL_ERR_ABORTED, "%s: the communicator was aborted", what);
    if (done()) return Status();
    const Status down = control_->down();  // one reading: a reconnection may land at any time
    if (!down.ok()) return down.with_context(what);
    if (!woke) {
      return WCCL_ERROR(WCCL_ERR_TIMEOUT, "%s: no decision from the coordinator within %lld ms",
                        what, static_cast<long long>(timeout.count()));
    }
    // Woken by a lost coordinator that the heartbeat timer has reconnected to already: wait on.
  }
}

// Sends an UPDATE, REFORM or LEAVE for the current epoch and waits for the coordinator's answer
// (Member::call has the rules).
Status Communicator::membership_call(MessageType type, const char *what) {
  std::unique_lock<std::mutex> lock(mu_);
  if (view_->aborted())
    return WCCL_ERROR(WCCL_ERR_ABORTED, "%s: the communicator was aborted", what);
  const Status down = control_->down();
  if (!down.ok()) return down.with_context(what);
  Actions actions;
  WCCL_RETURN_IF_ERROR(view_->call(type, &actions));
  if (type == MessageType::kUpdate) {
    // What this epoch's links measured, ahead of the UPDATE on the same ordered connection, so
    // the coordinator can order the next ring (coord/ring_order.h) and compute its crossover
    // (coord/algo_choice.h) by them.
    ControlMessage report;
    report.type = MessageType::kLinkReport;
    report.peer = id_;
    report.epoch = view_->epoch();
    for (const auto &[rank, link] : links_->current()) {
      const uint32_t rtt = link->min_rtt_us();
      if (rtt != 0)
        report.links.push_back(
            {view_->ring()[static_cast<size_t>(rank)].id, rtt, link->delivery_rate()});
    }
    if (!report.links.empty())
      actions.insert(actions.begin(),
                     Action{Action::Kind::kSend, std::move(report), 0, 0, Status()});
  }
  Effects effects = apply(std::move(actions));
  lock.unlock();
  carry_out(effects);
  lock.lock();
  Status answered = wait(lock, op_timeout_, what, [&] { return view_->call_answered(); });
  if (!answered.ok()) {
    view_->cancel_call();
    return answered;
  }
  Status outcome = view_->call_status();
  if (outcome.ok() && type == MessageType::kUpdate) ++stats_.updates;
  return outcome;
}

Status Communicator::update() { return membership_call(MessageType::kUpdate, "update"); }

Status Communicator::reform() { return membership_call(MessageType::kReform, "reform"); }

Status Communicator::leave() { return membership_call(MessageType::kLeave, "leave"); }

void Communicator::abort() {
  Effects effects;
  {
    std::lock_guard<std::mutex> lock(mu_);
    effects = apply(view_->abort(WCCL_ERROR(WCCL_ERR_ABORTED, "the communicator was aborted")));
  }
  cv_.notify_all();
  carry_out(effects);
  links_->close(WCCL_ERROR(WCCL_ERR_ABORTED, "the communicator was aborted"));
}

int Communicator::rank() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_->rank();
}

int Communicator::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_->size();
}

CommStats Communicator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::vector<LinkStats> Communicator::link_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LinkStats> out;
  for (const auto &[rank, link] : links_->current()) {
    out.push_back({rank, link->min_rtt_us(), link->delivery_rate()});
  }
  return out;
}

uint64_t Communicator::epoch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_->epoch();
}

bool Communicator::revoked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_->revoked();
}

std::vector<coord::PeerId> Communicator::ring() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<coord::PeerId> out;
  for (const coord::Member &m : view_->ring()) out.push_back(m.id);
  return out;
}

int Communicator::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_->pending();
}

bool Communicator::update_due() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_->update_due();
}

uint32_t Communicator::epoch_origin() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_->epoch_origin();
}

bool Communicator::wait_revoked(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return view_->revoked(); });
}

Status Communicator::links(std::chrono::milliseconds timeout,
                           std::map<int, std::shared_ptr<net::Link>> *out) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool open =
      cv_.wait_for(lock, timeout, [&] { return view_->aborted() || links_->complete(out); });
  if (view_->aborted()) return WCCL_ERROR(WCCL_ERR_ABORTED, "links: the communicator was aborted");
  if (!open) {
    return WCCL_ERROR(WCCL_ERR_TIMEOUT, "the links of epoch %llu are not open after %lld ms",
                      static_cast<unsigned long long>(view_->epoch()),
                      static_cast<long long>(timeout.count()));
  }
  return Status();
}

// --- control and data threads -------------------------------------------------------------------

void Communicator::on_control(const ControlMessage &m) {
  Effects effects;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!view_) return;  // nothing comes before this peer's JOIN, which follows the view
    effects = apply(view_->on_message(m));
  }
  cv_.notify_all();
  carry_out(effects);
}

Communicator::Effects Communicator::apply(Actions actions) {
  Effects e;
  for (Action &a : actions) {
    switch (a.kind) {
      case Action::Kind::kSend:
        e.sends.push_back(std::move(a.message));
        break;
      case Action::Kind::kDecide: {
        auto it = ops_.find({a.epoch, a.seq});
        if (it == ops_.end()) break;
        if (it->second->c.kind == algo::Kind::kStateSync) {
          for (auto &l : links_->release(a.epoch, a.seq)) {
            e.closing.emplace_back(std::move(l),
                                   WCCL_ERROR(WCCL_ERR_ABORTED, "operation %llu was decided",
                                              static_cast<unsigned long long>(a.seq)));
          }
        }
        decide(it->second, std::move(a.status));
        ops_.erase(it);
        break;
      }
      case Action::Kind::kCancelRunning:
        if (running_exchange_ != nullptr) running_exchange_->cancel(a.status);
        break;
      case Action::Kind::kEpochChanged:
        ++stats_.epochs;
        // The epoch and its links change together: nobody may see the new epoch with old links.
        for (auto &l : links_->begin_epoch(*view_)) {
          e.closing.emplace_back(std::move(l), WCCL_ERROR(WCCL_ERR_ABORTED, "epoch ended"));
        }
        e.open_links = true;
        break;
      case Action::Kind::kWarn:
        e.warnings.push_back(std::move(a.status));
        break;
    }
  }
  return e;
}

void Communicator::carry_out(const Effects &effects) {
  for (const Status &w : effects.warnings) WCCL_LOG(log_, kWarn, "%s", w.message().c_str());
  for (const auto &[l, why] : effects.closing) l->close(why);
  if (effects.open_links) links_->open();
  for (const ControlMessage &m : effects.sends) (void)send(m);
}

void Communicator::on_control_lost(const Status &why) {
  bool closing;
  {
    std::lock_guard<std::mutex> lock(mu_);  // as wake(): a waiter sees the loss or is woken
    closing = closing_;
  }
  if (!closing)
    WCCL_LOG(log_, kWarn, "lost the coordinator: %s; reconnecting", why.to_string().c_str());
  cv_.notify_all();
}

void Communicator::on_heartbeat_tick() {
  ControlMessage beat;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_ || !view_ || view_->aborted() || view_->left()) return;
    beat = view_->heartbeat();
  }
  if (control_->connected()) {
    (void)send(beat);
  } else {
    control_->reconnect();
  }
}

// Back with the coordinator (possibly a restarted one): REJOIN with the epoch and ring this peer
// holds, so that it continues from them, then DONE again for what awaits its commit.
std::vector<ControlMessage> Communicator::on_reconnected() {
  std::vector<ControlMessage> again;
  {
    std::lock_guard<std::mutex> lock(mu_);
    again = view_->rejoin();
  }
  cv_.notify_all();
  return again;
}

void Communicator::wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
  }  // a waiter checks its condition under mu_, then sleeps
  cv_.notify_all();
}

// A link of this member's epoch broke, or could not be opened: the coordinator probes that peer.
void Communicator::on_link_broken(uint64_t epoch, coord::PeerId peer, const Status &why,
                                  bool connecting) {
  std::optional<ControlMessage> report;
  {
    std::lock_guard<std::mutex> lock(mu_);
    report = view_->link_broken(epoch, peer, why, connecting);
  }
  if (!report) return;
  if (connecting) {
    WCCL_LOG(log_, kWarn, "cannot open the link to peer %016llx: %s",
             static_cast<unsigned long long>(peer), why.to_string().c_str());
  } else {
    // Not a warning: a peer that leaves or dies closes its links, and what that does to the group
    // (a revocation, logged as a warning) is the coordinator's to decide after its probe.
    WCCL_LOG(log_, kInfo, "link to peer %016llx broke: %s", static_cast<unsigned long long>(peer),
             why.to_string().c_str());
  }
  (void)send(*report);
}

}  // namespace wccl::comm
