#include "sim/simulate.h"

#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <thread>
#include <tuple>

#include "algo/exchange.h"
#include "algo/memory.h"
#include "codec/wire.h"

namespace wccl::sim {
namespace {

// A completion that runs once: from the network's events, or at once from abort().
struct Once {
  std::mutex mu;
  algo::Completion done;
  void fire(const Status &st) {
    algo::Completion d;
    {
      std::lock_guard<std::mutex> lock(mu);
      d = std::move(done);
      done = nullptr;
    }
    if (d) d(st);
  }
};

// Address space nothing touches, for elided buffers: every allocation aliases it.
class Void {
 public:
  explicit Void(size_t bytes) : bytes_(bytes) {
    void *p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t *>(p);
  }
  ~Void() {
    if (base_ != nullptr) munmap(base_, bytes_);
  }
  uint8_t *base() const { return base_; }
  size_t size() const { return bytes_; }

 private:
  size_t bytes_;
  uint8_t *base_;
};

// The messages of every operation, keyed by (operation, from, to, tag). Only the driving thread
// touches it (from events).
class Mailboxes {
 public:
  using Key = std::tuple<int, int, int, uint32_t>;
  struct Recv {
    uint8_t *data;
    size_t len;
    size_t *got;
    std::shared_ptr<Once> once;
    int rank;
  };
  explicit Mailboxes(Engine &engine) : engine_(engine) {}

  void arrive(const Key &k, std::shared_ptr<std::vector<uint8_t>> bytes, size_t len) {
    auto it = recvs_.find(k);
    if (it == recvs_.end()) {
      arrived_[k] = {std::move(bytes), len};
      return;
    }
    Recv r = it->second;
    recvs_.erase(it);
    place(r, bytes.get(), len);
  }
  void post(const Key &k, const Recv &r) {
    auto it = arrived_.find(k);
    if (it == arrived_.end()) {
      recvs_[k] = r;
      return;
    }
    auto [bytes, len] = std::move(it->second);
    arrived_.erase(it);
    place(r, bytes.get(), len);
  }

 private:
  void place(const Recv &r, const std::vector<uint8_t> *bytes, size_t len) {
    Status st;
    if (r.got == nullptr ? len != r.len : len > r.len) {
      st = WCCL_ERROR(WCCL_ERR_PROTOCOL, "a message of %zu bytes for a receive of %zu", len, r.len);
    } else {
      if (bytes != nullptr && len > 0) std::memcpy(r.data, bytes->data(), len);
      if (r.got != nullptr) *r.got = len;
    }
    r.once->fire(st);
    engine_.touch(r.rank);
  }

  Engine &engine_;
  std::map<Key, std::pair<std::shared_ptr<std::vector<uint8_t>>, size_t>> arrived_;
  std::map<Key, Recv> recvs_;
};

struct World {
  World(const Topology &topo, const std::vector<int> &ranks, const TcpOptions &tcp)
      : engine(static_cast<int>(ranks.size())), net(engine, topo, tcp), mail(engine), hosts(ranks) {}
  Engine engine;
  Network net;
  Mailboxes mail;
  std::vector<int> hosts;  // rank -> host
  bool data = false;
};

// One member's view of one operation.
class SimChannel final : public algo::Channel {
 public:
  SimChannel(World &w, int rank, int op) : w_(w), rank_(rank), op_(op) {}
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(w_.hosts.size()); }

  Status send(int peer, uint32_t tag, const void *data, size_t len, algo::Completion done) override {
    auto once = track(std::move(done));
    std::shared_ptr<std::vector<uint8_t>> bytes;
    if (w_.data) {
      const auto *p = static_cast<const uint8_t *>(data);
      bytes = std::make_shared<std::vector<uint8_t>>(p, p + len);
    }
    const Mailboxes::Key key{op_, rank_, peer, tag};
    World &w = w_;
    const int rank = rank_;
    w_.engine.at(w_.engine.now(), rank_, [&w, rank, peer, len, key, once, bytes] {
      w.net.send(w.hosts[static_cast<size_t>(rank)], w.hosts[static_cast<size_t>(peer)], len,
                 [&w, rank, once] {
                   once->fire(Status());
                   w.engine.touch(rank);
                 },
                 [&w, key, bytes, len] { w.mail.arrive(key, bytes, len); });
    });
    return Status();
  }

  Status recv(int peer, uint32_t tag, void *data, size_t len, size_t *got, algo::Completion done) override {
    Mailboxes::Recv r{static_cast<uint8_t *>(data), len, got, track(std::move(done)), rank_};
    const Mailboxes::Key key{op_, peer, rank_, tag};
    World &w = w_;
    w_.engine.at(w_.engine.now(), rank_, [&w, key, r] { w.mail.post(key, r); });
    return Status();
  }

  void abort(const Status &why) override {
    for (auto &once : outstanding_) once->fire(why);
    outstanding_.clear();
  }

