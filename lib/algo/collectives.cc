#include "algo/collectives.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <vector>

#include "algo/send_codec.h"

namespace wccl::algo {
namespace {

using codec::dtype_size;
using Ticket = Exchange::Ticket;

constexpr size_t kNoGate = std::numeric_limits<size_t>::max();
constexpr Ticket kNotIssued = std::numeric_limits<Ticket>::max();
constexpr Ticket kSkipped = std::numeric_limits<Ticket>::max() - 1;
// Receives posted ahead of the one being waited for: enough to keep every stream of a link busy
// while the worker reduces the previous chunk.
constexpr size_t kWindow = 4;

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

size_t segments(size_t max_elems, size_t esize, size_t chunk_bytes) {
  const size_t bytes = max_elems * esize;
  return std::max<size_t>(1, (bytes + chunk_bytes - 1) / chunk_bytes);
}

// The element size the byte shuffle of c's messages groups by: the dtype's, or the wire codec's.
size_t shuffle_bytes(const Collective &c) {
  switch (c.wire) {
    case codec::Wire::kNative: return dtype_size(c.dtype);
    case codec::Wire::kInt8: return 1;
    case codec::Wire::kF16:
    case codec::Wire::kBF16: return 2;
  }
  return 1;
}

// A schedule: the receives of one operation in the order its peers send them, each followed by
// an action (reduce, forward). The driver keeps kWindow receives posted ahead, so the network
// fills the next chunk while the worker handles this one. A receive that lands in memory an
// earlier send still reads names that send as its gate, and is posted only once it completed.
//
// Compression (c.compress, algo/send_codec.h): a send may go as a zstd frame held in one of the
// schedule's buffers until it completes; every receive is posted with a capacity of its length
// and a shorter message is expanded in place before its action runs, whatever this peer's own
// setting.
class Schedule {
 public:
  struct Step {
    int peer = -1;  // -1: no receive, only the action
    uint32_t tag = 0;
    uint8_t *dst = nullptr;  // null: into a staging slot, handed to the action
    size_t len = 0;          // bytes; 0: no receive
    size_t gate = kNoGate;   // a send slot that must complete before the receive is posted
    std::function<Status(const uint8_t *staged)> then;
    bool into_buffer = false;  // dst is in the operation's buffers (add_to_buffer), else host memory
  };

  Schedule(Exchange &ex, size_t send_slots, const Collective &c)
      : ex_(ex),
        mem_(memory_of(c)),
        sends_(send_slots, kNotIssued),
        es_(shuffle_bytes(c)),
        codec_(c.compress, 1) {}
  // Nothing may still write into the staging slots (or read the buffers of an algorithm that
  // declared them before its Schedule) once they are freed: on failure that means aborting the
  // channel and draining it here.
  ~Schedule() { ex_.finish(); }
  Schedule(const Schedule &) = delete;
  Schedule &operator=(const Schedule &) = delete;

  // Sends, remembering the ticket in `slot` (kNoGate: nobody gates on it). Zero bytes send nothing.
  // `data` is host memory, or with from_buffer, in the operation's buffers: on a device, those
  // bytes are copied to a page-locked block held until the send completes.
  void send(size_t slot, int peer, uint32_t tag, const void *data, size_t len, bool from_buffer = false) {
    Ticket t = kSkipped;
    if (len != 0) {
      reap();
      size_t copy = kNoBuffer;
      if (from_buffer && !mem_.host()) {
        // A page-locked block no send in flight reads, grown to len.
        if (free_copies_.empty()) {
          copies_.emplace_back();
          free_copies_.push_back(copies_.size() - 1);
        }
        copy = free_copies_.back();
        free_copies_.pop_back();
        uint8_t *bytes = nullptr;
        Status copied = copies_[copy].reserve(mem_, GrowingBytes::Kind::kHost, len, &bytes);
        if (copied.ok()) copied = mem_.to_host(bytes, data, len);
        if (!copied.ok()) {
          free_copies_.push_back(copy);
          ex_.cancel(copied);  // the operation fails with it at its next wait
          if (slot != kNoGate) sends_[slot] = kSkipped;
          return;
        }
        data = bytes;
      }
      if (free_.empty()) {
        frames_.emplace_back();
        free_.push_back(frames_.size() - 1);
      }
      const size_t buf = free_.back();
      size_t wire = len;
      const uint8_t *bytes = codec_.encode(0, static_cast<const uint8_t *>(data), len, es_, &frames_[buf], &wire);
      const bool raw = wire == len;
      if (!raw) free_.pop_back();  // held until the send completes
      if (!raw && copy != kNoBuffer) {
        free_copies_.push_back(copy);  // the frame holds the bytes now
        copy = kNoBuffer;
      }
      t = ex_.send(peer, tag, bytes, wire);
      in_flight_.push_back({t, wire, raw ? kNoBuffer : buf, copy});
    }
    if (slot != kNoGate) sends_[slot] = t;
  }
  // A send from the operation's buffers.
  void send_buffer(size_t slot, int peer, uint32_t tag, const void *data, size_t len) {
    send(slot, peer, tag, data, len, true);
  }
  Status wait_send(size_t slot) {
    const Ticket t = sends_[slot];
    if (t == kNotIssued) return WCCL_ERROR(WCCL_ERR_INTERNAL, "schedule waits for send slot %zu, never issued", slot);
    return t == kSkipped ? Status() : ex_.wait(t);
  }

