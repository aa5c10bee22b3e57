#include "sim/driver.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "algo/exchange.h"
#include "algo/memory.h"
#include "algo/state_sync.h"
#include "codec/hash.h"
#include "comm/state_sync.h"

namespace wccl::sim {

Void::Void(size_t bytes) : bytes_(bytes) {
  void *p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  base_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t *>(p);
}

Void::~Void() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

// The CPU of one member: the kernels run (with data) or not (elided), and each call costs the
// model's time of its input bytes.
class SimMemory final : public algo::Memory {
 public:
  SimMemory(World &w, int rank, const CpuModel &cpu, const Void *space)
      : w_(w), rank_(rank), cpu_(cpu), space_(space) {}
  bool host() const override { return space_ == nullptr; }
  const char *name() const override { return "simulated host"; }

  Status host_bytes(size_t n, algo::Bytes *out) override { return allocate(n, out); }
  Status scratch(size_t n, algo::Bytes *out) override { return allocate(n, out); }
  Status copy(void *dst, const void *src, size_t n) override {
    if (!elided()) std::memmove(dst, src, n);
    return spend(n, cpu_.copy);
  }
  Status to_host(uint8_t *dst, const void *src, size_t n) override { return copy(dst, src, n); }
  Status from_host(void *dst, const uint8_t *src, size_t n) override { return copy(dst, src, n); }
  Status reduce_into(codec::Dtype t, codec::RedOp op, void *dst, const void *mine,
                     const uint8_t *got, size_t count) override {
    if (!elided())
      WCCL_RETURN_IF_ERROR(algo::host_memory().reduce_into(t, op, dst, mine, got, count));
    return spend(count * codec::dtype_size(t), cpu_.reduce);
  }
  Status finish_avg(codec::Dtype t, void *dst, size_t count, int by) override {
    if (!elided()) WCCL_RETURN_IF_ERROR(algo::host_memory().finish_avg(t, dst, count, by));
    return spend(count * codec::dtype_size(t), cpu_.reduce);
  }
  Status encode(codec::Wire w, const float *src, size_t count, uint8_t *wire,
                size_t first) override {
    if (!elided()) WCCL_RETURN_IF_ERROR(algo::host_memory().encode(w, src, count, wire, first));
    return spend(count * 4, cpu_.encode);
  }
  Status decode(codec::Wire w, const uint8_t *wire, size_t len, size_t count, float *dst) override {
    if (!elided()) WCCL_RETURN_IF_ERROR(algo::host_memory().decode(w, wire, len, count, dst));
    return spend(count * 4, cpu_.decode);
  }
  Status decode_reduce(codec::Wire w, codec::RedOp op, const uint8_t *wire, size_t len,
                       size_t count, float *dst, const float *mine) override {
    if (!elided())
      WCCL_RETURN_IF_ERROR(algo::host_memory().decode_reduce(w, op, wire, len, count, dst, mine));
    return spend(count * 4, cpu_.decode_reduce);
  }
  Status widen(codec::Dtype t, const void *src, size_t count, float *dst) override {
    if (!elided()) WCCL_RETURN_IF_ERROR(algo::host_memory().widen(t, src, count, dst));
    return spend(count * 4, cpu_.decode);
  }
  // State sync hashes outside algo::Memory (codec::tensor_hash): the caller charges its bytes.
  Status hashed(size_t bytes) { return spend(bytes, cpu_.hash); }

 protected:
  void give_back(uint8_t *p, bool) override {
    if (!elided()) delete[] p;
  }

 private:
  bool elided() const { return space_ != nullptr; }
  Status allocate(size_t n, algo::Bytes *out) {
    if (n == 0) {
      *out = algo::Bytes(nullptr, algo::ReturnBytes{this, false});
      return Status();
    }
    if (elided()) {
      if (n > space_->size())
        return WCCL_ERROR(WCCL_ERR_NO_MEMORY, "sim: %zu bytes exceed the elided space", n);
      *out = algo::Bytes(space_->base(), algo::ReturnBytes{this, false});
    } else {
      *out = algo::Bytes(new uint8_t[n](), algo::ReturnBytes{this, false});
    }
    return Status();
  }
  Status spend(size_t bytes, double rate) {
    if (rate <= 0 || bytes == 0) return Status();
    if (!w_.engine.sleep(rank_, static_cast<Time>(static_cast<double>(bytes) / rate * 1e9))) {
      return WCCL_ERROR(WCCL_ERR_TIMEOUT, "sim: the simulation stopped during CPU work");
    }
    return Status();
  }

