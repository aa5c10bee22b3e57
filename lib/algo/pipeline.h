// The machinery under every collective's schedule (docs/algorithms.md): a topology (ring, tree,
// chain) lists its receives in the order its peers send them, each with what to do once the bytes
// are in; the Pipeline keeps kWindow receives posted ahead, so the network fills the next chunk
// while the worker combines this one. Three jobs, three pieces:
//
//   Pipeline   the receive window, and the gates: a receive into memory that an earlier send
//              still reads names that send's slot and is posted only once the send completed.
//   Outbox     the sends: zstd frames (opts.compress) and, for device buffers, page-locked copies
//              of the bytes, each held until its send completes.
//   Undo       (algo/undo.h) the caller's output buffer's old bytes, saved before each range's
//              first write.
//
// Compression (algo/send_codec.h): every receive is posted with a capacity of its length, and a
// shorter message (a zstd frame) is expanded in place before its step runs, whatever this peer's
// own setting.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "algo/collectives.h"
#include "algo/exchange.h"
#include "algo/memory.h"
#include "algo/send_codec.h"
#include "algo/undo.h"
#include "codec/compress.h"

namespace wccl::algo {

class Payload;  // algo/payload.h

// A send slot nobody gates on.
inline constexpr size_t kNoSlot = std::numeric_limits<size_t>::max();

// The sends of one operation.
class Outbox {
 public:
  // es: the element size zstd's byte shuffle groups by.
  Outbox(Exchange &ex, Memory &mem, size_t slots, size_t es, Compress compress);
  // Sends len bytes (zero: nothing), remembering the send in `slot` (kNoSlot: nobody waits for
  // it). `data` is host memory, or with from_buffer in the operation's buffers: on a device those
  // bytes are copied to page-locked memory first (which may fail).
  Status send(size_t slot, int peer, uint32_t tag, const void *data, size_t len, bool from_buffer);
  // Waits for the send in `slot` (OK if it sent nothing).
  Status wait(size_t slot);
  // The send in `slot` completed, or sent nothing; false if not issued yet.
  bool done(size_t slot) const;

 private:
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();
  struct InFlight {
    Exchange::Ticket ticket;
    size_t wire;
    size_t frame;  // the zstd frame it reads, or kNone
    size_t copy;   // the page-locked copy it reads, or kNone
  };
  void reap();

  Exchange &ex_;
  Memory &mem_;
  std::vector<Exchange::Ticket> slots_;
  const size_t es_;
  SendCodec codec_;
  std::deque<std::vector<uint8_t>> frames_;  // stable addresses
  std::vector<size_t> free_frames_;
  std::deque<GrowingBytes> copies_;
  std::vector<size_t> free_copies_;
  std::deque<InFlight> in_flight_;
};

class Pipeline {
 public:
  using Action = std::function<Status(const uint8_t *bytes)>;
  static constexpr size_t kWindow = 4;  // receives posted ahead of the one being waited for

  // For collective c (its memory, wire, dtype, operator, compression): `slots` send slots, and
  // messages of elements of es bytes on the wire.
  Pipeline(Exchange &ex, const Collective &c, Undo *undo, size_t slots, size_t es);
  // Nothing may still write into the staging slots or the payload's regions (or read the buffers)
  // once they are freed: on failure that means aborting the channel and draining it here, before
  // any member is destroyed.
  ~Pipeline();
  Pipeline(const Pipeline &) = delete;
  Pipeline &operator=(const Pipeline &) = delete;

  Memory &memory() const { return mem_; }
  Outbox &out() { return outbox_; }
  // What travels (c.wire), sending and receiving through this pipeline.
  Payload &payload() { return *payload_; }
  // [at, at + len) of the operation's buffers is about to be written: the Undo (if any) saves it.
  Status will_write(const void *at, size_t len) {
    return undo_ != nullptr ? undo_->will_write(at, len) : Status();
  }

  // Steps, run in the order added.
  // A message of len bytes from `peer` lands in a staging slot of host memory; `then` gets it.
  void receive(int peer, uint32_t tag, size_t len, Action then);
  // A message lands at dst: the operation's buffers (in_buffer; on a device through a staging
  // slot; the Undo saves dst first) or host memory. It is posted only once the send in `gate`
  // completed. `then` gets the bytes where they landed (the staging slot or dst).
  void land(int peer, uint32_t tag, uint8_t *dst, size_t len, bool in_buffer, size_t gate,
            Action then);

  // Runs the steps, then waits for every send. A failure cancels the exchange with it.
  Status run();

 private:
  Status run_steps();
  struct Step {
    int peer = -1;
    uint32_t tag = 0;
    uint8_t *dst = nullptr;  // null: a staging slot
    size_t len = 0;
    bool in_buffer = false;
    size_t gate = kNoSlot;
    Action then;
  };

  Exchange &ex_;
  Memory &mem_;
  Undo *undo_;
  Outbox outbox_;
  const size_t es_;
  std::vector<Step> steps_;
  Bytes staging_;
  codec::Compressor unzstd_;
  std::unique_ptr<Payload> payload_;
};

}  // namespace wccl::algo
