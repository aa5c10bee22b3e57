// Exported C functions for results, version and configuration: validate, then dispatch.
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "algo/collectives.h"
#include "api/guard.h"
#include "comm/communicator.h"
#include "codec/compress.h"
#include "codec/wire.h"
#include "comm/state_sync.h"
#include "coord/coordinator.h"
#include "core/config.h"
#include "gpu/kernels.h"
#include "gpu/device.h"
#include "hier/hier_allreduce.h"
#include "hier/nccl_group.h"
#include "hier/thread_group.h"
#include "wccl/wccl.h"

struct wccl_config {
  wccl::Config impl;
};

struct wccl_coord {
  std::unique_ptr<wccl::coord::Coordinator> impl;
};

struct wccl_comm {
  std::unique_ptr<wccl::comm::Communicator> impl;
};

struct wccl_local_group {
  std::unique_ptr<wccl::hier::Runner> runner;
};

// A collective of a communicator, or a hierarchical all-reduce of a local group's rank.
struct wccl_request {
  wccl::comm::Communicator *comm = nullptr;
  std::shared_ptr<wccl::comm::Op> op;
  wccl::hier::Runner *runner = nullptr;
  std::shared_ptr<wccl::hier::Op> hier;

  wccl::Status wait(wccl::comm::OpStats *stats) { return runner != nullptr ? runner->wait(hier, stats) : comm->wait(op, stats); }
  wccl::Status test() { return runner != nullptr ? runner->test(hier, nullptr) : comm->test(op, nullptr); }
};

namespace wccl {
namespace {
thread_local std::string t_last_error;
}  // namespace

void set_last_error(const Status &status) { t_last_error = status.to_string(); }

// A C caller may pass any int as an enum; loading it as the enum type would be undefined for values
// outside the enumerators, so parameters are read as the ints they are.
static int enum_value(const void *e) {
  int v;
  std::memcpy(&v, e, sizeof(v));
  return v;
}

}  // namespace wccl

