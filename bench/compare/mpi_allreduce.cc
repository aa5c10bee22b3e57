// mpi-allreduce: fp32 SUM MPI_Allreduce (in place), for comparison with wccl.
//
// Started by mpirun. To make Open MPI 4.1 use TCP over loopback between the processes of one
// machine, as wccl and Gloo do, rather than shared memory (bench/compare/compare.py runs this):
//
//   mpirun [--allow-run-as-root] --oversubscribe --bind-to none -np N
//       --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo mpi-allreduce [sweep flags]
//
//   --mca btl tcp,self          the one flag that matters on a plain machine: it leaves out vader,
//                               the shared-memory BTL, which Open MPI otherwise uses between ranks
//                               of one machine; self (a rank to itself) is required by ob1.
//   --mca pml ob1               ob1 is the PML that runs over the BTLs. The UCX PML (priority 51)
//                               would bypass them with its own shared-memory transports; Debian's
//                               build enables it only on Mellanox devices (pml_ucx_devices=mlx*),
//                               so this pins ob1 on machines that have one.
//   --mca btl_tcp_if_include lo the TCP BTL excludes 127.0.0.1/8 by default and then connects to
//                               the other interfaces' addresses (the kernel still carries that
//                               over lo; a machine with only lo would have nothing). Including lo
//                               uses 127.0.0.1, like the Gloo and wccl runs.
//   --bind-to none              for np > 2 Open MPI binds each rank to a socket; the wccl and Gloo
//                               ranks float freely, so these do too.
// The collective component stays coll/tuned (coll/sm, han and adapt have priority 0), which runs
// over the PML. Checked on Open MPI 4.1.4 with --mca pml_base_verbose 10 --mca coll_base_verbose
// 10 (ob1 and tuned selected) and lo's byte counter in /proc/net/dev: a 64 MiB all-reduce on 4
// ranks moves the ring's 2(N-1)/N * 64 MiB per rank over lo with these flags, and almost nothing
// with Open MPI's defaults (shared memory).
//
// The measurement is in ../perf/sweep.cc. MPI_IN_PLACE keeps the data movement the same as Gloo's
// in-place algorithms and wccl's.

// Only the C API is used; the deprecated C++ bindings mpi.h would pull in do not compile cleanly
// at warning_level=3.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <string>
#include <vector>

#include "perf/sweep.h"

namespace {

constexpr char kProg[] = "mpi-allreduce";

class MpiCollective : public sweep::Collective {
 public:
  MpiCollective() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void Bind(void *buf, size_t count, const sweep::Case & /*f32 sum*/) override {
    buf_ = static_cast<float *>(buf);
    count_ = static_cast<int>(count);  // ValidateOptions keeps count within an int
  }
  void Unbind() override { buf_ = nullptr; }

  // MPI_COMM_WORLD's default error handler is MPI_ERRORS_ARE_FATAL: a failure aborts the job.
  void AllReduce() override {
    MPI_Allreduce(MPI_IN_PLACE, buf_, count_, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }

  void Barrier() override { MPI_Barrier(MPI_COMM_WORLD); }

  double MaxOverRanks(double value) override {
    MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return value;
  }

  int64_t SumOverRanks(int64_t value) override {
    MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    return value;
  }

  // Open MPI's coll/tuned picks the algorithm per size; it does not say which.
  std::string Algorithm() const override { return "tuned"; }

 private:
  int rank_ = 0;
  int size_ = 0;
  float *buf_ = nullptr;
  int count_ = 0;
};

// Every rank parses the same command line; only rank 0 says what is wrong with it.
// Returns 0 to run, 1 after --help, 2 on a bad command line.
int ParseFlags(int argc, char **argv, int rank, sweep::Options *opt) {
  std::string error;
  for (int i = 1; i < argc && error.empty(); ++i) {
    const int common = sweep::ParseCommonFlag(argc, argv, &i, opt, &error);
    if (common != 0) continue;
    if (std::string(argv[i]) == "--help") {
      if (rank == 0) {
        std::printf("usage: mpirun ... %s [options]\n%s", kProg, sweep::kCommonUsage);
      }
      return 1;
    }
    error = std::string("unknown flag '") + argv[i] + "'";
  }
  if (error.empty()) error = sweep::ValidateOptions(*opt, INT_MAX);
  if (error.empty()) return 0;
  if (rank == 0) std::fprintf(stderr, "%s: %s\n", kProg, error.c_str());
  return 2;
}

}  // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MpiCollective coll;
  sweep::Options opt;
  const int parsed = ParseFlags(argc, argv, coll.rank(), &opt);
  if (parsed != 0) {
    MPI_Finalize();
    return parsed == 1 ? 0 : 2;
  }
#ifdef OPEN_MPI
  const char *tool = "openmpi";
#else
  const char *tool = "mpi";
#endif
  sweep::RunSweep(opt, {sweep::Case{}}, sweep::Run{tool, false}, &coll);
  MPI_Finalize();
  return 0;
}