  void add(Step s) { steps_.push_back(std::move(s)); }
  // A step whose receive lands in the operation's buffers (dst); on a device, through a host
  // staging slot.
  void add_to_buffer(Step s) {
    s.into_buffer = true;
    steps_.push_back(std::move(s));
  }

  Status run() {
    const bool staged_buffers = !mem_.host();
    auto staged = [&](const Step &s) { return !s.dst || (s.into_buffer && staged_buffers); };
    size_t stage_bytes = 0;
    for (const Step &s : steps_) {
      if (staged(s)) stage_bytes = std::max(stage_bytes, s.len);
    }
    WCCL_RETURN_IF_ERROR(mem_.host_bytes(stage_bytes * kWindow, &staging_));
    uint8_t *const staging = staging_.get();
    std::vector<Ticket> recvs(steps_.size(), kNotIssued);
    size_t posted = 0;
    auto gate_open = [&](const Step &s) {
      if (s.gate == kNoGate) return true;
      const Ticket t = sends_[s.gate];
      return t == kSkipped || (t != kNotIssued && ex_.done(t));
    };
    auto post = [&](size_t k) {
      const Step &s = steps_[k];
      if (s.peer < 0 || s.len == 0) {
        recvs[k] = kSkipped;
      } else {
        uint8_t *dst = staged(s) ? staging + (k % kWindow) * stage_bytes : s.dst;
        recvs[k] = ex_.recv(s.peer, s.tag, dst, s.len, /*any_length=*/true);
      }
    };
    for (size_t k = 0; k < steps_.size(); ++k) {
      while (posted < steps_.size() && posted < k + kWindow && gate_open(steps_[posted])) post(posted++);
      if (posted == k) {
        WCCL_RETURN_IF_ERROR(wait_send(steps_[k].gate));
        post(posted++);
      }
      const Step &s = steps_[k];
      uint8_t *at = staged(s) ? staging + (k % kWindow) * stage_bytes : s.dst;
      if (recvs[k] != kSkipped) {
        WCCL_RETURN_IF_ERROR(ex_.wait(recvs[k]));
        const size_t got = ex_.length(recvs[k]);
        if (got != s.len) WCCL_RETURN_IF_ERROR(unzstd_.decompress(at, got, es_, at, s.len));
        if (s.dst && at != s.dst) WCCL_RETURN_IF_ERROR(mem_.from_host(s.dst, at, s.len));
      }
      WCCL_RETURN_IF_ERROR(s.then(at));
    }
    return ex_.wait_all();
  }

 private:
  static constexpr size_t kNoBuffer = std::numeric_limits<size_t>::max();
  struct InFlight {
    Ticket ticket;
    size_t wire;
    size_t buffer;  // the frame buffer it reads, or kNoBuffer
    size_t copy;    // the page-locked copy it reads, or kNoBuffer
  };

  // Sends complete in order on each link but not across links: retire the finished ones at the
  // front, telling the codec (its link probe) and freeing their frame buffers.
  void reap() {
    while (!in_flight_.empty() && ex_.done(in_flight_.front().ticket)) {
      const InFlight &f = in_flight_.front();
      codec_.sent(f.wire, f.buffer == kNoBuffer);
      if (f.buffer != kNoBuffer) free_.push_back(f.buffer);
      if (f.copy != kNoBuffer) free_copies_.push_back(f.copy);
      in_flight_.pop_front();
    }
  }

