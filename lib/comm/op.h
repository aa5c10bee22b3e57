// One collective operation of a communicator, from the call to the caller's wait (DESIGN §4).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "algo/collectives.h"
#include "core/status.h"

namespace wccl::comm {

struct OpStats {
  uint64_t bytes_sent = 0;      // payload bytes this peer sent for the operation
  uint64_t bytes_received = 0;  // payload bytes it received
  double time_us = 0;           // from the call to the decision
  uint64_t epoch = 0;
  int world_size = 0;
  algo::Algo algo = algo::Algo::kRing;  // the algorithm that ran (kAuto resolved)
};

// What a communicator counts over its life (wccl_comm_stats_t has the meanings).
struct CommStats {
  uint64_t ops_committed = 0;
  uint64_t ops_failed = 0;
  uint64_t ops_peer_lost = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t epochs = 0;
  uint64_t updates = 0;
};

// One of the current epoch's links, as its TCP connections measure it (wccl_link_stats_t).
struct LinkStats {
  int rank = 0;
  uint32_t rtt_us = 0;
  uint64_t bytes_per_s = 0;
};

// A collective writes its result into the caller's output buffer during the data phase, saving
// each range's old bytes first (algo/undo.h) into a scratch buffer in the same memory; they are
// copied back if the operation is not committed, so a failed operation leaves the caller's buffers
// as they were. State sync receives into a staging scratch buffer instead, copied into the
// caller's tensors once committed.
class Op {
 public:
  using Clock = std::chrono::steady_clock;

  Op() = default;
  ~Op() {
    if (ready != nullptr) device->device().destroy_event(ready);
  }
  Op(const Op &) = delete;
  Op &operator=(const Op &) = delete;

  algo::Collective
      c;  // the caller's buffers (state sync: c.out is the staging scratch while it runs)
  // Device buffers: the communicator's memory on their GPU (c.memory), and an event of the
  // caller's stream recorded at the call, which the data phase waits for (null once it has).
  algo::DeviceMemory *device = nullptr;
  gpu::Event ready = nullptr;
  size_t result_bytes =
      0;  // the scratch buffer the data phase needs (a collective: the output's size)
  uint64_t epoch = 0;
  uint64_t seq = 0;  // 1, 2, ... within the epoch, the same on every member
  int rank = 0;
  int size = 0;
  Clock::time_point start, deadline;

  // Guarded by the communicator's mutex, except while deliver() runs: once collected, the op is
  // its caller's alone. Until its decision the member's rules (Member) say where it is
  // (queued, running, awaiting its commit); then outcome holds it until the caller collects it
  // (wait or test: the result copied out, or the output's old bytes put back).
  bool decided = false;
  bool collected = false;
  Status outcome;
  algo::Bytes scratch;  // in c.memory: the Undo's saved bytes, or state sync's staging
  size_t scratch_bytes = 0;
  std::unique_ptr<algo::Undo> undo;  // a collective's, once its data phase ended
  bool in_data_phase = false;        // the worker runs its data phase (it may write the output)
  OpStats stats;
  Clock::time_point decided_at;

  // Once decided and collected (the caller's alone: no lock needed): a committed widened
  // operation's F32 result rounded from `scratch` into the caller's output; a committed state
  // sync's received tensors copied out of its staging `scratch`; a failed collective's output put
  // back from `undo`. Returns the outcome, or why its result or its restore did not reach the
  // caller's buffers.
  Status deliver() const;
};

// The scratch buffers of finished operations, kept for the next ones (host or device memory):
// allocating device memory, or faulting in fresh host pages, costs more than a reuse.
class ScratchSpares {
 public:
  static constexpr size_t kMax = 2;
  // The smallest spare in `memory` of at least n bytes, its size in *size; empty if none fits.
  algo::Bytes take(const algo::Memory &memory, size_t n, size_t *size);
  // Keeps `bytes` (size bytes); with kMax kept, replaces the smallest if it is smaller.
  void put(size_t size, algo::Bytes bytes);

 private:
  std::vector<std::pair<size_t, algo::Bytes>> spares_;
};

}  // namespace wccl::comm
