// What the coordinator's HTTP endpoints show (wccl-coord --http; docs/operations.md): counters
// kept from the membership events, a snapshot of the job taken on the coordinator's loop thread,
// and that snapshot rendered as Prometheus text (/metrics), JSON (/status.json) or the page a
// person reads (/status). No I/O: the server (net/http_server.h) serves what these return.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "coord/job.h"
#include "coord/membership.h"

namespace wccl::coord {

// A group's counts since the coordinator started, from its membership events.
struct GroupCounters {
  uint64_t epochs = 0;  // epochs formed (kEpoch events)
  // Epoch changes by cause, each cause counted once per change: "join", "leave", a loss cause
  // (loss_cause_name: "disconnected", "silent", "probe", "straggler", "node", "superseded"),
  // "revocation" (a revoked epoch re-formed with the same members), "reorder" (the ring re-ordered
  // by measured round trips), "first" (formed from joiners alone).
  std::map<std::string, uint64_t> epoch_changes;
  uint64_t registered = 0, admitted = 0, left = 0;
  std::map<std::string, uint64_t> lost;  // by loss cause
  uint64_t revocations = 0;
  uint64_t operations_failed = 0;  // revocations because an operation failed (not a loss)
  uint64_t adopted = 0;            // epochs adopted from members after a coordinator restart
};

// Counters and the latest events of every group, fed each event as the coordinator takes it.
class JobCounters {
 public:
  static constexpr size_t kRecentEvents = 200;  // kept for the status page's history
  struct Stamped {
    std::string group;
    Event event;
    std::chrono::system_clock::time_point at;
  };
  void add(const std::string &group, const Event &e, std::chrono::system_clock::time_point at);
  const std::map<std::string, GroupCounters> &groups() const { return groups_; }
  const std::deque<Stamped> &recent() const { return recent_; }

 private:
  std::map<std::string, GroupCounters> groups_;
  std::map<std::string, std::vector<std::string>> causes_;  // losses since the group's last epoch
  std::map<std::string, bool> revoked_;                     // a revocation since then
  std::deque<Stamped> recent_;
};

// The job as the coordinator saw it at one instant.
struct JobReport {
  struct Peer {
    PeerId id = 0;
    PeerInfo info;
    int rank = -1;  // in the ring; -1 for a joiner
  };
  struct LinkEntry {
    int a = 0, b = 0;  // ranks, a < b
    LinkEstimate estimate;
  };
  struct Group {
    std::string name;
    uint64_t epoch = 0;
    bool revoked = false;
    EpochOrigin origin = EpochOrigin::kContinues;
    uint64_t committed = 0;             // operations committed in the current epoch
    uint64_t operations_committed = 0;  // in every epoch
    std::vector<Peer> members;          // in ring order
    std::vector<Peer> joiners;
    std::vector<LinkEntry> links;  // the measured links between members (rings up to
                                   // kMaxMeasuredRing)
    GroupCounters counters;
  };
  std::chrono::system_clock::time_point started;  // when this coordinator started
  std::chrono::system_clock::time_point taken;
  int port = 0;  // the control port
  std::vector<Group> groups;
  std::vector<JobCounters::Stamped> events;  // the latest, oldest first
};

JobReport make_report(const Job &job, const JobCounters &counters,
                      std::chrono::system_clock::time_point started, int port,
                      std::chrono::system_clock::time_point now);

// The Prometheus text exposition format, version 0.0.4.
std::string prometheus_text(const JobReport &r);
// The same data for scripts (docs/operations.md has the fields).
std::string status_json(const JobReport &r);
// The status page: plain HTML and a little JavaScript that renders /status.json and refreshes it
// every two seconds; it fetches nothing from elsewhere.
const std::string &status_page();

}  // namespace wccl::coord