extern "C" {

const char *wccl_result_name(wccl_result_t result) {
  switch (wccl::enum_value(&result)) {
#define WCCL_RESULT_NAME_(name, value, message) \
  case value:                                   \
    return #name;
    WCCL_RESULT_TABLE(WCCL_RESULT_NAME_)
#undef WCCL_RESULT_NAME_
  }
  return "WCCL_ERR_UNKNOWN";
}

const char *wccl_strerror(wccl_result_t result) {
  switch (wccl::enum_value(&result)) {
#define WCCL_RESULT_MESSAGE_(name, value, message) \
  case value:                                      \
    return message;
    WCCL_RESULT_TABLE(WCCL_RESULT_MESSAGE_)
#undef WCCL_RESULT_MESSAGE_
  }
  return "unknown result code";
}

const char *wccl_last_error(void) { return wccl::t_last_error.c_str(); }

const char *wccl_version(void) { return WCCL_VERSION_STRING; }

wccl_result_t wccl_config_create(wccl_config_t **config) {
  if (config != nullptr) *config = nullptr;
  return wccl::api_call([&]() -> wccl::Status {
    WCCL_CHECK_ARG(config != nullptr, "wccl_config_create: config (the out-handle) is NULL");
    WCCL_ASSIGN_OR_RETURN(wccl::Config cfg, wccl::Config::from_env());
    *config = new wccl_config{std::move(cfg)};
    return wccl::Status();
  });
}

void wccl_config_destroy(wccl_config_t *config) { delete config; }

wccl_result_t wccl_config_set(wccl_config_t *config, const char *key, const char *value) {
  return wccl::api_call([&]() -> wccl::Status {
    WCCL_CHECK_ARG(config != nullptr, "wccl_config_set: config is NULL");
    WCCL_CHECK_ARG(key != nullptr, "wccl_config_set: key is NULL");
    WCCL_CHECK_ARG(value != nullptr, "wccl_config_set: value for key \"%s\" is NULL", key);
    return config->impl.set(key, value);
  });
}

wccl_result_t wccl_config_get(const wccl_config_t *config, const char *key, char *buf,
                              size_t buf_size, size_t *needed) {
  return wccl::api_call([&]() -> wccl::Status {
    WCCL_CHECK_ARG(config != nullptr, "wccl_config_get: config is NULL");
    WCCL_CHECK_ARG(key != nullptr, "wccl_config_get: key is NULL");
    WCCL_ASSIGN_OR_RETURN(const std::string value, config->impl.get(key));
    const size_t size = value.size() + 1;
    if (needed != nullptr) *needed = size;
    WCCL_CHECK_ARG(buf != nullptr && buf_size >= size,
                   "wccl_config_get: buffer of %zu bytes is too small for key \"%s\", need %zu",
                   buf_size, key, size);
    std::memcpy(buf, value.c_str(), size);
    return wccl::Status();
  });
}

const char *wccl_config_keys(void) { return wccl::Config::describe_keys().c_str(); }

wccl_result_t wccl_coord_start(wccl_coord_t **coord, const wccl_config_t *config) {
  if (coord != nullptr) *coord = nullptr;
  return wccl::api_call([&]() -> wccl::Status {
    WCCL_CHECK_ARG(coord != nullptr, "wccl_coord_start: coord (the out-handle) is NULL");
    WCCL_CHECK_ARG(config != nullptr, "wccl_coord_start: config is NULL");
    WCCL_ASSIGN_OR_RETURN(auto started, wccl::coord::Coordinator::start(config->impl));
    *coord = new wccl_coord{std::move(started)};
    return wccl::Status();
  });
}

int wccl_coord_port(const wccl_coord_t *coord) { return coord != nullptr ? coord->impl->port() : 0; }

void wccl_coord_stop(wccl_coord_t *coord) { delete coord; }

wccl_result_t wccl_comm_join(wccl_comm_t **comm, const wccl_config_t *config) {
  if (comm != nullptr) *comm = nullptr;
  return wccl::api_call([&]() -> wccl::Status {
    WCCL_CHECK_ARG(comm != nullptr, "wccl_comm_join: comm (the out-handle) is NULL");
    WCCL_CHECK_ARG(config != nullptr, "wccl_comm_join: config is NULL");
    WCCL_ASSIGN_OR_RETURN(auto joined, wccl::comm::Communicator::join(config->impl));
    *comm = new wccl_comm{std::move(joined)};
    return wccl::Status();
  });
}

wccl_result_t wccl_comm_update(wccl_comm_t *comm) {
  return wccl::api_call([&]() -> wccl::Status {
    WCCL_CHECK_ARG(comm != nullptr, "wccl_comm_update: comm is NULL");
    return comm->impl->update();
  });
}

wccl_result_t wccl_comm_leave(wccl_comm_t *comm) {
  return wccl::api_call([&]() -> wccl::Status {
    WCCL_CHECK_ARG(comm != nullptr, "wccl_comm_leave: comm is NULL");
    return comm->impl->leave();
  });
}

void wccl_comm_abort(wccl_comm_t *comm) {
  if (comm != nullptr) comm->impl->abort();
}

int wccl_comm_rank(const wccl_comm_t *comm) { return comm != nullptr ? comm->impl->rank() : -1; }
int wccl_comm_size(const wccl_comm_t *comm) { return comm != nullptr ? comm->impl->size() : 0; }
uint64_t wccl_comm_epoch(const wccl_comm_t *comm) { return comm != nullptr ? comm->impl->epoch() : 0; }
int wccl_comm_pending(const wccl_comm_t *comm) { return comm != nullptr ? comm->impl->pending() : 0; }
int wccl_comm_update_due(const wccl_comm_t *comm) { return comm != nullptr && comm->impl->update_due() ? 1 : 0; }
wccl_epoch_origin_t wccl_comm_epoch_origin(const wccl_comm_t *comm) {
  return comm != nullptr ? static_cast<wccl_epoch_origin_t>(comm->impl->epoch_origin()) : WCCL_EPOCH_CONTINUES;
}

void wccl_comm_destroy(wccl_comm_t *comm) { delete comm; }

}  // extern "C"

