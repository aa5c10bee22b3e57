#include "core/config.h"

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>

namespace wccl {
namespace {

enum class Kind { kText, kOnOff, kLogLevel, kInteger, kBytes, kPath };

struct KeySpec {
  const char *name;
  const char *default_value;
  Kind kind;
  int64_t min;  // kInteger, kBytes; kText: maximum length in `max`
  int64_t max;
  const char *description;
};

// The one table of configuration keys. Keys are added as the features that read them land.
constexpr KeySpec kKeys[] = {
    {"name", "", Kind::kText, 0, 64,
     "peer id in logs and link hellos; empty means <hostname>:<pid>"},
    {"log_level", "warn", Kind::kLogLevel, 0, 0, "stderr log threshold"},
    {"tls", "on", Kind::kOnOff, 0, 0,
     "TLS 1.3 with mutual certificate authentication on every connection; off sends plaintext"},
    {"tls_cert", "", Kind::kPath, 0, 0, "PEM certificate (chain) of this node"},
    {"tls_key", "", Kind::kPath, 0, 0, "PEM private key of tls_cert"},
    {"tls_ca", "", Kind::kPath, 0, 0,
     "PEM CA certificate(s) that peers' certificates must chain to"},
    {"streams", "4", Kind::kInteger, 1, 64,
     "TCP connections per link; messages are striped across them"},
    {"frame_bytes", "1M", Kind::kBytes, 4096, 16 << 20,
     "largest frame payload a sender cuts a message into"},
    {"chunk_bytes", "1M", Kind::kBytes, 4096, 1LL << 30,
     "pipelining unit of the collectives: a message carries at most this many bytes of a buffer"},
    {"sync_compress", "on", Kind::kOnOff, 0, 0,
     "state sync sends pieces zstd-compressed (byte-shuffled) where that pays "
     "(docs/algorithms.md); off: never"},
    {"tree_max_bytes", "256K", Kind::kBytes, 0, 1LL << 40,
     "algo=AUTO runs the tree all-reduce up to this many bytes and the ring above, in epochs whose "
     "crossover the coordinator has not measured (measured_crossover; docs/algorithms.md)"},
    {"measured_crossover", "on", Kind::kOnOff, 0, 0,
     "coordinator: on sends with each epoch formed at an update algo=AUTO's ring/tree crossover, "
     "computed from the round trips and rates members measure on their links; off: members use "
     "tree_max_bytes"},
    {"sock_buf_bytes", "0", Kind::kBytes, 0, 1LL << 30,
     "SO_SNDBUF/SO_RCVBUF per connection; 0 leaves the kernel's autotuning (see docs/perf.md)"},
    {"listen", "0.0.0.0:0", Kind::kText, 1, 255,
     "address to listen on: the coordinator's, or a peer's for its neighbours' links (port 0 picks "
     "one)"},
    {"coordinator", "", Kind::kText, 0, 255, "the coordinator's host:port (peers)"},
    {"group", "default", Kind::kText, 1, 64,
     "peers of one group form one communicator (e.g. one group per local GPU index)"},
    {"node", "", Kind::kText, 0, 64,
     "the machine this communicator is one of, named alike by the node's communicators in its "
     "other "
     "groups: the coordinator loses them together (docs/fault-tolerance.md); empty: a node of its "
     "own"},
    {"node_groups", "0", Kind::kInteger, 0, 1024,
     "how many groups `node` has a communicator in: the coordinator then admits, drops and loses "
     "the node whole, in every group at the same update barrier (docs/fault-tolerance.md, \"The "
     "node\"); 0: the node is only lost together"},
    {"advertise", "", Kind::kText, 0, 255,
     "host:port peers reach this peer's links at; empty: the address it reaches the coordinator "
     "from"},
    {"join_timeout_ms", "600000", Kind::kInteger, 1, 86400000,
     "how long wccl_comm_join waits for admission"},
    {"op_timeout_ms", "600000", Kind::kInteger, 1, 86400000,
     "how long a membership call (update, leave) waits for the coordinator's decision, and a "
     "collective without opts.timeout_ms from the call to its outcome (the whole operation: its "
     "data phase over the WAN included)"},
    {"order_ring_by_rtt", "on", Kind::kOnOff, 0, 0,
     "on: the coordinator orders each epoch's ring from the round trips members measure on their "
     "links (docs/algorithms.md); off: the order of arrival"},
    {"events_log", "", Kind::kPath, 0, 0,
     "coordinator: a file it appends one JSON line to for every membership event (registered, "
     "admitted, left, lost with its cause, revoked, epoch, adopted; docs/fault-tolerance.md); "
     "\"-\": stderr; empty: none"},
    {"http", "", Kind::kText, 0, 255,
     "coordinator: serve /metrics (Prometheus), /status and /status.json over HTTP at HOST:PORT, "
     "or PORT alone on 127.0.0.1 (docs/operations.md); empty: off"},
    {"http_token_file", "", Kind::kPath, 0, 0,
     "coordinator: a file holding the bearer token every HTTP request must carry; empty: none"},
    {"min_peers", "1", Kind::kInteger, 1, 4096,
     "peers the coordinator waits for before the first epoch"},
    {"settle_ms", "200", Kind::kInteger, 0, 3600000,
     "with no epoch yet, the first one forms once no peer has joined for this long"},
    {"heartbeat_ms", "1000", Kind::kInteger, 10, 3600000,
     "peers send a heartbeat this often; a probed peer must answer within it"},
    {"peer_timeout_ms", "5000", Kind::kInteger, 10, 3600000,
     "a peer silent this long is lost and its epoch revoked"},
    {"straggler_timeout_ms", "0", Kind::kInteger, 0, 3600000,
     "the coordinator's straggler policy: a member that has not reached an update barrier this "
     "long "
     "after the first member did is declared lost (it joins again at its next update); 0: the "
     "barrier waits for every live member"},
    {"connect_timeout_ms", "10000", Kind::kInteger, 1, 3600000,
     "limit for TCP connect + TLS handshake + hello of a whole link"},
    {"hello_timeout_ms", "3000", Kind::kInteger, 1, 3600000,
     "limit for an accepted connection's TLS handshake + hello (a few WAN round trips)"},
    {"io_timeout_ms", "10000", Kind::kInteger, 1, 3600000,
     "a link with a frame half-received or a write queued that moves no byte for this long fails"},
};

const KeySpec *find_key(const std::string &key) {
  for (const KeySpec &spec : kKeys) {
    if (key == spec.name) return &spec;
  }
  return nullptr;
}

std::string form_of(const KeySpec &spec) {
  switch (spec.kind) {
    case Kind::kText:
      return format("text of at most %lld bytes without spaces", static_cast<long long>(spec.max));
    case Kind::kOnOff:
      return "on|off";
    case Kind::kLogLevel:
      return "error|warn|info|debug|trace";
    case Kind::kInteger:
      return format("integer %lld..%lld", static_cast<long long>(spec.min),
                    static_cast<long long>(spec.max));
    case Kind::kBytes:
      return format("bytes %lld..%lld, suffix K, M or G (x1024) allowed",
                    static_cast<long long>(spec.min), static_cast<long long>(spec.max));
    case Kind::kPath:
      return "file path";
  }
  return "";
}

// Parses a decimal integer with an optional binary suffix (K, M, G) when allow_suffix is set.
bool parse_integer(const std::string &text, bool allow_suffix, int64_t *out) {
  if (text.empty() || text.size() > 20) return false;
  size_t i = 0;
  int64_t v = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    v = v * 10 + (text[i] - '0');
    if (v > (1LL << 50)) return false;
  }
  if (i == 0) return false;
  if (i < text.size()) {
    if (!allow_suffix || i + 1 != text.size()) return false;
    switch (text[i]) {
      case 'k':
      case 'K':
        v <<= 10;
        break;
      case 'm':
      case 'M':
        v <<= 20;
        break;
      case 'g':
      case 'G':
        v <<= 30;
        break;
      default:
        return false;
    }
  }
  *out = v;
  return true;
}

// Checks value against spec; the message says what was expected.
Status check(const KeySpec &spec, const std::string &value, const char *origin) {
  bool good = true;
  switch (spec.kind) {
    case Kind::kText:
      good = value.size() <= static_cast<size_t>(spec.max);
      for (char c : value) good = good && std::isgraph(static_cast<unsigned char>(c));
      break;
    case Kind::kOnOff:
      good = value == "on" || value == "off";
      break;
    case Kind::kLogLevel: {
      LogLevel level;
      good = parse_log_level(value, &level);
      break;
    }
    case Kind::kInteger:
    case Kind::kBytes: {
      int64_t v = 0;
      good = parse_integer(value, spec.kind == Kind::kBytes, &v) && v >= spec.min && v <= spec.max;
      break;
    }
    case Kind::kPath:
      good = value.find('\0') == std::string::npos;
      break;
  }
  if (good) return Status();
  return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "%s: value \"%s\" is not accepted; expected %s",
                    origin, value.c_str(), form_of(spec).c_str());
}

