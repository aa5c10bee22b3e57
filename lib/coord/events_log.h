// The coordinator's events log (config key events_log; docs/fault-tolerance.md, "The events
// log"): one JSON object per line for every membership event of every group (coord::Event), and
// one when the coordinator starts, so an operator can grep a job's history across restarts.
#pragma once

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "coord/membership.h"
#include "core/status.h"

namespace wccl::coord {

// A JSON string literal of `s`: quotes, backslashes and control characters escaped; other bytes
// as they are (names and reasons are UTF-8 or ASCII).
std::string json_string(const std::string &s);
// A peer id as the events log and the HTTP endpoints write it: 16 hex digits.
std::string peer_id_text(PeerId id);
// "continues", "first", "after_loss", "after_leave".
const char *epoch_origin_name(EpochOrigin origin);

// The event as one line of JSON (no newline), stamped with `at` (UTC, to the millisecond).
std::string event_json(const std::string &group, const Event &e,
                       std::chrono::system_clock::time_point at);

class EventsLog {
 public:
  // Appends to the file at `path` ("-": standard error). IO if it cannot be opened.
  static Result<std::unique_ptr<EventsLog>> open(const std::string &path);
  ~EventsLog();
  EventsLog(const EventsLog &) = delete;
  EventsLog &operator=(const EventsLog &) = delete;

  // {"event":"started"}: a coordinator began serving on `port`; its epochs are numbered past
  // `epoch_base`. Goes before the lines not flushed yet.
  void started(int port, uint64_t epoch_base);
  void write(const std::string &group, const Event &e);
  // Writes the lines write() and started() gave since the last flush, in one write to the file
  // (so they do not interleave with log lines on stderr), and flushes it.
  void flush();

 private:
  explicit EventsLog(std::FILE *file) : file_(file) {}

  std::FILE *file_;
  std::string
      pending_;  // lines not written yet (flushed after every event the coordinator handles)
  bool failed_ = false;  // a write failed: said once on stderr, then given up
};

}  // namespace wccl::coord
