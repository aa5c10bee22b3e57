// The outer loop of DiLoCo on a node of several GPUs, in C++ on the C API: one thread per local
// rank, each with a wccl communicator of its own group ("local<r>": the local ranks r of every
// node) naming this node and its group count (node_groups: the coordinator admits, drops and
// loses the node whole), and a local group of the node's ranks. Every outer step each rank updates
// its group (admitting nodes that joined meanwhile), brings a new epoch's members to the same
// state (wccl_state_sync of the model and its momentum, the revision being the outer step), runs
// its inner steps (here: gradient steps on a quadratic whose target depends on the rank's data),
// averages its pseudo-gradient over every rank of every node with wccl_hier_allreduce, retrying
// after wccl_comm_update (and a state sync) whenever a node is lost, and applies Nesterov
// momentum. A node started mid-run joins, takes the job's state and step, and trains with it.
// Every rank of every node ends with the same model; each prints its hash (docs/algorithms.md,
// "Hierarchical all-reduce").
//
//   WCCL_COORDINATOR=host:48148 WCCL_TLS_CERT=node.pem WCCL_TLS_KEY=node.key WCCL_TLS_CA=ca.pem
//     wccl-hier-diloco --node NAME [--local-size 2] [--outer-steps 10] [--inner-steps 8]
//                      [--count 65536] [--wire native|int8] [--device cpu|cuda] [--step-ms 0]
//
// --device cuda keeps the pseudo-gradient in GPU memory (builds with CUDA; local rank r on GPU
// r % the GPUs there are) and, in builds with NCCL and as many GPUs as local ranks, takes an NCCL
// communicator as the local group; otherwise the local group is the node's threads.
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "wccl/wccl.h"
#if WCCL_EXAMPLE_CUDA
#include <cuda_runtime.h>
#endif
#if WCCL_EXAMPLE_NCCL
#include <nccl.h>
#endif

namespace {

struct Options {
  std::string node;
  int local_size = 2;
  int outer_steps = 10;
  int inner_steps = 8;
  size_t count = 65536;
  int wire = WCCL_WIRE_NATIVE;
  bool cuda = false;
  int step_ms = 0;  // extra time per inner step, as a real model's compute would take
};

uint64_t mix(uint64_t x) {  // splitmix64: the rank's "data"
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t hash_bytes(const void *p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; ++i)
    h = (h ^ static_cast<const unsigned char *>(p)[i]) * 1099511628211ULL;
  return h;
}

// Where the pseudo-gradient is averaged: host memory, or a GPU's.
class Buffer {
 public:
  Buffer(size_t count, bool cuda, int local_rank) : cuda_(cuda) {
#if WCCL_EXAMPLE_CUDA
    if (cuda_) {
      int devices = 1;
      (void)cudaGetDeviceCount(&devices);
      (void)cudaSetDevice(local_rank % (devices > 0 ? devices : 1));
      if (cudaMalloc(&device_, count * sizeof(float)) != cudaSuccess) device_ = nullptr;
      return;
    }
#else
    (void)local_rank;
#endif
    host_.resize(count);
  }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  ~Buffer() {
#if WCCL_EXAMPLE_CUDA
    if (device_ != nullptr) (void)cudaFree(device_);
#endif
  }
  bool ok() const { return !cuda_ || device_ != nullptr; }
  void *data() { return cuda_ ? device_ : host_.data(); }
  void put(const std::vector<float> &v) {
#if WCCL_EXAMPLE_CUDA
    if (cuda_) {
      (void)cudaMemcpy(device_, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice);
      return;
    }
#endif
    host_ = v;
  }
  void get(std::vector<float> *v) {
#if WCCL_EXAMPLE_CUDA
    if (cuda_) {
      (void)cudaMemcpy(v->data(), device_, v->size() * sizeof(float), cudaMemcpyDeviceToHost);
      return;
    }
#endif
    *v = host_;
  }

