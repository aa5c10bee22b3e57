// State sync: the description's encoding, the election, the transfer plan and the data phase.
#include "algo/state_sync.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>

#include "codec/compress.h"
#include "codec/hash.h"

namespace wccl::algo {
namespace {

constexpr uint32_t kMagic = 0x31535357;  // "WSS1" little-endian
constexpr uint16_t kVersion = 2;  // 2: hashes are codec::tensor_hash (of 16 KiB blocks' hash64s)

class Writer {
 public:
  explicit Writer(std::vector<uint8_t> *out) : out_(out) {}
  template <typename T>
  void put(T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out_->insert(out_->end(), b, b + sizeof(T));
  }
  void bytes(const std::string &s) { out_->insert(out_->end(), s.begin(), s.end()); }

 private:
  std::vector<uint8_t> *out_;
};

class Reader {
 public:
  Reader(const uint8_t *p, size_t len) : p_(p), end_(p + len) {}
  template <typename T>
  bool get(T *v) {
    if (static_cast<size_t>(end_ - p_) < sizeof(T)) return false;
    std::memcpy(v, p_, sizeof(T));
    p_ += sizeof(T);
    return true;
  }
  bool bytes(size_t n, std::string *s) {
    if (static_cast<size_t>(end_ - p_) < n) return false;
    s->assign(reinterpret_cast<const char *>(p_), n);
    p_ += n;
    return true;
  }
  bool only_padding_left() const {
    return std::all_of(p_, end_, [](uint8_t b) { return b == 0; });
  }

 private:
  const uint8_t *p_;
  const uint8_t *end_;
};

bool same_state(const MemberState &a, const MemberState &b) {
  if (a.revision != b.revision || a.tensors.size() != b.tensors.size()) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    if (a.tensors[i].hash != b.tensors[i].hash) return false;
  }
  return true;
}

// m holds target: its revision and every tensor's hash (the lists are known to match in length).
bool holds(const MemberState &m, const SyncTarget &target) {
  if (m.revision != target.revision) return false;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    if (m.tensors[i].hash != target.hashes[i]) return false;
  }
  return true;
}

std::string describe(const TensorInfo &t) {
  return "\"" + t.name + "\" " + codec::dtype_name(t.dtype) + " x " + std::to_string(t.count);
}

// INVALID_USAGE naming the first difference from rank 0's tensor list, or OK.
Status check_lists(const std::vector<MemberState> &members) {
  const std::vector<TensorInfo> &ref = members[0].tensors;
  for (size_t r = 1; r < members.size(); ++r) {
    const std::vector<TensorInfo> &m = members[r].tensors;
    if (m.size() != ref.size()) {
      return WCCL_ERROR(WCCL_ERR_INVALID_USAGE,
                        "state sync: rank %zu passes %zu tensors, rank 0 passes %zu", r, m.size(),
                        ref.size());
    }
    for (size_t i = 0; i < m.size(); ++i) {
      if (m[i].name != ref[i].name || m[i].dtype != ref[i].dtype || m[i].count != ref[i].count) {
        return WCCL_ERROR(WCCL_ERR_INVALID_USAGE,
                          "state sync: tensor %zu is %s on rank %zu but %s on rank 0", i,
                          describe(m[i]).c_str(), r, describe(ref[i]).c_str());
      }
    }
  }
  return Status();
}

// The rank whose state every member ends with (see plan_sync).
Result<int> elect(const std::vector<MemberState> &members) {
  const int n = static_cast<int>(members.size());
  int send_only = -1;
  for (int r = 0; r < n; ++r) {
    if (members[r].mode != SyncMode::kSendOnly) continue;
    if (send_only < 0) {
      send_only = r;
    } else if (!same_state(members[send_only], members[r])) {
      return WCCL_ERROR(
          WCCL_ERR_INVALID_USAGE,
          "state sync: send-only members rank %d (revision %llu) and rank %d (revision %llu) hold "
          "different states",
          send_only, static_cast<unsigned long long>(members[send_only].revision), r,
          static_cast<unsigned long long>(members[r].revision));
    }
  }
  if (send_only >= 0) return send_only;
  int best = -1, best_votes = 0;
  for (int r = 0; r < n; ++r) {
    if (members[r].mode != SyncMode::kPopular) continue;
    int votes = 0;
    for (int q = 0; q < n; ++q)
      votes += members[q].mode == SyncMode::kPopular && same_state(members[r], members[q]);
    // Ranks are visited in order, so among equals the lowest rank's state wins.
    if (best < 0 || votes > best_votes ||
        (votes == best_votes && members[r].revision > members[best].revision)) {
      best = r;
      best_votes = votes;
    }
  }
  if (best < 0) {
    return WCCL_ERROR(WCCL_ERR_INVALID_USAGE,
                      "state sync: every member is receive-only, so none offers its state");
  }
  return best;
}

}  // namespace

