#include "coord/coordinator.h"

#include <algorithm>
#include <chrono>
#include <fstream>

#include "coord/ring_order.h"

namespace wccl::coord {
namespace {

// The bearer token in http_token_file: its first line, without surrounding white space.
Result<std::string> read_token(const std::string &path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "http_token_file %s: cannot read a line",
                      path.c_str());
  }
  const size_t b = line.find_first_not_of(" \t\r");
  const size_t e = line.find_last_not_of(" \t\r");
  if (b == std::string::npos) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "http_token_file %s: the token is empty",
                      path.c_str());
  }
  return line.substr(b, e - b + 1);
}

}  // namespace

Coordinator::Coordinator(const Config &cfg) : log_(cfg.logger()) {
  Membership::Options options;
  options.min_peers = static_cast<int>(cfg.integer("min_peers"));
  options.settle = std::chrono::milliseconds(cfg.integer("settle_ms"));
  options.peer_timeout = std::chrono::milliseconds(cfg.integer("peer_timeout_ms"));
  options.straggler_timeout = std::chrono::milliseconds(cfg.integer("straggler_timeout_ms"));
  // A probed peer answers at once; one heartbeat period is ample.
  options.probe_timeout = std::chrono::milliseconds(cfg.integer("heartbeat_ms"));
  epoch_base_ = options.epoch_base =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  http_on_ = !cfg.str("http").empty();
  options.record_events = !cfg.str("events_log").empty() || http_on_;
  options.measured_order = cfg.flag("order_ring_by_rtt");
  options.measured_crossover = cfg.flag("measured_crossover");
  job_ = std::make_unique<Job>(options);
}

Result<std::unique_ptr<Coordinator>> Coordinator::start(const Config &cfg) {
  std::unique_ptr<Coordinator> c(new Coordinator(cfg));
  std::string token;  // read first: a bad file is refused before anything listens
  if (c->http_on_ && !cfg.str("http_token_file").empty()) {
    WCCL_ASSIGN_OR_RETURN(token, read_token(cfg.str("http_token_file")));
  }
  if (!cfg.flag("tls")) {
    WCCL_LOG(c->log_, kWarn,
             "tls=off: links to the coordinator are neither encrypted nor authenticated");
  }
  if (!cfg.str("events_log").empty()) {
    WCCL_ASSIGN_OR_RETURN(c->events_, EventsLog::open(cfg.str("events_log")));
  }
  WCCL_ASSIGN_OR_RETURN(c->transport_, net::Transport::create(cfg));
  Coordinator *self = c.get();
  WCCL_ASSIGN_OR_RETURN(
      c->port_, c->transport_->listen(cfg.str("listen"), [self](std::shared_ptr<net::Link> link) {
        self->on_link(std::move(link));
      }));
  // Timeouts are decided by tick(), run as often as the membership rules ask.
  WCCL_RETURN_IF_ERROR(c->transport_->every(c->job_->tick_period(), [self] { self->tick(); }));
  WCCL_LOG(c->log_, kInfo, "coordinator listening on port %d", c->port_);
  // The events log's first line, from the loop thread once port_ is set (events of peers that
  // came sooner wait for it).
  if (c->events_) WCCL_RETURN_IF_ERROR(c->transport_->post([self] { self->log_started(); }));
  if (c->http_on_) {
    WCCL_RETURN_IF_ERROR(c->transport_->post([self] { self->publish_report(); }));
    WCCL_ASSIGN_OR_RETURN(c->http_, net::HttpServer::start(cfg.str("http"), token, c->log_,
                                                           [self](const net::HttpRequest &r) {
                                                             return self->serve(r);
                                                           }));
    WCCL_LOG(c->log_, kInfo, "coordinator serving http on port %d", c->http_->port());
  }
  return c;
}

void Coordinator::publish_report() {
  auto report = std::make_shared<const JobReport>(
      make_report(*job_, counters_, started_at_, port_, std::chrono::system_clock::now()));
  report_stale_ = false;
  report_taken_ = Clock::now();
  std::lock_guard<std::mutex> lock(report_mu_);
  report_ = std::move(report);
}