  bool wait_until(std::unique_lock<std::mutex> &lock, std::condition_variable &, std::chrono::steady_clock::time_point,
                  const std::function<bool()> &ready) override {
    std::mutex *mu = lock.mutex();
    lock.unlock();
    const bool ok = w_.engine.block(rank_, [mu, &ready] {
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
  const int rank_, op_;
  std::vector<std::shared_ptr<Once>> outstanding_;
};

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
  Status reduce_into(codec::Dtype t, codec::RedOp op, void *dst, const void *mine, const uint8_t *got,
                     size_t count) override {
    if (!elided()) WCCL_RETURN_IF_ERROR(algo::host_memory().reduce_into(t, op, dst, mine, got, count));
    return spend(count * codec::dtype_size(t), cpu_.reduce);
  }
  Status finish_avg(codec::Dtype t, void *dst, size_t count, int by) override {
    if (!elided()) WCCL_RETURN_IF_ERROR(algo::host_memory().finish_avg(t, dst, count, by));
    return spend(count * codec::dtype_size(t), cpu_.reduce);
  }
  Status encode(codec::Wire w, const float *src, size_t count, uint8_t *wire, size_t first) override {
    if (!elided()) WCCL_RETURN_IF_ERROR(algo::host_memory().encode(w, src, count, wire, first));
    return spend(count * 4, cpu_.encode);
  }
  Status decode(codec::Wire w, const uint8_t *wire, size_t len, size_t count, float *dst) override {
    if (!elided()) WCCL_RETURN_IF_ERROR(algo::host_memory().decode(w, wire, len, count, dst));
    return spend(count * 4, cpu_.decode);
  }
  Status decode_reduce(codec::Wire w, codec::RedOp op, const uint8_t *wire, size_t len, size_t count, float *dst,
                       const float *mine) override {
    if (!elided()) WCCL_RETURN_IF_ERROR(algo::host_memory().decode_reduce(w, op, wire, len, count, dst, mine));
    return spend(count * 4, cpu_.decode_reduce);
  }

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
      if (n > space_->size()) return WCCL_ERROR(WCCL_ERR_NO_MEMORY, "sim: %zu bytes exceed the elided space", n);
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

// The pattern of bench/perf/sweep.h: element i of rank r holds (r + 1) * ((i % 251) + 1).
float pattern(int rank, size_t i) { return static_cast<float>((rank + 1) * static_cast<int>(i % 251 + 1)); }

}  // namespace

double Report::mean() const {
  return seconds.empty() ? 0 : std::accumulate(seconds.begin(), seconds.end(), 0.0) / static_cast<double>(seconds.size());
}

Report simulate(const Topology &topo, const std::vector<int> &ranks, const TcpOptions &tcp, const CpuModel &cpu,
                const Workload &work) {
  Report report;
  const int n = static_cast<int>(ranks.size());
  algo::Collective base = work.op;
  if (n < 2) {
    report.status = WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "sim: at least 2 peers are needed");
    return report;
  }
  if (base.algo == algo::Algo::kAuto) base.algo = algo::Algo::kRing;
  if (work.data && (base.dtype != codec::Dtype::kF32 || base.kind != algo::Kind::kAllreduce)) {
    report.status = WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "sim: data is carried for F32 all-reduces only");
    return report;
  }
  World w(topo, ranks, tcp);
  w.data = work.data;
  const size_t in_bytes = algo::in_count(base, n) * codec::dtype_size(base.dtype);
  const size_t out_bytes = algo::out_count(base, n) * codec::dtype_size(base.dtype);
  std::unique_ptr<Void> space;
  if (!work.data) {
    space = std::make_unique<Void>(std::max(in_bytes, out_bytes) * 2 + (size_t{64} << 20));
    if (space->base() == nullptr) {
      report.status = WCCL_ERROR(WCCL_ERR_NO_MEMORY, "sim: cannot reserve address space for the elided buffers");
      return report;
    }
  }
  const int ops = work.warmup + work.iters;
  struct Commit {
    int done = 0;
    Time at_coordinator = 0;
  };
  std::vector<Commit> commits(static_cast<size_t>(ops));
  std::vector<std::vector<Time>> started(static_cast<size_t>(ops), std::vector<Time>(static_cast<size_t>(n), 0));
  std::vector<std::vector<Time>> committed = started, data_done = started;
  std::vector<HostTraffic> traffic_before;
  std::vector<Status> failures(static_cast<size_t>(n));
  std::vector<std::vector<float>> buffers(work.data ? static_cast<size_t>(n) : 0);
  auto delay = [&](int from_host, int to_host) {
    return from_host == to_host ? Time{0}
                                : topo.delay_ns[static_cast<size_t>(from_host)][static_cast<size_t>(to_host)];
  };