namespace wccl {
namespace {

constexpr int kNoOp = -1000;  // prepare(): the collective takes no reduction operator

// Validates what every collective shares and fills c's type, op and options.
// dtype and op are the raw ints the caller passed (see enum_value); op is kNoOp where there is none.
Status prepare(const char *fn, algo::Collective *c, int dtype, int op, const wccl_opts_t *opts,
               std::chrono::milliseconds *timeout) {
  WCCL_CHECK_ARG(dtype >= 0 && dtype < codec::kDtypeCount, "%s: dtype %d is not a wccl_dtype_t", fn, dtype);
  c->dtype = static_cast<codec::Dtype>(dtype);
  if (op != kNoOp) {
    WCCL_CHECK_ARG(op >= 0 && op < codec::kRedOpCount, "%s: op %d is not a wccl_redop_t", fn, op);
    c->op = static_cast<codec::RedOp>(op);
  }
  wccl_opts_t o = opts != nullptr ? *opts : wccl_opts_default();
  WCCL_CHECK_ARG(o.size == sizeof(wccl_opts_t), "%s: opts->size is %zu, not sizeof(wccl_opts_t) = %zu (use wccl_opts_default)",
                 fn, o.size, sizeof(wccl_opts_t));
  WCCL_CHECK_ARG(o.algo >= WCCL_ALGO_AUTO && o.algo <= WCCL_ALGO_ALLGATHER, "%s: opts->algo %d is not a wccl_algo_t", fn, o.algo);
  WCCL_CHECK_ARG(o.wire >= 0 && o.wire < codec::kWireCount, "%s: opts->wire %d is not a wccl_wire_t", fn, o.wire);
  WCCL_CHECK_ARG(o.compress >= WCCL_COMPRESS_OFF && o.compress <= WCCL_COMPRESS_AUTO,
                 "%s: opts->compress %d is not a wccl_compress_t", fn, o.compress);
  WCCL_CHECK_ARG(o.timeout_ms >= 0, "%s: opts->timeout_ms is negative", fn);
  WCCL_CHECK_ARG(o.reserved == 0, "%s: opts->reserved must be 0", fn);
  if (o.compress != WCCL_COMPRESS_OFF && !codec::compression_available()) {
    return WCCL_ERROR(WCCL_ERR_UNSUPPORTED, "%s: compression needs zstd, which this library was built without", fn);
  }
  c->after = o.cuda_stream;
  c->algo = static_cast<algo::Algo>(o.algo);
  c->wire = static_cast<codec::Wire>(o.wire);
  c->compress = o.compress == WCCL_COMPRESS_ZSTD   ? algo::Compress::kAlways
                : o.compress == WCCL_COMPRESS_AUTO ? algo::Compress::kAuto
                                                   : algo::Compress::kOff;
  *timeout = std::chrono::milliseconds(o.timeout_ms);
  return Status();
}

// Checks the buffers for c on the communicator's current size, and finds the device they are on.
Status check_buffers(const char *fn, algo::Collective &c, wccl_comm_t *comm, bool needs_in) {
  const size_t n = static_cast<size_t>(std::max(1, comm->impl->size()));
  const size_t es = codec::dtype_size(c.dtype);
  WCCL_CHECK_ARG(c.count <= (SIZE_MAX / es) / n, "%s: count %zu is too large", fn, c.count);
  if (algo::in_count(c, static_cast<int>(n)) != 0 && needs_in) WCCL_CHECK_ARG(c.in != nullptr, "%s: sendbuf is NULL", fn);
  if (algo::out_count(c, static_cast<int>(n)) != 0) WCCL_CHECK_ARG(c.out != nullptr, "%s: recvbuf is NULL", fn);
  // Both buffers on one GPU, or both in host memory (a buffer the call does not use is not asked).
  const bool uses_in = algo::in_count(c, static_cast<int>(n)) != 0 && needs_in;
  const bool uses_out = algo::out_count(c, static_cast<int>(n)) != 0;
  gpu::Device *in_dev = uses_in ? gpu::device_of(c.in) : nullptr;
  gpu::Device *out_dev = uses_out ? gpu::device_of(c.out) : nullptr;
  if (uses_in && uses_out && in_dev != out_dev) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "%s: sendbuf is in %s and recvbuf in %s; both must be on one device or both in host memory",
                      fn, in_dev != nullptr ? in_dev->name().c_str() : "host memory",
                      out_dev != nullptr ? out_dev->name().c_str() : "host memory");
  }
  c.device = in_dev != nullptr ? in_dev : out_dev;
  if (c.after != nullptr && c.device == nullptr) {
    if (!gpu::available()) return WCCL_ERROR(WCCL_ERR_UNSUPPORTED, "%s: opts->cuda_stream is set, but this library has no CUDA", fn);
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                      "%s: opts->cuda_stream orders device buffers, and these are host memory (synchronize the stream first)", fn);
  }
  return Status();
}

// Queues c; on success *req owns the operation.
Status start(const algo::Collective &c, wccl_comm_t *comm, std::chrono::milliseconds timeout, wccl_request_t **req) {
  WCCL_ASSIGN_OR_RETURN(auto op, comm->impl->submit(c, timeout));
  *req = new wccl_request;
  (*req)->comm = comm->impl.get();
  (*req)->op = std::move(op);
  return Status();
}

void copy_stats(const comm::OpStats &in, wccl_op_stats_t *out) {
  if (out == nullptr) return;
  wccl_op_stats_t s{};
  s.size = sizeof(s);
  s.bytes_sent = in.bytes_sent;
  s.bytes_received = in.bytes_received;
  s.time_us = in.time_us;
  s.epoch = in.epoch;
  s.world_size = in.world_size;
  s.algo = static_cast<int32_t>(in.algo);
  *out = s;
}

