// The measurement shared by the peer comparison programs (gloo-allreduce, mpi-allreduce).
//
// Both programs, and wccl's own wccl-perf, measure an fp32 SUM all-reduce the same way so that
// bench/compare/compare.py can put their numbers side by side:
//
//   for each size S in b, b*f, b*f^2, ... <= e:
//     if checking: fill the pattern, run one all-reduce, count the wrong elements (summed over
//                  ranks); this iteration is not timed.
//     fill the pattern, run `warmup` all-reduces, fill the pattern again (untimed), barrier,
//     time `iters` back-to-back in-place all-reduces on this rank; time = elapsed / iters;
//     the reported time is the maximum over ranks, gathered with the library under test.
//   algbw = S / time (GB/s, 1 GB = 1e9 bytes); busbw = algbw * 2(N-1)/N (nccl-tests' factor).
//
// Element i of rank r holds float((r + 1) * ((i % 251) + 1)), so the exact sum over N ranks is
// N(N+1)/2 * ((i % 251) + 1): small integers, exact in fp32 whatever the reduction order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace compare {

// Flags common to every comparison program: -b -e -f -n -w -c --json.
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

// Checks the options once all flags are read. Returns an empty string or the reason they are bad.
std::string ValidateOptions(const Options &opt);

// Usage lines for the common flags, for each program's --help.
extern const char kCommonUsage[];

// What a program measuring one library provides. All calls are collective (every rank makes them
// in the same order) and block until this rank's part is done; failures throw or abort.
class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Makes AllReduce() work in place on buf[0, count). Called outside the timed region, so a library
  // that builds an algorithm object per buffer (Gloo) does it here.
  virtual void Bind(float *buf, size_t count) = 0;
  // Forgets the bound buffer before it is freed.
  virtual void Unbind() {}
  // In-place fp32 SUM all-reduce of the bound buffer.
  virtual void AllReduce() = 0;
  virtual void Barrier() = 0;
  virtual double MaxOverRanks(double value) = 0;
  virtual int64_t SumOverRanks(int64_t value) = 0;
};

struct Result {
  size_t bytes = 0;
  size_t count = 0;
  double time_us = 0;
  double algbw = 0;    // GB/s
  double busbw = 0;    // GB/s
  int64_t wrong = -1;  // -1: not checked
};

// Runs the sweep described at the top of this file. On rank 0 without --json, prints the table
// header and one row per size as soon as it is measured.
std::vector<Result> RunSweep(const Options &opt, Collective *coll);

// On rank 0 with --json, prints the one JSON object of the run on stdout. `tool` is the JSON
// "tool" value, e.g. "gloo-ring_chunked".
void PrintJson(const std::string &tool, int peers, const std::vector<Result> &results);

}  // namespace compare
