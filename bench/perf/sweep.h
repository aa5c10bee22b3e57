// The all-reduce measurement of wccl-perf and of the peer programs in bench/compare (Gloo, MPI),
// written once so that bench/compare/compare.py sets like against like:
//
//   for each size S in b, b*f, b*f^2, ... <= e, and for each case (type, wire, ...) at that size:
//     if checking: fill the pattern, run one all-reduce, count the wrong elements (summed over
//                  ranks); this iteration is not timed.
//     fill, run `warmup` all-reduces, fill again (untimed), barrier, time `iters` back-to-back
//     in-place all-reduces on this rank; time = elapsed / iters, reported as the maximum over
//     ranks, gathered with the library under test.
//   algbw = S / time (GB/s, 1 GB = 1e9 bytes); busbw = algbw * 2(N-1)/N (nccl-tests' factor).
//   CPU: each rank's process CPU time (getrusage, user and system apart, every thread of it)
//     over the timed iterations, summed over ranks; per GB all-reduced = / (S * iters / 1e9).
//     Every program runs one process per rank; a coordinator or launcher outside the ranks is
//     not counted.
//
// Element i of rank r holds (r + 1) * ((i % m) + 1), m = 251 (7 for 16-bit floats and 8-bit
// integers), so the exact SUM over N ranks is N(N+1)/2 * ((i % m) + 1): small integers, exact
// whatever the reduction order. On a lossy wire an element counts as wrong when it is further
// from the exact sum than the case's tolerance.
//
// This file and sweep.cc use only the standard library, so that each program links just its own
// library under test (wccl-perf: libwccl.so, as users do).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sweep {

// Element types, in wccl_dtype_t's order.
enum class Type { kF32, kF64, kF16, kBF16, kI8, kU8, kI32, kI64 };
extern const char *const kTypeNames[8];  // f32 f64 f16 bf16 i8 u8 i32 i64
size_t TypeSize(Type type);

// Flags common to every program: -b -e -f -n -w -c --json.
struct Options {
  size_t min_bytes = size_t{32} << 20;
  size_t max_bytes = size_t{32} << 20;
  size_t factor = 2;
  int iters = 20;
  int warmup = 5;
  bool check = true;
  bool json = false;
};

// Parses a byte count with an optional binary suffix: "4096", "4K", "256M", "1G" (K = 2^10).
// Returns false on anything else, including overflow.
bool ParseSize(const std::string &text, size_t *out);

// Parses a non-negative decimal int. Returns false on anything else.
bool ParseInt(const std::string &text, int *out);

// Tries to consume the common flag at argv[*i] (and its value, advancing *i past it).
// Returns 1 if consumed, 0 if the flag is not a common one, -1 on a bad value (*error says why).
int ParseCommonFlag(int argc, char **argv, int *i, Options *opt, std::string *error);

// Checks the options once all flags are read; max_f32_count bounds the f32 element count of the
// largest size (Gloo and MPI take it as an int). Returns an empty string or the reason they are
// bad.
std::string ValidateOptions(const Options &opt, size_t max_f32_count);

// Usage lines for the common flags, for each program's --help.
extern const char kCommonUsage[];

// What one row measures besides its size. The peer programs measure the default case only.
struct Case {
  Type type = Type::kF32;
  std::string redop = "sum";  // the data is checked only for "sum"
  std::string wire = "native";
  std::string compress = "off";
  double tolerance = 0;  // how far a SUM's element may be from the exact one (lossy wires)
  bool weights = false;  // f32 values about normal (deviation 0.02), as model weights: unchecked
};

// What a program measuring one library provides. All calls are collective (every rank makes them
// in the same order) and block until this rank's part is done; failures throw or exit.
class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Makes AllReduce() work in place on buf[0, count) as the case says. Called outside the timed
  // region, so a library that builds an algorithm object per buffer (Gloo) does it here.
  virtual void Bind(void *buf, size_t count, const Case &c) = 0;
  // Forgets the bound buffer before it is freed.
  virtual void Unbind() {}
  // In-place all-reduce of the bound buffer.
  virtual void AllReduce() = 0;
  virtual void Barrier() = 0;
  virtual double MaxOverRanks(double value) = 0;
  virtual int64_t SumOverRanks(int64_t value) = 0;
  // The algorithm the last AllReduce ran, and the payload bytes it sent (-1: the library does
  // not say).
  virtual std::string Algorithm() const = 0;
  virtual int64_t WireBytes() const { return -1; }
};

struct Result {
  Case c;
  size_t bytes = 0;
  size_t count = 0;
  std::string algo;
  double time_us = 0;
  double algbw = 0;         // GB/s
  double busbw = 0;         // GB/s
  int64_t wire_bytes = -1;  // -1: unknown
  int64_t wrong = -1;       // -1: not checked
  double cpu_user_s = 0;    // CPU over the timed iterations, all ranks (see the top of this file)
  double cpu_sys_s = 0;
};

// What a run prints about itself: "tool" in the JSON (e.g. "gloo-ring_chunked") and whether its
// links were encrypted.
struct Run {
  std::string tool;
  bool tls = false;
};

// Runs the sweep described at the top of this file, each size with each case in turn. On rank 0,
// prints a table row per measurement as soon as it is made, or with --json one JSON object at
// the end.
std::vector<Result> RunSweep(const Options &opt, const std::vector<Case> &cases, const Run &run,
                             Collective *coll);

}  // namespace sweep
