#include "perf/sweep.h"

#include <sys/resource.h>

#include <chrono>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace sweep {

const char *const kTypeNames[8] = {"f32", "f64", "f16", "bf16", "i8", "u8", "i32", "i64"};

size_t TypeSize(Type type) {
  static const size_t kSizes[8] = {4, 8, 2, 2, 1, 1, 4, 8};
  return kSizes[static_cast<int>(type)];
}

namespace {

// This process's CPU time so far, every thread of it, user and system apart, in microseconds.
struct CpuTime {
  int64_t user_us = 0;
  int64_t sys_us = 0;
};
CpuTime ProcessCpu() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return {static_cast<int64_t>(ru.ru_utime.tv_sec) * 1000000 + ru.ru_utime.tv_usec,
          static_cast<int64_t>(ru.ru_stime.tv_sec) * 1000000 + ru.ru_stime.tv_usec};
}

// IEEE binary16 and bfloat16 from a float, rounding to nearest even (the pattern's values and
// their sums are small integers; larger ones round as a library's conversion would).
uint16_t ToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and above round to infinity
  if (x < 0x38800000u) {                        // below 2^-14: a subnormal half (or zero)
    float a;
    std::memcpy(&a, &x, 4);
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));  // units of 2^-24
  }
  const uint32_t rounded = x + 0xfffu + ((x >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);  // exponent bias 127 -> 15
}

uint16_t ToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

double FromHalf(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  double v = exponent == 0    ? std::ldexp(mantissa, -24)
             : exponent == 31 ? (mantissa != 0 ? NAN : INFINITY)
                              : std::ldexp(mantissa | 0x400, exponent - 25);
  return (h & 0x8000) != 0 ? -v : v;
}

