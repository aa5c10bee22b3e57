#include "sweep.h"

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>

namespace compare {

namespace {

constexpr size_t kPatternPeriod = 251;  // prime, so the pattern does not align with chunk sizes

// Element i of rank r: (r + 1) * ((i % 251) + 1).
void FillPattern(float *buf, size_t count, int rank) {
  const float scale = static_cast<float>(rank + 1);
  size_t k = 0;
  for (size_t i = 0; i < count; ++i) {
    buf[i] = scale * static_cast<float>(k + 1);
    if (++k == kPatternPeriod) k = 0;
  }
}

// Number of elements that differ from N(N+1)/2 * ((i % 251) + 1). The expected values are small
// integers, exact in fp32 whatever order the library adds in, so the comparison is exact.
int64_t CountWrong(const float *buf, size_t count, int nranks) {
  const float scale = static_cast<float>(static_cast<int64_t>(nranks) * (nranks + 1) / 2);
  int64_t wrong = 0;
  size_t k = 0;
  for (size_t i = 0; i < count; ++i) {
    if (buf[i] != scale * static_cast<float>(k + 1)) ++wrong;
    if (++k == kPatternPeriod) k = 0;
  }
  return wrong;
}

Result MeasureOne(const Options &opt, Collective *coll, size_t count) {
  const int rank = coll->rank();
  const int nranks = coll->size();
  std::vector<float> buf(count);
  coll->Bind(buf.data(), count);

  Result r;
  r.count = count;
  r.bytes = count * sizeof(float);
  if (opt.check) {
    FillPattern(buf.data(), count, rank);
    coll->AllReduce();
    r.wrong = coll->SumOverRanks(CountWrong(buf.data(), count, nranks));
  }

  FillPattern(buf.data(), count, rank);
  for (int i = 0; i < opt.warmup; ++i) coll->AllReduce();

  // Why in place on a buffer that is not reset between timed iterations: Gloo's algorithms only
  // work in place, and resetting the input inside the loop would time a memcpy of the whole
  // buffer with it (or, timed per iteration, stop the iterations from being back to back). So the
  // values grow by a factor N per iteration. That costs nothing: fp32 addition runs at the same
  // speed for every normal value and for infinity (only subnormals are slow, and growing positive
  // values never become subnormal), and the result is checked on a separate iteration above.
  // The reset below (outside the timed region) starts the growth from the pattern again.
  FillPattern(buf.data(), count, rank);
  coll->Barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < opt.iters; ++i) coll->AllReduce();
  const auto stop = std::chrono::steady_clock::now();
  const double local_us =
      std::chrono::duration<double, std::micro>(stop - start).count() / opt.iters;

  // The slowest rank sets the time: an all-reduce is done only when every rank has its result.
  r.time_us = coll->MaxOverRanks(local_us);
  coll->Unbind();
  if (r.time_us > 0) {
    r.algbw = static_cast<double>(r.bytes) / r.time_us / 1e3;  // bytes/us -> GB/s
    r.busbw = r.algbw * 2.0 * (nranks - 1) / nranks;
  }
  return r;
}

void PrintHeader(const Options &opt, int nranks) {
  std::printf("# peers %d, iters %d, warmup %d, check %s\n#\n", nranks, opt.iters, opt.warmup,
              opt.check ? "on" : "off");
  std::printf("# %10s %12s %6s %6s %12s %12s %12s %8s\n", "size", "count", "type", "redop",
              "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  std::fflush(stdout);
}

void PrintRow(const Result &r) {
  char wrong[32];
  if (r.wrong < 0) {
    std::snprintf(wrong, sizeof(wrong), "N/A");
  } else {
    std::snprintf(wrong, sizeof(wrong), "%lld", static_cast<long long>(r.wrong));
  }
  std::printf("  %10zu %12zu %6s %6s %12.2f %12.3f %12.3f %8s\n", r.bytes, r.count, "float", "sum",
              r.time_us, r.algbw, r.busbw, wrong);
  std::fflush(stdout);
}

}  // namespace

const char kCommonUsage[] =
    "  -b BYTES      smallest size (suffixes K, M, G = 2^10, 2^20, 2^30; default 32M)\n"
    "  -e BYTES      largest size (default 32M)\n"
    "  -f FACTOR     size multiplier between steps, >= 2 (default 2)\n"
    "  -n ITERS      timed iterations per size (default 20)\n"
    "  -w WARMUP     untimed iterations before timing (default 5)\n"
    "  -c 0|1        check the result of one separate iteration (default 1)\n"
    "  --json        print one JSON object on stdout instead of the table\n";

bool ParseSize(const std::string &text, size_t *out) {
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  size_t pos = 0;
  unsigned long long value = 0;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
    const unsigned digit = static_cast<unsigned>(text[pos] - '0');
    if (value > (ULLONG_MAX - digit) / 10) return false;
    value = value * 10 + digit;
    ++pos;
  }
  int shift = 0;
  if (pos < text.size()) {
    switch (text[pos]) {
      case 'K':
      case 'k':
        shift = 10;
        break;
      case 'M':
      case 'm':
        shift = 20;
        break;
      case 'G':
      case 'g':
        shift = 30;
        break;
      default:
        return false;
    }
    if (++pos != text.size()) return false;
  }
  if (value > (SIZE_MAX >> shift)) return false;
  *out = static_cast<size_t>(value) << shift;
  return true;
}