  Exchange &ex_;
  Memory &mem_;
  std::vector<Ticket> sends_;
  std::vector<Step> steps_;
  Bytes staging_;  // kWindow receive slots
  const size_t es_;
  SendCodec codec_;
  std::deque<std::vector<uint8_t>> frames_;  // compressed sends' bytes (stable addresses)
  std::vector<size_t> free_;                 // frames_ not read by a send in flight
  std::deque<GrowingBytes> copies_;          // device bytes being sent (page-locked)
  std::vector<size_t> free_copies_;          // copies_ not read by a send in flight
  std::deque<InFlight> in_flight_;
  codec::Compressor unzstd_;
};

// Ring all-reduce: a reduce-scatter, then an all-gather, each n-1 steps around the ring, every
// block cut into segments of at most chunk_bytes that move independently (pipelining).
// Reduce-scatter step s: send block r-s-1, receive block r-s-2 and combine it with our own
// elements; after n-1 steps this peer holds the final block r. All-gather step s: send block r-s,
// receive the final block r-s-1 and forward it unchanged. Message tag: step * nseg + segment.
Status ring_allreduce(Exchange &ex, const Collective &c) {
  Memory &mem = memory_of(c);
  const int n = ex.size(), r = ex.rank();
  const size_t es = dtype_size(c.dtype);
  const auto *in = static_cast<const uint8_t *>(c.in);
  auto *out = static_cast<uint8_t *>(c.out);
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const size_t nseg = segments(split(c.count, n, 0).count, es, c.chunk_bytes);
  auto seg = [&](long block, size_t j) {
    const Span b = split(c.count, n, mod(block, n));
    const Span s = split(b.count, nseg, j);
    return Span{b.begin + s.begin, s.count};
  };
  auto tag = [&](int step, size_t j) { return static_cast<uint32_t>(step * nseg + j); };
  Schedule sched(ex, 2 * (n - 1) * nseg, c);
  for (size_t j = 0; j < nseg; ++j) {
    const Span s = seg(r - 1, j);
    sched.send_buffer(tag(0, j), next, tag(0, j), in + s.begin * es, s.count * es);
  }
  for (int step = 0; step < n - 1; ++step) {
    for (size_t j = 0; j < nseg; ++j) {
      const Span s = seg(r - step - 2, j);
      const int fwd = step + 1;  // reduce-scatter step n-1 is all-gather step 0
      sched.add({prev, tag(step, j), nullptr, s.count * es, kNoGate, [=, &sched, &c, &mem](const uint8_t *got) {
                   uint8_t *dst = out + s.begin * es;
                   WCCL_RETURN_IF_ERROR(mem.reduce_into(c.dtype, c.op, dst, in + s.begin * es, got, s.count));
                   if (fwd == n - 1 && c.op == codec::RedOp::kAvg) WCCL_RETURN_IF_ERROR(mem.finish_avg(c.dtype, dst, s.count, n));
                   sched.send_buffer(tag(fwd, j), next, tag(fwd, j), dst, s.count * es);
                   return Status();
                 }});
    }
  }
  for (int step = 0; step < n - 1; ++step) {
    for (size_t j = 0; j < nseg; ++j) {
      const Span s = seg(r - step - 1, j);
      uint8_t *dst = out + s.begin * es;
      // This block left through reduce-scatter step `step` (from `in` at step 0).
      const size_t gate = step == 0 ? kNoGate : tag(step, j);
      const int at = n - 1 + step;
      sched.add_to_buffer({prev, tag(at, j), dst, s.count * es, gate, [=, &sched](const uint8_t *) {
                   if (step < n - 2) sched.send_buffer(tag(at + 1, j), next, tag(at + 1, j), dst, s.count * es);
                   return Status();
                 }});
    }
  }
  return sched.run();
}

// Tree all-reduce over two binary trees (tree_node): the first half of the buffer is reduced up
// tree 0 and broadcast down it, the second half on tree 1, so every peer sends and receives
// about the whole buffer once each way, in 2 log2(n) latencies instead of the ring's 2(n-1). A
// node combines its own elements, then child 0's, then child 1's; the root's result goes down
// unchanged. Tags: (2t) * nseg + j going up tree t, (2t + 1) * nseg + j coming down.
Status tree_allreduce(Exchange &ex, const Collective &c) {
  Memory &mem = memory_of(c);
  const int n = ex.size(), r = ex.rank();
  const size_t es = dtype_size(c.dtype);
  const auto *in = static_cast<const uint8_t *>(c.in);
  auto *out = static_cast<uint8_t *>(c.out);
  const size_t nseg = segments(split(c.count, 2, 0).count, es, c.chunk_bytes);
  auto seg = [&](int t, size_t j) {
    const Span h = split(c.count, 2, t);
    const Span s = split(h.count, nseg, j);
    return Span{h.begin + s.begin, s.count};
  };
  auto up = [&](int t, size_t j) { return static_cast<uint32_t>((2 * t) * nseg + j); };
  auto down = [&](int t, size_t j) { return static_cast<uint32_t>((2 * t + 1) * nseg + j); };
  const TreeNode node[2] = {tree_node(0, r, n), tree_node(1, r, n)};
  auto leaf = [&](int t) { return node[t].child[0] < 0 && node[t].child[1] < 0; };
  Schedule sched(ex, 4 * nseg, c);
  for (size_t j = 0; j < nseg; ++j) {
    for (int t = 0; t < 2; ++t) {
      const Span s = seg(t, j);
      if (leaf(t)) sched.send_buffer(up(t, j), node[t].parent, up(t, j), in + s.begin * es, s.count * es);
    }
  }
  for (size_t j = 0; j < nseg; ++j) {
    for (int t = 0; t < 2; ++t) {
      if (leaf(t)) continue;
      const Span s = seg(t, j);
      uint8_t *dst = out + s.begin * es;
      const int last = node[t].child[1] >= 0 ? 1 : 0;
      for (int ci = 0; ci <= last; ++ci) {
        const TreeNode nd = node[t];
        sched.add({nd.child[ci], up(t, j), nullptr, s.count * es, kNoGate, [=, &sched, &c, &mem](const uint8_t *got) {
                     if (ci == 0) {
                       WCCL_RETURN_IF_ERROR(mem.reduce_into(c.dtype, c.op, dst, in + s.begin * es, got, s.count));
                     } else {
                       WCCL_RETURN_IF_ERROR(mem.reduce_into(c.dtype, c.op, dst, dst, got, s.count));
                     }
                     if (ci < last) return Status();
                     if (nd.parent >= 0) {
                       sched.send_buffer(up(t, j), nd.parent, up(t, j), dst, s.count * es);
                     } else if (c.op == codec::RedOp::kAvg) {
                       WCCL_RETURN_IF_ERROR(mem.finish_avg(c.dtype, dst, s.count, n));
                     }
                     return Status();
                   }});
      }
    }
  }
  for (size_t j = 0; j < nseg; ++j) {
    for (int t = 0; t < 2; ++t) {
      const Span s = seg(t, j);
      uint8_t *dst = out + s.begin * es;
      const TreeNode nd = node[t];
      // An interior node's partial went up from dst: the final value may land there only after.
      const size_t gate = leaf(t) || nd.parent < 0 ? kNoGate : up(t, j);
      sched.add_to_buffer({nd.parent, down(t, j), dst, nd.parent >= 0 ? s.count * es : 0, gate, [=, &sched](const uint8_t *) {
                   for (int child : nd.child) {
                     if (child >= 0) sched.send_buffer(kNoGate, child, down(t, j), dst, s.count * es);
                   }
                   return Status();
                 }});
    }
  }
  return sched.run();
}

// Broadcast down the ring from the root, pipelined in segments: the peer at distance d from the
// root receives each segment from its predecessor and forwards it unless it is the last.
Status chain_broadcast(Exchange &ex, const Collective &c) {
  const int n = ex.size(), r = ex.rank();
  const size_t es = dtype_size(c.dtype);
  auto *out = static_cast<uint8_t *>(c.out);
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const int distance = mod(r - c.root, n);
  const size_t nseg = segments(c.count, es, c.chunk_bytes);
  Schedule sched(ex, 0, c);
  if (distance == 0) {
    for (size_t j = 0; j < nseg; ++j) {
      const Span s = split(c.count, nseg, j);
      sched.send_buffer(kNoGate, next, static_cast<uint32_t>(j), static_cast<const uint8_t *>(c.in) + s.begin * es, s.count * es);
    }
    WCCL_RETURN_IF_ERROR(memory_of(c).copy(out, c.in, c.count * es));
    return sched.run();
  }
  for (size_t j = 0; j < nseg; ++j) {
    const Span s = split(c.count, nseg, j);
    uint8_t *dst = out + s.begin * es;
    sched.add_to_buffer({prev, static_cast<uint32_t>(j), dst, s.count * es, kNoGate, [=, &sched](const uint8_t *) {
                 if (distance < n - 1) sched.send_buffer(kNoGate, next, static_cast<uint32_t>(j), dst, s.count * es);
                 return Status();
               }});
  }
  return sched.run();
}

// Ring all-gather: step s sends block r-s and receives block r-s-1, which the next step forwards.
Status ring_allgather(Exchange &ex, const Collective &c) {
  const int n = ex.size(), r = ex.rank();
  const size_t es = dtype_size(c.dtype), block = c.count * es;
  auto *out = static_cast<uint8_t *>(c.out);
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const size_t nseg = segments(c.count, es, c.chunk_bytes);
  auto tag = [&](int step, size_t j) { return static_cast<uint32_t>(step * nseg + j); };
  Schedule sched(ex, 0, c);
  for (size_t j = 0; j < nseg; ++j) {
    const Span s = split(c.count, nseg, j);
    sched.send_buffer(kNoGate, next, tag(0, j), static_cast<const uint8_t *>(c.in) + s.begin * es, s.count * es);
  }
  WCCL_RETURN_IF_ERROR(memory_of(c).copy(out + static_cast<size_t>(r) * block, c.in, block));
  for (int step = 0; step < n - 1; ++step) {
    for (size_t j = 0; j < nseg; ++j) {
      const Span s = split(c.count, nseg, j);
      uint8_t *dst = out + static_cast<size_t>(mod(r - step - 1, n)) * block + s.begin * es;
      sched.add_to_buffer({prev, tag(step, j), dst, s.count * es, kNoGate, [=, &sched](const uint8_t *) {
                   if (step < n - 2) sched.send_buffer(kNoGate, next, tag(step + 1, j), dst, s.count * es);
                   return Status();
                 }});
    }
  }
  return sched.run();
}

// Ring reduce-scatter: the reduce-scatter half of the ring all-reduce over n blocks of `count`
// elements. Partials alternate between two block buffers; a buffer is overwritten only after
// the send that read it two steps earlier completed.
Status ring_reduce_scatter(Exchange &ex, const Collective &c) {
  Memory &mem = memory_of(c);
  const int n = ex.size(), r = ex.rank();
  const size_t es = dtype_size(c.dtype), block = c.count * es;
  const auto *in = static_cast<const uint8_t *>(c.in);
  auto *out = static_cast<uint8_t *>(c.out);
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const size_t nseg = segments(c.count, es, c.chunk_bytes);
  auto tag = [&](int step, size_t j) { return static_cast<uint32_t>(step * nseg + j); };
  Bytes partial[2];
  for (auto &p : partial) WCCL_RETURN_IF_ERROR(mem.scratch(n > 2 ? block : 0, &p));
  Schedule sched(ex, (n - 1) * nseg, c);
  for (size_t j = 0; j < nseg; ++j) {
    const Span s = split(c.count, nseg, j);
    sched.send_buffer(tag(0, j), next, tag(0, j), in + static_cast<size_t>(mod(r - 1, n)) * block + s.begin * es, s.count * es);
  }
  for (int step = 0; step < n - 1; ++step) {
    for (size_t j = 0; j < nseg; ++j) {
      const Span s = split(c.count, nseg, j);
      const uint8_t *mine = in + static_cast<size_t>(mod(r - step - 2, n)) * block + s.begin * es;
      const bool final = step == n - 2;
      uint8_t *dst = final ? out + s.begin * es : partial[step % 2].get() + s.begin * es;
      sched.add({prev, tag(step, j), nullptr, s.count * es, kNoGate, [=, &sched, &c, &mem](const uint8_t *got) {
                   if (!final && step >= 2) WCCL_RETURN_IF_ERROR(sched.wait_send(tag(step - 1, j)));
                   WCCL_RETURN_IF_ERROR(mem.reduce_into(c.dtype, c.op, dst, mine, got, s.count));
                   if (final) {
                     if (c.op == codec::RedOp::kAvg) WCCL_RETURN_IF_ERROR(mem.finish_avg(c.dtype, dst, s.count, n));
                   } else {
                     sched.send_buffer(tag(step + 1, j), next, tag(step + 1, j), dst, s.count * es);
                   }
                   return Status();
                 }});
    }
  }
  return sched.run();
}

// --- Wire codecs ----------------------------------------------------------------------------------
// The same schedules with F32 elements encoded on the wire (Collective::wire). Encoded messages
// live in WireRegions, one region per (block or tree, segment), written once per operation, so
// no receive ever has to wait for a send to finish reading. Segments are cut by encoded bytes:
// an INT8 message holds about four times the elements of a native one.

size_t wire_elem_bytes(codec::Wire w) { return w == codec::Wire::kInt8 ? 1 : w == codec::Wire::kNative ? 4 : 2; }

class WireRegions {
 public:
  template <typename CountOf>
  WireRegions(codec::Wire w, size_t regions, CountOf count_of) : offset_(regions + 1, 0) {
    for (size_t i = 0; i < regions; ++i) offset_[i + 1] = offset_[i] + codec::wire_size(w, count_of(i));
  }
  // Host memory for the regions (page-locked where mem is a device's); before at().
  Status allocate(Memory &mem) { return mem.host_bytes(offset_.back(), &bytes_); }
  uint8_t *at(size_t i) { return bytes_.get() + offset_[i]; }
  size_t len(size_t i) const { return offset_[i + 1] - offset_[i]; }

