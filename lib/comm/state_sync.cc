// wccl_state_sync: describe, all-gather the descriptions, elect and plan alike on every member,
// then move only the tensors that differ, striped over every member that holds them.
#include "comm/state_sync.h"

#include <algorithm>
#include <set>

#include "codec/compress.h"
#include "codec/hash.h"

namespace wccl::comm {
namespace {

// The Communicator as state sync's member.
class CommunicatorMember final : public SyncMember {
 public:
  explicit CommunicatorMember(Communicator &comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  bool revoked() const override { return comm_.revoked(); }
  size_t chunk_bytes() const override { return comm_.chunk_bytes(); }
  Status run(const algo::Collective &c, OpStats *stats) override {
    WCCL_ASSIGN_OR_RETURN(auto op, comm_.submit(c, std::chrono::milliseconds(0)));
    return comm_.wait(op, stats);
  }
  Status reform() override { return comm_.reform(); }

 private:
  Communicator &comm_;
};

// Every member's description, in rank order.
Result<std::vector<algo::MemberState>> gather_states(SyncMember &member,
                                                     const algo::MemberState &mine) {
  std::vector<uint8_t> blob = algo::encode_state(mine);
  const int n = member.size();
  int64_t len = static_cast<int64_t>(blob.size());
  std::vector<int64_t> lens(static_cast<size_t>(n));
  algo::Collective c;
  c.kind = algo::Kind::kAllgather;
  c.dtype = codec::Dtype::kI64;
  c.count = 1;
  c.in = &len;
  c.out = lens.data();
  WCCL_RETURN_IF_ERROR(member.run(c, nullptr));
  const size_t longest = static_cast<size_t>(*std::max_element(lens.begin(), lens.end()));
  blob.resize(longest, 0);
  std::vector<uint8_t> all(longest * static_cast<size_t>(n));
  c.dtype = codec::Dtype::kU8;
  c.count = longest;
  c.in = blob.data();
  c.out = all.data();
  WCCL_RETURN_IF_ERROR(member.run(c, nullptr));
  std::vector<algo::MemberState> states;
  for (int r = 0; r < n; ++r) {
    Result<algo::MemberState> s =
        algo::decode_state(all.data() + static_cast<size_t>(r) * longest, longest);
    if (!s.ok())
      return WCCL_ERROR(WCCL_ERR_PROTOCOL, "state sync: rank %d: %s", r,
                        s.status().message().c_str());
    states.push_back(std::move(s).value());
  }
  return states;
}

// One attempt on the current epoch: describe, elect (or keep `elected`), plan into job, transfer.
// job->plan is set once the descriptions are all-gathered; s accumulates the bytes moved.
Status attempt(SyncMember &member, const algo::MemberState &mine, const algo::SyncTarget *elected,
               const std::shared_ptr<algo::SyncJob> &job, SyncStats *s) {
  WCCL_ASSIGN_OR_RETURN(const std::vector<algo::MemberState> states, gather_states(member, mine));
  WCCL_ASSIGN_OR_RETURN(algo::SyncPlan plan,
                        algo::plan_sync(states, member.chunk_bytes(), elected));
  job->plan = std::make_shared<const algo::SyncPlan>(std::move(plan));
  algo::place_received(job.get(), member.rank());
  if (job->plan->transfers.empty()) return Status();
  algo::Collective c;
  c.kind = algo::Kind::kStateSync;
  c.dtype = codec::Dtype::kU8;
  c.count = job->stage_bytes;
  c.sync = job;
  OpStats op_stats;
  Status st = member.run(c, &op_stats);
  s->bytes_sent += op_stats.bytes_sent;
  s->bytes_received += op_stats.bytes_received;
  return st;
}

}  // namespace

Status state_sync(Communicator &comm, const std::vector<SyncTensor> &tensors, uint64_t *revision,
                  algo::SyncMode mode, SyncStats *stats) {
  const auto start = std::chrono::steady_clock::now();
  algo::MemberState mine;
  mine.mode = mode;
  mine.revision = *revision;
  std::vector<void *> data;
  std::vector<size_t> bytes, elem_bytes;
  std::vector<algo::DeviceMemory *> device;
  for (const SyncTensor &t : tensors) {
    bytes.push_back(t.count * codec::dtype_size(t.dtype));
    elem_bytes.push_back(codec::dtype_size(t.dtype));
    data.push_back(t.data);
    uint64_t hash = 0;
    if (t.device != nullptr) {
      Result<algo::DeviceMemory *> memory = comm.device_memory(t.device);
      if (!memory.ok())
        return memory.status().with_context("state sync: tensor \"" + t.name + "\"");
      device.push_back(memory.value());
      const Status hashed = memory.value()->hash(t.data, bytes.back(), &hash);
      if (!hashed.ok()) return hashed.with_context("state sync: hashing tensor \"" + t.name + "\"");
    } else {
      device.push_back(nullptr);
      hash = codec::tensor_hash(t.data, bytes.back());
    }
    mine.tensors.push_back({t.name, t.dtype, t.count, hash});
  }
  SyncStats s;
  std::shared_ptr<const algo::SyncJob> done;
  auto new_job = [&] {
    auto job = std::make_shared<algo::SyncJob>();
    job->tensors = data;
    job->device = device;
    job->tensor_bytes = bytes;
    job->elem_bytes = elem_bytes;
    job->compress = comm.sync_compress() && codec::compression_available() ? algo::Compress::kAuto
                                                                           : algo::Compress::kOff;
    return job;
  };
  CommunicatorMember member(comm);
  WCCL_RETURN_IF_ERROR(sync_rounds(member, mine, new_job, &s, &done));
  std::set<int> sources;
  for (const algo::Transfer &tr : done->plan->transfers) {
    if (tr.receiver == comm.rank()) sources.insert(tr.donor);
  }
  s.sources = static_cast<uint32_t>(sources.size());
  s.tensors_received = static_cast<uint32_t>(
      std::count_if(done->stage_offset.begin(), done->stage_offset.end(),
                    [](size_t o) { return o != algo::SyncJob::kNotReceived; }));
  s.epoch = comm.epoch();
  s.world_size = comm.size();
  s.time_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  *revision = done->plan->target.revision;
  if (stats != nullptr) *stats = s;
  return Status();
}

Status sync_rounds(SyncMember &member, const algo::MemberState &mine,
                   const std::function<std::shared_ptr<algo::SyncJob>()> &new_job, SyncStats *stats,
                   std::shared_ptr<const algo::SyncJob> *done) {
  std::unique_ptr<algo::SyncTarget> elected;  // once a description phase has committed
  for (;;) {
    std::shared_ptr<algo::SyncJob> job = new_job();
    Status st = attempt(member, mine, elected.get(), job, stats);
    if (job->plan && !elected) elected = std::make_unique<algo::SyncTarget>(job->plan->target);
    if (st.ok()) {
      *done = std::move(job);
      return Status();
    }
    // A member was lost (the epoch was revoked): re-form the survivors, admitting nobody, and
    // finish towards the same elected state from the donors that remain. Only a smaller epoch is
    // worth another attempt; a revocation that lost nobody (a member's OP_FAILED) is returned, and
    // so is a PEER_LOST with the epoch intact (no remaining donor holds a tensor).
    const int before = member.size();
    if (st.code() != WCCL_ERR_PEER_LOST || !member.revoked()) return st;
    const Status reformed = member.reform();
    if (!reformed.ok())
      return reformed.with_context("state sync: re-forming the survivors after a loss");
    if (member.size() >= before) return st;
  }
}

}  // namespace wccl::comm
