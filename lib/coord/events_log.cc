#include "coord/events_log.h"

#include <uv.h>

#include <cerrno>
#include <ctime>

namespace wccl::coord {

std::string json_string(const std::string &s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += format("\\u%04x", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string peer_id_text(PeerId id) {
  return format("%016llx", static_cast<unsigned long long>(id));
}

const char *epoch_origin_name(EpochOrigin origin) {
  switch (origin) {
    case EpochOrigin::kContinues:
      return "continues";
    case EpochOrigin::kFirst:
      return "first";
    case EpochOrigin::kAfterLoss:
      return "after_loss";
    case EpochOrigin::kAfterLeave:
      return "after_leave";
  }
  return "unknown";
}

namespace {

std::string timestamp(std::chrono::system_clock::time_point at) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count();
  const time_t seconds = static_cast<time_t>(ms / 1000);
  tm utc{};
  gmtime_r(&seconds, &utc);
  return format("%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(ms % 1000));
}

std::string number(uint64_t v) { return std::to_string(v); }

}  // namespace

std::string event_json(const std::string &group, const Event &e,
                       std::chrono::system_clock::time_point at) {
  std::string j = "{\"time\":" + json_string(timestamp(at)) + ",\"group\":" + json_string(group) +
                  ",\"event\":" + json_string(event_kind_name(e.kind)) +
                  ",\"epoch\":" + number(e.epoch);
  if (e.peer.id != 0) {
    j += ",\"peer\":" + json_string(peer_id_text(e.peer.id)) +
         ",\"name\":" + json_string(e.peer.info.name) +
         ",\"node\":" + json_string(e.peer.info.node) +
         ",\"address\":" + json_string(e.peer.info.address);
  }
  switch (e.kind) {
    case Event::Kind::kLost:
      j += ",\"cause\":" + json_string(loss_cause_name(e.cause)) +
           ",\"reason\":" + json_string(e.reason);
      [[fallthrough]];
    case Event::Kind::kLeft:
      j += std::string(",\"member\":") + (e.member ? "true" : "false");
      break;
    case Event::Kind::kRevoked:
      j += ",\"reason\":" + json_string(e.reason) + ",\"failed_op\":" + number(e.seq) +
           ",\"code\":" + json_string(wccl_result_name(static_cast<wccl_result_t>(e.code)));
      break;
    case Event::Kind::kEpoch:
      j += ",\"members\":" + number(e.members) +
           ",\"origin\":" + json_string(epoch_origin_name(e.origin)) +
           ",\"admitted\":" + number(e.admitted) + ",\"left\":" + number(e.left) +
           ",\"lost\":" + number(e.lost);
      break;
    case Event::Kind::kAdopted:
      j += ",\"members\":" + number(e.members) + ",\"committed\":" + number(e.seq);
      break;
    case Event::Kind::kRegistered:
    case Event::Kind::kAdmitted:
      break;
  }
  return j + "}";
}

Result<std::unique_ptr<EventsLog>> EventsLog::open(const std::string &path) {
  std::FILE *file = path == "-" ? stderr : std::fopen(path.c_str(), "a");
  if (file == nullptr) {
    return WCCL_ERROR(WCCL_ERR_IO, "events_log: cannot open %s for appending: %s", path.c_str(),
                      uv_strerror(uv_translate_sys_error(errno)));
  }
  return std::unique_ptr<EventsLog>(new EventsLog(file));
}

EventsLog::~EventsLog() {
  flush();
  if (file_ != stderr) std::fclose(file_);
}

void EventsLog::started(int port, uint64_t epoch_base) {
  if (failed_) return;
  pending_.insert(0, "{\"time\":" + json_string(timestamp(std::chrono::system_clock::now())) +
                         ",\"event\":\"started\",\"port\":" + number(static_cast<uint64_t>(port)) +
                         ",\"epoch_base\":" + number(epoch_base) + "}\n");
}

void EventsLog::write(const std::string &group, const Event &e) {
  if (!failed_) pending_ += event_json(group, e, std::chrono::system_clock::now()) + "\n";
}

void EventsLog::flush() {
  if (failed_ || pending_.empty()) return;
  if (std::fwrite(pending_.data(), 1, pending_.size(), file_) != pending_.size() ||
      std::fflush(file_) != 0) {
    failed_ = true;
    std::fprintf(stderr, "wccl: events_log: a write failed (%s); no more events are logged\n",
                 uv_strerror(uv_translate_sys_error(errno)));
  }
  pending_.clear();
}

}  // namespace wccl::coord
