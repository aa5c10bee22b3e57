// The coordinator: the membership authority of a job (DESIGN §3-§4). It listens for peers'
// control links (TLS unless tls=off: an unauthenticated client never reaches this code), keeps a
// session per link around the job's rules (coord::Job: a Membership per group and the node rule),
// feeds them the peers' messages and the passage of time, and sends their notices to the peers
// they are for. It carries no bulk data. Everything runs on its transport's loop thread.
//
// Reads config keys listen, min_peers, settle_ms, heartbeat_ms, peer_timeout_ms, events_log, http
// and http_token_file, plus the transport's keys. With http it serves /metrics, /status and
// /status.json (coord/report.h) from a snapshot of the job it takes on its loop thread at most
// every kReportPeriod, and whenever it is older than a second.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "coord/channel.h"
#include "coord/events_log.h"
#include "coord/job.h"
#include "coord/report.h"
#include "core/config.h"
#include "net/http_server.h"
#include "net/transport.h"

namespace wccl::coord {

class Coordinator {
 public:
  // Listens on the `listen` address and starts serving. IO if the address cannot be bound.
  static Result<std::unique_ptr<Coordinator>> start(const Config &cfg);
  // Stops serving: closes every peer's link and joins the loop thread.
  ~Coordinator();
  Coordinator(const Coordinator &) = delete;
  Coordinator &operator=(const Coordinator &) = delete;

  int port() const { return port_; }
  int http_port() const { return http_ ? http_->port() : 0; }  // 0 without http

  static constexpr std::chrono::milliseconds kReportPeriod{200};

 private:
  struct Session {
    std::shared_ptr<ControlChannel> channel;
    PeerId peer = 0;  // 0 until its JOIN or REJOIN
    std::string group;
  };
  explicit Coordinator(const Config &cfg);
  void on_link(std::shared_ptr<net::Link> link);
  void on_message(Session *s, const ControlMessage &m);
  void on_close(Session *s, const Status &why);
  void deliver();
  void tick();
  void refuse(Session *s, const Status &why);
  // Writes the events log's "started" line, ahead of any event already held.
  void log_started();
  // Takes the snapshot the HTTP endpoints serve (loop thread).
  void publish_report();
  net::HttpServer::Response serve(const net::HttpRequest &r);  // the HTTP thread

  Logger log_;
  uint64_t epoch_base_ = 0;
  std::unique_ptr<EventsLog> events_;  // null without events_log
  const std::chrono::system_clock::time_point started_at_ = std::chrono::system_clock::now();
  std::unique_ptr<Job> job_;
  std::unique_ptr<net::Transport> transport_;
  int port_ = 0;
  // Loop thread only:
  std::map<Session *, std::unique_ptr<Session>> sessions_;
  std::map<PeerId, Session *> by_peer_;
  bool stopping_ = false;
  bool started_logged_ = false;
  bool http_on_ = false;  // the http key is set (fixed before the loop thread starts)
  JobCounters counters_;  // with http
  bool report_stale_ = false;
  Clock::time_point report_taken_{};
  // The snapshot, shared with the HTTP thread.
  std::mutex report_mu_;
  std::shared_ptr<const JobReport> report_;
  // Last: it stops (and no longer calls serve()) before anything above is destroyed.
  std::unique_ptr<net::HttpServer> http_;
};

}  // namespace wccl::coord
