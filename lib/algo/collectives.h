// The collectives' data phases, as schedules over an Exchange (DESIGN §2, §5). docs/algorithms.md
// tabulates their steps and bytes on the wire.
//
// Buffers. `in` is read; `out` receives the result and is the algorithm's workspace. They may be
// the same buffer in the in-place layouts (check()). The communicator passes the caller's buffers,
// and an Undo (algo/undo.h) that saves each range of `out` before its first write, which is how a
// failed operation leaves the caller's buffers as they were, with no copy after the commit.
//
// Determinism. Every element is combined in an order fixed by the ranks of the epoch, once, by
// one peer, and that peer's bytes are forwarded verbatim to every other: all peers end with
// bit-identical results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>

#include "algo/crossovers.h"
#include "algo/exchange.h"
#include "algo/memory.h"
#include "algo/send_codec.h"
#include "algo/state_sync.h"
#include "algo/undo.h"
#include "codec/reduce.h"
#include "codec/wire.h"

namespace wccl::algo {

enum class Kind { kAllreduce, kBroadcast, kAllgather, kReduceScatter, kBarrier, kStateSync };
enum class Algo : int { kAuto = 0, kRing = 1, kTree = 2, kAllgather = 3 };  // values of wccl_algo_t

const char *kind_name(Kind k);
const char *algo_name(Algo a);

struct Collective {
  Kind kind = Kind::kAllreduce;
  // Elements: allreduce and broadcast, the buffer; allgather, each peer's contribution (out holds
  // size() * count); reduce-scatter, each peer's share of the result (in holds size() * count).
  size_t count = 0;
  codec::Dtype dtype = codec::Dtype::kF32;
  codec::RedOp op = codec::RedOp::kSum;
  int root = 0;             // broadcast
  Algo algo = Algo::kRing;  // allreduce: kRing, kTree or kAllgather (kAuto is resolved by choose())
  size_t chunk_bytes = 1 << 20;  // pipelining unit: messages are at most this long
  // How elements travel (codec/wire.h). Other than kNative: dtype kF32 (kF16 and kBF16 are
  // widened to it by the communicator: widened()); every hop decodes,
  // combines in F32 and encodes again, and a final value is encoded once by the peer that
  // produced it, which then keeps what it decodes from its own bytes, so all peers still end
  // bit-identical. Barrier ignores it.
  codec::Wire wire = codec::WireKind::kNative;
  // zstd on the wire (opts.compress; algo/send_codec.h): lossless, so results are unchanged. A
  // peer decides for its own sends; every peer accepts both forms.
  Compress compress = Compress::kOff;
  // Bytes per second each link of the member may send this operation's messages at (opts
  // max_link_rate; net::Link::pace); 0: unpaced. The communicator applies it, not the schedules.
  uint64_t max_link_rate = 0;
  const void *in = nullptr;
  void *out = nullptr;
  // Device buffers: the GPU holding in and out (null: host memory), and the caller's stream whose
  // work so far the operation waits for (opts.cuda_stream; null: the legacy default stream). The
  // communicator turns them into `memory`, where the algorithms find in and out (null: host).
  gpu::Device *device = nullptr;
  gpu::Stream after = nullptr;
  Memory *memory = nullptr;
  // kStateSync: the member's job (algo/state_sync.h); out is its staging buffer of count bytes
  // (dtype kU8) and in is unused.
  std::shared_ptr<const SyncJob> sync;
};

// Elements of `in` and `out` for c on n peers.
size_t in_count(const Collective &c, int n);
size_t out_count(const Collective &c, int n);

// F16 or BF16 elements on a wire other than NATIVE: the communicator runs c on F32 copies of its
// input (widened exactly) and rounds the committed F32 result into its output once, so the
// algorithms see F32 only (docs/algorithms.md, "Wire codecs").
bool widened(const Collective &c);

// INVALID_ARGUMENT, naming the rule, if c's wire cannot carry c: a wire codec on a dtype other
// than F32, F16 and BF16, or TOPK (never re-encoded) on a reduce-scatter or on an all-reduce by
// the ring or the tree. The wire rule, in one place: check() applies it to every operation, and
// wccl_opts_check and wccl_opts_for ask it before any operation is made.
Status check_wire(const Collective &c);

// INVALID_ARGUMENT if c cannot run as member `rank` of n peers: check_wire(), more messages than
// 32-bit tags can name, or in and out overlapping other than in place (all-reduce, broadcast: the
// same buffer; all-gather: in = out + rank * count; reduce-scatter: out = in + rank * count, in
// elements).
Status check(const Collective &c, int n, int rank);

// The all-reduce algorithm for c.algo = kAuto on n peers. On the INT2 and TOPK wires, kAllgather:
// the ring re-encodes partial sums at up to n hops, at INT2 each within a sixth of the partial's
// range, which passes the inputs' own range at n = 6 (TOPK would drop all but 3% at each); the
// all-gather encodes each contribution once (its bound does not grow with n) and its result is
// exactly the sum of the contributions' decodings, which error feedback can then correct in
// full. (check() refuses TOPK on the ring and the tree.) Otherwise, by size: the all-gather up to
// x.allgather_max_bytes (n - 1 message delays, each member sending n - 1 contributions), the tree
// up to x.tree_max_bytes (2 log2 n delays, 2 buffers), the ring above (2(n-1) delays, 2(n-1)/n
// buffers): the fewer delays where latency dominates, the fewer bytes where bytes do. Every member
// must decide alike, so it depends only on the operation and the crossovers, which every member
// of an epoch holds alike. Other kinds: kRing.
Algo choose(const Collective &c, int n, const Crossovers &x);

// Runs the data phase. On failure `out` holds garbage, except for what `undo` (if not null)
// saved; `in` is untouched unless it is `out`. The exchange is finished (no transfer in flight)
// when this returns.
Status run(Exchange &ex, const Collective &c, Undo *undo = nullptr);

// The two binary trees of the tree all-reduce: the parent (-1 for the root) and up to two
// children (-1 where absent) of `rank` in tree t (0 or 1) of n peers. Interior nodes of one tree
// are leaves of the other (for even n; for odd n one peer is a leaf of both).
struct TreeNode {
  int parent = -1;
  int child[2] = {-1, -1};
  int depth = 0;   // hops up to the root
  int height = 0;  // hops down to the deepest leaf below
};
TreeNode tree_node(int t, int rank, int n);

// The ranks whose links the schedules use from `rank` of n peers: the ring's next and previous
// (ring, all-gather and broadcast, and the call check) and the parent and children in both trees
// (tree_node): at most 8 whatever n. Every member derives its epoch's links from it, so that both
// ends of a link agree on it. (State sync's donors and receivers are linked per operation.)
std::set<int> schedule_neighbours(int rank, int n);

}  // namespace wccl::algo
