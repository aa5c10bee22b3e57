#include "coord/messages.h"

namespace wccl::coord {
namespace {

// A message's layout is written once, in fields() below, and walked by both directions: a Writer
// appends each field's value, a Reader reads each into the message and checks it. The field names
// are the Reader's error messages.
constexpr bool kWords = true;   // text(): no spaces (names, groups, addresses)
constexpr bool kProse = false;  // text(): printable text with spaces (reasons, messages)

class Writer {
 public:
  void u8(const char *, uint8_t v) { out_.push_back(v); }
  void u32(const char *, uint32_t v) { le(v, 4); }
  void u64(const char *, uint64_t v) { le(v, 8); }
  void peer(const char *, PeerId v) { le(v, 8); }
  void text(const char *, bool, const std::string &s) {
    const size_t n = s.size() < kMaxTextBytes ? s.size() : kMaxTextBytes;
    out_.push_back(static_cast<uint8_t>(n));
    out_.insert(out_.end(), s.begin(), s.begin() + static_cast<std::ptrdiff_t>(n));
  }
  template <typename T, typename Entry>
  void list(const char *, const char *, size_t, const std::vector<T> &entries, Entry entry) {
    le(entries.size(), 4);
    for (const T &e : entries) entry(e);
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  void le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> out_;
};

// Reads fields in order; the first failure sticks and names the field.
class Reader {
 public:
  Reader(const uint8_t *data, size_t size) : p_(data), left_(size) {}

  void u8(const char *field, uint8_t &v) { v = static_cast<uint8_t>(le(1, field)); }
  void u32(const char *field, uint32_t &v) { v = static_cast<uint32_t>(le(4, field)); }
  void u64(const char *field, uint64_t &v) { v = le(8, field); }
  void peer(const char *field, PeerId &id) {
    id = le(8, field);
    if (status_.ok() && id == 0)
      status_ = WCCL_ERROR(WCCL_ERR_PROTOCOL, "control message: %s is 0", field);
  }
  void text(const char *field, bool words, std::string &s) {
    s.clear();
    const size_t n = le(1, field);
    if (!status_.ok()) return;
    if (n > left_) {
      status_ = WCCL_ERROR(WCCL_ERR_PROTOCOL, "control message: %s runs past the end", field);
      return;
    }
    for (size_t i = 0; i < n; ++i) {
      const auto c = static_cast<char>(p_[i]);
      if (c < ' ' || c > '~' || (words && c == ' ')) {
        status_ = WCCL_ERROR(WCCL_ERR_PROTOCOL, "control message: %s holds a forbidden byte 0x%02x",
                             field, static_cast<unsigned>(p_[i]));
        return;
      }
    }
    s.assign(reinterpret_cast<const char *>(p_), n);
    p_ += n;
    left_ -= n;
  }
  // A count of entries of at least min_bytes each, at most kMaxRingMembers: a count the message
  // cannot hold is caught before anything is allocated for it.
  template <typename T, typename Entry>
  void list(const char *field, const char *what, size_t min_bytes, std::vector<T> &entries,
            Entry entry) {
    entries.clear();
    const auto n = static_cast<uint32_t>(le(4, field));
    if (status_.ok() && (n > kMaxRingMembers || n > left_ / min_bytes)) {
      status_ = WCCL_ERROR(WCCL_ERR_PROTOCOL,
                           "control message: %u %s (limit %zu, or more than the message holds)", n,
                           what, kMaxRingMembers);
    }
    if (!status_.ok()) return;
    entries.resize(n);
    for (T &e : entries) {
      entry(e);
      if (!status_.ok()) return;
    }
  }
  const Status &status() const { return status_; }
  Status finish() {
    if (status_.ok() && left_ != 0) {
      status_ =
          WCCL_ERROR(WCCL_ERR_PROTOCOL, "control message: %zu bytes after the last field", left_);
    }
    return status_;
  }

