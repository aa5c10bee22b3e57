// wccl-sim's members (docs/sim.md): one thread per simulated peer runs the workload as a training
// loop over the library would. Each operation is submitted to the member's rules
// (comm::Member, sim/world.h), its data phase is the project's own algorithm (lib/algo,
// unchanged) over a virtual-time algo::Channel whose messages cross the simulated WAN, and its
// outcome is the one those rules decide. PEER_LOST is answered with an update, waiting joiners are
// admitted with an update at an operation's boundary, and an epoch that holds a member without the
// trainer's state begins with a state sync. CPU work is charged through an algo::Memory at the
// CpuModel's rates.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "algo/collectives.h"
#include "sim/world.h"

namespace wccl::sim {

// Address space nothing touches, for elided buffers: every allocation aliases it.
class Void {
 public:
  explicit Void(size_t bytes);
  ~Void();
  Void(const Void &) = delete;
  Void &operator=(const Void &) = delete;
  uint8_t *base() const { return base_; }
  size_t size() const { return bytes_; }

 private:
  size_t bytes_;
  uint8_t *base_;
};

class SimMemory;

class Driver {
 public:
  static constexpr Time kNever = -1;
  // base: the workload's operation (its algorithm resolved); space: the elided buffers (null when
  // the workload carries data).
  Driver(World &w, const CpuModel &cpu, const algo::Collective &base, const Void *space);

  // Member r's thread, from its start (a joiner's: its time to ask) to its last operation.
  void run(int r);

  // What the members did, per workload operation and member (kNever: it did not).
  std::vector<std::vector<Time>> started, committed, data_done;
  std::vector<std::pair<Time, Status>> failures;  // when and why a member gave up
  std::vector<std::vector<float>> buffers;  // with data: each member's last operation's buffer
  std::vector<std::vector<int>> last_ring;  // the ring of each member's last operation
  // The trainer's state, for state sync: with data, each member's own bytes (the first epoch's
  // peers hold a pattern, a joiner zeros); elided, the untouched (zero) address space, which a
  // joiner describes with another hash, as a fresh process's state differs.
  std::vector<std::vector<uint8_t>> state;

 private:
  friend class SimSyncMember;
  enum class Outcome { kCommitted, kRetry, kStop };
  // One operation of member r in its current epoch, from its call to its decision. Its messages
  // carry their bytes where memory does (not elided); hashed_after: bytes the member hashes at
  // the end of the data phase (a state sync's received tensors, checked before the commit).
  Outcome attempt(int r, SimMemory &memory, algo::Collective c, int logical, Time *data_end,
                  size_t hashed_after);
  // State sync, by the library's own rounds (comm::sync_rounds): kRetry where it lost a peer and
  // the loop must update.
  Outcome sync(int r, SimMemory &memory, SimMemory &exact);
  // A membership call (UPDATE, or state sync's REFORM) and its answer: OK, PEER_LOST, or why the
  // member can go no further (ABORTED where nothing more could happen).
  Status call(int r, coord::MessageType type);
  Outcome fail(int r, const Status &why);  // the member fails for good, and the run ends

  World &w_;
  const CpuModel &cpu_;
  const algo::Collective base_;
  const Void *space_;
  const int peers_;  // the first epoch's
  const int ops_;    // the workload's operations, warm-up included
  uint64_t held_hash_ = 0,
           fresh_hash_ = 0;  // the described hashes of a state that is held, and of a joiner's
};

}  // namespace wccl::sim
