// The communicator's operations: a collective submitted, run by the worker thread (data phase,
// then the report to the coordinator), decided, and waited for. communicator.cc has its membership.
#include "comm/communicator.h"
#include "comm/link_channel.h"

#include "algo/call.h"
#include "algo/state_sync.h"

namespace wccl::comm {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

Result<std::shared_ptr<Op>> Communicator::submit(const algo::Collective &c,
                                                 std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const char *kind = algo::kind_name(c.kind);
  if (view_->aborted())
    return WCCL_ERROR(WCCL_ERR_ABORTED, "%s: the communicator was aborted", kind);
  if (view_->left() || view_->rank() < 0) {
    return WCCL_ERROR(WCCL_ERR_INVALID_USAGE, "%s: this peer is not a member (it left)", kind);
  }
  const int n = view_->size();
  auto op = std::make_shared<Op>();
  op->c = c;
  op->c.chunk_bytes = chunk_bytes_;
  algo::Crossovers crossovers = view_->crossovers();
  if (crossovers.tree_max_bytes == 0) crossovers.tree_max_bytes = tree_max_bytes_;  // none measured
  op->c.algo = algo::choose(c, n, crossovers);
  WCCL_RETURN_IF_ERROR(algo::check(op->c, n, view_->rank()));
  if (c.device != nullptr) {
    WCCL_ASSIGN_OR_RETURN(op->device, device_memory_locked(c.device));
    op->c.memory = op->device;
    WCCL_RETURN_IF_ERROR(c.device->record(c.after, &op->ready));
  }
  Actions actions;
  uint64_t seq = 0;
  const Status queued = view_->submit(&seq, &actions);
  if (!queued.ok()) {
    Effects effects = apply(std::move(actions));
    lock.unlock();
    cv_.notify_all();
    carry_out(effects);
    return queued.with_context(kind);
  }
  if (c.kind == algo::Kind::kStateSync) {
    op->result_bytes = c.sync->stage_bytes;
  } else if (algo::widened(op->c)) {
    // F32 copies of its output, then of its input: the caller's output is written at the commit.
    op->result_bytes = (algo::out_count(c, n) + algo::in_count(c, n)) * sizeof(float);
  } else {
    op->result_bytes = algo::out_count(c, n) * codec::dtype_size(c.dtype);  // the Undo's buffer
  }
  op->epoch = view_->epoch();
  op->seq = seq;
  op->rank = view_->rank();
  op->size = n;
  op->start = Clock::now();
  op->deadline = op->start + (timeout.count() > 0 ? timeout : op_timeout_);
  op->stats.epoch = op->epoch;
  op->stats.world_size = n;
  op->stats.algo = op->c.algo;
  ops_[{op->epoch, seq}] = op;
  queue_.push_back(op);
  const bool links_wanted = c.kind == algo::Kind::kStateSync;
  if (links_wanted) {
    // Its donors and receivers that are not neighbours, linked while the operations before it run.
    links_->want(op->epoch, seq, algo::sync_partners(*c.sync->plan, op->rank));
  }
  lock.unlock();
  cv_.notify_all();
  if (links_wanted) links_->open();
  return op;
}

Result<algo::DeviceMemory *> Communicator::device_memory(gpu::Device *device) {
  std::lock_guard<std::mutex> lock(mu_);
  return device_memory_locked(device);
}

Result<algo::DeviceMemory *> Communicator::device_memory_locked(gpu::Device *device) {
  std::unique_ptr<algo::DeviceMemory> &memory = device_memory_[device];
  if (!memory) {
    Status st;
    memory = algo::DeviceMemory::create(*device, &st);
    if (!memory) {
      device_memory_.erase(device);
      return st;
    }
  }
  return memory.get();
}

void Communicator::decide(const std::shared_ptr<Op> &op, Status outcome) {
  if (op->decided) return;
  op->decided = true;
  op->outcome = std::move(outcome);
  op->decided_at = Clock::now();
  op->stats.time_us = std::chrono::duration<double, std::micro>(op->decided_at - op->start).count();
  if (op->outcome.ok()) {
    ++stats_.ops_committed;
  } else {
    ++stats_.ops_failed;
    if (op->outcome.code() == WCCL_ERR_PEER_LOST) ++stats_.ops_peer_lost;
  }
}

void Communicator::work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    std::shared_ptr<Op> op = queue_.front();
    queue_.pop_front();
    if (!view_->start(op->epoch, op->seq)) continue;  // decided while it was queued
    op->in_data_phase = true;
    lock.unlock();
    run(op);
    lock.lock();
    cv_.notify_all();
  }
}

