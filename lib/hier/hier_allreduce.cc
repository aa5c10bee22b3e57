#include "hier/hier_allreduce.h"

#include <algorithm>
#include <vector>

#include "wccl/wccl.h"

namespace wccl::hier {

namespace {

std::chrono::milliseconds left(Clock::time_point deadline) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(ms, std::chrono::milliseconds(1));
}

// The all-reduce of this rank's block across nodes, to its outcome.
Status global_allreduce(comm::Communicator &global, const Call &call, codec::RedOp combine,
                        void *shard, size_t shard_count, Clock::time_point deadline,
                        comm::OpStats *stats) {
  algo::Collective c = call.global;
  c.kind = algo::Kind::kAllreduce;
  c.count = shard_count;
  c.dtype = call.dtype;
  c.op = combine;
  c.in = shard;
  c.out = shard;
  c.device = call.device;
  c.after = nullptr;  // the block is in place: every step before waited for its own work
  c.memory = nullptr;
  WCCL_ASSIGN_OR_RETURN(auto op, global.submit(c, left(deadline)));
  return global.wait(op, stats);
}

}  // namespace

Status hier_allreduce(LocalGroup &local, comm::Communicator &global, algo::Memory &m,
                      const Call &call, Clock::time_point deadline, comm::OpStats *stats) {
  if (call.count == 0) return Status();
  const size_t ranks = static_cast<size_t>(local.size());
  const size_t es = codec::dtype_size(call.dtype);
  const size_t shard_count = (call.count + ranks - 1) / ranks;
  const size_t padded_bytes = shard_count * ranks * es;
  const size_t bytes = call.count * es;
  const codec::RedOp combine = call.op == codec::RedOp::kAvg ? codec::RedOp::kSum : call.op;
  algo::Bytes shard, padded;

  // A step of this rank's own that fails leaves the others without their partner in the group's
  // next collective: the group is abandoned, so that every rank fails instead. After a local
  // collective timed out, a GPU may still be running it on the scratch: that is not freed.
  auto broken = [&](const Status &st) {
    local.abandon(st);
    if (st.code() == WCCL_ERR_TIMEOUT && !m.host()) {
      (void)shard.release();
      (void)padded.release();
    }
    return st;
  };

  if (Status st = m.scratch(shard_count * es, &shard); !st.ok()) return broken(st);
  const void *in = call.in;
  if (padded_bytes != bytes) {  // the input, then zeros: finite on every wire, and never read back
    if (Status st = m.scratch(padded_bytes, &padded); !st.ok()) return broken(st);
    if (Status st = m.copy(padded.get(), call.in, bytes); !st.ok()) return broken(st);
    const std::vector<uint8_t> zeros(padded_bytes - bytes, 0);
    if (Status st = m.from_host(padded.get() + bytes, zeros.data(), zeros.size()); !st.ok())
      return broken(st);
    in = padded.get();
  }
  if (Status st =
          local.reduce_scatter(m, in, shard.get(), shard_count, call.dtype, combine, deadline);
      !st.ok())
    return broken(st);

  Status mine = global_allreduce(global, call, combine, shard.get(), shard_count, deadline, stats);
  std::vector<int32_t> outcomes;
  if (Status st = local.exchange(static_cast<int32_t>(mine.code()), &outcomes, deadline); !st.ok())
    return broken(st);
  if (!mine.ok()) return mine;
  for (size_t r = 0; r < outcomes.size(); ++r) {
    if (outcomes[r] != WCCL_OK) {
      return WCCL_ERROR(WCCL_ERR_PEER_LOST,
                        "local rank %zu of this node failed its part of the all-reduce across "
                        "nodes (%s): the whole node "
                        "fails the operation; call wccl_comm_update on every local rank's "
                        "communicator, then retry",
                        r, wccl_result_name(static_cast<wccl_result_t>(outcomes[r])));
    }
  }

  if (call.op == codec::RedOp::kAvg) {
    if (Status st =
            m.finish_avg(call.dtype, shard.get(), shard_count, local.size() * stats->world_size);
        !st.ok())
      return broken(st);
  }
  if (padded_bytes == bytes) {
    if (Status st = local.all_gather(m, shard.get(), call.out, shard_count, call.dtype, deadline);
        !st.ok())
      return broken(st);
    return Status();
  }
  if (Status st = local.all_gather(m, shard.get(), padded.get(), shard_count, call.dtype, deadline);
      !st.ok())
    return broken(st);
  if (Status st = m.copy(call.out, padded.get(), bytes); !st.ok()) return broken(st);
  return Status();
}

Runner::Runner(std::unique_ptr<LocalGroup> local)
    : local_(std::move(local)), worker_([this] { work(); }) {}

Runner::~Runner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
  for (auto &[device, stream] : streams_) device->destroy_stream(stream);
}

Result<std::shared_ptr<Op>> Runner::submit(comm::Communicator *global, const Call &call) {
  auto op = std::make_shared<Op>();
  op->call = call;
  op->global = global;
  op->start = Clock::now();
  op->deadline = op->start + (call.timeout.count() > 0 ? call.timeout : global->op_timeout());
  std::lock_guard<std::mutex> lock(mu_);
  if (in_flight_ >= kMaxInFlight) {
    return WCCL_ERROR(WCCL_ERR_INVALID_USAGE,
                      "%zu hierarchical all-reduces of this local rank are in flight (at most %zu)",
                      in_flight_, kMaxInFlight);
  }
  ++in_flight_;
  queue_.push_back(op);
  cv_.notify_all();
  return op;
}

Status Runner::wait(const std::shared_ptr<Op> &op, comm::OpStats *stats) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return op->done; });  // the worker ends every step by the op's deadline
  if (stats != nullptr) *stats = op->stats;
  return op->outcome;
}

Status Runner::test(const std::shared_ptr<Op> &op, comm::OpStats *stats) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!op->done)
    return WCCL_ERROR(WCCL_ERR_IN_PROGRESS, "the hierarchical all-reduce is in flight");
  if (stats != nullptr) *stats = op->stats;
  return op->outcome;
}

void Runner::work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing is left to run
    std::shared_ptr<Op> op = queue_.front();
    queue_.pop_front();
    lock.unlock();
    const Status outcome = run(*op);
    lock.lock();
    op->outcome = outcome;
    op->stats.time_us = std::chrono::duration<double, std::micro>(Clock::now() - op->start).count();
    op->done = true;
    --in_flight_;
    cv_.notify_all();
  }
}

Status Runner::run(Op &op) {
  const Call &call = op.call;
  Status st;
  if (call.ready != nullptr) {
    // Waited for on the host: the other local ranks read this rank's input from their own streams.
    gpu::Stream &stream = streams_[call.device];
    if (stream == nullptr) st = call.device->create_stream(&stream);
    if (st.ok()) st = call.device->wait(stream, call.ready);
    call.device->destroy_event(call.ready);
    if (st.ok()) st = call.device->synchronize(stream);
  }
  if (!st.ok()) return st;
  WCCL_ASSIGN_OR_RETURN(algo::Memory * m, memory(call.device));
  return hier_allreduce(*local_, *op.global, *m, call, op.deadline, &op.stats);
}

Result<algo::Memory *> Runner::memory(gpu::Device *device) {
  if (device == nullptr) return &algo::host_memory();
  std::unique_ptr<algo::DeviceMemory> &m = device_memory_[device];
  if (m == nullptr) {
    Status st;
    m = algo::DeviceMemory::create(*device, &st);
    if (m == nullptr) {
      device_memory_.erase(device);
      return st;
    }
  }
  return m.get();
}

}  // namespace wccl::hier
