// Exported C functions for results, version and configuration: validate, then dispatch.
#include <cstring>
#include <string>

#include "api/guard.h"
#include "comm/communicator.h"
#include "coord/coordinator.h"
#include "core/config.h"
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

namespace wccl {
namespace {
thread_local std::string t_last_error;
}  // namespace

void set_last_error(const Status &status) { t_last_error = status.to_string(); }

}  // namespace wccl

extern "C" {

// A C caller may pass any int; in C++ loading an enum outside its enumerators' range is undefined,
// so the value is read as the int it is.
static int result_code(const wccl_result_t &result) {
  int code;
  std::memcpy(&code, &result, sizeof(code));
  return code;
}

const char *wccl_result_name(wccl_result_t result) {
  switch (result_code(result)) {
#define WCCL_RESULT_NAME_(name, value, message) \
  case value:                                   \
    return #name;
    WCCL_RESULT_TABLE(WCCL_RESULT_NAME_)
#undef WCCL_RESULT_NAME_
  }
  return "WCCL_ERR_UNKNOWN";
}

const char *wccl_strerror(wccl_result_t result) {
  switch (result_code(result)) {
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
    wccl::Result<wccl::Config> cfg = wccl::Config::from_env();
    if (!cfg.ok()) return cfg.status();
    *config = new wccl_config{std::move(cfg).value()};
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
    wccl::Result<std::string> value = config->impl.get(key);
    if (!value.ok()) return value.status();
    const size_t size = value->size() + 1;
    if (needed != nullptr) *needed = size;
    WCCL_CHECK_ARG(buf != nullptr && buf_size >= size,
                   "wccl_config_get: buffer of %zu bytes is too small for key \"%s\", need %zu",
                   buf_size, key, size);
    std::memcpy(buf, value->c_str(), size);
    return wccl::Status();
  });
}

const char *wccl_config_keys(void) { return wccl::Config::describe_keys().c_str(); }

wccl_result_t wccl_coord_start(wccl_coord_t **coord, const wccl_config_t *config) {
  if (coord != nullptr) *coord = nullptr;
  return wccl::api_call([&]() -> wccl::Status {
    WCCL_CHECK_ARG(coord != nullptr, "wccl_coord_start: coord (the out-handle) is NULL");
    WCCL_CHECK_ARG(config != nullptr, "wccl_coord_start: config is NULL");
    auto started = wccl::coord::Coordinator::start(config->impl);
    if (!started.ok()) return started.status();
    *coord = new wccl_coord{std::move(started).value()};
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
    auto joined = wccl::comm::Communicator::join(config->impl);
    if (!joined.ok()) return joined.status();
    *comm = new wccl_comm{std::move(joined).value()};
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

void wccl_comm_destroy(wccl_comm_t *comm) { delete comm; }

}  // extern "C"
