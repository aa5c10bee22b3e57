#include "algo/call.h"

#include "codec/hash.h"
#include "core/little_endian.h"

namespace wccl::algo {
namespace {

// Layout (little-endian): u8 kind, u8 dtype, u8 reduce op, u8 algo, u8 wire, u8 compress,
// u16 reserved, u32 root, u32 reserved, u64 count, u64 chunk bytes, u64 TOPK's keep.
constexpr size_t kOffRoot = 8, kOffCount = 16, kOffChunk = 24, kOffKeep = 32;
constexpr int kKindCount = static_cast<int>(Kind::kStateSync) + 1;
constexpr int kAlgoCount = static_cast<int>(Algo::kAllgather) + 1;
constexpr int kCompressCount = static_cast<int>(Compress::kAlways) + 1;

const char *compress_name(Compress c) {
  switch (c) {
    case Compress::kOff:
      return "off";
    case Compress::kAuto:
      return "auto";
    case Compress::kAlways:
      return "zstd";
  }
  return "?";
}

bool reduces(Kind k) { return k == Kind::kAllreduce || k == Kind::kReduceScatter; }

}  // namespace

Call Call::of(const Collective &c) {
  Call call;
  call.kind = c.kind;
  if (c.kind == Kind::kBarrier || c.kind == Kind::kStateSync) return call;
  call.dtype = c.dtype;
  call.count = c.count;
  call.wire = c.wire;
  call.compress = c.compress;
  call.chunk_bytes = c.chunk_bytes;
  if (reduces(c.kind)) call.op = c.op;
  if (c.kind == Kind::kAllreduce) call.algo = c.algo;
  if (c.kind == Kind::kBroadcast) call.root = static_cast<uint32_t>(c.root);
  return call;
}

bool operator==(const Call &a, const Call &b) { return encode(a) == encode(b); }

uint32_t call_key(const CallBytes &call) {
  return static_cast<uint32_t>(codec::hash64(call.data(), call.size()) >> 32);
}

CallBytes encode(const Call &call) {
  CallBytes b{};
  b[0] = static_cast<uint8_t>(call.kind);
  b[1] = static_cast<uint8_t>(call.dtype);
  b[2] = static_cast<uint8_t>(call.op);
  b[3] = static_cast<uint8_t>(call.algo);
  b[4] = static_cast<uint8_t>(call.wire.kind);
  b[5] = static_cast<uint8_t>(call.compress);
  put_le<uint32_t>(&b[kOffRoot], call.root);
  put_le<uint64_t>(&b[kOffCount], call.count);
  put_le<uint64_t>(&b[kOffChunk], call.chunk_bytes);
  put_le<uint64_t>(&b[kOffKeep], call.wire.keep);
  return b;
}

Status decode(const uint8_t *data, size_t size, Call *out) {
  if (size != kCallBytes)
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "a call description of %zu bytes (not %zu)", size,
                      kCallBytes);
  auto in_range = [&](size_t i, int n, const char *field) {
    return data[i] < n ? Status()
                       : WCCL_ERROR(WCCL_ERR_PROTOCOL, "a call description's %s is %u", field,
                                    static_cast<unsigned>(data[i]));
  };
  WCCL_RETURN_IF_ERROR(in_range(0, kKindCount, "collective"));
  WCCL_RETURN_IF_ERROR(in_range(1, codec::kDtypeCount, "dtype"));
  WCCL_RETURN_IF_ERROR(in_range(2, codec::kRedOpCount, "reduce op"));
  WCCL_RETURN_IF_ERROR(in_range(3, kAlgoCount, "algo"));
  WCCL_RETURN_IF_ERROR(in_range(4, codec::kWireCount, "wire"));
  WCCL_RETURN_IF_ERROR(in_range(5, kCompressCount, "compress"));
  if (data[6] != 0 || data[7] != 0 || get_le<uint32_t>(&data[12]) != 0)
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "a call description's reserved bytes are not 0");
  Call c;
  c.kind = static_cast<Kind>(data[0]);
  c.dtype = static_cast<codec::Dtype>(data[1]);
  c.op = static_cast<codec::RedOp>(data[2]);
  c.algo = static_cast<Algo>(data[3]);
  c.wire.kind = static_cast<codec::WireKind>(data[4]);
  c.compress = static_cast<Compress>(data[5]);
  c.root = get_le<uint32_t>(&data[kOffRoot]);
  c.count = get_le<uint64_t>(&data[kOffCount]);
  c.chunk_bytes = get_le<uint64_t>(&data[kOffChunk]);
  c.wire.keep = get_le<uint64_t>(&data[kOffKeep]);
  *out = c;
  return Status();
}

std::string to_string(const Call &call, bool transport) {
  std::string s = kind_name(call.kind);
  if (call.kind == Kind::kBarrier || call.kind == Kind::kStateSync) return s + "()";
  s += "(" + std::to_string(call.count) + " x " + codec::dtype_name(call.dtype);
  if (reduces(call.kind)) s += std::string(", ") + codec::redop_name(call.op);
  if (call.kind == Kind::kBroadcast) s += ", root " + std::to_string(call.root);
  s += std::string(", wire ") + codec::wire_name(call.wire);
  if (call.wire.kind == codec::WireKind::kTopk) s += "/" + std::to_string(call.wire.keep);
  if (call.kind == Kind::kAllreduce) s += std::string(", algo ") + algo_name(call.algo);
  if (transport) {
    s += std::string(", compress ") + compress_name(call.compress);
    s += ", chunk_bytes " + std::to_string(call.chunk_bytes);
  }
  return s + ")";
}

std::string differences(const Call &a, const Call &b) {
  std::string s;
  auto add = [&](bool differ, const char *field) {
    if (!differ) return;
    if (!s.empty()) s += ", ";
    s += field;
  };
  add(a.kind != b.kind, "collective");
  add(a.dtype != b.dtype, "dtype");
  add(a.count != b.count, "count");
  add(a.op != b.op, "reduce op");
  add(a.root != b.root, "root");
  add(a.wire != b.wire, "wire");
  add(a.algo != b.algo, "algo");
  add(a.compress != b.compress, "compress");
  add(a.chunk_bytes != b.chunk_bytes, "chunk_bytes");
  return s;
}

Status disagreement(int peer, const CallBytes &theirs, int rank, const Call &mine) {
  Call them;
  const Status bad = decode(theirs.data(), theirs.size(), &them);
  if (!bad.ok()) return WCCL_ERROR(WCCL_ERR_PROTOCOL, "rank %d: %s", peer, bad.message().c_str());
  // Shortest first: the coordinator relays at most 255 bytes of it (coord::kMaxTextBytes).
  const bool transport = them.compress != mine.compress || them.chunk_bytes != mine.chunk_bytes;
  return WCCL_ERROR(WCCL_ERR_MISMATCH, "calls differ in %s: rank %d called %s, rank %d %s",
                    differences(them, mine).c_str(), peer, to_string(them, transport).c_str(), rank,
                    to_string(mine, transport).c_str());
}

}  // namespace wccl::algo
