#include "coord/messages.h"

namespace wccl::coord {
namespace {

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(v); }
  void u32(uint32_t v) { le(v, 4); }
  void u64(uint64_t v) { le(v, 8); }
  void text(const std::string &s) {
    const size_t n = s.size() < kMaxTextBytes ? s.size() : kMaxTextBytes;
    u8(static_cast<uint8_t>(n));
    out_.insert(out_.end(), s.begin(), s.begin() + static_cast<std::ptrdiff_t>(n));
  }
  void ring(const std::vector<Member> &ring) {
    u32(static_cast<uint32_t>(ring.size()));
    for (const Member &m : ring) {
      u64(m.id);
      text(m.info.name);
      text(m.info.address);
    }
  }
  void links(const std::vector<LinkMeasurement> &links) {
    u32(static_cast<uint32_t>(links.size()));
    for (const LinkMeasurement &l : links) {
      u64(l.peer);
      u32(l.rtt_us);
      u64(l.bytes_per_s);
    }
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

  uint64_t u64(const char *field) { return le(8, field); }
  uint32_t u32(const char *field) { return static_cast<uint32_t>(le(4, field)); }
  uint8_t u8(const char *field) { return static_cast<uint8_t>(le(1, field)); }
  PeerId peer(const char *field) {
    const PeerId id = u64(field);
    if (status_.ok() && id == 0)
      status_ = WCCL_ERROR(WCCL_ERR_PROTOCOL, "control message: %s is 0", field);
    return id;
  }
  // words: no spaces (names, groups, addresses); otherwise printable text with spaces.
  std::string text(const char *field, bool words) {
    const size_t n = u8(field);
    if (!status_.ok()) return "";
    if (n > left_) {
      status_ = WCCL_ERROR(WCCL_ERR_PROTOCOL, "control message: %s runs past the end", field);
      return "";
    }
    std::string s(reinterpret_cast<const char *>(p_), n);
    for (char c : s) {
      if (c < ' ' || c > '~' || (words && c == ' ')) {
        status_ = WCCL_ERROR(WCCL_ERR_PROTOCOL, "control message: %s holds a forbidden byte 0x%02x",
                             field, static_cast<unsigned>(static_cast<unsigned char>(c)));
        return "";
      }
    }
    p_ += n;
    left_ -= n;
    return s;
  }
  // A count of entries of at least min_bytes each, at most kMaxRingMembers: a count the message
  // cannot hold is caught before anything is allocated for it. 0 after a failure.
  uint32_t count(const char *field, const char *what, size_t min_bytes) {
    const uint32_t n = u32(field);
    if (status_.ok() && (n > kMaxRingMembers || n > left_ / min_bytes)) {
      status_ = WCCL_ERROR(WCCL_ERR_PROTOCOL,
                           "control message: %u %s (limit %zu, or more than the message holds)", n,
                           what, kMaxRingMembers);
    }
    return status_.ok() ? n : 0;
  }
  std::vector<Member> ring() {
    const uint32_t n = count("ring size", "ring members", 10);
    std::vector<Member> out;
    out.reserve(n);
    for (uint32_t i = 0; i < n && status_.ok(); ++i) {
      Member m;
      m.id = peer("ring member id");
      m.info.name = text("ring member name", true);
      m.info.address = text("ring member address", true);
      out.push_back(std::move(m));
    }
    return out;
  }
  std::vector<LinkMeasurement> links() {
    const uint32_t n = count("link count", "links", 20);
    std::vector<LinkMeasurement> out;
    out.reserve(n);
    for (uint32_t i = 0; i < n && status_.ok(); ++i) {
      LinkMeasurement l;
      l.peer = peer("link peer id");
      l.rtt_us = u32("link round trip");
      l.bytes_per_s = u64("link delivery rate");
      if (status_.ok() && l.rtt_us == 0)
        status_ = WCCL_ERROR(WCCL_ERR_PROTOCOL, "control message: a link round trip is 0");
      out.push_back(l);
    }
    return out;
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

}  // namespace

std::vector<uint8_t> encode(const ControlMessage &m) {
  Writer w;
  w.u8(static_cast<uint8_t>(m.type));
  w.u8(0);  // reserved
  switch (m.type) {
    case MessageType::kJoin:
    case MessageType::kRejoin:
      w.u64(m.peer);
      w.text(m.group);
      w.text(m.info.name);
      w.text(m.info.address);
      w.text(m.info.node);
      if (m.type == MessageType::kRejoin) {
        w.u64(m.epoch);
        w.u64(m.seq);
        w.ring(m.ring);
        w.u64(m.tree_max_bytes);
      }
      break;
    case MessageType::kHeartbeat:
      w.u64(m.peer);
      break;
    case MessageType::kUpdate:
    case MessageType::kReform:
    case MessageType::kLeave:
      w.u64(m.peer);
      w.u64(m.epoch);
      w.u64(m.seq);
      w.u32(m.count);
      break;
    case MessageType::kLinkBroken:
      w.u64(m.peer);
      w.u64(m.other);
      break;
    case MessageType::kLinkReport:
      w.u64(m.peer);
      w.u64(m.epoch);
      w.links(m.links);
      break;
    case MessageType::kDone:
    case MessageType::kOpFailed:
      w.u64(m.peer);
      w.u64(m.epoch);
      w.u64(m.seq);
      if (m.type == MessageType::kOpFailed) w.text(m.text);
      break;
    case MessageType::kEpoch:
      w.u64(m.epoch);
      w.u32(m.count);
      w.ring(m.ring);
      w.u64(m.tree_max_bytes);
      w.u32(m.origin);
      break;
    case MessageType::kRevoked:
      w.u64(m.epoch);
      w.u64(m.seq);
      w.u64(m.other);
      w.text(m.text);
      break;
    case MessageType::kRemoved:
      w.u64(m.epoch);
      w.text(m.text);
      break;
    case MessageType::kProbe:
    case MessageType::kLeft:
      w.u64(m.epoch);
      break;
    case MessageType::kError:
      w.u32(m.code);
      w.text(m.text);
      break;
    case MessageType::kPending:
      w.u64(m.epoch);
      w.u32(m.count);
      break;
    case MessageType::kCommit:
    case MessageType::kBarrier:
      w.u64(m.epoch);
      w.u64(m.seq);
      break;
  }
  return w.take();
}

Status decode(const uint8_t *data, size_t size, ControlMessage *out) {
  if (size > kMaxControlBytes) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "control message of %zu bytes exceeds the limit of %zu",
                      size, kMaxControlBytes);
  }
  Reader r(data, size);
  ControlMessage m;
  const uint8_t type = r.u8("type");
  const uint8_t reserved = r.u8("reserved");
  WCCL_RETURN_IF_ERROR(r.status());
  if (reserved != 0) return WCCL_ERROR(WCCL_ERR_PROTOCOL, "control message: reserved byte set");
  m.type = static_cast<MessageType>(type);
  switch (m.type) {
    case MessageType::kJoin:
    case MessageType::kRejoin:
      m.peer = r.peer("peer id");
      m.group = r.text("group", true);
      m.info.name = r.text("name", true);
      m.info.address = r.text("address", true);
      m.info.node = r.text("node", false);
      if (m.type == MessageType::kRejoin) {
        m.epoch = r.u64("epoch");
        m.seq = r.u64("committed operation");
        m.ring = r.ring();
        m.tree_max_bytes = r.u64("tree_max_bytes");
      }
      break;
    case MessageType::kHeartbeat:
      m.peer = r.peer("peer id");
      break;
    case MessageType::kUpdate:
    case MessageType::kReform:
    case MessageType::kLeave:
      m.peer = r.peer("peer id");
      m.epoch = r.u64("epoch");
      m.seq = r.u64("operations");
      m.count = r.u32("call");
      break;
    case MessageType::kDone:
    case MessageType::kOpFailed:
      m.peer = r.peer("peer id");
      m.epoch = r.u64("epoch");
      m.seq = r.u64("operation");
      if (m.type == MessageType::kOpFailed) m.text = r.text("reason", false);
      break;
    case MessageType::kLinkBroken:
      m.peer = r.peer("peer id");
      m.other = r.peer("suspect id");
      break;
    case MessageType::kLinkReport:
      m.peer = r.peer("peer id");
      m.epoch = r.u64("epoch");
      m.links = r.links();
      break;
    case MessageType::kEpoch:
      m.epoch = r.u64("epoch");
      m.count = r.u32("call answered");
      m.ring = r.ring();
      m.tree_max_bytes = r.u64("tree_max_bytes");
      m.origin = r.u32("epoch origin");
      if (m.origin > static_cast<uint32_t>(EpochOrigin::kAfterLeave)) {
        return WCCL_ERROR(WCCL_ERR_PROTOCOL, "EPOCH with unknown origin %u", m.origin);
      }
      break;
    case MessageType::kRevoked:
      m.epoch = r.u64("epoch");
      m.seq = r.u64("committed operation");
      m.other = r.peer("lost peer id");
      m.text = r.text("reason", false);
      break;
    case MessageType::kRemoved:
      m.epoch = r.u64("epoch");
      m.text = r.text("reason", false);
      break;
    case MessageType::kProbe:
    case MessageType::kLeft:
      m.epoch = r.u64("epoch");
      break;
    case MessageType::kError:
      m.code = r.u32("code");
      m.text = r.text("message", false);
      break;
    case MessageType::kPending:
      m.epoch = r.u64("epoch");
      m.count = r.u32("count");
      break;
    case MessageType::kCommit:
    case MessageType::kBarrier:
      m.epoch = r.u64("epoch");
      m.seq = r.u64("operation");
      break;
    default:
      return WCCL_ERROR(WCCL_ERR_PROTOCOL, "control message: unknown type %u", type);
  }
  WCCL_RETURN_IF_ERROR(r.finish());
  *out = std::move(m);
  return Status();
}

std::vector<uint8_t> encode(const LinkHello &h) {
  Writer w;
  w.u64(h.epoch);
  w.u64(h.from);
  return w.take();
}

Status decode(const uint8_t *data, size_t size, LinkHello *out) {
  Reader r(data, size);
  LinkHello h;
  h.epoch = r.u64("link hello epoch");
  h.from = r.peer("link hello peer id");
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
      m.tree_max_bytes = n.tree_max_bytes;
      m.origin = static_cast<uint32_t>(n.origin);
      break;
    case Notice::Kind::kRevoked:
      m.type = MessageType::kRevoked;
      m.seq = n.seq;
      m.other = n.lost;
      m.text = n.reason;
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