std::vector<uint8_t> encode_state(const MemberState &s) {
  std::vector<uint8_t> out;
  Writer w(&out);
  w.put<uint32_t>(kMagic);
  w.put<uint16_t>(kVersion);
  w.put<uint8_t>(static_cast<uint8_t>(s.mode));
  w.put<uint8_t>(0);
  w.put<uint64_t>(s.revision);
  w.put<uint32_t>(static_cast<uint32_t>(s.tensors.size()));
  for (const TensorInfo &t : s.tensors) {
    w.put<uint16_t>(static_cast<uint16_t>(t.name.size()));
    w.bytes(t.name);
    w.put<uint8_t>(static_cast<uint8_t>(t.dtype));
    w.put<uint64_t>(t.count);
    w.put<uint64_t>(t.hash);
  }
  return out;
}

Result<MemberState> decode_state(const uint8_t *data, size_t len) {
  Reader r(data, len);
  uint32_t magic = 0, n = 0;
  uint16_t version = 0;
  uint8_t mode = 0, reserved = 0;
  MemberState s;
  if (!r.get(&magic) || !r.get(&version) || !r.get(&mode) || !r.get(&reserved) ||
      !r.get(&s.revision) || !r.get(&n)) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "state description: %zu bytes are too few for its header",
                      len);
  }
  if (magic != kMagic || version != kVersion) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL,
                      "state description: magic %08x version %u, expected %08x version %u", magic,
                      version, kMagic, kVersion);
  }
  if (mode >= kSyncModeCount || reserved != 0) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL,
                      "state description: mode %u (reserved %u) is not a sync mode", mode,
                      reserved);
  }
  s.mode = static_cast<SyncMode>(mode);
  // Each tensor takes at least 19 bytes: a count that could not fit is refused before reserving.
  if (n > len / 19)
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "state description: %u tensors in %zu bytes", n, len);
  s.tensors.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    TensorInfo &t = s.tensors[i];
    uint16_t name_len = 0;
    uint8_t dtype = 0;
    if (!r.get(&name_len) || name_len > kMaxNameBytes || !r.bytes(name_len, &t.name) ||
        !r.get(&dtype) || !r.get(&t.count) || !r.get(&t.hash)) {
      return WCCL_ERROR(WCCL_ERR_PROTOCOL,
                        "state description: tensor %u is truncated or its name too long", i);
    }
    if (dtype >= codec::kDtypeCount) {
      return WCCL_ERROR(WCCL_ERR_PROTOCOL, "state description: tensor %u has dtype %u", i, dtype);
    }
    t.dtype = static_cast<codec::Dtype>(dtype);
    if (t.count > (UINT64_MAX >> 4)) {
      return WCCL_ERROR(WCCL_ERR_PROTOCOL, "state description: tensor %u has %llu elements", i,
                        static_cast<unsigned long long>(t.count));
    }
  }
  if (!r.only_padding_left())
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "state description: bytes after its last tensor");
  return s;
}