net::HttpServer::Response Coordinator::serve(const net::HttpRequest &r) {
  std::shared_ptr<const JobReport> report;
  {
    std::lock_guard<std::mutex> lock(report_mu_);
    report = report_;
  }
  net::HttpServer::Response res;
  if (r.path == "/status" || r.path == "/") {
    res.content_type = "text/html; charset=utf-8";
    res.body = status_page();
    return res;
  }
  if (r.path != "/metrics" && r.path != "/status.json") {
    res.status = 404;
    res.body = "not found: this coordinator serves /metrics, /status and /status.json\n";
    return res;
  }
  if (!report) {  // before the loop thread took the first one
    res.status = 503;
    res.body = "the coordinator is starting\n";
    return res;
  }
  if (r.path == "/metrics") {
    res.content_type = "text/plain; version=0.0.4; charset=utf-8";
    res.body = prometheus_text(*report);
  } else {
    res.content_type = "application/json";
    res.body = status_json(*report);
  }
  return res;
}

Coordinator::~Coordinator() {
  // Destroying the transport fails every link (sessions see on_close on the loop thread) and
  // joins that thread; nothing of this object is touched after it returns. Those closes are the
  // coordinator's own, not peers going away: stopping_ keeps them out of the membership.
  if (!transport_) return;  // start() failed before there was one
  (void)transport_->post([this] { stopping_ = true; });
  transport_.reset();
}

void Coordinator::log_started() {
  started_logged_ = true;
  events_->started(port_, epoch_base_);
  events_->flush();
}

void Coordinator::on_link(std::shared_ptr<net::Link> link) {
  auto session = std::make_unique<Session>();
  Session *s = session.get();
  sessions_.emplace(s, std::move(session));
  s->channel = ControlChannel::open(
      std::move(link), [this, s](const ControlMessage &m) { on_message(s, m); },
      [this, s](const Status &why) { on_close(s, why); });
}

// Drops a client that broke the protocol, or whose JOIN or REJOIN was refused, once it has heard
// why (an ERROR). The warning is logged by on_close, once.
void Coordinator::refuse(Session *s, const Status &why) {
  (void)s->channel->send_then_close(refusal(why), why);
}

void Coordinator::on_message(Session *s, const ControlMessage &m) {
  const auto now = Clock::now();
  const bool first = s->peer == 0;
  if (first != (m.type == MessageType::kJoin || m.type == MessageType::kRejoin)) {
    return refuse(s, WCCL_ERROR(WCCL_ERR_PROTOCOL, "control message type %u %s",
                                static_cast<unsigned>(m.type),
                                first ? "before JOIN" : "after the link's JOIN"));
  }
  if (!first && m.peer != s->peer) {
    return refuse(
        s, WCCL_ERROR(WCCL_ERR_PROTOCOL, "message from peer %016llx on the link of peer %016llx",
                      static_cast<unsigned long long>(m.peer),
                      static_cast<unsigned long long>(s->peer)));
  }
  if (first && by_peer_.count(m.peer) != 0) {
    return refuse(s, WCCL_ERROR(WCCL_ERR_INVALID_USAGE, "peer %016llx is already connected",
                                static_cast<unsigned long long>(m.peer)));
  }
  const std::string &name = first ? m.group : s->group;
  bool drop = false;
  const Status st = job_->on_message(name, m, now, &drop);
  if (drop) return refuse(s, st);
  if (first) {
    s->peer = m.peer;
    s->group = m.group;
    by_peer_[m.peer] = s;
    WCCL_LOG(log_, kInfo, "peer %s (%016llx, %s) %s group \"%s\"", m.info.name.c_str(),
             static_cast<unsigned long long>(m.peer), m.info.address.c_str(),
             m.type == MessageType::kJoin ? "joins" : "rejoins", m.group.c_str());
  }
  if (!st.ok()) {
    // The request is refused but the peer stays: it hears why.
    (void)s->channel->send(refusal(st));
  }
  deliver();
}

