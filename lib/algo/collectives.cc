#include "algo/collectives.h"

#include <algorithm>
#include <limits>

#include "algo/payload.h"
#include "algo/pipeline.h"

namespace wccl::algo {
namespace {

using codec::dtype_size;

Memory &memory_of(const Collective &c) { return c.memory != nullptr ? *c.memory : host_memory(); }

int mod(long a, int n) { return static_cast<int>(((a % n) + n) % n); }

// Elements [begin, begin + count) of a buffer.
struct Span {
  size_t begin = 0;
  size_t count = 0;
};

// Part i of `total` elements cut into `parts` near-equal parts (the first total % parts are one
// longer).
Span split(size_t total, size_t parts, size_t i) {
  const size_t base = total / parts, rem = total % parts;
  return {i * base + std::min(i, rem), base + (i < rem ? 1 : 0)};
}

// Bytes of one element on the wire for zstd's byte shuffle: the dtype's, 2 for the 16-bit wires,
// 1 for the block-quantized ones (whose codes are bytes or nibbles).
size_t wire_elem_bytes(const Collective &c) {
  switch (c.wire.kind) {
    case codec::WireKind::kNative:
      return dtype_size(c.dtype);
    case codec::WireKind::kF16:
    case codec::WireKind::kBF16:
      return 2;
    case codec::WireKind::kInt8:
    case codec::WireKind::kInt4:
    case codec::WireKind::kInt2:
    case codec::WireKind::kFp8:
    case codec::WireKind::kTopk:
      return 1;
  }
  return 1;
}

// How many segments of at most about chunk_bytes on the wire `max_elems` elements take.
size_t segments(const Collective &c, size_t max_elems) {
  const size_t bytes = c.wire.kind == codec::WireKind::kNative
                           ? max_elems * dtype_size(c.dtype)
                           : codec::wire_size(c.wire, max_elems);
  return std::max<size_t>(1, (bytes + c.chunk_bytes - 1) / c.chunk_bytes);
}

// --- Topologies ----------------------------------------------------------------------------------
// Each is written once, over a Payload (algo/payload.h) and a Pipeline (algo/pipeline.h). A buffer
// is cut into blocks (n for a ring, two halves for the trees) and each block into segments of at
// most chunk_bytes on the wire, which move independently (pipelining). Send slots are message tags,
// for the receives that must wait until a send no longer reads their memory.

struct Ring {
  int n, r, next, prev;
  size_t nseg;
  uint32_t tag(int step, size_t j) const {
    return static_cast<uint32_t>(static_cast<size_t>(step) * nseg + j);
  }
};

Ring ring_of(const Exchange &ex, size_t nseg) {
  const int n = ex.size(), r = ex.rank();
  return {n, r, mod(r + 1, n), mod(r - 1, n), nseg};
}

// Segment j of block b, as a ring stage sees it.
struct Piece {
  size_t count = 0;
  size_t first = 0;               // index of its first element in `in`
  const uint8_t *mine = nullptr;  // this peer's own elements of it
  uint8_t *acc = nullptr;         // where it is combined (a partial), or lands (a final value)
  size_t region = 0;
  size_t reuse = kNoSlot;  // a send still reading acc, to wait for before combining into it
};

// Reduce-scatter around the ring, n-1 steps with tags 0..n-2: this peer first sends its own
// elements of block r-1; at step s it receives block r-s-2's partial from its predecessor,
// combines its own elements in and passes the partial on, except at the last step, where block r
// is complete here and `complete` takes it. piece(b, j, s): segment j of block b at step s (-1:
// the first send).
template <typename PieceOf, typename Complete>
Status ring_reduce_scatter_steps(Pipeline &pipe, Payload &pl, const Ring &ring, PieceOf piece,
                                 Complete complete) {
  for (size_t j = 0; j < ring.nseg; ++j) {
    const Piece p = piece(ring.r - 1, j, -1);
    WCCL_RETURN_IF_ERROR(pl.send_partial(ring.tag(0, j), ring.next, ring.tag(0, j), p.mine, p.count,
                                         p.first, p.region));
  }
  for (int step = 0; step < ring.n - 1; ++step) {
    for (size_t j = 0; j < ring.nseg; ++j) {
      const Piece p = piece(ring.r - step - 2, j, step);
      pipe.receive(ring.prev, ring.tag(step, j), pl.wire_len(p.count),
                   [=, &pipe, &pl](const uint8_t *got) {
                     if (p.reuse != kNoSlot) WCCL_RETURN_IF_ERROR(pipe.out().wait(p.reuse));
                     WCCL_RETURN_IF_ERROR(pl.combine(p.acc, p.mine, got, p.count));
                     if (step == ring.n - 2) return complete(p, j);
                     return pl.send_partial(ring.tag(step + 1, j), ring.next, ring.tag(step + 1, j),
                                            p.acc, p.count, p.first, p.region);
                   });
    }
  }
  return Status();
}

// All-gather around the ring, n-1 steps with tags base..base+n-2, once this peer's own final
// block r has left (the caller sends it with tag base): at step s the final block r-s-1 lands from
// the predecessor and is forwarded at the next step. gate(s, j): the send slot whose send must
// complete before step s's segment j may land.
template <typename PieceOf, typename Gate>
void ring_allgather_steps(Pipeline &pipe, Payload &pl, const Ring &ring, int base, PieceOf piece,
                          Gate gate) {
  for (int step = 0; step < ring.n - 1; ++step) {
    for (size_t j = 0; j < ring.nseg; ++j) {
      const Piece p = piece(ring.r - step - 1, j);
      const uint32_t fwd = ring.tag(base + step + 1, j);
      const bool last = step == ring.n - 2;
      pl.land_final(
          ring.prev, ring.tag(base + step, j), p.acc, p.count, p.region, gate(step, j), [=, &pl]() {
            return last ? Status()
                        : pl.send_final(kNoSlot, ring.next, fwd, p.acc, p.count, p.region);
          });
    }
  }
}

// Ring all-reduce: the reduce-scatter, whose last step completes block r here (AVG divides, the
// payload makes the final value and sends it), then the all-gather (tags from n-1). Partials are
// combined in place in `out`; a final block that lands in `out` waits for the send that last read
// that memory: the partial sent at tag s, or this peer's input at tag 0 (in place, in == out).
Status ring_allreduce(Exchange &ex, const Collective &c, Undo *undo) {
  Memory &mem = memory_of(c);
  const size_t es = dtype_size(c.dtype);
  const auto *in = static_cast<const uint8_t *>(c.in);
  auto *out = static_cast<uint8_t *>(c.out);
  const Ring ring = ring_of(ex, segments(c, split(c.count, ex.size(), 0).count));
  const int n = ring.n;
  auto piece = [&](long block, size_t j, int = 0) {
    const Span b = split(c.count, n, mod(block, n));
    const Span s = split(b.count, ring.nseg, j);
    const size_t first = b.begin + s.begin;
    return Piece{s.count, first, in + first * es, out + first * es, mod(block, n) * ring.nseg + j};
  };
  Pipeline pipe(ex, c, undo, static_cast<size_t>(n) * ring.nseg, wire_elem_bytes(c));
  Payload &pl = pipe.payload();
  WCCL_RETURN_IF_ERROR(pl.plan(
      static_cast<size_t>(n) * ring.nseg,
      [&](size_t i) { return piece(static_cast<long>(i / ring.nseg), i % ring.nseg).count; },
      Payload::Carry::kBoth));
  auto complete = [&](const Piece &p, size_t j) {
    if (c.op == codec::RedOp::kAvg)
      WCCL_RETURN_IF_ERROR(mem.finish_avg(c.dtype, p.acc, p.count, n));
    WCCL_RETURN_IF_ERROR(pl.make_final(p.acc, p.acc, p.count, p.first, p.region));
    return pl.send_final(kNoSlot, ring.next, ring.tag(n - 1, j), p.acc, p.count, p.region);
  };
  WCCL_RETURN_IF_ERROR(ring_reduce_scatter_steps(pipe, pl, ring, piece, complete));
  ring_allgather_steps(pipe, pl, ring, n - 1, piece,
                       [&](int step, size_t j) { return static_cast<size_t>(ring.tag(step, j)); });
  return pipe.run();
}

// Ring reduce-scatter: the first half of the ring all-reduce over n blocks of `count` elements.
// Partials alternate between two block buffers of scratch; one is combined into again only
// after the send that read it two steps earlier completed. The last step's block is this peer's
// share of the result, and goes to `out` (on a codec, in F32: no other peer holds it).
Status ring_reduce_scatter(Exchange &ex, const Collective &c, Undo *undo) {
  Memory &mem = memory_of(c);
  const size_t es = dtype_size(c.dtype);
  const auto *in = static_cast<const uint8_t *>(c.in);
  auto *out = static_cast<uint8_t *>(c.out);
  const Ring ring = ring_of(ex, segments(c, c.count));
  const int n = ring.n;
  Bytes partial[2];
  for (auto &p : partial) WCCL_RETURN_IF_ERROR(mem.scratch(n > 2 ? c.count * es : 0, &p));
  auto piece = [&](long block, size_t j, int step) {
    const Span s = split(c.count, ring.nseg, j);
    const size_t first = static_cast<size_t>(mod(block, n)) * c.count + s.begin;
    const bool last = step == n - 2;
    uint8_t *acc = last        ? out + s.begin * es
                   : step >= 0 ? partial[step % 2].get() + s.begin * es
                               : nullptr;
    const size_t reuse = !last && step >= 2 ? ring.tag(step - 1, j) : kNoSlot;
    return Piece{s.count, first, in + first * es, acc, mod(block, n) * ring.nseg + j, reuse};
  };
  Pipeline pipe(ex, c, undo, static_cast<size_t>(n) * ring.nseg, wire_elem_bytes(c));
  Payload &pl = pipe.payload();
  WCCL_RETURN_IF_ERROR(pl.plan(
      static_cast<size_t>(n) * ring.nseg,
      [&](size_t i) { return split(c.count, ring.nseg, i % ring.nseg).count; },
      Payload::Carry::kPartials));
  WCCL_RETURN_IF_ERROR(
      ring_reduce_scatter_steps(pipe, pl, ring, piece, [&](const Piece &p, size_t) {
        return c.op == codec::RedOp::kAvg ? mem.finish_avg(c.dtype, p.acc, p.count, n) : Status();
      }));
  return pipe.run();
}

// Ring all-gather: this peer's contribution is made final (encoded once on a codec) into its
// block of `out` and sent; then the all-gather steps. Nothing is sent from the blocks that land.
Status ring_allgather(Exchange &ex, const Collective &c, Undo *undo) {
  const size_t es = dtype_size(c.dtype);
  const auto *in = static_cast<const uint8_t *>(c.in);
  auto *out = static_cast<uint8_t *>(c.out);
  const Ring ring = ring_of(ex, segments(c, c.count));
  auto piece = [&](long block, size_t j) {
    const Span s = split(c.count, ring.nseg, j);
    const size_t b = static_cast<size_t>(mod(block, ring.n));
    return Piece{s.count, s.begin, in + s.begin * es, out + (b * c.count + s.begin) * es,
                 b * ring.nseg + j};
  };
  Pipeline pipe(ex, c, undo, 0, wire_elem_bytes(c));
  Payload &pl = pipe.payload();
  WCCL_RETURN_IF_ERROR(pl.plan(
      static_cast<size_t>(ring.n) * ring.nseg,
      [&](size_t i) { return split(c.count, ring.nseg, i % ring.nseg).count; },
      Payload::Carry::kFinals));
  for (size_t j = 0; j < ring.nseg; ++j) {
    const Piece p = piece(ring.r, j);
    WCCL_RETURN_IF_ERROR(pl.make_final(p.acc, p.mine, p.count, p.first, p.region));
    WCCL_RETURN_IF_ERROR(
        pl.send_final(kNoSlot, ring.next, ring.tag(0, j), p.acc, p.count, p.region));
  }
  ring_allgather_steps(pipe, pl, ring, 0, piece, [](int, size_t) { return kNoSlot; });
  return pipe.run();
}

// All-reduce as an all-gather (Algo::kAllgather): each member's input goes round the ring as a
// final value does (encoded once on a codec; nothing re-encodes it) and every member keeps it as
// it came; once a segment's n contributions are in, each member combines them in rank order, 0
// first, and AVG divides. Every member combines the same values in the same order, so all end
// bit-identical, and the result is the sum of what each contribution decodes to (its
// wccl_wire_roundtrip), however many members: one encoding per contribution, where the ring
// re-encodes partial sums up to n times. Each member sends n - 1 times its input's wire bytes,
// n/2 times the ring's, in n - 1 steps, and keeps n contributions' wire bytes in host memory.
Status gather_allreduce(Exchange &ex, const Collective &c, Undo *undo) {
  Memory &mem = memory_of(c);
  const size_t es = dtype_size(c.dtype);
  const auto *in = static_cast<const uint8_t *>(c.in);
  auto *out = static_cast<uint8_t *>(c.out);
  // Segments start on a block of the wire, so that a contribution is encoded exactly as the
  // whole buffer would be (as wccl_wire_roundtrip encodes it).
  const codec::BlockFormat *f = codec::block_format(c.wire);
  const size_t align = f != nullptr ? f->block : 1, units = (c.count + align - 1) / align;
  const Ring ring = ring_of(ex, std::min(segments(c, c.count), std::max<size_t>(units, 1)));
  const int n = ring.n;
  const size_t nseg = ring.nseg;
  auto seg = [&](size_t j) {
    const Span u = split(units, nseg, j);
    const size_t begin = u.begin * align;
    return Span{begin, std::min(c.count, (u.begin + u.count) * align) - std::min(c.count, begin)};
  };
  auto region = [n, nseg](long member, size_t j) {
    return static_cast<size_t>(mod(member, n)) * nseg + j;
  };
  Pipeline pipe(ex, c, undo, 0, wire_elem_bytes(c));
  Payload &pl = pipe.payload();
  WCCL_RETURN_IF_ERROR(
      pl.plan_kept(static_cast<size_t>(n) * nseg, [&](size_t i) { return seg(i % nseg).count; }));
  for (size_t j = 0; j < nseg; ++j) {  // all of `in` is read here, before `out` is written
    const Span s = seg(j);
    WCCL_RETURN_IF_ERROR(pl.keep(in + s.begin * es, s.count, s.begin, region(ring.r, j)));
    WCCL_RETURN_IF_ERROR(pl.send_kept(kNoSlot, ring.next, ring.tag(0, j), region(ring.r, j)));
  }
  for (int step = 0; step < n - 1; ++step) {
    for (size_t j = 0; j < nseg; ++j) {
      const size_t from = region(ring.r - step - 1, j);
      pl.land_kept(ring.prev, ring.tag(step, j), from, [=, &pl, &mem, &c]() {
        if (step < n - 2) return pl.send_kept(kNoSlot, ring.next, ring.tag(step + 1, j), from);
        const Span s = seg(j);
        uint8_t *acc = out + s.begin * es;
        for (int m = 0; m < n; ++m)
          WCCL_RETURN_IF_ERROR(pl.combine_kept(acc, s.count, region(m, j), m == 0));
        return c.op == codec::RedOp::kAvg ? mem.finish_avg(c.dtype, acc, s.count, n) : Status();
      });
    }
  }
  return pipe.run();
}

// Tree all-reduce over two binary trees (tree_node): the first half of the buffer is reduced up
// tree 0 and broadcast down it, the second half on tree 1, so every peer sends and receives about
// the whole buffer once each way, in 2 log2(n) latencies instead of the ring's 2(n-1). A node
// combines its own elements, then child 0's, then child 1's, in place in `out`; the root makes the
// final value and sends it down at once, and it goes down verbatim. It lands where this node's
// partial (or, at a leaf, its input) went up from, so after that send. Tags: (2t) * nseg + j up
// tree t, (2t + 1) * nseg + j down.
//
// The pipeline takes its steps in the order they are listed, so they are listed in the order they
// can arrive: a segment's partials from the tree where this node's subtree is lower first, its
// finals from the tree where this node is nearer the root first. Listed the other way, a peer
// holding one tree's final would wait for the other tree's before passing it on: a message
// latency lost on every all-reduce.
Status tree_allreduce(Exchange &ex, const Collective &c, Undo *undo) {
  Memory &mem = memory_of(c);
  const int n = ex.size(), r = ex.rank();
  const size_t es = dtype_size(c.dtype);
  const auto *in = static_cast<const uint8_t *>(c.in);
  auto *out = static_cast<uint8_t *>(c.out);
  const size_t nseg = segments(c, split(c.count, 2, 0).count);
  auto seg = [&](int t, size_t j) {
    const Span h = split(c.count, 2, static_cast<size_t>(t));
    const Span s = split(h.count, nseg, j);
    return Span{h.begin + s.begin, s.count};
  };
  auto up = [&](int t, size_t j) { return static_cast<uint32_t>((2 * t) * nseg + j); };
  auto down = [&](int t, size_t j) { return static_cast<uint32_t>((2 * t + 1) * nseg + j); };
  auto region = [&](int t, size_t j) { return static_cast<size_t>(t) * nseg + j; };
  const TreeNode node[2] = {tree_node(0, r, n), tree_node(1, r, n)};
  auto leaf = [&](int t) { return node[t].child[0] < 0 && node[t].child[1] < 0; };
  const int partials_first = node[1].height < node[0].height ? 1 : 0;
  const int finals_first = node[1].depth < node[0].depth ? 1 : 0;
  Pipeline pipe(ex, c, undo, 4 * nseg, wire_elem_bytes(c));
  Payload &pl = pipe.payload();
  WCCL_RETURN_IF_ERROR(pl.plan(
      2 * nseg, [&](size_t i) { return seg(static_cast<int>(i / nseg), i % nseg).count; },
      Payload::Carry::kBoth));
  auto send_down = [&pl, &node, down, region](int t, size_t j, const uint8_t *value, size_t count) {
    for (int child : node[t].child) {
      if (child >= 0)
        WCCL_RETURN_IF_ERROR(pl.send_final(kNoSlot, child, down(t, j), value, count, region(t, j)));
    }
    return Status();
  };
  for (size_t j = 0; j < nseg; ++j) {
    for (int t = 0; t < 2; ++t) {
      const Span s = seg(t, j);
      if (leaf(t)) {
        WCCL_RETURN_IF_ERROR(pl.send_partial(up(t, j), node[t].parent, up(t, j), in + s.begin * es,
                                             s.count, s.begin, region(t, j)));
      }
    }
  }
  for (size_t j = 0; j < nseg; ++j) {
    for (int t : {partials_first, 1 - partials_first}) {
      if (leaf(t)) continue;
      const Span s = seg(t, j);
      uint8_t *acc = out + s.begin * es;
      const TreeNode nd = node[t];
      const int last = nd.child[1] >= 0 ? 1 : 0;
      for (int ci = 0; ci <= last; ++ci) {
        pipe.receive(
            nd.child[ci], up(t, j), pl.wire_len(s.count), [=, &pl, &mem, &c](const uint8_t *got) {
              WCCL_RETURN_IF_ERROR(
                  pl.combine(acc, ci == 0 ? in + s.begin * es : acc, got, s.count));
              if (ci < last) return Status();
              if (nd.parent >= 0)
                return pl.send_partial(up(t, j), nd.parent, up(t, j), acc, s.count, s.begin,
                                       region(t, j));
              if (c.op == codec::RedOp::kAvg)
                WCCL_RETURN_IF_ERROR(mem.finish_avg(c.dtype, acc, s.count, n));
              WCCL_RETURN_IF_ERROR(pl.make_final(acc, acc, s.count, s.begin, region(t, j)));
              return send_down(t, j, acc, s.count);
            });
      }
    }
  }
  for (size_t j = 0; j < nseg; ++j) {
    for (int t : {finals_first, 1 - finals_first}) {
      if (node[t].parent < 0) continue;  // the root sent it down as it made it
      const Span s = seg(t, j);
      uint8_t *value = out + s.begin * es;
      pl.land_final(node[t].parent, down(t, j), value, s.count, region(t, j), up(t, j),
                    [=, &send_down]() { return send_down(t, j, value, s.count); });
    }
  }
  return pipe.run();
}

// Broadcast down the ring from the root, pipelined in segments: the root makes each segment final
// (encodes it once on a codec) and sends it; the peer at distance d receives it into place and
// forwards it unless it is the last.
Status chain_broadcast(Exchange &ex, const Collective &c, Undo *undo) {
  const size_t es = dtype_size(c.dtype);
  const auto *in = static_cast<const uint8_t *>(c.in);
  auto *out = static_cast<uint8_t *>(c.out);
  const Ring ring = ring_of(ex, segments(c, c.count));
  const int distance = mod(ring.r - c.root, ring.n);
  Pipeline pipe(ex, c, undo, 0, wire_elem_bytes(c));
  Payload &pl = pipe.payload();
  WCCL_RETURN_IF_ERROR(pl.plan(
      ring.nseg, [&](size_t j) { return split(c.count, ring.nseg, j).count; },
      Payload::Carry::kFinals));
  for (size_t j = 0; j < ring.nseg; ++j) {
    const Span s = split(c.count, ring.nseg, j);
    uint8_t *value = out + s.begin * es;
    const uint32_t tag = static_cast<uint32_t>(j);
    if (distance == 0) {
      WCCL_RETURN_IF_ERROR(pl.make_final(value, in + s.begin * es, s.count, s.begin, j));
      WCCL_RETURN_IF_ERROR(pl.send_final(kNoSlot, ring.next, tag, value, s.count, j));
      continue;
    }
    pl.land_final(ring.prev, tag, value, s.count, j, kNoSlot, [=, &pl]() {
      return distance < ring.n - 1 ? pl.send_final(kNoSlot, ring.next, tag, value, s.count, j)
                                   : Status();
    });
  }
  return pipe.run();
}

Status dispatch(Exchange &ex, const Collective &c, Undo *undo) {
  const int n = ex.size();
  if (c.kind == Kind::kBarrier) return Status();  // the commit step is the barrier
  if (c.kind == Kind::kStateSync) return run_sync(ex, *c.sync, static_cast<uint8_t *>(c.out));
  if (n == 1) {
    const size_t bytes = out_count(c, n) * dtype_size(c.dtype);
    if (c.out == c.in || bytes == 0) return Status();
    if (undo != nullptr) WCCL_RETURN_IF_ERROR(undo->will_write(c.out, bytes));
    return memory_of(c).copy(c.out, c.in, bytes);
  }
  switch (c.kind) {
    case Kind::kAllreduce:
      switch (c.algo) {
        case Algo::kTree:
          return tree_allreduce(ex, c, undo);
        case Algo::kAllgather:
          return gather_allreduce(ex, c, undo);
        case Algo::kAuto:
        case Algo::kRing:
          break;
      }
      return ring_allreduce(ex, c, undo);
    case Kind::kBroadcast:
      return chain_broadcast(ex, c, undo);
    case Kind::kAllgather:
      return ring_allgather(ex, c, undo);
    case Kind::kReduceScatter:
      return ring_reduce_scatter(ex, c, undo);
    case Kind::kBarrier:
    case Kind::kStateSync:
      break;
  }
  return Status();
}

// In and out may be the same buffer where the algorithms read each input element no later than
// they first write its place in the output (the in-place layouts of MPI and NCCL); any other
// overlap would let a write clobber input still to be read.
Status overlap(const Collective &c, int n, int rank) {
  const size_t es = dtype_size(c.dtype);
  const auto in = reinterpret_cast<uintptr_t>(c.in), out = reinterpret_cast<uintptr_t>(c.out);
  const size_t in_bytes = in_count(c, n) * es, out_bytes = out_count(c, n) * es;
  if (in_bytes == 0 || out_bytes == 0 || in + in_bytes <= out || out + out_bytes <= in)
    return Status();
  const size_t r = static_cast<size_t>(rank);
  switch (c.kind) {
    case Kind::kAllreduce:
    case Kind::kBroadcast:
      if (in == out) return Status();
      break;
    case Kind::kAllgather:  // in is this peer's block of out
      if (in == out + r * in_bytes) return Status();
      break;
    case Kind::kReduceScatter:  // out is this peer's block of in
      if (out == in + r * out_bytes) return Status();
      break;
    case Kind::kBarrier:
    case Kind::kStateSync:
      break;
  }
  return WCCL_ERROR(
      WCCL_ERR_INVALID_ARGUMENT,
      "%s: sendbuf and recvbuf overlap, but not in place (in place: the same buffer%s)",
      kind_name(c.kind),
      c.kind == Kind::kAllgather       ? "; for all-gather, sendbuf = recvbuf + rank * count"
      : c.kind == Kind::kReduceScatter ? "; for reduce-scatter, recvbuf = sendbuf + rank * count"
                                       : "");
}

}  // namespace

const char *kind_name(Kind k) {
  switch (k) {
    case Kind::kAllreduce:
      return "allreduce";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kAllgather:
      return "allgather";
    case Kind::kReduceScatter:
      return "reduce_scatter";
    case Kind::kBarrier:
      return "barrier";
    case Kind::kStateSync:
      return "state_sync";
  }
  return "?";
}

const char *algo_name(Algo a) {
  switch (a) {
    case Algo::kAuto:
      return "auto";
    case Algo::kRing:
      return "ring";
    case Algo::kTree:
      return "tree";
    case Algo::kAllgather:
      return "allgather";
  }
  return "?";
}

size_t in_count(const Collective &c, int n) {
  switch (c.kind) {
    case Kind::kReduceScatter:
      return c.count * static_cast<size_t>(n);
    case Kind::kBarrier:
    case Kind::kStateSync:
      return 0;
    default:
      return c.count;
  }
}

size_t out_count(const Collective &c, int n) {
  switch (c.kind) {
    case Kind::kAllgather:
      return c.count * static_cast<size_t>(n);
    case Kind::kBarrier:
      return 0;
    default:
      return c.count;
  }
}

bool widened(const Collective &c) {
  return c.wire.kind != codec::WireKind::kNative && c.kind != Kind::kBarrier &&
         c.kind != Kind::kStateSync &&
         (c.dtype == codec::Dtype::kF16 || c.dtype == codec::Dtype::kBF16);
}

Status check_wire(const Collective &c) {
  if (c.wire.kind != codec::WireKind::kNative && c.kind != Kind::kBarrier &&
      c.dtype != codec::Dtype::kF32 && !widened(c)) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                      "the %s wire carries f32, f16 and bf16 elements, not %s",
                      codec::wire_name(c.wire), codec::dtype_name(c.dtype));
  }
  if (c.wire.kind == codec::WireKind::kTopk &&
      (c.kind == Kind::kReduceScatter ||
       (c.kind == Kind::kAllreduce && c.algo != Algo::kAuto && c.algo != Algo::kAllgather))) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                      "the topk wire is never re-encoded: all-reduce takes it by algo allgather "
                      "(or auto), broadcast and "
                      "all-gather as they are; not %s",
                      c.kind == Kind::kAllreduce ? algo_name(c.algo) : kind_name(c.kind));
  }
  return Status();
}

