// The C API's opaque handles, shared by the files that export its functions (api.cc,
// collectives.cc), and how a parameter typed as an enum is read.
#pragma once

#include <cstring>
#include <memory>

#include "comm/communicator.h"
#include "coord/coordinator.h"
#include "core/config.h"
#include "hier/hier_allreduce.h"
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

  wccl::Status wait(wccl::comm::OpStats *stats) {
    return runner != nullptr ? runner->wait(hier, stats) : comm->wait(op, stats);
  }
  wccl::Status test() {
    return runner != nullptr ? runner->test(hier, nullptr) : comm->test(op, nullptr);
  }
};

namespace wccl {

// A C caller may pass any int as an enum; loading it as the enum type would be undefined for values
// outside the enumerators, so parameters are read as the ints they are.
inline int enum_value(const void *e) {
  int v;
  std::memcpy(&v, e, sizeof(v));
  return v;
}

}  // namespace wccl
