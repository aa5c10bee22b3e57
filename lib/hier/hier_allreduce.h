// wccl_hier_allreduce (docs/algorithms.md, "Hierarchical all-reduce"): an all-reduce over every
// rank of every node, written once over a LocalGroup (the node's ranks) and a wccl communicator
// per local rank (that rank's peers on the other nodes):
//
//   1. reduce-scatter inside the node: local rank r holds block r of the node's reduction (the
//      input padded with zeros to a multiple of the local size);
//   2. all-reduce of that block across nodes over the rank's communicator (any wire);
//   3. the node agrees on the outcome: every local rank's result code, exchanged. If any rank's
//      all-reduce failed, every rank returns (its own error, or PEER_LOST naming the rank that
//      failed) and the output is as it was;
//   4. all-gather inside the node into the output. AVG divides once, by local size x nodes,
//      before it.
//
// Every node's local rank r talks to the other nodes' local rank r, and each communicator's
// outcome is agreed among its members, so the node-level outcome (the AND of its ranks') is the
// same on every node. Runner runs one local rank's operations on a thread of its own, in the
// order they were called (the non-blocking form).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "algo/collectives.h"
#include "comm/communicator.h"
#include "comm/op.h"
#include "hier/local_group.h"

namespace wccl::hier {

using Clock = std::chrono::steady_clock;

// One call of wccl_hier_allreduce.
struct Call {
  const void *in = nullptr;
  void *out = nullptr;
  size_t count = 0;
  codec::Dtype dtype = codec::Dtype::kF32;
  codec::RedOp op = codec::RedOp::kSum;
  // The all-reduce across nodes: wire, algo and compress (its count, buffers and op are the
  // schedule's).
  algo::Collective global;
  // Device buffers: their GPU, and an event of the caller's stream recorded at the call, which the
  // operation waits for before it reads the input (released by it).
  gpu::Device *device = nullptr;
  gpu::Event ready = nullptr;
  std::chrono::milliseconds timeout{0};  // the whole operation; 0: the communicator's op_timeout_ms
};

// The schedule above, on one local rank, with the buffers in m; every step ends by `deadline`.
// stats: the all-reduce across nodes (bytes, epoch, world size).
Status hier_allreduce(LocalGroup &local, comm::Communicator &global, algo::Memory &m,
                      const Call &call, Clock::time_point deadline, comm::OpStats *stats);

// A queued or running call.
struct Op {
  Call call;
  comm::Communicator *global = nullptr;
  Clock::time_point start, deadline;
  bool done = false;  // guarded by the Runner's mutex, as are outcome and stats
  Status outcome;
  comm::OpStats stats;
};

class Runner {
 public:
  explicit Runner(std::unique_ptr<LocalGroup> local);
  ~Runner();  // runs the queued calls first
  Runner(const Runner &) = delete;
  Runner &operator=(const Runner &) = delete;

  LocalGroup &local() { return *local_; }
  // Queues call on `global`. INVALID_USAGE with kMaxInFlight calls not yet done.
  Result<std::shared_ptr<Op>> submit(comm::Communicator *global, const Call &call);
  // Waits for op's outcome (each step is bounded by the operation's deadline).
  Status wait(const std::shared_ptr<Op> &op, comm::OpStats *stats);
  // The outcome if done, IN_PROGRESS otherwise.
  Status test(const std::shared_ptr<Op> &op, comm::OpStats *stats);

  static constexpr size_t kMaxInFlight = comm::kMaxOpsInFlight;

 private:
  void work();
  Status run(Op &op);
  // The worker's memory for `device`'s buffers (null: host memory), made on first use.
  Result<algo::Memory *> memory(gpu::Device *device);

  std::unique_ptr<LocalGroup> local_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Op>> queue_;
  size_t in_flight_ = 0;
  bool stopping_ = false;
  // The worker's own: a memory and a stream per GPU.
  std::map<gpu::Device *, std::unique_ptr<algo::DeviceMemory>> device_memory_;
  std::map<gpu::Device *, gpu::Stream> streams_;
  std::thread worker_;
};

}  // namespace wccl::hier