 private:
  uint64_t le(size_t bytes, const char *field) {
    if (!status_.ok()) return 0;
    if (left_ < bytes) {
      status_ = WCCL_ERROR(WCCL_ERR_PROTOCOL, "control message: truncated at %s", field);
      return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p_[i]) << (8 * i);
    p_ += bytes;
    left_ -= bytes;
    return v;
  }
  const uint8_t *p_;
  size_t left_;
  Status status_;
};

// Io is a Writer (M a const ControlMessage) or a Reader (M a ControlMessage).
template <typename Io, typename M>
void ring(Io &io, M &m) {
  io.list("ring size", "ring members", 11, m.ring, [&io](auto &member) {
    io.peer("ring member id", member.id);
    io.text("ring member name", kWords, member.info.name);
    io.text("ring member address", kWords, member.info.address);
    // A restarted coordinator adopting the ring knows each member's node before it is back, so
    // a member lost then takes its node's communicators in the other groups with it.
    io.text("ring member node", kProse, member.info.node);
  });
}

template <typename Io, typename M>
void crossovers(Io &io, M &m) {
  io.u64("allgather_max_bytes", m.crossovers.allgather_max_bytes);
  io.u64("tree_max_bytes", m.crossovers.tree_max_bytes);
}

// The fields after the type and the reserved byte. False for a type that is not a MessageType.
template <typename Io, typename M>
bool fields(Io &io, M &m) {
  switch (m.type) {
    case MessageType::kJoin:
    case MessageType::kRejoin:
      io.peer("peer id", m.peer);
      io.text("group", kWords, m.group);
      io.text("name", kWords, m.info.name);
      io.text("address", kWords, m.info.address);
      io.text("node", kProse, m.info.node);
      io.u32("node groups", m.info.node_groups);
      if (m.type == MessageType::kRejoin) {
        io.u64("epoch", m.epoch);
        io.u64("committed operation", m.seq);
        ring(io, m);
        crossovers(io, m);
      }
      return true;
    case MessageType::kHeartbeat:
      io.peer("peer id", m.peer);
      return true;
    case MessageType::kUpdate:
    case MessageType::kReform:
    case MessageType::kLeave:
      io.peer("peer id", m.peer);
      io.u64("epoch", m.epoch);
      io.u64("operations", m.seq);
      io.u32("call", m.count);
      return true;
    case MessageType::kDone:
    case MessageType::kOpFailed:
      io.peer("peer id", m.peer);
      io.u64("epoch", m.epoch);
      io.u64("operation", m.seq);
      if (m.type == MessageType::kOpFailed) {
        io.u32("result code", m.code);
        io.text("reason", kProse, m.text);
      }
      return true;
    case MessageType::kLinkBroken:
      io.peer("peer id", m.peer);
      io.peer("suspect id", m.other);
      return true;
    case MessageType::kLinkReport:
      io.peer("peer id", m.peer);
      io.u64("epoch", m.epoch);
      io.list("link count", "links", 20, m.links, [&io](auto &link) {
        io.peer("link peer id", link.peer);
        io.u32("link round trip", link.rtt_us);
        io.u64("link delivery rate", link.bytes_per_s);
      });
      return true;
    case MessageType::kEpoch:
      io.u64("epoch", m.epoch);
      io.u32("call answered", m.count);
      ring(io, m);
      crossovers(io, m);
      io.u32("epoch origin", m.origin);
      return true;
    case MessageType::kRevoked:
      io.u64("epoch", m.epoch);
      io.u64("committed operation", m.seq);
      io.peer("lost peer id", m.other);
      io.text("reason", kProse, m.text);
      io.u64("failed operation", m.failed);
      io.u32("result code", m.code);
      return true;
    case MessageType::kRemoved:
      io.u64("epoch", m.epoch);
      io.text("reason", kProse, m.text);
      return true;
    case MessageType::kProbe:
    case MessageType::kLeft:
      io.u64("epoch", m.epoch);
      return true;
    case MessageType::kError:
      io.u32("code", m.code);
      io.text("message", kProse, m.text);
      return true;
    case MessageType::kPending:
      io.u64("epoch", m.epoch);
      io.u32("count", m.count);
      return true;
    case MessageType::kCommit:
    case MessageType::kBarrier:
      io.u64("epoch", m.epoch);
      io.u64("operation", m.seq);
      return true;
  }
  return false;
}

template <typename Io, typename H>
void fields_of_hello(Io &io, H &h) {
  io.u64("link hello epoch", h.epoch);
  io.peer("link hello peer id", h.from);
  io.u64("link hello operation", h.seq);
}

}  // namespace

std::vector<uint8_t> encode(const ControlMessage &m) {
  Writer w;
  w.u8("type", static_cast<uint8_t>(m.type));
  w.u8("reserved", 0);
  fields(w, m);
  return w.take();
}

Status decode(const uint8_t *data, size_t size, ControlMessage *out) {
  if (size > kMaxControlBytes) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "control message of %zu bytes exceeds the limit of %zu",
                      size, kMaxControlBytes);
  }
  Reader r(data, size);
  ControlMessage m;
  uint8_t type = 0;
  uint8_t reserved = 0;
  r.u8("type", type);
  r.u8("reserved", reserved);
  WCCL_RETURN_IF_ERROR(r.status());
  if (reserved != 0) return WCCL_ERROR(WCCL_ERR_PROTOCOL, "control message: reserved byte set");
  m.type = static_cast<MessageType>(type);
  if (!fields(r, m)) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "control message: unknown type %u", type);
  }
  WCCL_RETURN_IF_ERROR(r.finish());
  if (m.type == MessageType::kEpoch && m.origin > static_cast<uint32_t>(EpochOrigin::kAfterLeave)) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "EPOCH with unknown origin %u", m.origin);
  }
  for (const LinkMeasurement &l : m.links) {
    if (l.rtt_us == 0)
      return WCCL_ERROR(WCCL_ERR_PROTOCOL, "control message: a link round trip is 0");
  }
  *out = std::move(m);
  return Status();
}