  World &w_;
  const int rank_;
  const CpuModel &cpu_;
  const Void *space_;
};

namespace {

// One member's view of one operation: ranks are positions in the epoch's ring.
class SimChannel final : public algo::Channel {
 public:
  // carry: its messages carry their bytes (else only their lengths travel).
  SimChannel(World &w, int member, uint64_t epoch, uint64_t seq, bool carry)
      : w_(w),
        member_(member),
        epoch_(epoch),
        seq_(seq),
        carry_(carry),
        rank_(w.peer(member).view.rank()),
        ring_(w.peer(member).ring()) {}
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ring_.size()); }

  Status send(int peer, uint32_t tag, const void *data, size_t len,
              algo::Completion done) override {
    if (!aborted_.ok()) return aborted_;
    auto once = track(std::move(done));
    std::shared_ptr<std::vector<uint8_t>> bytes;
    if (carry_) {
      const auto *p = static_cast<const uint8_t *>(data);
      bytes = std::make_shared<std::vector<uint8_t>>(p, p + len);
    }
    const int to = ring_[static_cast<size_t>(peer)];
    const Mailboxes::Key key{epoch_, seq_, member_, to, tag};
    World &w = w_;
    const int me = member_;
    const uint64_t connection = epoch_;
    w_.engine.at(w_.engine.now(), member_, [&w, me, to, len, key, once, bytes, connection] {
      w.net.send(
          w.peer(me).host, w.peer(to).host, len,
          [&w, me, once] {
            once->fire(Status());
            w.engine.touch(me);
          },
          [&w, key, bytes, len] { w.mail.arrive(key, bytes, len); }, connection);
    });
    return Status();
  }

  Status recv(int peer, uint32_t tag, void *data, size_t len, size_t *got,
              algo::Completion done) override {
    if (!aborted_.ok()) return aborted_;
    Mailboxes::Recv r{static_cast<uint8_t *>(data), len, got, track(std::move(done)), member_};
    const Mailboxes::Key key{epoch_, seq_, ring_[static_cast<size_t>(peer)], member_, tag};
    World &w = w_;
    w_.engine.at(w_.engine.now(), member_, [&w, key, r] { w.mail.post(key, r); });
    return Status();
  }

  // From an event (a revocation, a closed link) or the member's own thread.
  void abort(const Status &why) override {
    if (aborted_.ok()) aborted_ = why;
    w_.mail.close(epoch_, seq_, member_);
    for (auto &once : outstanding_) once->fire(why);
    outstanding_.clear();
  }

  bool wait_until(std::unique_lock<std::mutex> &lock, std::condition_variable &,
                  std::chrono::steady_clock::time_point,
                  const std::function<bool()> &ready) override {
    std::mutex *mu = lock.mutex();
    lock.unlock();
    const bool ok = w_.engine.block(member_, [mu, &ready] {
      std::lock_guard<std::mutex> inner(*mu);
      return ready();
    });
    lock.lock();
    return ok || ready();
  }

 private:
  std::shared_ptr<Once> track(algo::Completion done) {
    auto once = std::make_shared<Once>();
    once->done = std::move(done);
    outstanding_.push_back(once);
    return once;
  }

  World &w_;
  const int member_;
  const uint64_t epoch_, seq_;
  const bool carry_;
  const int rank_;
  const std::vector<int> ring_;  // member indices
  Status aborted_;
  std::vector<std::shared_ptr<Once>> outstanding_;
};

// The pattern of bench/perf/sweep.h: element i of rank r holds (r + 1) * ((i % 251) + 1).
float pattern(int rank, size_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 251 + 1));
}

}  // namespace