void Coordinator::on_close(Session *s, const Status &why) {
  auto owned = std::move(sessions_.at(s));
  sessions_.erase(s);
  if (stopping_) return;
  const bool refused = why.code() == WCCL_ERR_PROTOCOL || why.code() == WCCL_ERR_INVALID_USAGE ||
                       why.code() == WCCL_ERR_INVALID_ARGUMENT;
  if (s->peer == 0) {
    if (refused) {
      WCCL_LOG(log_, kWarn, "closed the control link of %s (%s) before its JOIN: %s",
               s->channel->link().peer_address().c_str(), s->channel->link().peer_name().c_str(),
               why.to_string().c_str());
    }
    return;
  }
  by_peer_.erase(s->peer);
  // A malformed message is worth a warning naming the peer; a peer going away is the routine case.
  const LogLevel level = refused ? LogLevel::kWarn : LogLevel::kInfo;
  if (log_.enabled(level)) {
    log_.log(level, "control link of peer %016llx (%s, %s) closed: %s",
             static_cast<unsigned long long>(s->peer), s->channel->link().peer_name().c_str(),
             s->channel->link().peer_address().c_str(), why.to_string().c_str());
  }
  job_->disconnected(s->group, s->peer, Clock::now());
  deliver();
}

void Coordinator::deliver() {
  if (events_ || http_on_) {
    const auto now = std::chrono::system_clock::now();
    for (const Job::GroupEvent &e : job_->take_events()) {
      if (events_) events_->write(e.group, e.event);
      if (http_on_) counters_.add(e.group, e.event, now);
    }
    if (events_ && started_logged_) events_->flush();
  }
  report_stale_ = true;
  PeerId logged_loss = 0;
  uint64_t logged_epoch = 0;
  for (const Job::Addressed &addressed : job_->take_notices()) {
    const std::string &name = addressed.group;
    const Notice &n = addressed.notice;
    if (n.kind == Notice::Kind::kEpoch && n.epoch != logged_epoch &&
        log_.enabled(LogLevel::kInfo)) {
      logged_epoch = n.epoch;  // once per announcement, not per member
      const Membership &m = *job_->group(name);
      std::string ring;
      for (const Member &member : n.ring) ring += " " + member.info.name;
      const auto cost = ring_cost(n.ring, [&m](PeerId a, PeerId b) { return m.rtt(a, b); });
      log_.log(LogLevel::kInfo, "group \"%s\" epoch %llu, ring:%s; round trips %s; algo=AUTO: %s",
               name.c_str(), static_cast<unsigned long long>(n.epoch), ring.c_str(),
               cost ? format("%.1f ms at most, %.1f ms in all", cost->max_us / 1e3,
                             static_cast<double>(cost->sum_us) / 1e3)
                          .c_str()
                    : "not all measured",
               n.crossovers.tree_max_bytes != 0 || n.crossovers.allgather_max_bytes != 0
                   ? format("all-gather up to %llu bytes, tree up to %s (measured)",
                            static_cast<unsigned long long>(n.crossovers.allgather_max_bytes),
                            n.crossovers.tree_max_bytes != 0
                                ? format("%llu bytes", static_cast<unsigned long long>(
                                                           n.crossovers.tree_max_bytes))
                                      .c_str()
                                : "each member's tree_max_bytes")
                         .c_str()
                   : "tree up to each member's tree_max_bytes");
    }
    if (n.kind == Notice::Kind::kRevoked &&
        n.lost != logged_loss) {  // once per loss, not per member
      logged_loss = n.lost;
      WCCL_LOG(log_, kWarn, "group \"%s\" epoch %llu revoked: %s", name.c_str(),
               static_cast<unsigned long long>(n.epoch), n.reason.c_str());
    }
    auto it = by_peer_.find(n.to);
    // Not connected (nothing to tell it with), or connected for another group.
    if (it == by_peer_.end() || it->second->group != name) continue;
    std::shared_ptr<ControlChannel> channel =
        it->second->channel;  // a failed send can end the session
    (void)channel->send(to_message(n));
  }
}

void Coordinator::tick() {
  const auto now = Clock::now();
  job_->tick(now);
  deliver();
  // Link estimates and joiners change without events: a snapshot is at most a second old.
  if (http_on_ && ((report_stale_ && now - report_taken_ >= kReportPeriod) ||
                   now - report_taken_ >= std::chrono::seconds(1))) {
    publish_report();
  }
}

}  // namespace wccl::coord
