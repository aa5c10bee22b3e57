// Shared state sync (DESIGN §6): the pure parts that every member computes alike from the same
// inputs, and the data phase. Each member describes its named tensors (dtype, count, a hash of the
// bytes) with its revision and mode; the descriptions are all-gathered (comm/state_sync.cc); then
// every member elects the same state and derives the same transfer plan, so no member needs to be
// told what to send or receive. docs/algorithms.md describes the rules;
// tests/test_algo_state_sync.cc checks them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "algo/exchange.h"
#include "algo/memory.h"
#include "algo/send_codec.h"
#include "codec/reduce.h"
#include "core/status.h"

namespace wccl::algo {

// The values match wccl_sync_mode_t.
enum class SyncMode : int {
  kPopular = 0,      // offers its state to the election and receives what differs from the winner
  kSendOnly = 1,     // its state is the reference: it never receives (send-only members must agree)
  kReceiveOnly = 2,  // takes the elected state; never a candidate, never a donor
};
inline constexpr int kSyncModeCount = 3;

struct TensorInfo {
  std::string name;
  codec::Dtype dtype = codec::Dtype::kU8;
  uint64_t count = 0;
  uint64_t hash = 0;  // codec::tensor_hash of the tensor's bytes
};

struct MemberState {
  SyncMode mode = SyncMode::kPopular;
  uint64_t revision = 0;
  std::vector<TensorInfo> tensors;
};

// The description a member all-gathers (little-endian; docs/protocol.md "State sync").
std::vector<uint8_t> encode_state(const MemberState &s);
// PROTOCOL for anything malformed: bad magic or version, lengths past the end, an unknown mode or
// dtype, a name longer than kMaxNameBytes, trailing bytes (after `len`, zero padding is allowed).
Result<MemberState> decode_state(const uint8_t *data, size_t len);
inline constexpr size_t kMaxNameBytes = 1024;

// One message of the data phase: bytes [offset, offset + bytes) of tensor `tensor`, from member
// `donor` to member `receiver` (ranks).
struct Transfer {
  uint32_t tensor = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  int donor = 0;
  int receiver = 0;
};

// The state a plan makes every member hold.
struct SyncTarget {
  uint64_t revision = 0;
  std::vector<uint64_t> hashes;
};

struct SyncPlan {
  SyncTarget target;                // the elected revision and tensor hashes: every member's after
  int elected = -1;                 // the lowest rank that holds it (-1: none, with keep)
  std::vector<Transfer> transfers;  // in the one order every member posts them in
};

// The members `rank` exchanges bytes with in plan's data phase (its donors and its receivers).
std::set<int> sync_partners(const SyncPlan &plan, int rank);

// Elects the state every member ends with and plans the transfers, from the members' states in
// rank order. With `keep`, the election is skipped and keep is the target (state sync finishing
// a transfer after a donor's loss): PEER_LOST if a tensor that some member lacks is held by no
// remaining donor. Election: the send-only members' state if there are any (INVALID_USAGE if they
// differ); otherwise the (revision, hashes) held by the most popular members, ties going to the
// higher revision, then to the state of the lowest rank. Receive-only members never count. Every
// member whose hash of a tensor differs from the elected one receives that tensor, cut into
// pieces of at most piece_bytes, striped round-robin over its donors: the non-receive-only
// members that hold the elected bytes. INVALID_USAGE, naming the first mismatch, if the members'
// tensor lists differ (count, names, dtypes, element counts, against rank 0's), or if no member
// may offer its state.
Result<SyncPlan> plan_sync(const std::vector<MemberState> &members, size_t piece_bytes,
                           const SyncTarget *keep = nullptr);

// What one member runs the data phase with: its tensors (sent from, and written after the commit),
// and for each tensor where it lands in the staging buffer (kNotReceived if it does not receive
// it). The staging buffer is host memory; a tensor may be a GPU's (device).
struct SyncJob {
  static constexpr size_t kNotReceived = SIZE_MAX;
  std::shared_ptr<const SyncPlan> plan;
  std::vector<void *> tensors;
  std::vector<DeviceMemory *> device;  // each tensor's GPU, null for host memory (empty: all host)
  std::vector<size_t> tensor_bytes;
  std::vector<size_t> elem_bytes;  // each tensor's element size, for the byte shuffle (empty: 1)
  std::vector<size_t> stage_offset;
  size_t stage_bytes = 0;
  // Donors send zstd frames: never, where that pays (SendCodec, one key per tensor), or for every
  // piece that shrinks (kAlways: a test knob that forces the compressed path whatever the link).
  Compress compress = Compress::kOff;
};

// This member's stage offsets for plan (tensor_bytes filled in): the tensors it receives, packed
// in order.
void place_received(SyncJob *job, int rank);

// The data phase on member ex.rank(): posts its sends (from its tensors) and receives (into
// stage) in plan order, at most kSyncWindow at once, then checks each received tensor against the
// elected hash (PROTOCOL naming it if one differs). Never writes the member's tensors.
//
// Compression. A piece travels either as its bytes or, shorter, as one zstd frame of its
// byte-shuffled bytes, as the donor's SendCodec decides (algo/send_codec.h, one key per tensor);
// the receiver tells them apart by length and expands the frame in place.
Status run_sync(Exchange &ex, const SyncJob &job, uint8_t *stage);

// The commit of a sync: each received tensor's bytes copied out of `stage` into the tensor, in
// order, by copy(to, from, bytes, the tensor's GPU or null); the first error stops it.
Status deliver_received(
    const SyncJob &job, const uint8_t *stage,
    const std::function<Status(void *, const uint8_t *, size_t, DeviceMemory *)> &copy);
inline constexpr size_t kSyncWindow = 16;

}  // namespace wccl::algo