Driver::Driver(World &w, const CpuModel &cpu, const algo::Collective &base, const Void *space)
    : w_(w),
      cpu_(cpu),
      base_(base),
      space_(space),
      peers_(w.first_peers),
      ops_(w.work.warmup + w.work.iters) {
  const Workload &work = w.work;
  const auto all = w.peers.size();
  started.assign(static_cast<size_t>(ops_), std::vector<Time>(all, kNever));
  committed = data_done = started;
  failures.resize(all);
  buffers.resize(work.data ? all : 0);
  last_ring.resize(all);
  state.resize(work.data && !work.joins.empty() ? all : 0);
  for (size_t m = 0; m < state.size(); ++m) {
    state[m].assign(work.state_bytes, 0);
    if (m < static_cast<size_t>(peers_)) {
      for (size_t i = 0; i < work.state_bytes; ++i) state[m][i] = static_cast<uint8_t>(i * 131 + 7);
    }
  }
  if (!work.joins.empty()) {
    held_hash_ = codec::tensor_hash(work.data ? state[0].data() : space->base(), work.state_bytes);
    fresh_hash_ =
        work.data ? codec::tensor_hash(state[static_cast<size_t>(peers_)].data(), work.state_bytes)
                  : held_hash_ + 1;
  }
}

Driver::Outcome Driver::fail(int r, const Status &why) {
  failures[static_cast<size_t>(r)] = {w_.engine.now(), why};
  w_.halted = true;
  return Outcome::kStop;
}

Driver::Outcome Driver::attempt(int r, SimMemory &memory, algo::Collective c, int logical,
                                Time *data_end, size_t hashed_after) {
  Peer &me = w_.peer(r);
  // As the Communicator's submit: nothing starts in a revoked epoch (the revocation may have come
  // during CPU work between operations), nor past the operations after which another member
  // waits at the update barrier (that revokes the epoch): the loop updates.
  comm::Actions actions;
  uint64_t seq = 0;
  const Status queued = me.view.submit(&seq, &actions);
  w_.carry_out(r, r, std::move(actions));
  if (!queued.ok()) return queued.code() == WCCL_ERR_PEER_LOST ? Outcome::kRetry : fail(r, queued);
  const uint64_t epoch = me.view.epoch();
  if (logical >= 0) {
    std::lock_guard<std::mutex> lock(w_.logical_mu);
    w_.logical[{epoch, seq}] = logical;
  }
  (void)me.view.start(epoch, seq);  // nothing decides it between the two: no event runs
  c.memory = &memory;
  Status st;
  // As the Communicator's worker: the data phase starts once the epoch's links are open (a state
  // sync's retry follows its re-form at once), and not at all if the epoch ends first.
  if (!w_.engine.block(r, [&me, epoch] {
        return me.links_open || me.view.revoked() || me.view.epoch() != epoch;
      })) {
    return Outcome::kStop;
  }
  if (!me.links_open || me.view.revoked() || me.view.epoch() != epoch) {
    st = WCCL_ERROR(WCCL_ERR_PEER_LOST, "the epoch ended");
  } else {
    SimChannel channel(w_, r, epoch, seq, memory.host());
    me.running = &channel;
    algo::Exchange ex(channel, std::chrono::steady_clock::time_point::max());
    st = algo::run(ex, c, nullptr);
    ex.finish();
    me.running = nullptr;
  }
  if (st.ok() && hashed_after > 0) st = memory.hashed(hashed_after);
  if (data_end != nullptr) *data_end = w_.engine.now();
  if (me.stopped) return Outcome::kStop;
  // The member's rules decide it: DONE and the coordinator's COMMIT, or a failure here (a closed
  // link: OP_FAILED, unless the revocation came first), as in the Communicator.
  const bool data_error = st.code() == WCCL_ERR_INVALID_ARGUMENT || st.code() == WCCL_ERR_CUDA;
  w_.carry_out(r, r, me.view.finished(epoch, seq, st, data_error));
  const std::pair<uint64_t, uint64_t> key{epoch, seq};
  if (!w_.engine.block(r, [&me, key] { return me.decided.count(key) != 0; })) return Outcome::kStop;
  const Status outcome = std::move(me.decided[key]);
  me.decided.erase(key);
  if (outcome.ok()) return Outcome::kCommitted;
  // A lost peer: update and run it again. Anything else is the caller's error, as from the
  // library, and the run ends.
  return outcome.code() == WCCL_ERR_PEER_LOST ? Outcome::kRetry : fail(r, outcome);
}