double FromBf16(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

void Store(Type type, void *buf, size_t i, int64_t v) {
  switch (type) {
    case Type::kF32:
      static_cast<float *>(buf)[i] = static_cast<float>(v);
      break;
    case Type::kF64:
      static_cast<double *>(buf)[i] = static_cast<double>(v);
      break;
    case Type::kF16:
      static_cast<uint16_t *>(buf)[i] = ToHalf(static_cast<float>(v));
      break;
    case Type::kBF16:
      static_cast<uint16_t *>(buf)[i] = ToBf16(static_cast<float>(v));
      break;
    case Type::kI8:
      static_cast<int8_t *>(buf)[i] = static_cast<int8_t>(v);
      break;
    case Type::kU8:
      static_cast<uint8_t *>(buf)[i] = static_cast<uint8_t>(v);
      break;
    case Type::kI32:
      static_cast<int32_t *>(buf)[i] = static_cast<int32_t>(v);
      break;
    case Type::kI64:
      static_cast<int64_t *>(buf)[i] = v;
      break;
  }
}

double Load(Type type, const void *buf, size_t i) {
  switch (type) {
    case Type::kF32:
      return static_cast<const float *>(buf)[i];
    case Type::kF64:
      return static_cast<const double *>(buf)[i];
    case Type::kF16:
      return FromHalf(static_cast<const uint16_t *>(buf)[i]);
    case Type::kBF16:
      return FromBf16(static_cast<const uint16_t *>(buf)[i]);
    case Type::kI8:
      return static_cast<const int8_t *>(buf)[i];
    case Type::kU8:
      return static_cast<const uint8_t *>(buf)[i];
    case Type::kI32:
      return static_cast<const int32_t *>(buf)[i];
    case Type::kI64:
      return static_cast<double>(static_cast<const int64_t *>(buf)[i]);
  }
  return NAN;
}

// The pattern's period: prime, so that it does not align with chunk sizes; 7 where larger sums
// would not be exact (16-bit floats) or would overflow (8-bit integers).
int64_t Period(Type type) {
  return type == Type::kF16 || type == Type::kBF16 || type == Type::kI8 || type == Type::kU8 ? 7
                                                                                             : 251;
}

void Fill(const Case &c, void *buf, size_t count, int rank) {
  if (c.weights) {  // a sum of four uniforms (xorshift64, seeded by the rank), deviation 0.02
    uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(rank + 1);
    auto uniform = [&x] {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      return static_cast<float>(x >> 40) * (1.0f / 16777216.0f);
    };
    for (size_t i = 0; i < count; ++i) {
      static_cast<float *>(buf)[i] =
          (uniform() + uniform() + uniform() + uniform() - 2.0f) * 0.0346f;
    }
    return;
  }
  const int64_t m = Period(c.type);
  int64_t k = 0;
  for (size_t i = 0; i < count; ++i) {
    Store(c.type, buf, i, (rank + 1) * (k + 1));
    if (++k == m) k = 0;
  }
}

// Elements that differ from the exact SUM over n ranks: in their bits, or with a tolerance by
// more than it.
int64_t CountWrong(const Case &c, const void *buf, size_t count, int n) {
  const int64_t m = Period(c.type);
  const int64_t ranks = static_cast<int64_t>(n) * (n + 1) / 2;
  const size_t es = TypeSize(c.type);
  uint64_t want = 0;  // room for one element of any type
  int64_t wrong = 0;
  int64_t k = 0;
  for (size_t i = 0; i < count; ++i) {
    if (c.tolerance > 0) {
      wrong +=
          !(std::fabs(Load(c.type, buf, i) - static_cast<double>(ranks * (k + 1))) <= c.tolerance);
    } else {
      Store(c.type, &want, 0, ranks * (k + 1));
      wrong += std::memcmp(static_cast<const uint8_t *>(buf) + i * es, &want, es) != 0;
    }
    if (++k == m) k = 0;
  }
  return wrong;
}

Result MeasureOne(const Options &opt, const Case &c, size_t count, Collective *coll) {
  const int rank = coll->rank();
  Result r;
  r.c = c;
  r.count = count;
  r.bytes = count * TypeSize(c.type);
  std::vector<uint64_t> storage((r.bytes + 7) / 8 + 1);  // aligned for every type; never empty
  void *buf = storage.data();
  coll->Bind(buf, count, c);

  if (opt.check && c.redop == "sum" && !c.weights) {
    Fill(c, buf, count, rank);
    coll->AllReduce();
    r.wrong = coll->SumOverRanks(CountWrong(c, buf, count, coll->size()));
  }

  Fill(c, buf, count, rank);
  for (int i = 0; i < opt.warmup; ++i) coll->AllReduce();

  // Why in place on a buffer that is not reset between timed iterations: Gloo's algorithms only
  // work in place, and resetting the input inside the loop would time a memcpy of the whole
  // buffer with it (or, timed per iteration, stop the iterations from being back to back). So the
  // values grow by a factor N per iteration. That costs nothing: floating-point addition runs at
  // the same speed for every normal value and for infinity (only subnormals are slow, and growing
  // values never become subnormal), integers wrap at the same speed, and the result is checked on
  // a separate iteration above. The fill below (outside the timed region) starts from the pattern.
  Fill(c, buf, count, rank);
  coll->Barrier();
  const CpuTime cpu_start = ProcessCpu();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < opt.iters; ++i) coll->AllReduce();
  const auto stop = std::chrono::steady_clock::now();
  const CpuTime cpu_stop = ProcessCpu();
  r.cpu_user_s =
      static_cast<double>(coll->SumOverRanks(cpu_stop.user_us - cpu_start.user_us)) / 1e6;
  r.cpu_sys_s = static_cast<double>(coll->SumOverRanks(cpu_stop.sys_us - cpu_start.sys_us)) / 1e6;
  const double local_us =
      std::chrono::duration<double, std::micro>(stop - start).count() / opt.iters;
  r.algo = coll->Algorithm();
  r.wire_bytes = coll->WireBytes();

  // The slowest rank sets the time: an all-reduce is done only when every rank has its result.
  r.time_us = coll->MaxOverRanks(local_us);
  coll->Unbind();
  if (r.time_us > 0) {
    r.algbw = static_cast<double>(r.bytes) / r.time_us / 1e3;  // bytes/us -> GB/s
    r.busbw = r.algbw * 2.0 * (coll->size() - 1) / coll->size();
  }
  return r;
}

