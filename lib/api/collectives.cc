// Exported collectives: validate the call, then queue it on the communicator (or, for the
// hierarchical all-reduce, on the local group's runner) or run it to its outcome.
#include <algorithm>
#include <chrono>

#include "algo/collectives.h"
#include "api/guard.h"
#include "api/handles.h"
#include "codec/compress.h"
#include "codec/wire.h"
#include "gpu/device.h"
#include "gpu/kernels.h"
#include "hier/nccl_group.h"
#include "hier/thread_group.h"

namespace wccl {
namespace {

constexpr int64_t kMinLinkRate = WCCL_MIN_LINK_RATE;

static_assert(static_cast<int>(algo::Kind::kAllreduce) == WCCL_COLL_ALLREDUCE &&
                  static_cast<int>(algo::Kind::kBroadcast) == WCCL_COLL_BROADCAST &&
                  static_cast<int>(algo::Kind::kAllgather) == WCCL_COLL_ALLGATHER &&
                  static_cast<int>(algo::Kind::kReduceScatter) == WCCL_COLL_REDUCE_SCATTER &&
                  static_cast<int>(algo::Kind::kBarrier) == WCCL_COLL_BARRIER,
              "algo::Kind and wccl_collective_t list the collectives in the same order");

bool reduces(algo::Kind k) {
  return k == algo::Kind::kAllreduce || k == algo::Kind::kReduceScatter;
}

// Validates what every collective shares and fills c's kind, type, op and options: what a
// collective checks before it looks at its buffers, but for the wire rule (algo::check_wire),
// which the communicator applies to the operation it makes and wccl_opts_check right after this.
// coll, dtype and op are the raw ints the caller passed (see enum_value); op is read for the
// reductions only, dtype for every collective but barrier.
Status prepare(const char *fn, int coll, int dtype, int op, const wccl_opts_t *opts,
               algo::Collective *c, std::chrono::milliseconds *timeout) {
  WCCL_CHECK_ARG(coll >= WCCL_COLL_ALLREDUCE && coll <= WCCL_COLL_BARRIER,
                 "%s: coll %d is not a wccl_collective_t", fn, coll);
  c->kind = static_cast<algo::Kind>(coll);
  if (c->kind == algo::Kind::kBarrier) dtype = WCCL_U8;
  WCCL_CHECK_ARG(dtype >= 0 && dtype < codec::kDtypeCount, "%s: dtype %d is not a wccl_dtype_t", fn,
                 dtype);
  c->dtype = static_cast<codec::Dtype>(dtype);
  if (reduces(c->kind)) {
    WCCL_CHECK_ARG(op >= 0 && op < codec::kRedOpCount, "%s: op %d is not a wccl_redop_t", fn, op);
    c->op = static_cast<codec::RedOp>(op);
  }
  wccl_opts_t o = opts != nullptr ? *opts : wccl_opts_default();
  WCCL_CHECK_ARG(o.size == sizeof(wccl_opts_t),
                 "%s: opts->size is %zu, not sizeof(wccl_opts_t) = %zu (use wccl_opts_default)", fn,
                 o.size, sizeof(wccl_opts_t));
  WCCL_CHECK_ARG(o.algo >= WCCL_ALGO_AUTO && o.algo <= WCCL_ALGO_ALLGATHER,
                 "%s: opts->algo %d is not a wccl_algo_t", fn, o.algo);
  WCCL_RETURN_IF_ERROR(codec::wire_from_api(o.wire, o.topk_keep, fn, &c->wire));
  WCCL_CHECK_ARG(o.compress >= WCCL_COMPRESS_OFF && o.compress <= WCCL_COMPRESS_AUTO,
                 "%s: opts->compress %d is not a wccl_compress_t", fn, o.compress);
  WCCL_CHECK_ARG(o.timeout_ms >= 0, "%s: opts->timeout_ms is negative", fn);
  WCCL_CHECK_ARG(o.max_link_rate == 0 || o.max_link_rate >= kMinLinkRate,
                 "%s: opts->max_link_rate is %lld; 0 (unpaced) or at least %lld bytes per second",
                 fn, static_cast<long long>(o.max_link_rate), static_cast<long long>(kMinLinkRate));
  if (o.compress != WCCL_COMPRESS_OFF && !codec::compression_available()) {
    return WCCL_ERROR(WCCL_ERR_UNSUPPORTED,
                      "%s: compression needs zstd, which this library was built without", fn);
  }
  c->after = o.cuda_stream;
  c->algo = static_cast<algo::Algo>(o.algo);
  c->compress = o.compress == WCCL_COMPRESS_ZSTD   ? algo::Compress::kAlways
                : o.compress == WCCL_COMPRESS_AUTO ? algo::Compress::kAuto
                                                   : algo::Compress::kOff;
  c->max_link_rate = static_cast<uint64_t>(o.max_link_rate);
  *timeout = std::chrono::milliseconds(o.timeout_ms);
  return Status();
}

// Whether a group's wire applies to c (wccl_opts_for): a SUM or AVG reduction that the wire
// carries by some algorithm (TOPK's all-reduce by AUTO's).
bool group_wire_applies(const algo::Collective &c) {
  algo::Collective any = c;
  any.algo = algo::Algo::kAuto;
  return reduces(c.kind) && (c.op == codec::RedOp::kSum || c.op == codec::RedOp::kAvg) &&
         algo::check_wire(any).ok();
}

// Checks the buffers for c on the communicator's current size, and finds the device they are on.
Status check_buffers(const char *fn, algo::Collective &c, wccl_comm_t *comm, bool needs_in) {
  const size_t n = static_cast<size_t>(std::max(1, comm->impl->size()));
  const size_t es = codec::dtype_size(c.dtype);
  WCCL_CHECK_ARG(c.count <= (SIZE_MAX / es) / n, "%s: count %zu is too large", fn, c.count);
  if (algo::in_count(c, static_cast<int>(n)) != 0 && needs_in)
    WCCL_CHECK_ARG(c.in != nullptr, "%s: sendbuf is NULL", fn);
  if (algo::out_count(c, static_cast<int>(n)) != 0)
    WCCL_CHECK_ARG(c.out != nullptr, "%s: recvbuf is NULL", fn);
  // Both buffers on one GPU, or both in host memory (a buffer the call does not use is not asked).
  const bool uses_in = algo::in_count(c, static_cast<int>(n)) != 0 && needs_in;
  const bool uses_out = algo::out_count(c, static_cast<int>(n)) != 0;
  gpu::Device *in_dev = uses_in ? gpu::device_of(c.in) : nullptr;
  gpu::Device *out_dev = uses_out ? gpu::device_of(c.out) : nullptr;
  if (uses_in && uses_out && in_dev != out_dev) {
    return WCCL_ERROR(
        WCCL_ERR_INVALID_ARGUMENT,
        "%s: sendbuf is in %s and recvbuf in %s; both must be on one device or both in host memory",
        fn, in_dev != nullptr ? in_dev->name().c_str() : "host memory",
        out_dev != nullptr ? out_dev->name().c_str() : "host memory");
  }
  c.device = in_dev != nullptr ? in_dev : out_dev;
  if (c.after != nullptr && c.device == nullptr) return stream_with_host_buffers(fn);
  return Status();
}

// Queues c; on success *req owns the operation.
Status start(const algo::Collective &c, wccl_comm_t *comm, std::chrono::milliseconds timeout,
             wccl_request_t **req) {
  WCCL_ASSIGN_OR_RETURN(auto op, comm->impl->submit(c, timeout));
  *req = new wccl_request;
  (*req)->comm = comm->impl.get();
  (*req)->op = std::move(op);
  return Status();
}

// A blocking collective: queue, then wait.
Status run_blocking(const algo::Collective &c, wccl_comm_t *comm,
                    std::chrono::milliseconds timeout) {
  WCCL_ASSIGN_OR_RETURN(auto op, comm->impl->submit(c, timeout));
  return comm->impl->wait(op, nullptr);
}

// Checks req (non-blocking forms) and comm, lets build fill in and check the collective, then
// queues it (*req) or runs it to its outcome.
template <typename Build>
wccl_result_t collective(const char *fn, wccl_request_t **req, bool nonblocking, wccl_comm_t *comm,
                         Build build) {
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

wccl_result_t wccl_opts_check(wccl_collective_t coll, wccl_dtype_t dtype, wccl_redop_t op,
                              const wccl_opts_t *opts) {
  return wccl::api_call([&]() -> wccl::Status {
    wccl::algo::Collective c;
    std::chrono::milliseconds timeout{0};
    WCCL_RETURN_IF_ERROR(wccl::prepare("wccl_opts_check", wccl::enum_value(&coll),
                                       wccl::enum_value(&dtype), wccl::enum_value(&op), opts, &c,
                                       &timeout));
    return wccl::algo::check_wire(c);
  });
}

wccl_result_t wccl_opts_for(wccl_collective_t coll, wccl_dtype_t dtype, wccl_redop_t op,
                            const wccl_opts_t *group, wccl_opts_t *out) {
  return wccl::api_call([&]() -> wccl::Status {
    const char *fn = "wccl_opts_for";
    WCCL_CHECK_ARG(out != nullptr, "%s: out is NULL", fn);
    wccl_opts_t o = group != nullptr ? *group : wccl_opts_default();
    wccl::algo::Collective c;
    std::chrono::milliseconds timeout{0};
    WCCL_RETURN_IF_ERROR(wccl::prepare(fn, wccl::enum_value(&coll), wccl::enum_value(&dtype),
                                       wccl::enum_value(&op), &o, &c, &timeout));
    if (!wccl::group_wire_applies(c)) {
      o.wire = WCCL_WIRE_NATIVE;
      o.topk_keep = 0;
      c.wire = wccl::codec::WireKind::kNative;
    }
    WCCL_RETURN_IF_ERROR(wccl::algo::check_wire(c));
    *out = o;
    return wccl::Status();
  });
}

int64_t wccl_min_link_rate(void) { return WCCL_MIN_LINK_RATE; }
int32_t wccl_topk_default_keep(void) { return WCCL_TOPK_DEFAULT_KEEP; }

// The helpers below take dtype and op as the ints the caller passed (wccl::enum_value).
static wccl_result_t allreduce(const char *fn, wccl_request_t **req, bool nonblocking,
                               const void *sendbuf, void *recvbuf, size_t count, int dtype, int op,
                               wccl_comm_t *comm, const wccl_opts_t *opts) {
  return wccl::collective(
      fn, req, nonblocking, comm,
      [&](wccl::algo::Collective *c, std::chrono::milliseconds *timeout) {
        WCCL_RETURN_IF_ERROR(wccl::prepare(fn, WCCL_COLL_ALLREDUCE, dtype, op, opts, c, timeout));
        c->count = count;
        c->in = sendbuf;
        c->out = recvbuf;
        return wccl::check_buffers(fn, *c, comm, true);
      });
}

wccl_result_t wccl_allreduce(const void *sendbuf, void *recvbuf, size_t count, wccl_dtype_t dtype,
                             wccl_redop_t op, wccl_comm_t *comm, const wccl_opts_t *opts) {
  return allreduce("wccl_allreduce", nullptr, false, sendbuf, recvbuf, count,
                   wccl::enum_value(&dtype), wccl::enum_value(&op), comm, opts);
}

wccl_result_t wccl_iallreduce(wccl_request_t **req, const void *sendbuf, void *recvbuf,
                              size_t count, wccl_dtype_t dtype, wccl_redop_t op, wccl_comm_t *comm,
                              const wccl_opts_t *opts) {
  return allreduce("wccl_iallreduce", req, true, sendbuf, recvbuf, count, wccl::enum_value(&dtype),
                   wccl::enum_value(&op), comm, opts);
}

static wccl_result_t broadcast(const char *fn, wccl_request_t **req, bool nonblocking,
                               const void *sendbuf, void *recvbuf, size_t count, int dtype,
                               int root, wccl_comm_t *comm, const wccl_opts_t *opts) {
  return wccl::collective(
      fn, req, nonblocking, comm,
      [&](wccl::algo::Collective *c, std::chrono::milliseconds *timeout) {
        WCCL_RETURN_IF_ERROR(wccl::prepare(fn, WCCL_COLL_BROADCAST, dtype, 0, opts, c, timeout));
        const int size = comm->impl->size();
        WCCL_CHECK_ARG(root >= 0 && root < size,
                       "%s: root %d is not a rank of this epoch (size %d)", fn, root, size);
        c->count = count;
        c->root = root;
        c->in = sendbuf;
        c->out = recvbuf;
        return wccl::check_buffers(fn, *c, comm, comm->impl->rank() == root);
      });
}

wccl_result_t wccl_broadcast(const void *sendbuf, void *recvbuf, size_t count, wccl_dtype_t dtype,
                             int root, wccl_comm_t *comm, const wccl_opts_t *opts) {
  return broadcast("wccl_broadcast", nullptr, false, sendbuf, recvbuf, count,
                   wccl::enum_value(&dtype), root, comm, opts);
}

wccl_result_t wccl_ibroadcast(wccl_request_t **req, const void *sendbuf, void *recvbuf,
                              size_t count, wccl_dtype_t dtype, int root, wccl_comm_t *comm,
                              const wccl_opts_t *opts) {
  return broadcast("wccl_ibroadcast", req, true, sendbuf, recvbuf, count, wccl::enum_value(&dtype),
                   root, comm, opts);
}

static wccl_result_t allgather(const char *fn, wccl_request_t **req, bool nonblocking,
                               const void *sendbuf, void *recvbuf, size_t count, int dtype,
                               wccl_comm_t *comm, const wccl_opts_t *opts) {
  return wccl::collective(
      fn, req, nonblocking, comm,
      [&](wccl::algo::Collective *c, std::chrono::milliseconds *timeout) {
        WCCL_RETURN_IF_ERROR(wccl::prepare(fn, WCCL_COLL_ALLGATHER, dtype, 0, opts, c, timeout));
        c->count = count;
        c->in = sendbuf;
        c->out = recvbuf;
        return wccl::check_buffers(fn, *c, comm, true);
      });
}

wccl_result_t wccl_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                             wccl_dtype_t dtype, wccl_comm_t *comm, const wccl_opts_t *opts) {
  return allgather("wccl_allgather", nullptr, false, sendbuf, recvbuf, sendcount,
                   wccl::enum_value(&dtype), comm, opts);
}

wccl_result_t wccl_iallgather(wccl_request_t **req, const void *sendbuf, void *recvbuf,
                              size_t sendcount, wccl_dtype_t dtype, wccl_comm_t *comm,
                              const wccl_opts_t *opts) {
  return allgather("wccl_iallgather", req, true, sendbuf, recvbuf, sendcount,
                   wccl::enum_value(&dtype), comm, opts);
}

static wccl_result_t reduce_scatter(const char *fn, wccl_request_t **req, bool nonblocking,
                                    const void *sendbuf, void *recvbuf, size_t count, int dtype,
                                    int op, wccl_comm_t *comm, const wccl_opts_t *opts) {
  return wccl::collective(fn, req, nonblocking, comm,
                          [&](wccl::algo::Collective *c, std::chrono::milliseconds *timeout) {
                            WCCL_RETURN_IF_ERROR(wccl::prepare(fn, WCCL_COLL_REDUCE_SCATTER, dtype,
                                                               op, opts, c, timeout));
                            c->count = count;
                            c->in = sendbuf;
                            c->out = recvbuf;
                            return wccl::check_buffers(fn, *c, comm, true);
                          });
}

wccl_result_t wccl_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                  wccl_dtype_t dtype, wccl_redop_t op, wccl_comm_t *comm,
                                  const wccl_opts_t *opts) {
  return reduce_scatter("wccl_reduce_scatter", nullptr, false, sendbuf, recvbuf, recvcount,
                        wccl::enum_value(&dtype), wccl::enum_value(&op), comm, opts);
}

wccl_result_t wccl_ireduce_scatter(wccl_request_t **req, const void *sendbuf, void *recvbuf,
                                   size_t recvcount, wccl_dtype_t dtype, wccl_redop_t op,
                                   wccl_comm_t *comm, const wccl_opts_t *opts) {
  return reduce_scatter("wccl_ireduce_scatter", req, true, sendbuf, recvbuf, recvcount,
                        wccl::enum_value(&dtype), wccl::enum_value(&op), comm, opts);
}

static wccl_result_t barrier(const char *fn, wccl_request_t **req, bool nonblocking,
                             wccl_comm_t *comm, const wccl_opts_t *opts) {
  return wccl::collective(fn, req, nonblocking, comm,
                          [&](wccl::algo::Collective *c, std::chrono::milliseconds *timeout) {
                            return wccl::prepare(fn, WCCL_COLL_BARRIER, 0, 0, opts, c, timeout);
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
    WCCL_CHECK_ARG(groups != nullptr,
                   "wccl_local_group_threads: groups (the array of out-handles) is NULL");
    WCCL_CHECK_ARG(size >= 1 && size <= 1024, "wccl_local_group_threads: size %d is not in 1..1024",
                   size);
    auto members = wccl::hier::ThreadGroup::create(size);
    for (int r = 0; r < size; ++r) {
      groups[r] = new wccl_local_group{
          std::make_unique<wccl::hier::Runner>(std::move(members[static_cast<size_t>(r)]))};
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

int wccl_local_group_rank(const wccl_local_group_t *group) {
  return group != nullptr ? group->runner->local().rank() : -1;
}
int wccl_local_group_size(const wccl_local_group_t *group) {
  return group != nullptr ? group->runner->local().size() : 0;
}
void wccl_local_group_destroy(wccl_local_group_t *group) { delete group; }

static wccl_result_t hier_allreduce(const char *fn, wccl_request_t **req, bool nonblocking,
                                    const void *sendbuf, void *recvbuf, size_t count, int dtype,
                                    int op, wccl_local_group_t *local, wccl_comm_t *comm,
                                    const wccl_opts_t *opts) {
  if (req != nullptr) *req = nullptr;
  return wccl::api_call([&]() -> wccl::Status {
    WCCL_CHECK_ARG(!nonblocking || req != nullptr, "%s: req (the out-handle) is NULL", fn);
    WCCL_CHECK_ARG(local != nullptr, "%s: local is NULL", fn);
    WCCL_CHECK_ARG(comm != nullptr, "%s: comm is NULL", fn);
    wccl::hier::Call call;
    WCCL_RETURN_IF_ERROR(
        wccl::prepare(fn, WCCL_COLL_ALLREDUCE, dtype, op, opts, &call.global, &call.timeout));
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
    const size_t ranks =
        static_cast<size_t>(runner.local().size());  // the input is padded to a multiple of it
    WCCL_CHECK_ARG(count <= SIZE_MAX / wccl::codec::dtype_size(call.dtype) - ranks,
                   "%s: count %zu is too large", fn, count);
    if (count != 0) {
      const wccl::Status takes = runner.local().takes(call.device);
      if (!takes.ok()) return WCCL_ERROR(takes.code(), "%s: %s", fn, takes.message().c_str());
    }
    if (call.device != nullptr)
      WCCL_RETURN_IF_ERROR(call.device->record(call.global.after, &call.ready));
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

wccl_result_t wccl_hier_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                  wccl_dtype_t dtype, wccl_redop_t op, wccl_local_group_t *local,
                                  wccl_comm_t *comm, const wccl_opts_t *opts) {
  return hier_allreduce("wccl_hier_allreduce", nullptr, false, sendbuf, recvbuf, count,
                        wccl::enum_value(&dtype), wccl::enum_value(&op), local, comm, opts);
}

wccl_result_t wccl_ihier_allreduce(wccl_request_t **req, const void *sendbuf, void *recvbuf,
                                   size_t count, wccl_dtype_t dtype, wccl_redop_t op,
                                   wccl_local_group_t *local, wccl_comm_t *comm,
                                   const wccl_opts_t *opts) {
  return hier_allreduce("wccl_ihier_allreduce", req, true, sendbuf, recvbuf, count,
                        wccl::enum_value(&dtype), wccl::enum_value(&op), local, comm, opts);
}

}  // extern "C"