 private:
  bool cuda_;
  std::vector<float> host_;
  void *device_ = nullptr;
};

int fail(const Options &o, int rank, const char *what, wccl_result_t r) {
  std::fprintf(stderr, "%s rank %d: %s: %s (%s)\n", o.node.c_str(), rank, what, wccl_result_name(r),
               wccl_last_error());
  return 1;
}

// Retries update while the coordinator is away (it may be restarting), for at most a minute.
wccl_result_t update(wccl_comm_t *comm) {
  wccl_result_t r = WCCL_OK;
  for (int tries = 0; tries < 600; ++tries) {
    r = wccl_comm_update(comm);
    if (r != WCCL_ERR_COORDINATOR_UNREACHABLE) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return r;
}

int run_rank(const Options &o, int rank, wccl_local_group_t *local) {
  wccl_config_t *cfg = nullptr;
  wccl_result_t r = wccl_config_create(&cfg);
  if (r != WCCL_OK) return fail(o, rank, "config", r);
  const std::string group = "local" + std::to_string(rank),
                    name = o.node + "-" + std::to_string(rank);
  wccl_comm_t *comm = nullptr;
  if ((r = wccl_config_set(cfg, "group", group.c_str())) != WCCL_OK ||
      (r = wccl_config_set(cfg, "node", o.node.c_str())) != WCCL_OK ||
      (r = wccl_config_set(cfg, "node_groups", std::to_string(o.local_size).c_str())) != WCCL_OK ||
      (r = wccl_config_set(cfg, "name", name.c_str())) != WCCL_OK ||
      (r = wccl_comm_join(&comm, cfg)) != WCCL_OK) {
    wccl_config_destroy(cfg);
    return fail(o, rank, "join", r);
  }
  wccl_config_destroy(cfg);

  const uint64_t seed = hash_bytes(o.node.data(), o.node.size()) ^ mix(static_cast<uint64_t>(rank));
  std::vector<float> x(o.count), momentum(o.count, 0.0f), local_x(o.count), delta(o.count);
  for (size_t i = 0; i < o.count; ++i)
    x[i] = std::sin(static_cast<float>(i));  // the same on every rank
  Buffer shared(o.count, o.cuda, rank);
  if (!shared.ok()) return fail(o, rank, "cudaMalloc", WCCL_ERR_CUDA);
  wccl_opts_t opts = wccl_opts_default();
  opts.wire = o.wire;
  const float lr = 0.1f, outer_lr = 0.7f, mu = 0.9f;
  // The state a new epoch's members agree on: the model and its momentum, at the outer step that
  // the revision counts (a node that joins mid-run holds revision 0 and takes the job's).
  const wccl_tensor_t state[2] = {
      {"x", x.data(), x.size(), WCCL_F32, WCCL_DEVICE_HOST},
      {"momentum", momentum.data(), momentum.size(), WCCL_F32, WCCL_DEVICE_HOST}};
  uint64_t synced_epoch = 0;
  int step = 0;
  // After any update: a new epoch (nodes admitted or lost) syncs the state first.
  auto sync = [&]() -> wccl_result_t {
    while (wccl_comm_epoch(comm) != synced_epoch) {
      uint64_t revision = static_cast<uint64_t>(step);
      wccl_result_t s = wccl_state_sync(comm, state, 2, &revision, WCCL_SYNC_POPULAR, nullptr);
      if (s == WCCL_ERR_PEER_LOST) {
        if ((s = update(comm)) != WCCL_OK) return s;
        continue;
      }
      if (s != WCCL_OK) return s;
      synced_epoch = wccl_comm_epoch(comm);
      step = static_cast<int>(revision);
    }
    return WCCL_OK;
  };
  if ((r = sync()) != WCCL_OK)
    return fail(o, rank, "state sync", r);  // the job's, if it joined late
  while (step < o.outer_steps) {
    // Inner steps: gradient descent on 0.5 |x - t|^2, t = 1 + this rank's noise for the step.
    local_x = x;
    double loss = 0;
    for (int h = 0; h < o.inner_steps; ++h) {
      const uint64_t batch =
          mix(seed ^ mix(static_cast<uint64_t>(step) * static_cast<uint64_t>(o.inner_steps) +
                         static_cast<uint64_t>(h)));
      for (size_t i = 0; i < o.count; ++i) {
        const float noise =
            static_cast<float>(static_cast<int64_t>(mix(batch + i) % 2001) - 1000) * 1e-4f;
        const float g = local_x[i] - (1.0f + noise);
        if (h == 0) loss += 0.5 * static_cast<double>(g) * g;
        local_x[i] -= lr * g;
      }
      if (o.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.step_ms));
    }
    for (size_t i = 0; i < o.count; ++i) delta[i] = x[i] - local_x[i];
    // The outer step: the pseudo-gradient averaged over every rank of every node. On PEER_LOST
    // every rank of every node failed alike and the buffer is as it was: update, retry.
    shared.put(delta);
    while ((r = wccl_hier_allreduce(shared.data(), shared.data(), o.count, WCCL_F32, WCCL_AVG,
                                    local, comm, &opts)) == WCCL_ERR_PEER_LOST) {
      if ((r = update(comm)) != WCCL_OK) return fail(o, rank, "update", r);
      if ((r = sync()) != WCCL_OK) return fail(o, rank, "state sync", r);
    }
    if (r != WCCL_OK) return fail(o, rank, "hier_allreduce", r);
    shared.get(&delta);
    for (size_t i = 0; i < o.count; ++i) {
      momentum[i] = mu * momentum[i] + delta[i];
      x[i] -= outer_lr * (delta[i] + mu * momentum[i]);
    }
    if (rank == 0) {
      std::printf("%s step %d loss %.6f nodes %d epoch %" PRIu64 "\n", o.node.c_str(), step,
                  loss / static_cast<double>(o.count), wccl_comm_size(comm), wccl_comm_epoch(comm));
      std::fflush(stdout);
    }
    ++step;
    // The outer boundary: nodes that joined meanwhile are admitted here, whole, and take the state.
    if ((r = update(comm)) != WCCL_OK) return fail(o, rank, "update", r);
    if ((r = sync()) != WCCL_OK) return fail(o, rank, "state sync", r);
  }
  std::printf("%s rank %d done hash %016" PRIx64 "\n", o.node.c_str(), rank,
              hash_bytes(x.data(), x.size() * sizeof(float)));
  std::fflush(stdout);
  r = wccl_comm_leave(comm);
  wccl_comm_destroy(comm);
  return r == WCCL_OK ? 0 : fail(o, rank, "leave", r);
}

bool parse(int argc, char **argv, Options *o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--node")
      o->node = value;
    else if (flag == "--local-size")
      o->local_size = std::atoi(value.c_str());
    else if (flag == "--outer-steps")
      o->outer_steps = std::atoi(value.c_str());
    else if (flag == "--inner-steps")
      o->inner_steps = std::atoi(value.c_str());
    else if (flag == "--count")
      o->count = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--step-ms")
      o->step_ms = std::atoi(value.c_str());
    else if (flag == "--wire" && (value == "native" || value == "int8"))
      o->wire = value == "int8" ? WCCL_WIRE_INT8 : WCCL_WIRE_NATIVE;
    else if (flag == "--device" && (value == "cpu" || value == "cuda"))
      o->cuda = value == "cuda";
    else
      return false;
  }
  return argc % 2 == 1 && !o->node.empty() && o->local_size >= 1 && o->outer_steps >= 0 &&
         o->inner_steps >= 1 && o->count > 0;
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(
        stderr,
        "usage: %s --node NAME [--local-size L] [--outer-steps S] [--inner-steps H] [--count N] "
        "[--wire native|int8] [--device cpu|cuda] [--step-ms MS]\n",
        argv[0]);
    return 2;
  }