  auto member = [&](int r) {
    SimMemory memory(w, r, cpu, space.get());
    const int host = ranks[static_cast<size_t>(r)];
    for (int k = 0; k < ops && failures[static_cast<size_t>(r)].ok(); ++k) {
      algo::Collective c = base;
      c.memory = &memory;
      if (work.data) {
        auto &b = buffers[static_cast<size_t>(r)];
        b.resize(algo::out_count(c, n));
        for (size_t i = 0; i < b.size(); ++i) b[i] = pattern(r, i);
        c.in = c.out = b.data();
      } else {
        c.in = c.out = space->base();
      }
      started[static_cast<size_t>(k)][static_cast<size_t>(r)] = w.engine.now();
      Status st;
      {
        SimChannel channel(w, r, k);
        algo::Exchange ex(channel, std::chrono::steady_clock::time_point::max());
        st = algo::run(ex, c, nullptr);
        ex.finish();
      }
      data_done[static_cast<size_t>(k)][static_cast<size_t>(r)] = w.engine.now();
      if (!st.ok()) {
        failures[static_cast<size_t>(r)] = st;
        break;
      }
      // The commit: every member's report reaches the coordinator, which answers each.
      Time commit = w.engine.now();
      if (work.coordinator >= 0) {
        Commit &cm = commits[static_cast<size_t>(k)];
        const Time arrives = w.engine.now() + delay(host, work.coordinator);
        w.engine.at(w.engine.now(), r, [&w, &cm, arrives, n, &traffic_before, last_warmup = k + 1 == work.warmup] {
          cm.at_coordinator = std::max(cm.at_coordinator, arrives);
          if (++cm.done < n) return;
          if (last_warmup) traffic_before = w.net.traffic();
          for (int i = 0; i < n; ++i) w.engine.touch(i);
        });
        if (!w.engine.block(r, [&cm, n] { return cm.done == n; })) {
          failures[static_cast<size_t>(r)] = WCCL_ERROR(WCCL_ERR_TIMEOUT, "sim: a member never reported its operation");
          break;
        }
        commit = cm.at_coordinator + delay(work.coordinator, host);
        w.engine.sleep(r, commit - w.engine.now());
      }
      committed[static_cast<size_t>(k)][static_cast<size_t>(r)] = commit;
      if (k + 1 < ops) w.engine.sleep(r, work.gap);
    }
    w.engine.finished(r);
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) threads.emplace_back(member, r);
  for (auto &t : threads) t.join();

  for (const Status &st : failures) {
    if (!st.ok()) {
      report.status = st;
      return report;
    }
  }
  for (int k = work.warmup; k < ops; ++k) {
    Time slowest = 0, phase = 0;
    for (int r = 0; r < n; ++r) {
      slowest = std::max(slowest, committed[static_cast<size_t>(k)][static_cast<size_t>(r)] -
                                      started[static_cast<size_t>(k)][static_cast<size_t>(r)]);
      phase = std::max(phase, data_done[static_cast<size_t>(k)][static_cast<size_t>(r)] -
                                  started[static_cast<size_t>(k)][static_cast<size_t>(r)]);
    }
    report.seconds.push_back(static_cast<double>(slowest) * 1e-9);
    report.data_phase += static_cast<double>(phase) * 1e-9 / work.iters;
  }
  if (work.iters > 0) {
    Time first = std::numeric_limits<Time>::max(), last = 0;
    for (int r = 0; r < n; ++r) {
      first = std::min(first, started[static_cast<size_t>(work.warmup)][static_cast<size_t>(r)]);
      last = std::max(last, committed[static_cast<size_t>(ops - 1)][static_cast<size_t>(r)]);
    }
    report.timed_s = static_cast<double>(last - first) * 1e-9;
  }
  report.traffic = w.net.traffic();
  if (!traffic_before.empty()) {
    for (size_t h = 0; h < report.traffic.size(); ++h) {
      report.traffic[h].sent -= traffic_before[h].sent;
      report.traffic[h].received -= traffic_before[h].received;
      report.traffic[h].up_busy -= traffic_before[h].up_busy;
    }
  }
  report.events = w.engine.events();
  report.losses = w.net.losses();
  if (work.data) {
    report.checked = true;
    const double sum_ranks = n * (n + 1) / 2.0;
    for (int r = 0; r < n && report.checked; ++r) {
      const auto &b = buffers[static_cast<size_t>(r)];
      if (std::memcmp(b.data(), buffers[0].data(), b.size() * sizeof(float)) != 0) report.checked = false;
      if (base.wire == codec::Wire::kNative && base.op == codec::RedOp::kSum) {
        for (size_t i = 0; i < b.size() && report.checked; ++i) {
          report.checked = b[i] == static_cast<float>(sum_ranks * static_cast<double>(i % 251 + 1));
        }
      }
    }
  }
  return report;
}

}  // namespace wccl::sim
