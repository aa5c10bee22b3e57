// Exported C functions for results, version, configuration, the coordinator, a communicator's
// life, requests, state sync and the wire round trip: validate, then dispatch. The collectives'
// are in collectives.cc.
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "api/guard.h"
#include "api/handles.h"
#include "codec/wire.h"
#include "comm/state_sync.h"
#include "gpu/device.h"
#include "gpu/kernels.h"

namespace wccl {
namespace {
thread_local std::string t_last_error;

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

// wccl_wire_roundtrip on one GPU's memory: encoded into device scratch and decoded into out by the
// GPU, on `stream` (null: the legacy default stream) after the work queued there, waited for.
Status device_roundtrip(gpu::Device &dev, codec::Wire w, const float *in, float *out, size_t count,
                        void *stream) {
  if (w.kind == codec::WireKind::kNative) {
    if (in != out) WCCL_RETURN_IF_ERROR(dev.copy(out, in, count * sizeof(float), stream));
    return dev.synchronize(stream);
  }
  void *scratch = nullptr;
  WCCL_RETURN_IF_ERROR(dev.alloc(&scratch, codec::wire_size(w, count)));
  auto *bytes = static_cast<uint8_t *>(scratch);
  Status st = dev.encode(w, in, count, bytes, 0, stream);  // waits: names a value it cannot encode
  if (st.ok()) st = dev.decode(w, bytes, count, out, stream);
  const Status synced = dev.synchronize(stream);  // before the scratch goes
  dev.free(scratch);
  return st.ok() ? synced : st;
}

}  // namespace

void set_last_error(const Status &status) { t_last_error = status.to_string(); }

Status stream_with_host_buffers(const char *fn) {
  if (!gpu::available())
    return WCCL_ERROR(WCCL_ERR_UNSUPPORTED,
                      "%s: opts->cuda_stream is set, but this library has no CUDA", fn);
  return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                    "%s: opts->cuda_stream orders device buffers, and these are host memory "
                    "(synchronize the stream first)",
                    fn);
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

int wccl_coord_port(const wccl_coord_t *coord) {
  return coord != nullptr ? coord->impl->port() : 0;
}

int wccl_coord_http_port(const wccl_coord_t *coord) {
  return coord != nullptr ? coord->impl->http_port() : 0;
}

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
uint64_t wccl_comm_epoch(const wccl_comm_t *comm) {
  return comm != nullptr ? comm->impl->epoch() : 0;
}
int wccl_comm_pending(const wccl_comm_t *comm) {
  return comm != nullptr ? comm->impl->pending() : 0;
}
int wccl_comm_update_due(const wccl_comm_t *comm) {
  return comm != nullptr && comm->impl->update_due() ? 1 : 0;
}
wccl_epoch_origin_t wccl_comm_epoch_origin(const wccl_comm_t *comm) {
  return comm != nullptr ? static_cast<wccl_epoch_origin_t>(comm->impl->epoch_origin())
                         : WCCL_EPOCH_CONTINUES;
}

wccl_result_t wccl_comm_stats(const wccl_comm_t *comm, wccl_comm_stats_t *stats) {
  return wccl::api_call([&]() -> wccl::Status {
    WCCL_CHECK_ARG(comm != nullptr, "wccl_comm_stats: comm is NULL");
    WCCL_CHECK_ARG(stats != nullptr, "wccl_comm_stats: stats is NULL");
    WCCL_CHECK_ARG(stats->size == sizeof(wccl_comm_stats_t),
                   "wccl_comm_stats: stats->size is %zu, not sizeof(wccl_comm_stats_t) = %zu",
                   stats->size, sizeof(wccl_comm_stats_t));
    const wccl::comm::CommStats s = comm->impl->stats();
    stats->ops_committed = s.ops_committed;
    stats->ops_failed = s.ops_failed;
    stats->ops_peer_lost = s.ops_peer_lost;
    stats->bytes_sent = s.bytes_sent;
    stats->bytes_received = s.bytes_received;
    stats->epochs = s.epochs;
    stats->updates = s.updates;
    return wccl::Status();
  });
}

wccl_result_t wccl_comm_links(const wccl_comm_t *comm, wccl_link_stats_t *links, size_t capacity,
                              size_t *count) {
  return wccl::api_call([&]() -> wccl::Status {
    WCCL_CHECK_ARG(comm != nullptr, "wccl_comm_links: comm is NULL");
    WCCL_CHECK_ARG(count != nullptr, "wccl_comm_links: count is NULL");
    WCCL_CHECK_ARG(links != nullptr || capacity == 0,
                   "wccl_comm_links: links is NULL with capacity %zu", capacity);
    const std::vector<wccl::comm::LinkStats> all = comm->impl->link_stats();
    *count = all.size();
    for (size_t i = 0; i < all.size() && i < capacity; ++i) {
      links[i] = {all[i].rank, all[i].rtt_us, all[i].bytes_per_s};
    }
    return wccl::Status();
  });
}

void wccl_comm_destroy(wccl_comm_t *comm) { delete comm; }

wccl_result_t wccl_wire_roundtrip(const float *in, float *out, size_t count,
                                  const wccl_opts_t *opts) {
  return wccl::api_call([&]() -> wccl::Status {
    const char *fn = "wccl_wire_roundtrip";
    const wccl_opts_t o = opts != nullptr ? *opts : wccl_opts_default();
    WCCL_CHECK_ARG(o.size == sizeof(wccl_opts_t),
                   "%s: opts->size is %zu, not sizeof(wccl_opts_t) = %zu (use wccl_opts_default)",
                   fn, o.size, sizeof(wccl_opts_t));
    wccl::codec::Wire codec_wire;
    WCCL_RETURN_IF_ERROR(wccl::codec::wire_from_api(o.wire, o.topk_keep, fn, &codec_wire));
    WCCL_CHECK_ARG(count == 0 || (in != nullptr && out != nullptr), "%s: in or out is NULL", fn);
    if (count == 0) return wccl::Status();
    wccl::gpu::Device *in_dev = wccl::gpu::device_of(in), *out_dev = wccl::gpu::device_of(out);
    WCCL_CHECK_ARG(in_dev == out_dev,
                   "%s: in is in %s and out in %s; both must be on one device or both in host "
                   "memory",
                   fn, in_dev != nullptr ? in_dev->name().c_str() : "host memory",
                   out_dev != nullptr ? out_dev->name().c_str() : "host memory");
    if (o.cuda_stream != nullptr && in_dev == nullptr) return wccl::stream_with_host_buffers(fn);
    if (in_dev != nullptr)
      return wccl::device_roundtrip(*in_dev, codec_wire, in, out, count, o.cuda_stream);
    std::vector<uint8_t> bytes(wccl::codec::wire_size(codec_wire, count));
    WCCL_RETURN_IF_ERROR(wccl::codec::encode(codec_wire, in, count, bytes.data()));
    return wccl::codec::decode(codec_wire, bytes.data(), bytes.size(), count, out);
  });
}

wccl_result_t wccl_wait(wccl_request_t *req, wccl_op_stats_t *stats) {
  return wccl::api_call([&]() -> wccl::Status {
    WCCL_CHECK_ARG(req != nullptr, "wccl_wait: req is NULL");
    WCCL_CHECK_ARG(stats == nullptr || stats->size == sizeof(wccl_op_stats_t),
                   "wccl_wait: stats->size is %zu, not sizeof(wccl_op_stats_t) = %zu",
                   stats ? stats->size : 0, sizeof(wccl_op_stats_t));
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

wccl_result_t wccl_state_sync(wccl_comm_t *comm, const wccl_tensor_t *tensors, size_t n,
                              uint64_t *revision, wccl_sync_mode_t mode, wccl_sync_stats_t *stats) {
  return wccl::api_call([&]() -> wccl::Status {
    const char *fn = "wccl_state_sync";
    WCCL_CHECK_ARG(comm != nullptr, "%s: comm is NULL", fn);
    WCCL_CHECK_ARG(revision != nullptr, "%s: revision is NULL", fn);
    WCCL_CHECK_ARG(n == 0 || tensors != nullptr, "%s: tensors is NULL", fn);
    const int m = wccl::enum_value(&mode);
    WCCL_CHECK_ARG(m >= 0 && m < wccl::algo::kSyncModeCount,
                   "%s: mode %d is not a wccl_sync_mode_t", fn, m);
    WCCL_CHECK_ARG(stats == nullptr || stats->size == sizeof(wccl_sync_stats_t),
                   "%s: stats->size is %zu, not sizeof(wccl_sync_stats_t) = %zu", fn,
                   stats ? stats->size : 0, sizeof(wccl_sync_stats_t));
    std::vector<wccl::comm::SyncTensor> list;
    std::set<std::string> names;
    for (size_t i = 0; i < n; ++i) {
      const wccl_tensor_t &t = tensors[i];
      WCCL_CHECK_ARG(t.name != nullptr, "%s: tensors[%zu].name is NULL", fn, i);
      const size_t name_len = std::strlen(t.name);
      WCCL_CHECK_ARG(name_len >= 1 && name_len <= wccl::algo::kMaxNameBytes,
                     "%s: tensors[%zu].name is %zu bytes long, not 1 to %zu", fn, i, name_len,
                     wccl::algo::kMaxNameBytes);
      WCCL_CHECK_ARG(names.insert(t.name).second, "%s: tensor name \"%s\" appears twice", fn,
                     t.name);
      WCCL_CHECK_ARG(t.dtype >= 0 && t.dtype < wccl::codec::kDtypeCount,
                     "%s: tensor \"%s\": dtype %d is not a wccl_dtype_t", fn, t.name, t.dtype);
      WCCL_CHECK_ARG(t.device == WCCL_DEVICE_HOST || t.device == WCCL_DEVICE_CUDA,
                     "%s: tensor \"%s\": device %d is not a wccl_device_t", fn, t.name, t.device);
      wccl::gpu::Device *device = wccl::gpu::device_of(t.data);
      if (t.device == WCCL_DEVICE_CUDA && device == nullptr && t.count != 0) {
        if (!wccl::gpu::available()) {
          return WCCL_ERROR(WCCL_ERR_UNSUPPORTED,
                            "%s: tensor \"%s\" is WCCL_DEVICE_CUDA, and this library has no CUDA",
                            fn, t.name);
        }
        return WCCL_ERROR(
            WCCL_ERR_INVALID_ARGUMENT,
            "%s: tensor \"%s\" is WCCL_DEVICE_CUDA, but its data is not device memory", fn, t.name);
      }
      WCCL_CHECK_ARG(t.device == WCCL_DEVICE_CUDA || device == nullptr,
                     "%s: tensor \"%s\" is WCCL_DEVICE_HOST, but its data is device memory of %s",
                     fn, t.name, device != nullptr ? device->name().c_str() : "");
      const auto dtype = static_cast<wccl::codec::Dtype>(t.dtype);
      WCCL_CHECK_ARG(t.count <= SIZE_MAX / wccl::codec::dtype_size(dtype),
                     "%s: tensor \"%s\": count %zu is too large", fn, t.name, t.count);
      WCCL_CHECK_ARG(t.count == 0 || t.data != nullptr, "%s: tensor \"%s\": data is NULL", fn,
                     t.name);
      list.push_back({t.name, t.data, dtype, t.count, device});
    }
    wccl::comm::SyncStats s;
    uint64_t rev = *revision;
    WCCL_RETURN_IF_ERROR(
        wccl::comm::state_sync(*comm->impl, list, &rev, static_cast<wccl::algo::SyncMode>(m), &s));
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