#if !WCCL_EXAMPLE_CUDA
  if (o.cuda) {
    std::fprintf(stderr, "--device cuda: this example was built without CUDA\n");
    return 2;
  }
#endif
  std::vector<wccl_local_group_t *> local(static_cast<size_t>(o.local_size), nullptr);
  wccl_result_t r = WCCL_ERR_UNSUPPORTED;
#if WCCL_EXAMPLE_NCCL
  // One NCCL communicator of the node's ranks, one GPU each (NCCL takes no two ranks on a GPU).
  int devices = 0;
  std::vector<ncclComm_t> comms;
  if (o.cuda && cudaGetDeviceCount(&devices) == cudaSuccess && devices >= o.local_size) {
    ncclUniqueId id;
    comms.assign(local.size(), nullptr);
    ncclResult_t made = ncclGetUniqueId(&id);
    if (made == ncclSuccess) made = ncclGroupStart();
    for (int i = 0; i < o.local_size && made == ncclSuccess; ++i) {
      if (cudaSetDevice(i) != cudaSuccess) made = ncclUnhandledCudaError;
      if (made == ncclSuccess)
        made = ncclCommInitRank(&comms[static_cast<size_t>(i)], o.local_size, id, i);
    }
    if (ncclGroupEnd() != ncclSuccess || made != ncclSuccess) {
      std::fprintf(stderr, "%s: NCCL: %s\n", o.node.c_str(), ncclGetErrorString(made));
      return 1;
    }
    for (size_t i = 0; i < local.size(); ++i) {
      if ((r = wccl_local_group_nccl(&local[i], comms[i])) != WCCL_OK)
        return fail(o, static_cast<int>(i), "local group", r);
    }
    std::printf("%s local group: NCCL over %d GPUs\n", o.node.c_str(), o.local_size);
  }
#endif
  if (r != WCCL_OK && (r = wccl_local_group_threads(o.local_size, local.data())) != WCCL_OK)
    return fail(o, -1, "local group", r);
  std::vector<int> codes(local.size(), 1);
  std::vector<std::thread> ranks;
  ranks.reserve(local.size());
  for (int i = 0; i < o.local_size; ++i) {
    ranks.emplace_back(
        [&, i] { codes[static_cast<size_t>(i)] = run_rank(o, i, local[static_cast<size_t>(i)]); });
  }
  for (auto &t : ranks) t.join();
  for (wccl_local_group_t *g : local) wccl_local_group_destroy(g);
#if WCCL_EXAMPLE_NCCL
  for (ncclComm_t c : comms) (void)ncclCommDestroy(c);
#endif
  for (int c : codes) {
    if (c != 0) return c;
  }
  return 0;
}