// A blocking collective: queue, then wait.
Status run_blocking(const algo::Collective &c, wccl_comm_t *comm, std::chrono::milliseconds timeout) {
  WCCL_ASSIGN_OR_RETURN(auto op, comm->impl->submit(c, timeout));
  return comm->impl->wait(op, nullptr);
}

// Checks req (non-blocking forms) and comm, lets build fill in and check the collective, then
// queues it (*req) or runs it to its outcome.
template <typename Build>
wccl_result_t collective(const char *fn, wccl_request_t **req, bool nonblocking, wccl_comm_t *comm, Build build) {
  if (req != nullptr) *req = nullptr;
  return api_call([&]() -> Status {
    WCCL_CHECK_ARG(!nonblocking || req != nullptr, "%s: req (the out-handle) is NULL", fn);
    WCCL_CHECK_ARG(comm != nullptr, "%s: comm is NULL", fn);
    algo::Collective c;
    std::chrono::milliseconds timeout{0};
    WCCL_RETURN_IF_ERROR(build(&c, &timeout));
    return nonblocking ? start(c, comm, timeout, req) : run_blocking(c, comm, timeout);
  });
}

// wccl_wire_roundtrip on one GPU's memory: encoded into device scratch and decoded into out by the
// GPU, on the legacy default stream (after the work queued there), waited for.
Status device_roundtrip(gpu::Device &dev, codec::Wire w, const float *in, float *out, size_t count) {
  if (w == codec::Wire::kNative) {
    if (in != out) WCCL_RETURN_IF_ERROR(dev.copy(out, in, count * sizeof(float), nullptr));
    return dev.synchronize(nullptr);
  }
  void *scratch = nullptr;
  WCCL_RETURN_IF_ERROR(dev.alloc(&scratch, codec::wire_size(w, count)));
  auto *bytes = static_cast<uint8_t *>(scratch);
  Status st = dev.encode(w, in, count, bytes, 0, nullptr);  // waits: names a value it cannot encode
  if (st.ok()) st = dev.decode(w, bytes, count, out, nullptr);
  const Status synced = dev.synchronize(nullptr);  // before the scratch goes
  dev.free(scratch);
  return st.ok() ? synced : st;
}

}  // namespace
}  // namespace wccl

