// Shared state sync on a communicator (DESIGN §6): wccl_state_sync below the C API.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algo/state_sync.h"
#include "comm/communicator.h"

namespace wccl::comm {

struct SyncTensor {
  std::string name;
  void *data = nullptr;
  codec::Dtype dtype = codec::Dtype::kU8;
  size_t count = 0;
  gpu::Device *device = nullptr;  // the GPU holding data; null: host memory
};

struct SyncStats {
  uint64_t bytes_sent = 0;      // tensor bytes this member sent as a donor (every attempt)
  uint64_t bytes_received = 0;  // tensor bytes it received (every attempt)
  uint32_t sources = 0;         // donors it received from
  uint32_t tensors_received = 0;
  double time_us = 0;  // the whole call
  uint64_t epoch = 0;
  int world_size = 0;
};

// Every member of the epoch calls it with the same tensor list (names, dtypes, counts, in one
// order); each member's tensors may be host or device memory, independently. A device tensor is
// hashed by its GPU, sent from it through page-locked memory, and written by a copy to it at the
// commit; the received bytes are staged and checked in host memory. Three operations of the
// communicator, each committed like a collective: all-gathers of the members' descriptions (length,
// then the padded descriptions), then, if any member differs from the elected state, the data phase
// (algo::run_sync), whose received tensors are copied into the member's tensors only once it is
// committed. On OK every member holds the elected tensors and *revision is the elected revision.
// Errors: INVALID_USAGE naming the first mismatch of the tensor lists, or a mode conflict
// (algo::plan_sync), on every member alike before any tensor data moves; PROTOCOL for a malformed
// description; the collectives' errors (PEER_LOST when a member is lost: update and call again). On
// any error the tensors and *revision are as they were.
//
// A member lost during the call (a donor, say) revokes the epoch: every survivor then re-forms
// the epoch without it (Communicator::reform: no joiner is admitted, so the members stay those
// that are inside this call) and tries again, towards the state elected before the loss if the
// descriptions had been gathered. So a receiver completes from the remaining donors; PEER_LOST
// only when none holds a tensor it lacks, or the re-formed epoch is no smaller. The communicator's
// epoch, rank and size may therefore change inside the call.
Status state_sync(Communicator &comm, const std::vector<SyncTensor> &tensors, uint64_t *revision,
                  algo::SyncMode mode, SyncStats *stats);

// What state sync needs of the member that runs it: a Communicator, or one of wccl-sim's
// simulated members (lib/sim/driver.cc), so that both run the rounds below.
class SyncMember {
 public:
  virtual ~SyncMember() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual bool revoked() const = 0;
  virtual size_t chunk_bytes() const = 0;
  // Runs c as the epoch's next operation and waits for its outcome. A state sync's c carries only
  // its job (c.sync) and size (c.count): the member stages the received bytes and, once the
  // operation is committed, copies them into the job's tensors.
  virtual Status run(const algo::Collective &c, OpStats *stats) = 0;
  // Communicator::reform: the survivors re-formed, admitting nobody.
  virtual Status reform() = 0;
};

// State sync's rounds for a member described by `mine` (state_sync above, from its descriptions
// on): all-gather the descriptions, elect and plan alike on every member, transfer; after a loss,
// re-form the survivors and finish toward the state elected before it. new_job() gives each
// attempt a job holding this member's tensors. On OK, *done is the committed job (its plan names
// the elected revision and the donors). The transfer's bytes are added to stats.
Status sync_rounds(SyncMember &member, const algo::MemberState &mine,
                   const std::function<std::shared_ptr<algo::SyncJob>()> &new_job, SyncStats *stats,
                   std::shared_ptr<const algo::SyncJob> *done);

}  // namespace wccl::comm