 private:
  std::vector<size_t> offset_;
  Bytes bytes_;
};

// The final value of a span: encode it once, keep what decodes from those bytes (so this peer
// holds exactly what every receiver will), and leave the bytes in `wire` to send.
Status encode_final(Memory &mem, codec::Wire w, float *value, size_t count, uint8_t *wire, size_t len, size_t first) {
  WCCL_RETURN_IF_ERROR(mem.encode(w, value, count, wire, first));
  return mem.decode(w, wire, len, count, value);
}

// Ring all-reduce (the steps of ring_allreduce). Reduce-scatter hops decode the partial they
// receive into F32, add this peer's elements and encode again; the owner of a finished block
// encodes it once with encode_final, and the all-gather forwards those bytes verbatim.
Status ring_allreduce_coded(Exchange &ex, const Collective &c) {
  Memory &mem = memory_of(c);
  const int n = ex.size(), r = ex.rank();
  const codec::Wire w = c.wire;
  const auto *in = static_cast<const float *>(c.in);
  auto *out = static_cast<float *>(c.out);
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const size_t nseg = segments(split(c.count, n, 0).count, wire_elem_bytes(w), c.chunk_bytes);
  auto seg = [&](long block, size_t j) {
    const Span b = split(c.count, n, mod(block, n));
    const Span s = split(b.count, nseg, j);
    return Span{b.begin + s.begin, s.count};
  };
  auto region = [&](long block, size_t j) { return static_cast<size_t>(mod(block, n)) * nseg + j; };
  auto count_of = [&](size_t i) { return seg(static_cast<long>(i / nseg), i % nseg).count; };
  WireRegions partials(w, static_cast<size_t>(n) * nseg, count_of), finals(w, static_cast<size_t>(n) * nseg, count_of);
  WCCL_RETURN_IF_ERROR(partials.allocate(mem));
  WCCL_RETURN_IF_ERROR(finals.allocate(mem));
  auto tag = [&](int step, size_t j) { return static_cast<uint32_t>(step * nseg + j); };
  Schedule sched(ex, 0, c);
  for (size_t j = 0; j < nseg; ++j) {
    const Span s = seg(r - 1, j);
    const size_t k = region(r - 1, j);
    WCCL_RETURN_IF_ERROR(mem.encode(w, in + s.begin, s.count, partials.at(k), s.begin));
    sched.send(kNoGate, next, tag(0, j), partials.at(k), partials.len(k));
  }
  for (int step = 0; step < n - 1; ++step) {
    for (size_t j = 0; j < nseg; ++j) {
      const Span s = seg(r - step - 2, j);
      const size_t k = region(r - step - 2, j);
      const int fwd = step + 1;
      sched.add({prev, tag(step, j), nullptr, partials.len(k), kNoGate,
                 [=, &sched, &mem, &c, &partials, &finals](const uint8_t *got) {
                   float *dst = out + s.begin;
                   WCCL_RETURN_IF_ERROR(mem.decode_reduce(w, c.op, got, partials.len(k), s.count, dst, in + s.begin));
                   if (fwd < n - 1) {
                     WCCL_RETURN_IF_ERROR(mem.encode(w, dst, s.count, partials.at(k), s.begin));
                     sched.send(kNoGate, next, tag(fwd, j), partials.at(k), partials.len(k));
                     return Status();
                   }
                   if (c.op == codec::RedOp::kAvg) WCCL_RETURN_IF_ERROR(mem.finish_avg(codec::Dtype::kF32, dst, s.count, n));
                   WCCL_RETURN_IF_ERROR(encode_final(mem, w, dst, s.count, finals.at(k), finals.len(k), s.begin));
                   sched.send(kNoGate, next, tag(fwd, j), finals.at(k), finals.len(k));
                   return Status();
                 }});
    }
  }
  for (int step = 0; step < n - 1; ++step) {
    for (size_t j = 0; j < nseg; ++j) {
      const Span s = seg(r - step - 1, j);
      const size_t k = region(r - step - 1, j);
      const int at = n - 1 + step;
      sched.add({prev, tag(at, j), finals.at(k), finals.len(k), kNoGate, [=, &sched, &mem, &finals](const uint8_t *got) {
                   WCCL_RETURN_IF_ERROR(mem.decode(w, got, finals.len(k), s.count, out + s.begin));
                   if (step < n - 2) sched.send(kNoGate, next, tag(at + 1, j), got, finals.len(k));
                   return Status();
                 }});
    }
  }
  return sched.run();
}

// Tree all-reduce (the steps of tree_allreduce): partials going up are decoded and combined at
// each interior node and encoded again; the root encodes the result once (encode_final), and
// the way down forwards its bytes verbatim.
Status tree_allreduce_coded(Exchange &ex, const Collective &c) {
  Memory &mem = memory_of(c);
  const int n = ex.size(), r = ex.rank();
  const codec::Wire w = c.wire;
  const auto *in = static_cast<const float *>(c.in);
  auto *out = static_cast<float *>(c.out);
  const size_t nseg = segments(split(c.count, 2, 0).count, wire_elem_bytes(w), c.chunk_bytes);
  auto seg = [&](int t, size_t j) {
    const Span h = split(c.count, 2, t);
    const Span s = split(h.count, nseg, j);
    return Span{h.begin + s.begin, s.count};
  };
  auto region = [&](int t, size_t j) { return static_cast<size_t>(t) * nseg + j; };
  auto count_of = [&](size_t i) { return seg(static_cast<int>(i / nseg), i % nseg).count; };
  WireRegions ups(w, 2 * nseg, count_of), downs(w, 2 * nseg, count_of);
  WCCL_RETURN_IF_ERROR(ups.allocate(mem));
  WCCL_RETURN_IF_ERROR(downs.allocate(mem));
  auto up = [&](int t, size_t j) { return static_cast<uint32_t>((2 * t) * nseg + j); };
  auto down = [&](int t, size_t j) { return static_cast<uint32_t>((2 * t + 1) * nseg + j); };
  const TreeNode node[2] = {tree_node(0, r, n), tree_node(1, r, n)};
  auto leaf = [&](int t) { return node[t].child[0] < 0 && node[t].child[1] < 0; };
  Schedule sched(ex, 0, c);
  for (size_t j = 0; j < nseg; ++j) {
    for (int t = 0; t < 2; ++t) {
      if (!leaf(t)) continue;
      const Span s = seg(t, j);
      const size_t k = region(t, j);
      WCCL_RETURN_IF_ERROR(mem.encode(w, in + s.begin, s.count, ups.at(k), s.begin));
      sched.send(kNoGate, node[t].parent, up(t, j), ups.at(k), ups.len(k));
    }
  }
  for (size_t j = 0; j < nseg; ++j) {
    for (int t = 0; t < 2; ++t) {
      if (leaf(t)) continue;
      const Span s = seg(t, j);
      const size_t k = region(t, j);
      float *dst = out + s.begin;
      const int last = node[t].child[1] >= 0 ? 1 : 0;
      for (int ci = 0; ci <= last; ++ci) {
        const TreeNode nd = node[t];
        sched.add({nd.child[ci], up(t, j), nullptr, ups.len(k), kNoGate, [=, &sched, &mem, &c, &ups, &downs](const uint8_t *got) {
                     WCCL_RETURN_IF_ERROR(mem.decode_reduce(w, c.op, got, ups.len(k), s.count, dst, ci == 0 ? in + s.begin : dst));
                     if (ci < last) return Status();
                     if (nd.parent >= 0) {
                       WCCL_RETURN_IF_ERROR(mem.encode(w, dst, s.count, ups.at(k), s.begin));
                       sched.send(kNoGate, nd.parent, up(t, j), ups.at(k), ups.len(k));
                       return Status();
                     }
                     if (c.op == codec::RedOp::kAvg) WCCL_RETURN_IF_ERROR(mem.finish_avg(codec::Dtype::kF32, dst, s.count, n));
                     return encode_final(mem, w, dst, s.count, downs.at(k), downs.len(k), s.begin);
                   }});
      }
    }
  }
  for (size_t j = 0; j < nseg; ++j) {
    for (int t = 0; t < 2; ++t) {
      const Span s = seg(t, j);
      const size_t k = region(t, j);
      const TreeNode nd = node[t];
      sched.add({nd.parent, down(t, j), downs.at(k), nd.parent >= 0 ? downs.len(k) : 0, kNoGate,
                 [=, &sched, &mem, &downs](const uint8_t *) {
                   if (nd.parent >= 0) WCCL_RETURN_IF_ERROR(mem.decode(w, downs.at(k), downs.len(k), s.count, out + s.begin));
                   for (int child : nd.child) {
                     if (child >= 0) sched.send(kNoGate, child, down(t, j), downs.at(k), downs.len(k));
                   }
                   return Status();
                 }});
    }
  }
  return sched.run();
}

// Broadcast down the chain: the root encodes once (and keeps what it decodes), the others decode
// and forward the bytes verbatim.
Status chain_broadcast_coded(Exchange &ex, const Collective &c) {
  Memory &mem = memory_of(c);
  const int n = ex.size(), r = ex.rank();
  const codec::Wire w = c.wire;
  auto *out = static_cast<float *>(c.out);
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const int distance = mod(r - c.root, n);
  const size_t nseg = segments(c.count, wire_elem_bytes(w), c.chunk_bytes);
  WireRegions wire(w, nseg, [&](size_t j) { return split(c.count, nseg, j).count; });
  WCCL_RETURN_IF_ERROR(wire.allocate(mem));
  Schedule sched(ex, 0, c);
  if (distance == 0) {
    for (size_t j = 0; j < nseg; ++j) {
      const Span s = split(c.count, nseg, j);
      WCCL_RETURN_IF_ERROR(mem.encode(w, static_cast<const float *>(c.in) + s.begin, s.count, wire.at(j), s.begin));
      sched.send(kNoGate, next, static_cast<uint32_t>(j), wire.at(j), wire.len(j));
      WCCL_RETURN_IF_ERROR(mem.decode(w, wire.at(j), wire.len(j), s.count, out + s.begin));
    }
    return sched.run();
  }
  for (size_t j = 0; j < nseg; ++j) {
    const Span s = split(c.count, nseg, j);
    sched.add({prev, static_cast<uint32_t>(j), wire.at(j), wire.len(j), kNoGate, [=, &sched, &mem, &wire](const uint8_t *got) {
                 WCCL_RETURN_IF_ERROR(mem.decode(w, got, wire.len(j), s.count, out + s.begin));
                 if (distance < n - 1) sched.send(kNoGate, next, static_cast<uint32_t>(j), got, wire.len(j));
                 return Status();
               }});
  }
  return sched.run();
}

// Ring all-gather: each peer encodes its contribution once (and keeps what it decodes); the
// blocks travel the ring verbatim.
Status ring_allgather_coded(Exchange &ex, const Collective &c) {
  Memory &mem = memory_of(c);
  const int n = ex.size(), r = ex.rank();
  const codec::Wire w = c.wire;
  auto *out = static_cast<float *>(c.out);
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const size_t nseg = segments(c.count, wire_elem_bytes(w), c.chunk_bytes);
  auto region = [&](long block, size_t j) { return static_cast<size_t>(mod(block, n)) * nseg + j; };
  WireRegions wire(w, static_cast<size_t>(n) * nseg, [&](size_t i) { return split(c.count, nseg, i % nseg).count; });
  WCCL_RETURN_IF_ERROR(wire.allocate(mem));
  auto tag = [&](int step, size_t j) { return static_cast<uint32_t>(step * nseg + j); };
  Schedule sched(ex, 0, c);
  for (size_t j = 0; j < nseg; ++j) {
    const Span s = split(c.count, nseg, j);
    const size_t k = region(r, j);
    float *mine = out + static_cast<size_t>(r) * c.count + s.begin;
    WCCL_RETURN_IF_ERROR(mem.encode(w, static_cast<const float *>(c.in) + s.begin, s.count, wire.at(k), s.begin));
    sched.send(kNoGate, next, tag(0, j), wire.at(k), wire.len(k));
    WCCL_RETURN_IF_ERROR(mem.decode(w, wire.at(k), wire.len(k), s.count, mine));
  }
  for (int step = 0; step < n - 1; ++step) {
    for (size_t j = 0; j < nseg; ++j) {
      const Span s = split(c.count, nseg, j);
      const size_t k = region(r - step - 1, j);
      float *dst = out + static_cast<size_t>(mod(r - step - 1, n)) * c.count + s.begin;
      sched.add({prev, tag(step, j), wire.at(k), wire.len(k), kNoGate, [=, &sched, &mem, &wire](const uint8_t *got) {
                   WCCL_RETURN_IF_ERROR(mem.decode(w, got, wire.len(k), s.count, dst));
                   if (step < n - 2) sched.send(kNoGate, next, tag(step + 1, j), got, wire.len(k));
                   return Status();
                 }});
    }
  }
  return sched.run();
}

// Ring reduce-scatter: each hop decodes, combines in F32 and encodes the partial again; the last
// hop keeps its block in F32 (nobody else holds that block, so nothing needs to match).
Status ring_reduce_scatter_coded(Exchange &ex, const Collective &c) {
  Memory &mem = memory_of(c);
  const int n = ex.size(), r = ex.rank();
  const codec::Wire w = c.wire;
  const auto *in = static_cast<const float *>(c.in);
  auto *out = static_cast<float *>(c.out);
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const size_t nseg = segments(c.count, wire_elem_bytes(w), c.chunk_bytes);
  auto region = [&](long block, size_t j) { return static_cast<size_t>(mod(block, n)) * nseg + j; };
  WireRegions wire(w, static_cast<size_t>(n) * nseg, [&](size_t i) { return split(c.count, nseg, i % nseg).count; });
  WCCL_RETURN_IF_ERROR(wire.allocate(mem));
  Bytes partial_bytes;  // one segment, encoded before reuse
  WCCL_RETURN_IF_ERROR(mem.scratch(split(c.count, nseg, 0).count * sizeof(float), &partial_bytes));
  auto *const partial = reinterpret_cast<float *>(partial_bytes.get());
  auto tag = [&](int step, size_t j) { return static_cast<uint32_t>(step * nseg + j); };
  Schedule sched(ex, 0, c);
  for (size_t j = 0; j < nseg; ++j) {
    const Span s = split(c.count, nseg, j);
    const size_t k = region(r - 1, j);
    const size_t first = static_cast<size_t>(mod(r - 1, n)) * c.count + s.begin;
    WCCL_RETURN_IF_ERROR(mem.encode(w, in + first, s.count, wire.at(k), first));
    sched.send(kNoGate, next, tag(0, j), wire.at(k), wire.len(k));
  }
  for (int step = 0; step < n - 1; ++step) {
    for (size_t j = 0; j < nseg; ++j) {
      const Span s = split(c.count, nseg, j);
      const size_t first = static_cast<size_t>(mod(r - step - 2, n)) * c.count + s.begin;
      const size_t k = region(r - step - 2, j);
      const bool final = step == n - 2;
      sched.add({prev, tag(step, j), nullptr, wire.len(k), kNoGate, [=, &sched, &c, &mem, &wire](const uint8_t *got) {
                   float *dst = final ? out + s.begin : partial;
                   WCCL_RETURN_IF_ERROR(mem.decode_reduce(w, c.op, got, wire.len(k), s.count, dst, in + first));
                   if (final) {
                     if (c.op == codec::RedOp::kAvg) WCCL_RETURN_IF_ERROR(mem.finish_avg(codec::Dtype::kF32, dst, s.count, n));
                     return Status();
                   }
                   WCCL_RETURN_IF_ERROR(mem.encode(w, dst, s.count, wire.at(k), first));
                   sched.send(kNoGate, next, tag(step + 1, j), wire.at(k), wire.len(k));
                   return Status();
                 }});
    }
  }
  return sched.run();
}

Status dispatch(Exchange &ex, const Collective &c) {
  const int n = ex.size();
  const size_t out_bytes = out_count(c, n) * dtype_size(c.dtype);
  if (c.kind == Kind::kBarrier) return Status();  // the commit step is the barrier
  if (c.kind == Kind::kStateSync) return run_sync(ex, *c.sync, static_cast<uint8_t *>(c.out));
  if (n == 1) {
    return memory_of(c).copy(c.out, c.in, out_bytes);
  }
  if (c.wire != codec::Wire::kNative) {
    switch (c.kind) {
      case Kind::kAllreduce:
        return c.algo == Algo::kTree ? tree_allreduce_coded(ex, c) : ring_allreduce_coded(ex, c);
      case Kind::kBroadcast: return chain_broadcast_coded(ex, c);
      case Kind::kAllgather: return ring_allgather_coded(ex, c);
      case Kind::kReduceScatter: return ring_reduce_scatter_coded(ex, c);
      case Kind::kBarrier:
      case Kind::kStateSync: break;
    }
    return Status();
  }
  switch (c.kind) {
    case Kind::kAllreduce:
      return c.algo == Algo::kTree ? tree_allreduce(ex, c) : ring_allreduce(ex, c);
    case Kind::kBroadcast: return chain_broadcast(ex, c);
    case Kind::kAllgather: return ring_allgather(ex, c);
    case Kind::kReduceScatter: return ring_reduce_scatter(ex, c);
    case Kind::kBarrier:
    case Kind::kStateSync: break;
  }
  return Status();
}

}  // namespace

const char *kind_name(Kind k) {
  switch (k) {
    case Kind::kAllreduce: return "allreduce";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kAllgather: return "allgather";
    case Kind::kReduceScatter: return "reduce_scatter";
    case Kind::kBarrier: return "barrier";
    case Kind::kStateSync: return "state_sync";
  }
  return "?";
}

const char *algo_name(Algo a) {
  switch (a) {
    case Algo::kAuto: return "auto";
    case Algo::kRing: return "ring";
    case Algo::kTree: return "tree";
  }
  return "?";
}

size_t in_count(const Collective &c, int n) {
  switch (c.kind) {
    case Kind::kReduceScatter: return c.count * static_cast<size_t>(n);
    case Kind::kBarrier:
    case Kind::kStateSync: return 0;
    default: return c.count;
  }
}

size_t out_count(const Collective &c, int n) {
  switch (c.kind) {
    case Kind::kAllgather: return c.count * static_cast<size_t>(n);
    case Kind::kBarrier: return 0;
    default: return c.count;
  }
}

Status check(const Collective &c, int n) {
  if (c.kind == Kind::kStateSync) {
    return c.sync != nullptr && c.dtype == codec::Dtype::kU8 && c.count == c.sync->stage_bytes
               ? Status()
               : WCCL_ERROR(WCCL_ERR_INTERNAL, "state_sync: the collective does not describe its job");
  }
  if (c.wire != codec::Wire::kNative && c.kind != Kind::kBarrier && c.dtype != codec::Dtype::kF32) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "the %s wire carries f32 elements, not %s", codec::wire_name(c.wire),
                      codec::dtype_name(c.dtype));
  }
  const size_t es = c.wire == codec::Wire::kNative ? dtype_size(c.dtype) : wire_elem_bytes(c.wire);
  if (c.chunk_bytes < es) return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "chunk_bytes %zu is below one element", c.chunk_bytes);
  const size_t per_step = c.kind == Kind::kAllreduce ? split(c.count, c.algo == Algo::kTree ? 2 : n, 0).count : c.count;
  const size_t messages = segments(per_step, es, c.chunk_bytes) * 2 * static_cast<size_t>(n);
  if (messages > std::numeric_limits<uint32_t>::max()) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "%zu elements in chunks of %zu bytes need more than 2^32 messages; raise chunk_bytes",
                      c.count, c.chunk_bytes);
  }
  return Status();
}

Status run(Exchange &ex, const Collective &c) {
  Status st = dispatch(ex, c);
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
  return node;
}

}  // namespace wccl::algo
