// What one member called for an operation, in the form its neighbours compare before they read
// any of its messages (docs/protocol.md, "Agreeing on the call"). Every member must make the same
// call for an operation; one that does not (another dtype of the same width, another reduce op, a
// broadcast among all-reduces, another count or wire) would otherwise either return OK with results
// that differ between members, or fail a link as if a live neighbour had broken it. The Exchange
// sends a member's Call to its neighbours and fails the operation with MISMATCH when one differs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "algo/collectives.h"
#include "core/status.h"

namespace wccl::algo {

struct Call {
  Kind kind = Kind::kAllreduce;
  codec::Dtype dtype = codec::Dtype::kF32;
  codec::RedOp op = codec::RedOp::kSum;
  Algo algo = Algo::kRing;
  codec::Wire wire;
  Compress compress = Compress::kOff;
  uint32_t root = 0;
  uint64_t count = 0;
  uint64_t chunk_bytes = 0;

  // The caller's collective (before the communicator widens F16 or BF16 to F32), with c.algo
  // resolved. A field that does not apply to the kind is left at its zero value, so that members
  // that differ only there agree: the reduce op of a broadcast or an all-gather, the root of all
  // but a broadcast, the algorithm of all but an all-reduce, everything but the kind of a barrier
  // and of state sync's data phase (whose staging size is each member's own; the descriptions it
  // all-gathers first are compared by state sync itself).
  static Call of(const Collective &c);
  friend bool operator==(const Call &a, const Call &b);
  friend bool operator!=(const Call &a, const Call &b) { return !(a == b); }
};

CallBytes encode(const Call &call);  // kCallBytes (algo/exchange.h)
// 32 bits of a hash of the call, which comm::LinkChannel puts into its messages' keys: two calls
// that differ have different keys but once in 2^32.
uint32_t call_key(const CallBytes &call);
// PROTOCOL, naming the field, for a length other than kCallBytes, a value out of its range or a
// reserved byte other than 0.
Status decode(const uint8_t *data, size_t size, Call *out);

// "allreduce(8 x i32, sum, wire native, algo ring)": the fields that apply to its kind, with
// `transport` also compress and chunk_bytes.
std::string to_string(const Call &call, bool transport = false);
// The names of the fields in which a and b differ, comma-separated ("dtype, count").
std::string differences(const Call &a, const Call &b);

// The call check's verdict (Exchange::agree) on rank `peer`'s call `theirs` against `mine`, made
// by this member of rank `rank`: MISMATCH naming both calls and what differs, or PROTOCOL if
// `theirs` does not decode.
Status disagreement(int peer, const CallBytes &theirs, int rank, const Call &mine);

}  // namespace wccl::algo