extern "C" {

wccl_opts_t wccl_opts_default(void) {
  wccl_opts_t o;
  std::memset(&o, 0, sizeof(o));
  o.size = sizeof(o);
  o.wire = WCCL_WIRE_NATIVE;
  o.algo = WCCL_ALGO_AUTO;
  o.compress = WCCL_COMPRESS_OFF;
  return o;
}

// The helpers below take dtype and op as the ints the caller passed (wccl::enum_value).
static wccl_result_t allreduce(const char *fn, wccl_request_t **req, bool nonblocking, const void *sendbuf, void *recvbuf, size_t count,
                               int dtype, int op, wccl_comm_t *comm, const wccl_opts_t *opts) {
  return wccl::collective(fn, req, nonblocking, comm, [&](wccl::algo::Collective *c, std::chrono::milliseconds *timeout) {
    WCCL_RETURN_IF_ERROR(wccl::prepare(fn, c, dtype, op, opts, timeout));
    c->kind = wccl::algo::Kind::kAllreduce;
    c->count = count;
    c->in = sendbuf;
    c->out = recvbuf;
    return wccl::check_buffers(fn, *c, comm, true);
  });
}

wccl_result_t wccl_allreduce(const void *sendbuf, void *recvbuf, size_t count, wccl_dtype_t dtype, wccl_redop_t op,
                             wccl_comm_t *comm, const wccl_opts_t *opts) {
  return allreduce("wccl_allreduce", nullptr, false, sendbuf, recvbuf, count, wccl::enum_value(&dtype), wccl::enum_value(&op), comm, opts);
}

wccl_result_t wccl_iallreduce(wccl_request_t **req, const void *sendbuf, void *recvbuf, size_t count, wccl_dtype_t dtype,
                              wccl_redop_t op, wccl_comm_t *comm, const wccl_opts_t *opts) {
  return allreduce("wccl_iallreduce", req, true, sendbuf, recvbuf, count, wccl::enum_value(&dtype), wccl::enum_value(&op), comm, opts);
}

static wccl_result_t broadcast(const char *fn, wccl_request_t **req, bool nonblocking, const void *sendbuf, void *recvbuf, size_t count,
                               int dtype, int root, wccl_comm_t *comm, const wccl_opts_t *opts) {
  return wccl::collective(fn, req, nonblocking, comm, [&](wccl::algo::Collective *c, std::chrono::milliseconds *timeout) {
    WCCL_RETURN_IF_ERROR(wccl::prepare(fn, c, dtype, wccl::kNoOp, opts, timeout));
    const int size = comm->impl->size();
    WCCL_CHECK_ARG(root >= 0 && root < size, "%s: root %d is not a rank of this epoch (size %d)", fn, root, size);
    c->kind = wccl::algo::Kind::kBroadcast;
    c->count = count;
    c->root = root;
    c->in = sendbuf;
    c->out = recvbuf;
    return wccl::check_buffers(fn, *c, comm, comm->impl->rank() == root);
  });
}

wccl_result_t wccl_broadcast(const void *sendbuf, void *recvbuf, size_t count, wccl_dtype_t dtype, int root,
                             wccl_comm_t *comm, const wccl_opts_t *opts) {
  return broadcast("wccl_broadcast", nullptr, false, sendbuf, recvbuf, count, wccl::enum_value(&dtype), root, comm, opts);
}

wccl_result_t wccl_ibroadcast(wccl_request_t **req, const void *sendbuf, void *recvbuf, size_t count, wccl_dtype_t dtype,
                              int root, wccl_comm_t *comm, const wccl_opts_t *opts) {
  return broadcast("wccl_ibroadcast", req, true, sendbuf, recvbuf, count, wccl::enum_value(&dtype), root, comm, opts);
}

static wccl_result_t allgather(const char *fn, wccl_request_t **req, bool nonblocking, const void *sendbuf, void *recvbuf, size_t count,
                               int dtype, wccl_comm_t *comm, const wccl_opts_t *opts) {
  return wccl::collective(fn, req, nonblocking, comm, [&](wccl::algo::Collective *c, std::chrono::milliseconds *timeout) {
    WCCL_RETURN_IF_ERROR(wccl::prepare(fn, c, dtype, wccl::kNoOp, opts, timeout));
    c->kind = wccl::algo::Kind::kAllgather;
    c->count = count;
    c->in = sendbuf;
    c->out = recvbuf;
    return wccl::check_buffers(fn, *c, comm, true);
  });
}

wccl_result_t wccl_allgather(const void *sendbuf, void *recvbuf, size_t sendcount, wccl_dtype_t dtype, wccl_comm_t *comm,
                             const wccl_opts_t *opts) {
  return allgather("wccl_allgather", nullptr, false, sendbuf, recvbuf, sendcount, wccl::enum_value(&dtype), comm, opts);
}

wccl_result_t wccl_iallgather(wccl_request_t **req, const void *sendbuf, void *recvbuf, size_t sendcount,
                              wccl_dtype_t dtype, wccl_comm_t *comm, const wccl_opts_t *opts) {
  return allgather("wccl_iallgather", req, true, sendbuf, recvbuf, sendcount, wccl::enum_value(&dtype), comm, opts);
}

static wccl_result_t reduce_scatter(const char *fn, wccl_request_t **req, bool nonblocking, const void *sendbuf, void *recvbuf,
                                    size_t count, int dtype, int op, wccl_comm_t *comm,
                                    const wccl_opts_t *opts) {
  return wccl::collective(fn, req, nonblocking, comm, [&](wccl::algo::Collective *c, std::chrono::milliseconds *timeout) {
    WCCL_RETURN_IF_ERROR(wccl::prepare(fn, c, dtype, op, opts, timeout));
    c->kind = wccl::algo::Kind::kReduceScatter;
    c->count = count;
    c->in = sendbuf;
    c->out = recvbuf;
    return wccl::check_buffers(fn, *c, comm, true);
  });
}

wccl_result_t wccl_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount, wccl_dtype_t dtype,
                                  wccl_redop_t op, wccl_comm_t *comm, const wccl_opts_t *opts) {
  return reduce_scatter("wccl_reduce_scatter", nullptr, false, sendbuf, recvbuf, recvcount, wccl::enum_value(&dtype), wccl::enum_value(&op), comm, opts);
}

wccl_result_t wccl_ireduce_scatter(wccl_request_t **req, const void *sendbuf, void *recvbuf, size_t recvcount,
                                   wccl_dtype_t dtype, wccl_redop_t op, wccl_comm_t *comm, const wccl_opts_t *opts) {
  return reduce_scatter("wccl_ireduce_scatter", req, true, sendbuf, recvbuf, recvcount, wccl::enum_value(&dtype), wccl::enum_value(&op), comm, opts);
}