std::vector<uint8_t> encode(const LinkHello &h) {
  Writer w;
  fields_of_hello(w, h);
  return w.take();
}

Status decode(const uint8_t *data, size_t size, LinkHello *out) {
  Reader r(data, size);
  LinkHello h;
  fields_of_hello(r, h);
  WCCL_RETURN_IF_ERROR(r.finish());
  *out = h;
  return Status();
}

ControlMessage to_message(const Notice &n) {
  ControlMessage m;
  m.epoch = n.epoch;
  switch (n.kind) {
    case Notice::Kind::kEpoch:
      m.type = MessageType::kEpoch;
      m.count = n.answers;
      m.ring = n.ring;
      m.crossovers = n.crossovers;
      m.origin = static_cast<uint32_t>(n.origin);
      break;
    case Notice::Kind::kRevoked:
      m.type = MessageType::kRevoked;
      m.seq = n.seq;
      m.other = n.lost;
      m.text = n.reason;
      m.failed = n.failed;
      m.code = n.code;
      break;
    case Notice::Kind::kRemoved:
      m.type = MessageType::kRemoved;
      m.text = n.reason;
      break;
    case Notice::Kind::kProbe:
      m.type = MessageType::kProbe;
      break;
    case Notice::Kind::kLeft:
      m.type = MessageType::kLeft;
      break;
    case Notice::Kind::kPending:
      m.type = MessageType::kPending;
      m.count = n.joiners;
      break;
    case Notice::Kind::kCommit:
      m.type = MessageType::kCommit;
      m.seq = n.seq;
      break;
    case Notice::Kind::kBarrier:
      m.type = MessageType::kBarrier;
      m.seq = n.seq;
      break;
    case Notice::Kind::kRefused:
      m.type = MessageType::kError;
      m.code = static_cast<uint32_t>(WCCL_ERR_PEER_LOST);
      m.text = n.reason;
      break;
  }
  return m;
}

ControlMessage refusal(const Status &why) {
  ControlMessage m;
  m.type = MessageType::kError;
  m.code = static_cast<uint32_t>(why.code());
  m.text = why.message();
  return m;
}

}  // namespace wccl::coord