Status check(const Collective &c, int n, int rank) {
  if (c.kind == Kind::kStateSync) {
    return c.sync != nullptr && c.dtype == codec::Dtype::kU8 && c.count == c.sync->stage_bytes
               ? Status()
               : WCCL_ERROR(WCCL_ERR_INTERNAL,
                            "state_sync: the collective does not describe its job");
  }
  WCCL_RETURN_IF_ERROR(check_wire(c));
  const size_t es = wire_elem_bytes(c);
  if (c.chunk_bytes < es)
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "chunk_bytes %zu is below one element",
                      c.chunk_bytes);
  const size_t per_step = c.kind != Kind::kAllreduce ? c.count
                          : c.algo == Algo::kAllgather
                              ? c.count
                              : split(c.count, c.algo == Algo::kTree ? 2 : n, 0).count;
  const size_t messages = segments(c, per_step) * 2 * static_cast<size_t>(n);
  if (messages >= kCallTag) {  // tags 0 .. messages - 1; kCallTag is the call check's
    return WCCL_ERROR(
        WCCL_ERR_INVALID_ARGUMENT,
        "%zu elements in chunks of %zu bytes need more than 2^32 messages; raise chunk_bytes",
        c.count, c.chunk_bytes);
  }
  return overlap(c, n, rank);
}