// A count as text, or `unknown` for -1.
std::string CountOr(int64_t count, const char *unknown) {
  return count < 0 ? unknown : std::to_string(count);
}

void PrintHeader(const Options &opt, const Run &run, int nranks) {
  std::printf("# %s: allreduce, %d peers, tls %s, iters %d, warmup %d, check %s\n",
              run.tool.c_str(), nranks, run.tls ? "on" : "off", opt.iters, opt.warmup,
              opt.check ? "on" : "off");
  std::printf("# %10s %12s %5s %5s %6s %4s %16s %12s %11s %11s %12s %7s\n", "size", "count", "type",
              "redop", "wire", "zstd", "algo", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "wire(B)",
              "#wrong");
  std::fflush(stdout);
}

void PrintRow(const Result &r) {
  std::printf("  %10zu %12zu %5s %5s %6s %4s %16s %12.1f %11.3f %11.3f %12s %7s\n", r.bytes,
              r.count, kTypeNames[static_cast<int>(r.c.type)], r.c.redop.c_str(), r.c.wire.c_str(),
              r.c.compress.c_str(), r.algo.c_str(), r.time_us, r.algbw, r.busbw,
              CountOr(r.wire_bytes, "N/A").c_str(), CountOr(r.wrong, "N/A").c_str());
  std::fflush(stdout);
}

void PrintJson(const Run &run, int peers, int iters, const std::vector<Result> &results) {
  std::printf("{\"tool\": \"%s\", \"peers\": %d, \"tls\": %s, \"results\": [", run.tool.c_str(),
              peers, run.tls ? "true" : "false");
  for (size_t i = 0; i < results.size(); ++i) {
    const Result &r = results[i];
    std::printf(
        "%s{\"bytes\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", \"wire\": \"%s\", "
        "\"compress\": \"%s\", \"algo\": \"%s\", \"time_us\": %.3f, \"algbw\": %.6g, \"busbw\": "
        "%.6g, "
        "\"wire_bytes\": %s, \"wrong\": %s, \"iters\": %d, \"cpu_user_s\": %.6f, \"cpu_sys_s\": "
        "%.6f}",
        i == 0 ? "" : ", ", r.bytes, r.count, kTypeNames[static_cast<int>(r.c.type)],
        r.c.redop.c_str(), r.c.wire.c_str(), r.c.compress.c_str(), r.algo.c_str(), r.time_us,
        r.algbw, r.busbw, CountOr(r.wire_bytes, "null").c_str(), CountOr(r.wrong, "null").c_str(),
        iters, r.cpu_user_s, r.cpu_sys_s);
  }
  std::printf("]}\n");
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

std::string ValidateOptions(const Options &opt, size_t max_f32_count) {
  if (opt.min_bytes < 1) return "-b must be at least 1 byte";
  if (opt.min_bytes > opt.max_bytes) return "-b is larger than -e";
  if (opt.max_bytes / sizeof(float) > max_f32_count)
    return "-e is too large: the element count must fit in an int";
  if (opt.factor < 2) return "-f must be at least 2";
  if (opt.iters < 1) return "-n must be at least 1";
  return "";
}

std::vector<Result> RunSweep(const Options &opt, const std::vector<Case> &cases, const Run &run,
                             Collective *coll) {
  const bool print = coll->rank() == 0;
  if (print && !opt.json) PrintHeader(opt, run, coll->size());
  std::vector<Result> results;
  for (size_t bytes = opt.min_bytes; bytes <= opt.max_bytes;) {
    for (const Case &c : cases) {
      // Sizes not a multiple of the element size are rounded down to whole elements, as
      // nccl-tests does.
      results.push_back(MeasureOne(opt, c, bytes / TypeSize(c.type), coll));
      if (print && !opt.json) PrintRow(results.back());
    }
    if (bytes > opt.max_bytes / opt.factor) break;
    bytes *= opt.factor;
  }
  if (print && opt.json) PrintJson(run, coll->size(), opt.iters, results);
  return results;
}

}  // namespace sweep