const KeySpec &must_find(const std::string &key) {
  const KeySpec *spec = find_key(key);
  if (spec == nullptr) {
    std::fprintf(stderr, "wccl: internal error: config key \"%s\" is not in the table\n",
                 key.c_str());
    std::abort();
  }
  return *spec;
}

}  // namespace

Config Config::defaults() {
  Config cfg;
  for (const KeySpec &spec : kKeys) cfg.values_[spec.name] = spec.default_value;
  return cfg;
}

Result<Config> Config::from_env() {
  Config cfg = defaults();
  for (const KeySpec &spec : kKeys) {
    std::string var = "WCCL_";
    for (const char *p = spec.name; *p != '\0'; ++p) {
      var += static_cast<char>(std::toupper(static_cast<unsigned char>(*p)));
    }
    const char *value = std::getenv(var.c_str());  // NOLINT(concurrency-mt-unsafe): read-only use
    if (value == nullptr) continue;
    WCCL_RETURN_IF_ERROR(check(spec, value, ("environment variable " + var).c_str()));
    cfg.values_[spec.name] = value;
  }
  return cfg;
}

Status Config::set(const std::string &key, const std::string &value) {
  const KeySpec *spec = find_key(key);
  if (spec == nullptr) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                      "unknown config key \"%s\"; wccl_config_keys() lists the keys", key.c_str());
  }
  WCCL_RETURN_IF_ERROR(check(*spec, value, ("config key " + key).c_str()));
  values_[key] = value;
  return Status();
}