Algo choose(const Collective &c, int n, const Crossovers &x) {
  if (c.kind != Kind::kAllreduce) return Algo::kRing;
  if (c.algo != Algo::kAuto) return c.algo;
  if (c.wire.kind == codec::WireKind::kInt2 || c.wire.kind == codec::WireKind::kTopk)
    return Algo::kAllgather;
  const uint64_t bytes = c.count * dtype_size(c.dtype);
  if (x.allgather_max_bytes != 0 && bytes <= x.allgather_max_bytes) return Algo::kAllgather;
  return n > 2 && bytes <= x.tree_max_bytes ? Algo::kTree : Algo::kRing;
}

Status run(Exchange &ex, const Collective &c, Undo *undo) {
  Status st = dispatch(ex, c, undo);
  if (st.ok()) st = ex.agreed();  // every neighbour's call matched (a no-op without agree())
  if (!st.ok()) ex.cancel(st);    // so the channel's abort names the cause (first cause wins)
  ex.finish();
  return st;
}

// Tree 0 is the binary heap over ranks 0..n-1 (rank i has children 2i+1 and 2i+2); tree 1 is the
// same heap over the ranks in reverse order, so tree 0's interior (the low ranks) is tree 1's
// leaves and the other way round.
TreeNode tree_node(int t, int rank, int n) {
  auto to_rank = [&](int pos) { return t == 0 ? pos : n - 1 - pos; };
  const int pos = t == 0 ? rank : n - 1 - rank;
  TreeNode node;
  if (pos > 0) node.parent = to_rank((pos - 1) / 2);
  for (int k = 0; k < 2; ++k) {
    const int c = 2 * pos + 1 + k;
    if (c < n) node.child[k] = to_rank(c);
  }
  for (int p = pos; p > 0; p = (p - 1) / 2) ++node.depth;
  for (int c = 2 * pos + 1; c < n; c = 2 * c + 1)
    ++node.height;  // a heap's deepest leaves are leftmost
  return node;
}

std::set<int> schedule_neighbours(int rank, int n) {
  std::set<int> out;
  if (rank < 0 || rank >= n || n < 2) return out;
  out.insert(mod(rank + 1, n));
  out.insert(mod(rank - 1, n));
  for (int t = 0; t < 2; ++t) {
    const TreeNode node = tree_node(t, rank, n);
    for (int r : {node.parent, node.child[0], node.child[1]}) {
      if (r >= 0) out.insert(r);
    }
  }
  return out;
}

}  // namespace wccl::algo