// A simulated member as state sync's: its operations are attempt()'s, its re-form call()'s. The
// descriptions' all-gathers carry their bytes (exact: host buffers whatever the workload), so
// every member decodes and plans from what the others sent, as in the library.
class SimSyncMember final : public comm::SyncMember {
 public:
  SimSyncMember(Driver &d, int r, SimMemory &memory, SimMemory &exact)
      : d_(d), r_(r), me_(d.w_.peer(r)), memory_(memory), exact_(exact) {}
  int rank() const override { return me_.view.rank(); }
  int size() const override { return me_.view.size(); }
  bool revoked() const override { return me_.view.revoked(); }
  size_t chunk_bytes() const override { return d_.base_.chunk_bytes; }
  Status run(const algo::Collective &c, comm::OpStats *) override {
    if (c.kind != algo::Kind::kStateSync) return status(d_.attempt(r_, exact_, c, -1, nullptr, 0));
    // The transfer: received bytes are staged (elided: the untouched space) and checked against
    // their hash before the commit, then copied into the tensors, as the Communicator does.
    const bool data = d_.w_.work.data;
    algo::Collective op = c;
    stage_.assign(data ? c.count : 0, 0);
    op.in = op.out = data ? stage_.data() : d_.space_->base();
    Status st = status(d_.attempt(r_, memory_, op, -1, nullptr, c.count));
    if (!st.ok()) return st;
    return algo::deliver_received(*c.sync, static_cast<const uint8_t *>(op.out),
                                  [&](void *to, const uint8_t *from, size_t n,
                                      algo::DeviceMemory *) { return memory_.copy(to, from, n); });
  }
  Status reform() override { return d_.call(r_, coord::MessageType::kReform); }

 private:
  static Status status(Driver::Outcome o) {
    if (o == Driver::Outcome::kCommitted) return Status();
    if (o == Driver::Outcome::kRetry)
      return WCCL_ERROR(WCCL_ERR_PEER_LOST, "sim: the operation's epoch ended");
    return WCCL_ERROR(WCCL_ERR_ABORTED, "sim: the member stopped");
  }

  Driver &d_;
  const int r_;
  Peer &me_;
  SimMemory &memory_, &exact_;
  std::vector<uint8_t> stage_;
};

// State sync as the library runs it (comm/state_sync.cc): every member hashes its state to
// describe it (the CPU time is charged; the hash is the workload's), then the library's own rounds:
// the descriptions all-gathered (their lengths, then the descriptions), every member plans alike,
// and the members that hold the state send it to those that lack it (the trainer's SEND_ONLY and
// RECEIVE_ONLY), who check its hash before the commit; a lost peer re-forms the survivors.
Driver::Outcome Driver::sync(int r, SimMemory &memory, SimMemory &exact) {
  Peer &me = w_.peer(r);
  const Workload &work = w_.work;
  if (!memory.hashed(work.state_bytes).ok()) return Outcome::kStop;
  algo::MemberState mine;
  mine.mode = me.has_state ? algo::SyncMode::kSendOnly : algo::SyncMode::kReceiveOnly;
  mine.revision = me.has_state ? 1 : 0;
  mine.tensors.push_back(
      {"state", codec::Dtype::kU8, work.state_bytes, me.has_state ? held_hash_ : fresh_hash_});
  uint8_t *tensor = work.data ? state[static_cast<size_t>(r)].data() : space_->base();
  auto new_job = [&] {
    auto job = std::make_shared<algo::SyncJob>();
    job->tensors = {tensor};
    job->tensor_bytes = {work.state_bytes};
    return job;
  };
  SimSyncMember member(*this, r, memory, exact);
  comm::SyncStats stats;
  std::shared_ptr<const algo::SyncJob> done;
  const Status st = comm::sync_rounds(member, mine, new_job, &stats, &done);
  if (st.code() == WCCL_ERR_PEER_LOST) return Outcome::kRetry;
  if (st.code() == WCCL_ERR_ABORTED) return Outcome::kStop;
  if (!st.ok()) return fail(r, st);
  me.synced_epoch = me.view.epoch();
  if (!me.has_state) {
    // Committed: the received state is its own, and it goes on where the others are.
    me.has_state = true;
    for (int m : me.ring()) me.next_op = std::max(me.next_op, w_.peer(m).next_op);
    w_.admissions[static_cast<size_t>(r - peers_)].synced = seconds(w_.engine.now());
  }
  return Outcome::kCommitted;
}