Result<SyncPlan> plan_sync(const std::vector<MemberState> &members, size_t piece_bytes,
                           const SyncTarget *keep) {
  if (members.empty() || piece_bytes == 0)
    return WCCL_ERROR(WCCL_ERR_INTERNAL, "plan_sync: no members or pieces");
  WCCL_RETURN_IF_ERROR(check_lists(members));
  const int n = static_cast<int>(members.size());
  SyncPlan plan;
  if (keep != nullptr) {
    if (keep->hashes.size() != members[0].tensors.size()) {
      return WCCL_ERROR(WCCL_ERR_INTERNAL,
                        "plan_sync: the kept target has %zu tensors, the members %zu",
                        keep->hashes.size(), members[0].tensors.size());
    }
    plan.target = *keep;
    for (int r = 0; r < n && plan.elected < 0; ++r) {
      if (holds(members[static_cast<size_t>(r)], *keep)) plan.elected = r;
    }
  } else {
    WCCL_ASSIGN_OR_RETURN(plan.elected, elect(members));
    const MemberState &winner = members[static_cast<size_t>(plan.elected)];
    plan.target.revision = winner.revision;
    for (const TensorInfo &t : winner.tensors) plan.target.hashes.push_back(t.hash);
  }
  const std::vector<TensorInfo> &list = members[0].tensors;
  for (size_t t = 0; t < list.size(); ++t) {
    const uint64_t hash = plan.target.hashes[t];
    std::vector<int> receivers, donors;
    for (int r = 0; r < n; ++r) {
      const MemberState &m = members[static_cast<size_t>(r)];
      if (m.tensors[t].hash != hash) {
        receivers.push_back(r);
      } else if (m.mode != SyncMode::kReceiveOnly) {
        donors.push_back(r);
      }
    }
    const uint64_t bytes = list[t].count * codec::dtype_size(list[t].dtype);
    if (receivers.empty() || bytes == 0) continue;
    if (donors.empty()) {
      return WCCL_ERROR(WCCL_ERR_PEER_LOST,
                        "state sync: no remaining member holds tensor \"%s\" of the elected state",
                        list[t].name.c_str());
    }
    // Piece k of receiver j comes from donor (k + j) mod |donors|: each receiver draws on every
    // donor at once, and the donors' load is spread over the receivers.
    const uint64_t pieces = (bytes + piece_bytes - 1) / piece_bytes;
    for (uint64_t k = 0; k < pieces; ++k) {
      for (size_t j = 0; j < receivers.size(); ++j) {
        Transfer tr;
        tr.tensor = static_cast<uint32_t>(t);
        tr.offset = k * piece_bytes;
        tr.bytes = std::min<uint64_t>(piece_bytes, bytes - tr.offset);
        tr.donor = donors[(k + j) % donors.size()];
        tr.receiver = receivers[j];
        plan.transfers.push_back(tr);
      }
    }
    if (plan.transfers.size() > UINT32_MAX) {
      return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                        "state sync: more than 2^32 messages; raise chunk_bytes");
    }
  }
  return plan;
}

void place_received(SyncJob *job, int rank) {
  job->stage_offset.assign(job->tensor_bytes.size(), SyncJob::kNotReceived);
  job->stage_bytes = 0;
  for (const Transfer &tr : job->plan->transfers) {
    if (tr.receiver != rank || job->stage_offset[tr.tensor] != SyncJob::kNotReceived) continue;
    job->stage_offset[tr.tensor] = job->stage_bytes;
    job->stage_bytes += job->tensor_bytes[tr.tensor];
  }
}

