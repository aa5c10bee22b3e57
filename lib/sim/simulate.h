// wccl-sim's core (docs/sim.md): the project's own collectives (lib/algo, unchanged) run by one
// thread per simulated peer over a virtual-time algo::Channel (sim/engine.h) whose messages cross
// the simulated WAN (sim/network.h). CPU work is charged through an algo::Memory at rates from the
// project's micro benchmarks (CpuModel). Each operation ends as the library's does: every member
// reports to the coordinator, which commits once all have, and each member learns it a path delay
// later.
//
// The data itself is elided unless Workload::data is set: buffers are address space that nothing
// reads (the codecs' byte counts still come from the codecs), so a 10-billion-parameter
// all-reduce over a thousand peers fits on a laptop. With data, every byte travels and the
// kernels run, so a test can check the result.
#pragma once

#include <cstdint>
#include <vector>

#include "algo/collectives.h"
#include "core/status.h"
#include "sim/network.h"
#include "sim/topology.h"

namespace wccl::sim {

// Rates of the CPU kernels, in bytes of input elements per second; 0 makes that work free.
struct CpuModel {
  double reduce = 0;         // codec::reduce_into, finish_avg
  double encode = 0;         // F32 to a wire codec
  double decode = 0;         // a wire codec to F32
  double decode_reduce = 0;  // a wire codec combined into F32
  double copy = 0;           // memcpy
};

struct Workload {
  // kind, count, dtype, op, algo (kRing or kTree; resolve kAuto before), wire, chunk_bytes. The
  // buffers and memory are the simulator's.
  algo::Collective op;
  int warmup = 1, iters = 1;  // operations run untimed, then timed
  Time gap = 0;               // each member's time between operations (compute)
  bool data = false;          // carry real bytes and check the result
  int coordinator = 0;        // the host of the coordinator; -1: no commit round trip
};

struct Report {
  Status status;                // the first member's failure, if any
  std::vector<double> seconds;  // per timed operation: the slowest member's call-to-commit time
  double data_phase = 0;        // mean over timed operations of the slowest member's data phase
  std::vector<HostTraffic> traffic;  // per host, over the timed operations
  double timed_s = 0;           // virtual seconds the timed operations spanned
  uint64_t events = 0, losses = 0;
  bool checked = false;  // with data: every member ended with the same bytes, the exact SUM for native
  double mean() const;
};

// ranks[r] is the host (topology index) of rank r; peers are ranks.size().
Report simulate(const Topology &topo, const std::vector<int> &ranks, const TcpOptions &tcp, const CpuModel &cpu,
                const Workload &work);

}  // namespace wccl::sim