Result<std::string> Config::get(const std::string &key) const {
  auto it = values_.find(key);
  if (it == values_.end()) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                      "unknown config key \"%s\"; wccl_config_keys() lists the keys", key.c_str());
  }
  return it->second;
}

const std::string &Config::str(const std::string &key) const {
  must_find(key);
  return values_.at(key);
}

int64_t Config::integer(const std::string &key) const {
  const KeySpec &spec = must_find(key);
  int64_t v = 0;
  parse_integer(values_.at(key), spec.kind == Kind::kBytes, &v);
  return v;
}

bool Config::flag(const std::string &key) const { return str(key) == "on"; }

LogLevel Config::log_level() const {
  LogLevel level = LogLevel::kWarn;
  parse_log_level(str("log_level"), &level);
  return level;
}

std::string Config::peer_name() const {
  const std::string &name = str("name");
  if (!name.empty()) return name;
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "unknown");
  return format("%s:%d", host, static_cast<int>(getpid()));
}

const std::string &Config::describe_keys() {
  static const std::string text = [] {
    std::string out;
    for (const KeySpec &spec : kKeys) {
      out += format("%s\t%s\t%s\t%s\n", spec.name, spec.default_value, form_of(spec).c_str(),
                    spec.description);
    }
    return out;
  }();
  return text;
}

}  // namespace wccl
