// What travels between peers and what a hop does with it. The topologies (lib/algo/collectives.cc:
// ring, tree, chain) are written once over this interface, as NCCL's runRing is over Primitives;
// a Payload decides the bytes:
//
//   native    elements travel as they are: a partial is sent from where it was combined, a final
//             value lands in place and is forwarded from there.
//   coded     F32 elements travel encoded (opts.wire: FP16, BF16, INT8). Every hop decodes,
//             combines in F32 and encodes again; a final value is encoded once, by the peer that
//             completes it, which keeps what decodes from its own bytes, and the bytes are
//             forwarded verbatim, so all peers end bit-identical.
//
// Elements are addressed by pointers into the operation's buffers (in, out, or a scratch
// accumulator) with `first`, the index of the first element in its buffer (INT8 blocks start
// there). A coded payload keeps each message's bytes in a region of host memory named by the
// topology, one per (block, segment), written once per operation: its receives never wait for a
// send. Every write into the caller's output goes through Pipeline::will_write first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "algo/pipeline.h"
#include "codec/reduce.h"
#include "codec/wire.h"

namespace wccl::algo {

class Payload {
 public:
  virtual ~Payload() = default;

  // What a topology's regions carry: partials (messages combined on the way), finals (values sent
  // once complete), or both.
  enum class Carry { kPartials, kFinals, kBoth };
  // The topology's regions, before any other call: `regions` of them, region i holding
  // count_of(i) elements, with room for what they carry.
  virtual Status plan(size_t regions, const std::function<size_t(size_t)> &count_of,
                      Carry carry) = 0;
  // Bytes of a message of `count` elements.
  virtual size_t wire_len(size_t count) const = 0;

  // Sends `count` elements at src (this peer's input, or a partial).
  virtual Status send_partial(size_t slot, int peer, uint32_t tag, const void *src, size_t count,
                              size_t first, size_t region) = 0;
  // acc = mine (op) the partial `got`; acc may equal mine.
  virtual Status combine(void *acc, const void *mine, const uint8_t *got, size_t count) = 0;
  // value = the final value of src's elements, as every receiver will hold it; src may equal value.
  virtual Status make_final(void *value, const void *src, size_t count, size_t first,
                            size_t region) = 0;
  // Sends the final value made (make_final) or received (land_final) here.
  virtual Status send_final(size_t slot, int peer, uint32_t tag, const void *value, size_t count,
                            size_t region) = 0;
  // A pipeline step: a final value from `peer` lands in `value` (posted once the send in `gate`
  // completed, where it lands in the buffers), then `then` runs.
  virtual void land_final(int peer, uint32_t tag, void *value, size_t count, size_t region,
                          size_t gate, std::function<Status()> then) = 0;

  // Kept contributions, for the all-gather all-reduce: each member's elements travel as a final
  // value does (encoded once on a codec), and every member keeps them, as they came, in regions
  // of their own (plan_kept, instead of plan), until it combines them all in one order.
  virtual Status plan_kept(size_t regions, const std::function<size_t(size_t)> &count_of) = 0;
  // Region `region` = count elements at src (first: src[0]'s index in its buffer), as they travel.
  virtual Status keep(const void *src, size_t count, size_t first, size_t region) = 0;
  virtual Status send_kept(size_t slot, int peer, uint32_t tag, size_t region) = 0;
  // A pipeline step: region `region` lands from `peer` as it was sent, then `then` runs.
  virtual void land_kept(int peer, uint32_t tag, size_t region, std::function<Status()> then) = 0;
  // acc = acc (op) the elements kept in `region`; with `first`, acc = those elements.
  virtual Status combine_kept(void *acc, size_t count, size_t region, bool first) = 0;
};

// The payload for elements of dtype t combined with op, travelling as w (kNative, or an F32 codec),
// sending and receiving through `pipe` (which makes its own: Pipeline::payload()).
std::unique_ptr<Payload> make_payload(Pipeline &pipe, codec::Wire w, codec::Dtype t,
                                      codec::RedOp op);

}  // namespace wccl::algo
