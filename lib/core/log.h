// Logging to stderr: one line per record, written with a single write(2) so that lines from
// several threads or processes never interleave. Each line carries a UTC timestamp, the process
// name and pid, and the peer id of the object that logged it.
#pragma once

#include <string>

namespace wccl {

enum class LogLevel { kError = 0, kWarn, kInfo, kDebug, kTrace };

// Parses "error", "warn", "info", "debug", "trace". Returns false for anything else.
bool parse_log_level(const std::string &text, LogLevel *out);
const char *log_level_name(LogLevel level);

class Logger {
 public:
  Logger() = default;
  Logger(LogLevel level, std::string peer) : level_(level), peer_(std::move(peer)) {}

  bool enabled(LogLevel level) const { return level <= level_; }
  const std::string &peer() const { return peer_; }
  void log(LogLevel level, const char *fmt, ...) const __attribute__((format(printf, 3, 4)));

 private:
  LogLevel level_ = LogLevel::kWarn;
  std::string peer_;
};

}  // namespace wccl

// Formats the message only when the level is enabled.
#define WCCL_LOG(logger, level, ...)                      \
  do {                                                    \
    if ((logger).enabled(::wccl::LogLevel::level))        \
      (logger).log(::wccl::LogLevel::level, __VA_ARGS__); \
  } while (0)