wccl_result_t wccl_wire_roundtrip(const float *in, float *out, size_t count, wccl_wire_t wire) {
  return wccl::api_call([&]() -> wccl::Status {
    const int w = wccl::enum_value(&wire);
    WCCL_CHECK_ARG(w >= 0 && w < wccl::codec::kWireCount, "wccl_wire_roundtrip: wire %d is not a wccl_wire_t", w);
    WCCL_CHECK_ARG(count == 0 || (in != nullptr && out != nullptr), "wccl_wire_roundtrip: in or out is NULL");
    if (count == 0) return wccl::Status();
    const auto codec_wire = static_cast<wccl::codec::Wire>(w);
    wccl::gpu::Device *in_dev = wccl::gpu::device_of(in), *out_dev = wccl::gpu::device_of(out);
    WCCL_CHECK_ARG(in_dev == out_dev, "wccl_wire_roundtrip: in is in %s and out in %s; both must be on one device "
                   "or both in host memory", in_dev != nullptr ? in_dev->name().c_str() : "host memory",
                   out_dev != nullptr ? out_dev->name().c_str() : "host memory");
    if (in_dev != nullptr) return wccl::device_roundtrip(*in_dev, codec_wire, in, out, count);
    std::vector<uint8_t> bytes(wccl::codec::wire_size(codec_wire, count));
    WCCL_RETURN_IF_ERROR(wccl::codec::encode(codec_wire, in, count, bytes.data()));
    return wccl::codec::decode(codec_wire, bytes.data(), bytes.size(), count, out);
  });
}

static wccl_result_t barrier(const char *fn, wccl_request_t **req, bool nonblocking, wccl_comm_t *comm, const wccl_opts_t *opts) {
  return wccl::collective(fn, req, nonblocking, comm, [&](wccl::algo::Collective *c, std::chrono::milliseconds *timeout) {
    WCCL_RETURN_IF_ERROR(wccl::prepare(fn, c, WCCL_U8, wccl::kNoOp, opts, timeout));
    c->kind = wccl::algo::Kind::kBarrier;
    return wccl::Status();
  });
}

wccl_result_t wccl_barrier(wccl_comm_t *comm, const wccl_opts_t *opts) {
  return barrier("wccl_barrier", nullptr, false, comm, opts);
}

wccl_result_t wccl_ibarrier(wccl_request_t **req, wccl_comm_t *comm, const wccl_opts_t *opts) {
  return barrier("wccl_ibarrier", req, true, comm, opts);
}

wccl_result_t wccl_local_group_threads(int size, wccl_local_group_t **groups) {
  return wccl::api_call([&]() -> wccl::Status {
    WCCL_CHECK_ARG(groups != nullptr, "wccl_local_group_threads: groups (the array of out-handles) is NULL");
    WCCL_CHECK_ARG(size >= 1 && size <= 1024, "wccl_local_group_threads: size %d is not in 1..1024", size);
    auto members = wccl::hier::ThreadGroup::create(size);
    for (int r = 0; r < size; ++r) {
      groups[r] = new wccl_local_group{std::make_unique<wccl::hier::Runner>(std::move(members[static_cast<size_t>(r)]))};
    }
    return wccl::Status();
  });
}

wccl_result_t wccl_local_group_nccl(wccl_local_group_t **group, void *nccl_comm) {
  if (group != nullptr) *group = nullptr;
  return wccl::api_call([&]() -> wccl::Status {
    WCCL_CHECK_ARG(group != nullptr, "wccl_local_group_nccl: group (the out-handle) is NULL");
    WCCL_CHECK_ARG(nccl_comm != nullptr, "wccl_local_group_nccl: nccl_comm is NULL");
    WCCL_ASSIGN_OR_RETURN(auto local, wccl::hier::nccl_group(nccl_comm));
    *group = new wccl_local_group{std::make_unique<wccl::hier::Runner>(std::move(local))};
    return wccl::Status();
  });
}

int wccl_local_group_rank(const wccl_local_group_t *group) { return group != nullptr ? group->runner->local().rank() : -1; }
int wccl_local_group_size(const wccl_local_group_t *group) { return group != nullptr ? group->runner->local().size() : 0; }
void wccl_local_group_destroy(wccl_local_group_t *group) { delete group; }