// Worker thread: the data phase of one operation, then its report to the coordinator.
void Communicator::run(const std::shared_ptr<Op> &op) {
  std::map<int, std::shared_ptr<net::Link>> links;
  Status link_failure;
  const uint64_t links_of = op->c.kind == algo::Kind::kStateSync ? op->seq : 0;  // EpochLinks::want
  algo::Memory &memory = op->c.memory != nullptr ? *op->c.memory : algo::host_memory();
  algo::Bytes scratch;
  size_t scratch_bytes = 0;
  // Ends the data phase with st (under mu_): the view decides the operation or sends its DONE.
  auto end = [&](std::unique_lock<std::mutex> &lock, const Status &st, bool data_error) {
    Effects effects = apply(view_->finished(op->epoch, op->seq, st, data_error));
    op->in_data_phase = false;
    lock.unlock();
    cv_.notify_all();
    // A DONE that cannot be sent now is sent again after the reconnection (see reconnect()).
    carry_out(effects);
  };
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto ready = [&] {
      return view_->aborted() || view_->revoked() || view_->epoch() != op->epoch ||
             links_->complete(&links, links_of, &link_failure);
    };
    if (!cv_.wait_until(lock, op->deadline, ready)) {
      return end(lock,
                 WCCL_ERROR(WCCL_ERR_TIMEOUT,
                            "the links of epoch %llu did not open before the operation's deadline",
                            static_cast<unsigned long long>(op->epoch)),
                 false);
    }
    if (view_->aborted() || view_->revoked() || view_->epoch() != op->epoch) {
      return end(lock, WCCL_ERROR(WCCL_ERR_PEER_LOST, "the epoch ended"),
                 false);  // the view knows why
    }
    if (!link_failure.ok()) return end(lock, link_failure, false);
    // A scratch buffer in the operation's memory from the spares, or a new one.
    scratch_bytes = op->result_bytes;
    scratch = spares_.take(memory, scratch_bytes, &scratch_bytes);
  }
  Status ready = scratch || scratch_bytes == 0 ? Status() : memory.scratch(scratch_bytes, &scratch);
  if (!ready.ok()) {
    ready =
        WCCL_ERROR(ready.code(), "the %zu-byte result buffer of operation %llu: %s", scratch_bytes,
                   static_cast<unsigned long long>(op->seq), ready.message().c_str());
  }
  if (ready.ok() && op->ready != nullptr) {  // the caller's stream has reached the call
    ready = op->device->wait_for(op->ready);
    op->ready = nullptr;
  }
  algo::Collective c = op->c;
  if (ready.ok() && algo::widened(c)) {
    // The algorithms see F32: the input widened exactly into the scratch, the output there too.
    auto *out32 = reinterpret_cast<float *>(scratch.get());
    float *in32 = out32 + algo::out_count(c, op->size);
    if (c.in != nullptr) ready = memory.widen(c.dtype, c.in, algo::in_count(c, op->size), in32);
    c.in = c.in != nullptr ? in32 : nullptr;
    c.out = out32;
    c.dtype = codec::Dtype::kF32;
  }
  if (!ready.ok()) {
    std::unique_lock<std::mutex> lock(mu_);
    return end(lock, ready,
               /*data_error=*/true);  // this member's own failure, whatever else happened
  }
  for (auto &[rank, link] : links) link->pace(c.max_link_rate);
  const algo::Call call = algo::Call::of(op->c);
  const algo::CallBytes call_bytes = algo::encode(call);
  LinkChannel channel(op->epoch, op->seq, algo::call_key(call_bytes), op->rank, op->size,
                      std::move(links));
  // Calls that differ fail every member with MISMATCH only if the coordinator hears of them
  // before anyone hears of a closed link (docs/fault-tolerance.md, "One outcome for one fault"):
  // this member reports first and closes its links once the epoch is revoked (bounded by the
  // deadline).
  channel.before_close([&](const Status &why) {
    if (why.code() != WCCL_ERR_MISMATCH) return;
    std::unique_lock<std::mutex> lock(mu_);
    Effects effects = apply(view_->report_mismatch(op->epoch, op->seq, why));
    lock.unlock();
    carry_out(effects);
    lock.lock();
    cv_.wait_until(lock, op->deadline, [&] {
      return view_->revoked() || view_->aborted() || view_->epoch() != op->epoch;
    });
  });
  algo::Exchange ex(channel, op->deadline);
  // Every member's call is compared with its ring predecessor's (and so, around the ring, with
  // every other's).
  ex.agree(call_bytes, [&call, rank = op->rank](int peer, const algo::CallBytes &theirs) {
    return algo::disagreement(peer, theirs, rank, call);
  });
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_exchange_ = &ex;
    if (view_->aborted())
      ex.cancel(WCCL_ERROR(WCCL_ERR_ABORTED, "the communicator was aborted"));
    else if (!view_->epoch_failure().ok())
      ex.cancel(view_->epoch_failure());
  }
  std::unique_ptr<algo::Undo> undo;
  if (c.kind == algo::Kind::kStateSync) {
    c.out = scratch.get();  // the staging buffer; the commit copies the received tensors out of it
  } else if (!algo::widened(op->c)) {
    undo = std::make_unique<algo::Undo>(memory, c.out, op->result_bytes, scratch.get());
  }
  const Status st = algo::run(ex, c, undo.get());
  std::unique_lock<std::mutex> lock(mu_);
  op->undo = std::move(undo);
  running_exchange_ = nullptr;
  op->stats.bytes_sent = ex.bytes_sent();
  op->stats.bytes_received = ex.bytes_received();
  stats_.bytes_sent += op->stats.bytes_sent;
  stats_.bytes_received += op->stats.bytes_received;
  op->scratch = std::move(scratch);
  op->scratch_bytes = scratch_bytes;
  // Data this peer's wire codec cannot carry (a NaN on the INT8 wire) could never have been
  // sent, and a call that differs from a neighbour's never succeeds: that is the operation's
  // outcome here even if the revocation it causes (its neighbours see its links close) reached
  // this peer first.
  end(lock, st,
      st.code() == WCCL_ERR_INVALID_ARGUMENT || st.code() == WCCL_ERR_CUDA ||
          st.code() == WCCL_ERR_MISMATCH);
}

