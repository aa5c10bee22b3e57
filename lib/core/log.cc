#include "core/log.h"

#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <ctime>

namespace wccl {
namespace {

constexpr const char *kLevelNames[] = {"error", "warn", "info", "debug", "trace"};

}  // namespace

bool parse_log_level(const std::string &text, LogLevel *out) {
  for (int i = 0; i <= static_cast<int>(LogLevel::kTrace); ++i) {
    if (text == kLevelNames[i]) {
      *out = static_cast<LogLevel>(i);
      return true;
    }
  }
  return false;
}

const char *log_level_name(LogLevel level) { return kLevelNames[static_cast<int>(level)]; }

void Logger::log(LogLevel level, const char *fmt, ...) const {
  char line[2048];
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  tm utc{};
  gmtime_r(&now.tv_sec, &utc);
  int n = std::snprintf(
      line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s[%d] peer=%s %-5s ",
      utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
      now.tv_nsec / 1000000, program_invocation_short_name, static_cast<int>(getpid()),
      peer_.empty() ? "-" : peer_.c_str(), log_level_name(level));
  if (n < 0) return;
  va_list args;
  va_start(args, fmt);
  const int m = std::vsnprintf(line + n, sizeof(line) - static_cast<size_t>(n) - 1, fmt, args);
  va_end(args);
  size_t len = static_cast<size_t>(n) + (m > 0 ? static_cast<size_t>(m) : 0);
  if (len > sizeof(line) - 2) len = sizeof(line) - 2;  // truncated: keep the line ending
  line[len++] = '\n';
  // One write per line; a short write to stderr is not retried (logging must never block work).
  const ssize_t ignored = ::write(STDERR_FILENO, line, len);
  (void)ignored;
}

}  // namespace wccl
