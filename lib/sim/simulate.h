// wccl-sim's core (docs/sim.md): the project's own collectives (lib/algo, unchanged) run by one
// thread per simulated peer over a virtual-time algo::Channel (sim/engine.h) whose messages cross
// the simulated WAN (sim/network.h). CPU work is charged through an algo::Memory at rates from the
// project's micro benchmarks (CpuModel). The coordinator is the library's own rules
// (coord::Membership) on a host of the topology, its messages a path delay on their way: each
// operation ends when every member has reported it done and the commit has come back; peers send
// heartbeats; a fault (Fault) is detected, revoked and recovered from as the library does (the
// survivors update, the coordinator forms the next epoch, its links open with their handshakes on
// new TCP connections, and the operation runs again). A joiner (Join) is admitted as the library
// admits one: the members hear that it waits, update at their next operation's boundary, and the
// next epoch's first work is a state sync (lib/algo/state_sync, unchanged) that gives it the
// trainer's state from every member at once.
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
  double hash = 0;           // codec::tensor_hash (state sync's descriptions and its check)
};

// A peer's process stops at a given time: killed (its connections reset at once: the
// coordinator and its neighbours see them close a path delay later) or frozen (SIGSTOP: its
// connections stay open, it goes silent, and the coordinator declares it lost after
// peer_timeout without a heartbeat).
struct Fault {
  enum class Kind { kKill, kFreeze } kind = Kind::kKill;
  int rank = 0;  // the ranks argument's index, or past it a joiner's (peers + its index in
                 // Workload::joins)
  Time at = 0;   // virtual time from the start of the first operation
};

// A new peer on topology host `host` asks the coordinator to join at virtual time `at`.
struct Join {
  int host = 0;
  Time at = 0;
};

struct Workload {
  // kind, count, dtype, op, algo (kRing or kTree; resolve kAuto before), wire, chunk_bytes. The
  // buffers and memory are the simulator's.
  algo::Collective op;
  int warmup = 1, iters = 1;  // operations run untimed, then timed
  Time gap = 0;               // each member's time between operations (compute)
  bool data = false;          // carry real bytes and check the result
  int coordinator = 0;        // the host of the coordinator; -1: no commit round trip
  std::vector<Fault> faults;
  Time heartbeat = kSecond;         // config key heartbeat_ms (also the probe timeout)
  Time peer_timeout = 5 * kSecond;  // config key peer_timeout_ms
  std::vector<Join> joins;
  // What a joiner receives through state sync: one tensor of this many bytes (the reference
  // trainer's outer parameters and momentum). Needed with joins.
  size_t state_bytes = 0;
};

// How the group got over one fault, in virtual seconds from the start (-1: did not happen).
struct Recovery {
  Fault fault;
  double revoked = -1;    // the coordinator revoked the epoch
  double epoch = -1;      // it formed the next epoch (the survivors' update barrier)
  double links = -1;      // every member of that epoch had its links open (TCP + TLS + hello)
  double committed = -1;  // the coordinator committed that epoch's first operation
};

// How a joiner got in, in virtual seconds from the start (-1: did not happen; a joiner that asks
// after the last operation is never admitted). The last two are when the joiner learnt of the
// commit.
struct Admission {
  Join join;
  double admitted =
      -1;             // the coordinator formed an epoch that holds it (the members' update barrier)
  double links = -1;  // every member of that epoch had its links open
  double synced = -1;     // its state sync committed: it holds the trainer's state
  double committed = -1;  // its first operation of the workload committed
};

struct Report {
  Status status;                // the first member's failure, if any
  std::vector<double> seconds;  // per timed operation: the slowest member's call-to-commit time
  double data_phase = 0;        // mean over timed operations of the slowest member's data phase
  std::vector<HostTraffic> traffic;  // per host, over the timed operations
  double timed_s = 0;                // virtual seconds the timed operations spanned
  uint64_t events = 0, losses = 0;
  // With data: every survivor ended with the same bytes, the exact SUM for native, and every
  // admitted joiner with the donors' state.
  bool checked = false;
  std::vector<Recovery> recoveries;   // one per fault, in the order given
  std::vector<Admission> admissions;  // one per join, in the order given
  int survivors = 0;                  // members of the last epoch
  double mean() const;
};

// ranks[r] is the host (topology index) of rank r; the first epoch's peers are ranks.size(), and
// each joiner is one more.
Report simulate(const Topology &topo, const std::vector<int> &ranks, const TcpOptions &tcp,
                const CpuModel &cpu, const Workload &work);

}  // namespace wccl::sim