Status Communicator::finish(const std::shared_ptr<Op> &op, OpStats *stats,
                            std::unique_lock<std::mutex> &lock) {
  if (op->decided && !op->collected && op->in_data_phase) {
    // Decided while its data phase still runs (this peer gave up on it): the phase was cancelled
    // and ends at its next wait; its writes into the output must end before the restore.
    if (running_exchange_ != nullptr && !op->outcome.ok()) running_exchange_->cancel(op->outcome);
    if (!cv_.wait_for(lock, std::chrono::seconds(60), [&] { return !op->in_data_phase; })) {
      op->outcome =
          WCCL_ERROR(op->outcome.code(),
                     "%s; its data phase did not end within 60 s of being cancelled, so the "
                     "output buffer may hold partial results",
                     op->outcome.message().c_str());
      op->collected = true;
      if (stats) *stats = op->stats;
      return op->outcome;
    }
  }
  if (op->decided && !op->collected) {
    op->collected = true;
    lock.unlock();  // the op is this caller's alone now: its copies run without the lock
    const Status delivered = op->deliver();
    lock.lock();
    op->outcome = delivered;
    op->undo.reset();
    spares_.put(op->scratch_bytes, std::move(op->scratch));
  }
  if (stats) *stats = op->stats;
  return op->outcome;
}

Status Communicator::wait(const std::shared_ptr<Op> &op, OpStats *stats) {
  std::unique_lock<std::mutex> lock(mu_);
  auto decided = [&] { return op->decided; };
  if (!cv_.wait_until(lock, op->deadline, decided)) {
    if (view_->op_state(op->epoch, op->seq) == Member::OpState::kRunning) {
      // Its data phase ends at the same deadline: the worker decides it in a moment.
      if (running_exchange_ != nullptr) {
        running_exchange_->cancel(
            WCCL_ERROR(WCCL_ERR_TIMEOUT, "the operation did not complete in time"));
      }
      cv_.wait_for(lock, std::chrono::seconds(60), decided);
    }
    if (!decided()) {
      // Queued behind a slow operation, or its data phase done but no decision from the
      // coordinator: this peer gives up, which revokes the epoch (OP_FAILED). If the coordinator
      // did commit it meanwhile, the others succeeded: docs/fault-tolerance.md names this window.
      const Status timeout =
          WCCL_ERROR(WCCL_ERR_TIMEOUT, "operation %llu: no outcome within its timeout%s",
                     static_cast<unsigned long long>(op->seq),
                     view_->op_state(op->epoch, op->seq) == Member::OpState::kAwaiting ||
                             view_->op_state(op->epoch, op->seq) == Member::OpState::kFailed
                         ? " (the coordinator did not decide)"
                         : "");
      Effects effects = apply(view_->give_up(op->epoch, op->seq, timeout));
      lock.unlock();
      cv_.notify_all();
      carry_out(effects);
      lock.lock();
    }
  }
  return finish(op, stats, lock);
}

Status Communicator::test(const std::shared_ptr<Op> &op, OpStats *stats) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!op->decided) {
    if (Clock::now() < op->deadline)
      return WCCL_ERROR(WCCL_ERR_IN_PROGRESS, "operation %llu is in flight",
                        static_cast<unsigned long long>(op->seq));
    lock.unlock();
    return wait(op, stats);  // past its deadline: settle it
  }
  return finish(op, stats, lock);
}

}  // namespace wccl::comm