bool ParseInt(const std::string &text, int *out) {
  if (text.empty()) return false;
  long long value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
    if (value > INT_MAX) return false;
  }
  *out = static_cast<int>(value);
  return true;
}

int ParseCommonFlag(int argc, char **argv, int *i, Options *opt, std::string *error) {
  const std::string flag = argv[*i];
  if (flag == "--json") {
    opt->json = true;
    return 1;
  }
  static const char *const kValued[] = {"-b", "-e", "-f", "-n", "-w", "-c"};
  bool known = false;
  for (const char *v : kValued) known = known || flag == v;
  if (!known) return 0;
  if (*i + 1 >= argc) {
    *error = flag + " needs a value";
    return -1;
  }
  const std::string value = argv[++*i];
  bool ok = false;
  int c = 0;
  if (flag == "-b") {
    ok = ParseSize(value, &opt->min_bytes);
  } else if (flag == "-e") {
    ok = ParseSize(value, &opt->max_bytes);
  } else if (flag == "-f") {
    ok = ParseSize(value, &opt->factor);
  } else if (flag == "-n") {
    ok = ParseInt(value, &opt->iters);
  } else if (flag == "-w") {
    ok = ParseInt(value, &opt->warmup);
  } else if (flag == "-c") {
    ok = ParseInt(value, &c) && c <= 1;
    opt->check = c == 1;
  }
  if (!ok) {
    *error = "bad value for " + flag + ": '" + value + "'";
    return -1;
  }
  return 1;
}

std::string ValidateOptions(const Options &opt) {
  if (opt.min_bytes < sizeof(float)) return "-b must be at least 4 bytes (one float)";
  if (opt.min_bytes > opt.max_bytes) return "-b is larger than -e";
  // Both Gloo and MPI (before MPI 4's large-count calls) take the element count as an int.
  if (opt.max_bytes / sizeof(float) > static_cast<size_t>(INT_MAX)) {
    return "-e is too large: the element count must fit in an int";
  }
  if (opt.factor < 2) return "-f must be at least 2";
  if (opt.iters < 1) return "-n must be at least 1";
  return "";
}

std::vector<Result> RunSweep(const Options &opt, Collective *coll) {
  const bool print = coll->rank() == 0 && !opt.json;
  if (print) PrintHeader(opt, coll->size());
  std::vector<Result> results;
  // Sizes not a multiple of 4 are rounded down to whole floats, as nccl-tests does.
  for (size_t bytes = opt.min_bytes; bytes <= opt.max_bytes;) {
    results.push_back(MeasureOne(opt, coll, bytes / sizeof(float)));
    if (print) PrintRow(results.back());
    if (bytes > opt.max_bytes / opt.factor) break;
    bytes *= opt.factor;
  }
  return results;
}

void PrintJson(const std::string &tool, int peers, const std::vector<Result> &results) {
  std::printf("{\"tool\": \"%s\", \"peers\": %d, \"tls\": false, \"results\": [", tool.c_str(),
              peers);
  for (size_t i = 0; i < results.size(); ++i) {
    const Result &r = results[i];
    char wrong[32];
    if (r.wrong < 0) {
      std::snprintf(wrong, sizeof(wrong), "null");
    } else {
      std::snprintf(wrong, sizeof(wrong), "%lld", static_cast<long long>(r.wrong));
    }
    std::printf(
        "%s{\"bytes\": %zu, \"count\": %zu, \"type\": \"f32\", \"redop\": \"sum\", "
        "\"time_us\": %.3f, \"algbw\": %.6g, \"busbw\": %.6g, \"wire_bytes\": null, "
        "\"wrong\": %s}",
        i == 0 ? "" : ", ", r.bytes, r.count, r.time_us, r.algbw, r.busbw, wrong);
  }
  std::printf("]}\n");
  std::fflush(stdout);
}

}  // namespace compare