static wccl_result_t hier_allreduce(const char *fn, wccl_request_t **req, bool nonblocking, const void *sendbuf, void *recvbuf,
                                    size_t count, int dtype, int op, wccl_local_group_t *local, wccl_comm_t *comm,
                                    const wccl_opts_t *opts) {
  if (req != nullptr) *req = nullptr;
  return wccl::api_call([&]() -> wccl::Status {
    WCCL_CHECK_ARG(!nonblocking || req != nullptr, "%s: req (the out-handle) is NULL", fn);
    WCCL_CHECK_ARG(local != nullptr, "%s: local is NULL", fn);
    WCCL_CHECK_ARG(comm != nullptr, "%s: comm is NULL", fn);
    wccl::hier::Call call;
    WCCL_RETURN_IF_ERROR(wccl::prepare(fn, &call.global, dtype, op, opts, &call.timeout));
    call.global.kind = wccl::algo::Kind::kAllreduce;
    call.global.count = count;
    call.global.in = sendbuf;
    call.global.out = recvbuf;
    WCCL_RETURN_IF_ERROR(wccl::check_buffers(fn, call.global, comm, true));  // as wccl_allreduce's
    call.in = sendbuf;
    call.out = recvbuf;
    call.count = count;
    call.dtype = call.global.dtype;
    call.op = call.global.op;
    call.device = call.global.device;
    wccl::hier::Runner &runner = *local->runner;
    const size_t ranks = static_cast<size_t>(runner.local().size());  // the input is padded to a multiple of it
    WCCL_CHECK_ARG(count <= SIZE_MAX / wccl::codec::dtype_size(call.dtype) - ranks, "%s: count %zu is too large", fn, count);
    if (count != 0) {
      const wccl::Status takes = runner.local().takes(call.device);
      if (!takes.ok()) return WCCL_ERROR(takes.code(), "%s: %s", fn, takes.message().c_str());
    }
    if (call.device != nullptr) WCCL_RETURN_IF_ERROR(call.device->record(call.global.after, &call.ready));
    auto queued = runner.submit(comm->impl.get(), call);
    if (!queued.ok()) {
      if (call.ready != nullptr) call.device->destroy_event(call.ready);
      return queued.status();
    }
    auto request = std::make_unique<wccl_request>();
    request->runner = &runner;
    request->hier = std::move(queued).value();
    if (nonblocking) {
      *req = request.release();
      return wccl::Status();
    }
    return request->wait(nullptr);
  });
}

wccl_result_t wccl_hier_allreduce(const void *sendbuf, void *recvbuf, size_t count, wccl_dtype_t dtype, wccl_redop_t op,
                                  wccl_local_group_t *local, wccl_comm_t *comm, const wccl_opts_t *opts) {
  return hier_allreduce("wccl_hier_allreduce", nullptr, false, sendbuf, recvbuf, count, wccl::enum_value(&dtype),
                        wccl::enum_value(&op), local, comm, opts);
}

wccl_result_t wccl_ihier_allreduce(wccl_request_t **req, const void *sendbuf, void *recvbuf, size_t count, wccl_dtype_t dtype,
                                   wccl_redop_t op, wccl_local_group_t *local, wccl_comm_t *comm, const wccl_opts_t *opts) {
  return hier_allreduce("wccl_ihier_allreduce", req, true, sendbuf, recvbuf, count, wccl::enum_value(&dtype),
                        wccl::enum_value(&op), local, comm, opts);
}

wccl_result_t wccl_wait(wccl_request_t *req, wccl_op_stats_t *stats) {
  return wccl::api_call([&]() -> wccl::Status {
    WCCL_CHECK_ARG(req != nullptr, "wccl_wait: req is NULL");
    WCCL_CHECK_ARG(stats == nullptr || stats->size == sizeof(wccl_op_stats_t),
                   "wccl_wait: stats->size is %zu, not sizeof(wccl_op_stats_t) = %zu", stats ? stats->size : 0,
                   sizeof(wccl_op_stats_t));
    wccl::comm::OpStats s;
    wccl::Status st = req->wait(&s);
    wccl::copy_stats(s, stats);
    return st;
  });
}

wccl_result_t wccl_test(wccl_request_t *req, int *done) {
  if (done != nullptr) *done = 0;
  return wccl::api_call([&]() -> wccl::Status {
    WCCL_CHECK_ARG(req != nullptr, "wccl_test: req is NULL");
    WCCL_CHECK_ARG(done != nullptr, "wccl_test: done is NULL");
    wccl::Status st = req->test();
    if (st.code() == WCCL_ERR_IN_PROGRESS) return wccl::Status();
    *done = 1;
    return st;
  });
}

void wccl_request_free(wccl_request_t *req) {
  if (req == nullptr) return;
  (void)req->wait(nullptr);
  delete req;
}