namespace {

// A message of the plan this member posted.
struct Posted {
  Exchange::Ticket ticket;
  const Transfer *tr;
  bool is_send;
  size_t len;  // a send's wire bytes
};

// What this member's sends read while in flight, one of each per window slot: a compressed
// piece, and a device tensor's piece copied to host memory.
struct SendSlots {
  std::vector<std::vector<uint8_t>> frames = std::vector<std::vector<uint8_t>>(kSyncWindow);
  std::vector<GrowingBytes> copies = std::vector<GrowingBytes>(kSyncWindow);
};

// Posts and retires the plan's messages of this member.
Status transfer(Exchange &ex, const SyncJob &job, uint8_t *stage, SendSlots *slots) {
  const int me = ex.rank();
  const std::vector<Transfer> &transfers = job.plan->transfers;
  SendCodec donor(job.compress, job.tensors.size());
  codec::Compressor receiver;
  auto elem_bytes = [&](uint32_t t) {
    return t < job.elem_bytes.size() ? job.elem_bytes[t] : size_t{1};
  };
  size_t sends = 0;
  std::deque<Posted> window;
  // Waits for the oldest message; a compressed piece received is expanded in place.
  auto retire = [&]() -> Status {
    Posted &p = window.front();
    WCCL_RETURN_IF_ERROR(ex.wait(p.ticket));
    if (p.is_send) {
      donor.sent(p.len, p.len == p.tr->bytes);
    } else if (const size_t got = ex.length(p.ticket); got != p.tr->bytes) {
      uint8_t *piece = stage + job.stage_offset[p.tr->tensor] + p.tr->offset;
      const Status st =
          receiver.decompress(piece, got, elem_bytes(p.tr->tensor), piece, p.tr->bytes);
      if (!st.ok())
        return st.with_context("state sync: a piece from rank " + std::to_string(p.tr->donor));
    }
    window.pop_front();
    return Status();
  };
  for (size_t i = 0; i < transfers.size(); ++i) {
    const Transfer &tr = transfers[i];
    const uint32_t tag = static_cast<uint32_t>(i);
    if (tr.donor == me) {
      // At most kSyncWindow messages are outstanding, so the send that last used this slot,
      // kSyncWindow sends ago, has been retired.
      const size_t slot = sends++ % kSyncWindow;
      size_t len = 0;
      const uint8_t *raw = static_cast<const uint8_t *>(job.tensors[tr.tensor]) + tr.offset;
      if (DeviceMemory *device = tr.tensor < job.device.size() ? job.device[tr.tensor] : nullptr) {
        uint8_t *copy = nullptr;
        WCCL_RETURN_IF_ERROR(
            slots->copies[slot].reserve(*device, GrowingBytes::Kind::kHost, tr.bytes, &copy));
        WCCL_RETURN_IF_ERROR(device->to_host(copy, raw, tr.bytes));
        raw = copy;
      }
      const uint8_t *bytes =
          donor.encode(tr.tensor, raw, tr.bytes, elem_bytes(tr.tensor), &slots->frames[slot], &len);
      window.push_back({ex.send(tr.receiver, tag, bytes, len), &tr, true, len});
    } else if (tr.receiver == me) {
      window.push_back(
          {ex.recv(tr.donor, tag, stage + job.stage_offset[tr.tensor] + tr.offset, tr.bytes, true),
           &tr, false, tr.bytes});
    } else {
      continue;
    }
    // Every member posts in plan order and waits for its oldest message first, so the oldest
    // unfinished message of the whole plan is always posted at both ends: no cycle can form.
    if (window.size() >= kSyncWindow) WCCL_RETURN_IF_ERROR(retire());
  }
  while (!window.empty()) WCCL_RETURN_IF_ERROR(retire());
  return Status();
}

}  // namespace

std::set<int> sync_partners(const SyncPlan &plan, int rank) {
  std::set<int> out;
  for (const Transfer &tr : plan.transfers) {
    if (tr.donor == rank) out.insert(tr.receiver);
    if (tr.receiver == rank) out.insert(tr.donor);
  }
  return out;
}

Status run_sync(Exchange &ex, const SyncJob &job, uint8_t *stage) {
  SendSlots slots;
  Status st = transfer(ex, job, stage, &slots);
  if (st.ok()) st = ex.agreed();  // the neighbours' calls (Exchange::agree), before finish()
  ex.finish();                    // before slots go: after a failure, sends may still read them
  WCCL_RETURN_IF_ERROR(st);
  for (size_t t = 0; t < job.stage_offset.size(); ++t) {
    if (job.stage_offset[t] == SyncJob::kNotReceived) continue;
    if (codec::tensor_hash(stage + job.stage_offset[t], job.tensor_bytes[t]) !=
        job.plan->target.hashes[t]) {
      return WCCL_ERROR(WCCL_ERR_PROTOCOL,
                        "state sync: tensor %zu as received does not hash to the elected state's",
                        t);
    }
  }
  return Status();
}

Status deliver_received(
    const SyncJob &job, const uint8_t *stage,
    const std::function<Status(void *, const uint8_t *, size_t, DeviceMemory *)> &copy) {
  for (size_t t = 0; t < job.stage_offset.size(); ++t) {
    if (job.stage_offset[t] == SyncJob::kNotReceived) continue;
    WCCL_RETURN_IF_ERROR(copy(job.tensors[t], stage + job.stage_offset[t], job.tensor_bytes[t],
                              t < job.device.size() ? job.device[t] : nullptr));
  }
  return Status();
}

}  // namespace wccl::algo