Status Driver::call(int r, coord::MessageType type) {
  Peer &me = w_.peer(r);
  comm::Actions actions;
  Status called = me.view.call(type, &actions);
  w_.carry_out(r, r, std::move(actions));
  if (!called.ok()) {
    fail(r, called);
    return called;
  }
  if (!w_.engine.block(r, [&me] { return me.view.call_answered(); })) {
    return WCCL_ERROR(WCCL_ERR_ABORTED, "sim: member %d's call was never answered", r);
  }
  const Status &answer = me.view.call_status();
  if (!answer.ok() && answer.code() != WCCL_ERR_PEER_LOST) fail(r, answer);
  return answer;
}

void Driver::run(int r) {
  Peer &me = w_.peer(r);
  const Workload &work = w_.work;
  SimMemory memory(w_, r, cpu_, space_), exact(w_, r, cpu_, nullptr);
  // A joiner's process starts at its time and asks to join.
  bool running = r < peers_ || w_.engine.sleep(r, work.joins[static_cast<size_t>(r - peers_)].at);
  if (running && r >= peers_) w_.join(r);
  while (running && me.next_op < ops_) {
    if (!w_.engine.block(
            r, [&me] { return me.view.revoked() || (me.view.epoch() != 0 && me.links_open); }))
      break;
    const bool sync_due =
        w_.needs_sync.count(me.view.epoch()) != 0 && me.synced_epoch != me.view.epoch();
    if (me.view.revoked() || (me.view.pending() > 0 && !sync_due)) {
      // The training loop's update: its answer to PEER_LOST, and, at an operation's boundary, how
      // joiners that wait are admitted (not inside a state sync: that goes on first).
      const Status st = call(r, coord::MessageType::kUpdate);
      running = st.ok() || st.code() == WCCL_ERR_PEER_LOST;
      continue;
    }
    if (sync_due) {
      running = sync(r, memory, exact) != Outcome::kStop;
      continue;
    }
    const int k = me.next_op;
    auto &first_start = started[static_cast<size_t>(k)][static_cast<size_t>(r)];
    if (first_start == kNever) first_start = w_.engine.now();
    algo::Collective c = base_;
    if (work.data) {
      auto &b = buffers[static_cast<size_t>(r)];
      b.resize(algo::out_count(c, me.view.size()));
      for (size_t i = 0; i < b.size(); ++i) b[i] = pattern(r, i);
      c.in = c.out = b.data();
    } else {
      c.in = c.out = space_->base();
    }
    const Outcome o =
        attempt(r, memory, c, k, &data_done[static_cast<size_t>(k)][static_cast<size_t>(r)], 0);
    running = o != Outcome::kStop;
    if (o != Outcome::kCommitted) continue;
    committed[static_cast<size_t>(k)][static_cast<size_t>(r)] = w_.engine.now();
    last_ring[static_cast<size_t>(r)] = me.ring();
    if (r >= peers_ && w_.admissions[static_cast<size_t>(r - peers_)].committed < 0) {
      w_.admissions[static_cast<size_t>(r - peers_)].committed = seconds(w_.engine.now());
    }
    if (++me.next_op < ops_) w_.engine.sleep(r, work.gap);
  }
  if (!me.stopped) {
    // A joiner never admitted asked after the job's last update: that is no failure.
    const bool admitted = r < peers_ || me.view.epoch() != 0;
    if (me.next_op < ops_ && admitted && failures[static_cast<size_t>(r)].second.ok()) {
      failures[static_cast<size_t>(r)] = {
          w_.engine.now(), WCCL_ERROR(WCCL_ERR_TIMEOUT,
                                      "sim: member %d could not finish operation %d: nothing more "
                                      "could happen",
                                      r, me.next_op)};
    }
    if (me.asked) --w_.active;
  }
  me.done = true;
  w_.engine.finished();
}

}  // namespace wccl::sim