wccl_result_t wccl_state_sync(wccl_comm_t *comm, const wccl_tensor_t *tensors, size_t n, uint64_t *revision,
                              wccl_sync_mode_t mode, wccl_sync_stats_t *stats) {
  return wccl::api_call([&]() -> wccl::Status {
    const char *fn = "wccl_state_sync";
    WCCL_CHECK_ARG(comm != nullptr, "%s: comm is NULL", fn);
    WCCL_CHECK_ARG(revision != nullptr, "%s: revision is NULL", fn);
    WCCL_CHECK_ARG(n == 0 || tensors != nullptr, "%s: tensors is NULL", fn);
    const int m = wccl::enum_value(&mode);
    WCCL_CHECK_ARG(m >= 0 && m < wccl::algo::kSyncModeCount, "%s: mode %d is not a wccl_sync_mode_t", fn, m);
    WCCL_CHECK_ARG(stats == nullptr || stats->size == sizeof(wccl_sync_stats_t),
                   "%s: stats->size is %zu, not sizeof(wccl_sync_stats_t) = %zu", fn, stats ? stats->size : 0,
                   sizeof(wccl_sync_stats_t));
    std::vector<wccl::comm::SyncTensor> list;
    std::set<std::string> names;
    for (size_t i = 0; i < n; ++i) {
      const wccl_tensor_t &t = tensors[i];
      WCCL_CHECK_ARG(t.name != nullptr, "%s: tensors[%zu].name is NULL", fn, i);
      const size_t name_len = std::strlen(t.name);
      WCCL_CHECK_ARG(name_len >= 1 && name_len <= wccl::algo::kMaxNameBytes,
                     "%s: tensors[%zu].name is %zu bytes long, not 1 to %zu", fn, i, name_len, wccl::algo::kMaxNameBytes);
      WCCL_CHECK_ARG(names.insert(t.name).second, "%s: tensor name \"%s\" appears twice", fn, t.name);
      WCCL_CHECK_ARG(t.dtype >= 0 && t.dtype < wccl::codec::kDtypeCount, "%s: tensor \"%s\": dtype %d is not a wccl_dtype_t",
                     fn, t.name, t.dtype);
      WCCL_CHECK_ARG(t.device == WCCL_DEVICE_HOST || t.device == WCCL_DEVICE_CUDA,
                     "%s: tensor \"%s\": device %d is not a wccl_device_t", fn, t.name, t.device);
      wccl::gpu::Device *device = wccl::gpu::device_of(t.data);
      if (t.device == WCCL_DEVICE_CUDA && device == nullptr && t.count != 0) {
        if (!wccl::gpu::available()) {
          return WCCL_ERROR(WCCL_ERR_UNSUPPORTED, "%s: tensor \"%s\" is WCCL_DEVICE_CUDA, and this library has no CUDA", fn,
                            t.name);
        }
        return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "%s: tensor \"%s\" is WCCL_DEVICE_CUDA, but its data is not device memory",
                          fn, t.name);
      }
      WCCL_CHECK_ARG(t.device == WCCL_DEVICE_CUDA || device == nullptr,
                     "%s: tensor \"%s\" is WCCL_DEVICE_HOST, but its data is device memory of %s", fn, t.name,
                     device != nullptr ? device->name().c_str() : "");
      const auto dtype = static_cast<wccl::codec::Dtype>(t.dtype);
      WCCL_CHECK_ARG(t.count <= SIZE_MAX / wccl::codec::dtype_size(dtype), "%s: tensor \"%s\": count %zu is too large", fn,
                     t.name, t.count);
      WCCL_CHECK_ARG(t.count == 0 || t.data != nullptr, "%s: tensor \"%s\": data is NULL", fn, t.name);
      list.push_back({t.name, t.data, dtype, t.count, device});
    }
    wccl::comm::SyncStats s;
    uint64_t rev = *revision;
    WCCL_RETURN_IF_ERROR(wccl::comm::state_sync(*comm->impl, list, &rev, static_cast<wccl::algo::SyncMode>(m), &s));
    *revision = rev;
    if (stats != nullptr) {
      wccl_sync_stats_t out{};
      out.size = sizeof(out);
      out.bytes_sent = s.bytes_sent;
      out.bytes_received = s.bytes_received;
      out.sources = s.sources;
      out.tensors_received = s.tensors_received;
      out.time_us = s.time_us;
      out.epoch = s.epoch;
      out.world_size = s.world_size;
      *stats = out;
    }
    return wccl::Status();
  });
}

}  // extern "C"
