// The C API of results, version and configuration, as a C caller sees it.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "codec/compress.h"
#include "codec/wire.h"
#include "emulated_device.h"
#include "gpu/kernels.h"
#include "wccl/wccl.h"

namespace {

std::string get(wccl_config_t *cfg, const char *key) {
  char buf[256];
  EXPECT_EQ(wccl_config_get(cfg, key, buf, sizeof(buf), nullptr), WCCL_OK) << wccl_last_error();
  return buf;
}

TEST(Results, EveryCodeHasANameAndAMessage) {
#define CHECK_CODE(name, value, message)       \
  EXPECT_STREQ(wccl_result_name(name), #name); \
  EXPECT_STREQ(wccl_strerror(name), message);  \
  EXPECT_EQ(static_cast<int>(name), value);
  WCCL_RESULT_TABLE(CHECK_CODE)
#undef CHECK_CODE
  // Values outside the table are checked from C (tests/c/c99_header.c), where they are legal.
  // Codes users match on keep their values forever.
  EXPECT_EQ(WCCL_OK, 0);
  EXPECT_EQ(WCCL_ERR_PEER_LOST, 6);
  EXPECT_EQ(WCCL_ERR_AUTH, 9);
}

TEST(Version, MatchesTheHeader) {
  EXPECT_STREQ(wccl_version(), WCCL_VERSION_STRING);
  const std::string v = wccl_version();
  EXPECT_EQ(v.substr(0, v.find('.')), std::to_string(WCCL_VERSION_MAJOR));
}

TEST(Config, DefaultsComeFromTheKeyTable) {
  wccl_config_t *cfg = nullptr;
  ASSERT_EQ(wccl_config_create(&cfg), WCCL_OK) << wccl_last_error();
  EXPECT_EQ(get(cfg, "streams"), "4");
  EXPECT_EQ(get(cfg, "tls"), "on");
  EXPECT_EQ(get(cfg, "log_level"), "warn");
  const std::string keys = wccl_config_keys();
  EXPECT_NE(keys.find("streams\t4\tinteger 1..64\t"), std::string::npos) << keys;
  EXPECT_NE(keys.find("tls\ton\ton|off\t"), std::string::npos) << keys;
  // Every listed key can be read back.
  size_t start = 0;
  while (start < keys.size()) {
    const size_t tab = keys.find('\t', start);
    ASSERT_NE(tab, std::string::npos);
    const std::string key = keys.substr(start, tab - start);
    size_t needed = 0;
    EXPECT_EQ(wccl_config_get(cfg, key.c_str(), nullptr, 0, &needed), WCCL_ERR_INVALID_ARGUMENT);
    EXPECT_GE(needed, 1u) << key;
    start = keys.find('\n', tab) + 1;
  }
  wccl_config_destroy(cfg);
  wccl_config_destroy(nullptr);  // accepted
}

TEST(Config, EnvironmentOverridesDefaults) {
  setenv("WCCL_STREAMS", "8", 1);
  setenv("WCCL_LOG_LEVEL", "debug", 1);
  wccl_config_t *cfg = nullptr;
  ASSERT_EQ(wccl_config_create(&cfg), WCCL_OK) << wccl_last_error();
  EXPECT_EQ(get(cfg, "streams"), "8");
  EXPECT_EQ(get(cfg, "log_level"), "debug");
  // set() wins over the environment.
  EXPECT_EQ(wccl_config_set(cfg, "streams", "2"), WCCL_OK);
  EXPECT_EQ(get(cfg, "streams"), "2");
  wccl_config_destroy(cfg);
  unsetenv("WCCL_STREAMS");
  unsetenv("WCCL_LOG_LEVEL");
}

TEST(Config, BadEnvironmentValueFailsCreateNamingTheVariable) {
  setenv("WCCL_STREAMS", "lots", 1);
  wccl_config_t *cfg = reinterpret_cast<wccl_config_t *>(0x1);
  EXPECT_EQ(wccl_config_create(&cfg), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cfg, nullptr);
  const std::string err = wccl_last_error();
  EXPECT_NE(err.find("WCCL_STREAMS"), std::string::npos) << err;
  EXPECT_NE(err.find("integer 1..64"), std::string::npos) << err;
  unsetenv("WCCL_STREAMS");
}

TEST(Config, BadValuesAreRejectedAndLeaveTheValue) {
  wccl_config_t *cfg = nullptr;
  ASSERT_EQ(wccl_config_create(&cfg), WCCL_OK);
  const struct {
    const char *key, *value, *expect;
  } cases[] = {
      {"streams", "0", "integer 1..64"},
      {"streams", "65", "integer 1..64"},
      {"streams", "4x", "integer 1..64"},
      {"streams", "", "integer 1..64"},
      {"streams", "-1", "integer 1..64"},
      {"tls", "yes", "on|off"},
      {"log_level", "verbose", "error|warn|info|debug|trace"},
      {"frame_bytes", "1k", "bytes 4096.."},
      {"frame_bytes", "17M", "bytes 4096.."},
      {"frame_bytes", "1T", "bytes 4096.."},
      {"connect_timeout_ms", "99999999999999999999", "integer 1..3600000"},
      {"name", "has space", "without spaces"},
  };
  for (const auto &c : cases) {
    EXPECT_EQ(wccl_config_set(cfg, c.key, c.value), WCCL_ERR_INVALID_ARGUMENT)
        << c.key << "=" << c.value;
    const std::string err = wccl_last_error();
    EXPECT_NE(err.find(std::string("config key ") + c.key), std::string::npos) << err;
    EXPECT_NE(err.find(c.expect), std::string::npos) << err;
  }
  EXPECT_EQ(get(cfg, "streams"), "4");
  EXPECT_EQ(wccl_config_set(cfg, "frame_bytes", "2M"), WCCL_OK);
  EXPECT_EQ(get(cfg, "frame_bytes"), "2M");
  wccl_config_destroy(cfg);
}

TEST(Config, UnknownKeysAndNullArguments) {
  wccl_config_t *cfg = nullptr;
  ASSERT_EQ(wccl_config_create(&cfg), WCCL_OK);
  EXPECT_EQ(wccl_config_set(cfg, "stream", "4"), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wccl_last_error()).find("unknown config key \"stream\""),
            std::string::npos);
  char buf[8] = "keep";
  EXPECT_EQ(wccl_config_get(cfg, "nope", buf, sizeof(buf), nullptr), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(buf, "keep");
  EXPECT_EQ(wccl_config_set(nullptr, "streams", "4"), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(wccl_config_set(cfg, nullptr, "4"), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(wccl_config_set(cfg, "streams", nullptr), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wccl_last_error()).find("streams"), std::string::npos);
  EXPECT_EQ(wccl_config_create(nullptr), WCCL_ERR_INVALID_ARGUMENT);
  wccl_config_destroy(cfg);
}

TEST(Config, GetReportsTheSizeItNeeds) {
  wccl_config_t *cfg = nullptr;
  ASSERT_EQ(wccl_config_create(&cfg), WCCL_OK);
  ASSERT_EQ(wccl_config_set(cfg, "name", "node-abc"), WCCL_OK);
  size_t needed = 0;
  char small[4] = "xyz";
  EXPECT_EQ(wccl_config_get(cfg, "name", small, sizeof(small), &needed), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(needed, 9u);
  EXPECT_STREQ(small, "xyz");  // untouched on error
  EXPECT_NE(std::string(wccl_last_error()).find("need 9"), std::string::npos);
  char exact[9];
  EXPECT_EQ(wccl_config_get(cfg, "name", exact, sizeof(exact), &needed), WCCL_OK);
  EXPECT_STREQ(exact, "node-abc");
  wccl_config_destroy(cfg);
}

TEST(LastError, IsPerThreadAndNamesTheSource) {
  wccl_config_t *cfg = nullptr;
  ASSERT_EQ(wccl_config_create(&cfg), WCCL_OK);
  EXPECT_EQ(wccl_config_set(cfg, "tls", "maybe"), WCCL_ERR_INVALID_ARGUMENT);
  const std::string mine = wccl_last_error();
  EXPECT_EQ(mine.rfind("WCCL_ERR_INVALID_ARGUMENT: ", 0), 0u) << mine;
  EXPECT_NE(mine.find("lib/core/config.cc:"), std::string::npos) << mine;
  std::string other = "unset";
  std::thread([&] { other = wccl_last_error(); }).join();
  EXPECT_EQ(other, "");
  // A later success does not clear it.
  EXPECT_EQ(wccl_config_set(cfg, "tls", "off"), WCCL_OK);
  EXPECT_EQ(std::string(wccl_last_error()), mine);
  wccl_config_destroy(cfg);
}

// wccl_wire_roundtrip with opts of this wire and TOPK keep.
// The wire is an int: a test passes values that are no wccl_wire_t.
wccl_result_t roundtrip(const float *in, float *out, size_t count, int32_t wire,
                        int32_t topk_keep = 0) {
  wccl_opts_t o = wccl_opts_default();
  o.wire = wire;
  o.topk_keep = topk_keep;
  return wccl_wire_roundtrip(in, out, count, &o);
}

TEST(WireRoundtrip, IsWhatTheWireKeepsAndRefusesWithoutWriting) {
  std::vector<float> x(3000), y(3000, 7.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 101) * 0.01f - 0.5f;
  for (wccl_wire_t w :
       {WCCL_WIRE_INT8, WCCL_WIRE_INT4, WCCL_WIRE_INT2, WCCL_WIRE_FP8, WCCL_WIRE_TOPK}) {
    ASSERT_EQ(roundtrip(x.data(), y.data(), x.size(), w), WCCL_OK) << wccl_last_error();
    const wccl::codec::Wire cw(static_cast<wccl::codec::WireKind>(w));
    std::vector<uint8_t> bytes(wccl::codec::wire_size(cw, x.size()));
    std::vector<float> want(x.size());
    ASSERT_TRUE(wccl::codec::encode(cw, x.data(), x.size(), bytes.data()).ok());
    ASSERT_TRUE(wccl::codec::decode(cw, bytes.data(), bytes.size(), x.size(), want.data()).ok());
    EXPECT_EQ(y, want) << w;
    EXPECT_NE(y, x) << w << " is lossy on these values";
  }
  ASSERT_EQ(roundtrip(x.data(), y.data(), x.size(), WCCL_WIRE_NATIVE), WCCL_OK);
  EXPECT_EQ(y, x);
  ASSERT_EQ(wccl_wire_roundtrip(x.data(), y.data(), x.size(), nullptr), WCCL_OK) << "NULL: native";
  EXPECT_EQ(y, x);
  x[2222] = std::nanf("");
  const std::vector<float> before = y;
  EXPECT_EQ(roundtrip(x.data(), y.data(), x.size(), WCCL_WIRE_INT4), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wccl_last_error()).find("element 2222 is NaN"), std::string::npos)
      << wccl_last_error();
  EXPECT_EQ(y, before);
  EXPECT_EQ(roundtrip(x.data(), y.data(), 4, 9), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wccl_last_error()).find("opts->wire 9"), std::string::npos)
      << wccl_last_error();
  EXPECT_EQ(roundtrip(nullptr, y.data(), 4, WCCL_WIRE_INT8), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(roundtrip(nullptr, nullptr, 0, WCCL_WIRE_INT8), WCCL_OK);
  wccl_opts_t o = wccl_opts_default();
  o.size = 8;
  EXPECT_EQ(wccl_wire_roundtrip(x.data(), y.data(), 4, &o), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wccl_last_error()).find("opts->size is 8"), std::string::npos)
      << wccl_last_error();
  o = wccl_opts_default();
  int stream = 0;
  o.cuda_stream = &stream;
  // With host buffers: INVALID_ARGUMENT where CUDA runs, UNSUPPORTED where it does not (as the
  // collectives answer).
  const bool cuda = wccl::gpu::available();
  EXPECT_EQ(wccl_wire_roundtrip(x.data(), y.data(), 4, &o),
            cuda ? WCCL_ERR_INVALID_ARGUMENT : WCCL_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(wccl_last_error())
                .find(cuda ? "opts->cuda_stream orders device buffers"
                           : "opts->cuda_stream is set, but this library has no CUDA"),
            std::string::npos)
      << wccl_last_error();
  EXPECT_EQ(y, before);
}

// TOPK keeps opts.topk_keep of each block of 256 (0: the default 8), as the codec's wire of that
// keep encodes them; a keep outside 1..64, or one given with another wire, is refused by name.
TEST(WireRoundtrip, TopkKeepsWhatTheOptionsSay) {
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.37f);
  for (int32_t keep : {1, 2, 8, 31, 64}) {
    std::vector<float> y(x.size(), 7.0f);
    ASSERT_EQ(roundtrip(x.data(), y.data(), x.size(), WCCL_WIRE_TOPK, keep), WCCL_OK)
        << wccl_last_error();
    const auto w = wccl::codec::Wire::topk(static_cast<size_t>(keep));
    std::vector<uint8_t> bytes(wccl::codec::wire_size(w, x.size()));
    EXPECT_EQ(bytes.size(), 3 * (4 + keep + (keep + 1) / 2) +
                                (4 + std::min(keep, 232) + (std::min(keep, 232) + 1) / 2));
    std::vector<float> want(x.size());
    ASSERT_TRUE(wccl::codec::encode(w, x.data(), x.size(), bytes.data()).ok());
    ASSERT_TRUE(wccl::codec::decode(w, bytes.data(), bytes.size(), x.size(), want.data()).ok());
    EXPECT_EQ(y, want) << keep;
    size_t nonzero = 0;
    for (float v : y) nonzero += v != 0.0f;
    EXPECT_LE(nonzero, 3 * static_cast<size_t>(keep) + std::min<size_t>(keep, 232)) << keep;
    EXPECT_GE(nonzero, 2 * static_cast<size_t>(keep)) << keep;  // at most a seventh rounds to 0
  }
  std::vector<float> eight(x.size()), deflt(x.size());
  ASSERT_EQ(roundtrip(x.data(), eight.data(), x.size(), WCCL_WIRE_TOPK, 8), WCCL_OK);
  ASSERT_EQ(roundtrip(x.data(), deflt.data(), x.size(), WCCL_WIRE_TOPK, 0), WCCL_OK);
  EXPECT_EQ(eight, deflt);
  std::vector<float> y(x.size(), 7.0f);
  const std::vector<float> before = y;
  for (int32_t keep : {-1, 65, 256}) {
    EXPECT_EQ(roundtrip(x.data(), y.data(), x.size(), WCCL_WIRE_TOPK, keep),
              WCCL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(wccl_last_error())
                  .find("opts->topk_keep " + std::to_string(keep) + " is not 1..64"),
              std::string::npos)
        << wccl_last_error();
  }
  EXPECT_EQ(roundtrip(x.data(), y.data(), x.size(), WCCL_WIRE_INT8, 4), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wccl_last_error()).find("only the TOPK wire keeps elements (this is int8)"),
            std::string::npos)
      << wccl_last_error();
  EXPECT_EQ(y, before);
}

// On device memory (an emulated GPU, whose streams run only when synchronized): the GPU's
// roundtrip is the host's bit for bit, runs after the work already queued on the default stream,
// frees its scratch, and refuses without writing.
TEST(WireRoundtrip, OnAGpuIsTheHostsAfterTheDefaultStreamsWork) {
  wccl::test::EmulatedGpu gpu;
  gpu.install();
  std::vector<float> x(3000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 101) * 0.01f - 0.5f;
  const size_t bytes = x.size() * sizeof(float);
  const std::vector<float> sevens(x.size(), 7.0f);
  void *din = gpu.alloc_copy(sevens.data(), bytes);
  void *dout = gpu.alloc_copy(sevens.data(), bytes);
  ASSERT_TRUE(gpu.copy(din, x.data(), bytes, nullptr).ok());  // queued, not run yet
  auto read = [&](void *p) {
    std::vector<float> v(x.size());
    const std::vector<uint8_t> b = gpu.read(p, bytes);
    std::memcpy(v.data(), b.data(), bytes);
    return v;
  };
  for (wccl_wire_t w : {WCCL_WIRE_INT8, WCCL_WIRE_INT4, WCCL_WIRE_INT2, WCCL_WIRE_FP8,
                        WCCL_WIRE_TOPK, WCCL_WIRE_BF16, WCCL_WIRE_FP16, WCCL_WIRE_NATIVE}) {
    std::vector<float> want(x.size());
    ASSERT_EQ(roundtrip(x.data(), want.data(), x.size(), w), WCCL_OK) << wccl_last_error();
    ASSERT_EQ(roundtrip(static_cast<const float *>(din), static_cast<float *>(dout), x.size(), w),
              WCCL_OK)
        << wccl_last_error();
    EXPECT_EQ(read(dout), want) << w;
  }
  ASSERT_EQ(roundtrip(static_cast<const float *>(dout), static_cast<float *>(dout), x.size(),
                      WCCL_WIRE_INT8),
            WCCL_OK)
      << wccl_last_error();
  std::vector<float> want(x.size());
  ASSERT_EQ(roundtrip(x.data(), want.data(), x.size(), WCCL_WIRE_INT8), WCCL_OK);
  EXPECT_EQ(read(dout), want) << "in place";
  x[2222] = std::nanf("");
  gpu.write(din, x.data(), bytes);
  EXPECT_EQ(roundtrip(static_cast<const float *>(din), static_cast<float *>(dout), x.size(),
                      WCCL_WIRE_FP8),
            WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wccl_last_error()).find("element 2222 is NaN"), std::string::npos)
      << wccl_last_error();
  EXPECT_EQ(read(dout), want) << "a refused roundtrip writes nothing";
  EXPECT_EQ(roundtrip(x.data(), static_cast<float *>(dout), x.size(), WCCL_WIRE_INT8),
            WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wccl_last_error()).find("in is in host memory and out in emulated-gpu"),
            std::string::npos)
      << wccl_last_error();
  gpu.free(din);
  gpu.free(dout);
  EXPECT_EQ(gpu.live_allocations(), 0u);
}

// opts.cuda_stream orders the GPU's roundtrip after the work queued on that stream (a copy that
// runs only when the stream is synchronized: were the roundtrip on the default stream, it would
// read the buffer's old contents), and opts.topk_keep is kept on the GPU as on the host.
TEST(WireRoundtrip, OnAGpuFollowsTheOptionsStreamAndKeep) {
  wccl::test::EmulatedGpu gpu;
  gpu.install();
  std::vector<float> x(3000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.37f);
  const size_t bytes = x.size() * sizeof(float);
  const std::vector<float> sevens(x.size(), 7.0f);
  void *din = gpu.alloc_copy(sevens.data(), bytes);
  void *dout = gpu.alloc_copy(sevens.data(), bytes);
  wccl::gpu::Stream stream = nullptr;
  ASSERT_TRUE(gpu.create_stream(&stream).ok());
  ASSERT_TRUE(gpu.copy(din, x.data(), bytes, stream).ok());  // queued on the stream, not run yet
  wccl_opts_t o = wccl_opts_default();
  o.wire = WCCL_WIRE_TOPK;
  o.topk_keep = 2;
  o.cuda_stream = stream;
  ASSERT_EQ(wccl_wire_roundtrip(static_cast<const float *>(din), static_cast<float *>(dout),
                                x.size(), &o),
            WCCL_OK)
      << wccl_last_error();
  std::vector<float> want(x.size());
  ASSERT_EQ(roundtrip(x.data(), want.data(), x.size(), WCCL_WIRE_TOPK, 2), WCCL_OK);
  std::vector<float> got(x.size());
  const std::vector<uint8_t> b = gpu.read(dout, bytes);
  std::memcpy(got.data(), b.data(), bytes);
  EXPECT_EQ(got, want);
  gpu.destroy_stream(stream);
  gpu.free(din);
  gpu.free(dout);
  EXPECT_EQ(gpu.live_allocations(), 0u);
}

}  // namespace

namespace {

TEST(CoordApi, StartsOnAFreePortAndStops) {
  wccl_config_t *cfg = nullptr;
  ASSERT_EQ(wccl_config_create(&cfg), WCCL_OK);
  ASSERT_EQ(wccl_config_set(cfg, "listen", "127.0.0.1:0"), WCCL_OK);
  ASSERT_EQ(wccl_config_set(cfg, "tls", "off"), WCCL_OK);
  wccl_coord_t *coord = nullptr;
  ASSERT_EQ(wccl_coord_start(&coord, cfg), WCCL_OK) << wccl_last_error();
  EXPECT_GT(wccl_coord_port(coord), 0);
  // A second coordinator on the same port cannot bind it.
  const std::string taken = "127.0.0.1:" + std::to_string(wccl_coord_port(coord));
  ASSERT_EQ(wccl_config_set(cfg, "listen", taken.c_str()), WCCL_OK);
  wccl_coord_t *second = reinterpret_cast<wccl_coord_t *>(0x1);
  EXPECT_EQ(wccl_coord_start(&second, cfg), WCCL_ERR_IO);
  EXPECT_EQ(second, nullptr);
  EXPECT_NE(std::string(wccl_last_error()).find(taken), std::string::npos) << wccl_last_error();
  wccl_coord_stop(coord);
  wccl_coord_stop(nullptr);
  EXPECT_EQ(wccl_coord_port(nullptr), 0);
  wccl_config_destroy(cfg);
}

TEST(CoordApi, BadConfigurationIsNamed) {
  wccl_config_t *cfg = nullptr;
  ASSERT_EQ(wccl_config_create(&cfg), WCCL_OK);
  wccl_coord_t *coord = nullptr;
  ASSERT_EQ(wccl_config_set(cfg, "listen", "127.0.0.1:0"), WCCL_OK);
  EXPECT_EQ(wccl_coord_start(&coord, cfg), WCCL_ERR_INVALID_ARGUMENT) << "tls=on without files";
  EXPECT_NE(std::string(wccl_last_error()).find("tls_cert"), std::string::npos)
      << wccl_last_error();
  ASSERT_EQ(wccl_config_set(cfg, "tls", "off"), WCCL_OK);
  ASSERT_EQ(wccl_config_set(cfg, "listen", "nowhere"), WCCL_OK);
  EXPECT_EQ(wccl_coord_start(&coord, cfg), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wccl_last_error()).find("nowhere"), std::string::npos) << wccl_last_error();
  EXPECT_EQ(wccl_coord_start(&coord, nullptr), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(wccl_coord_start(nullptr, cfg), WCCL_ERR_INVALID_ARGUMENT);
  wccl_config_destroy(cfg);
}

}  // namespace

namespace {

// The configuration of a plaintext group on 127.0.0.1 whose first epoch forms with min_peers
// members, for its coordinator and (once `coordinator` is set) its members.
wccl_config_t *local_group_config(int min_peers) {
  wccl_config_t *cfg = nullptr;
  EXPECT_EQ(wccl_config_create(&cfg), WCCL_OK);
  EXPECT_EQ(wccl_config_set(cfg, "tls", "off"), WCCL_OK);
  EXPECT_EQ(wccl_config_set(cfg, "log_level", "error"), WCCL_OK);
  EXPECT_EQ(wccl_config_set(cfg, "listen", "127.0.0.1:0"), WCCL_OK);
  EXPECT_EQ(wccl_config_set(cfg, "min_peers", std::to_string(min_peers).c_str()), WCCL_OK);
  EXPECT_EQ(wccl_config_set(cfg, "settle_ms", "10"), WCCL_OK);
  return cfg;
}

// One peer alone in a plaintext group: enough to reach every argument check of the collectives.
class CollectiveApi : public testing::Test {
 protected:
  void SetUp() override {
    wccl_config_t *cfg = local_group_config(1);
    ASSERT_NE(cfg, nullptr);
    ASSERT_EQ(wccl_coord_start(&coord_, cfg), WCCL_OK) << wccl_last_error();
    const std::string address = "127.0.0.1:" + std::to_string(wccl_coord_port(coord_));
    ASSERT_EQ(wccl_config_set(cfg, "coordinator", address.c_str()), WCCL_OK);
    ASSERT_EQ(wccl_comm_join(&comm_, cfg), WCCL_OK) << wccl_last_error();
    wccl_config_destroy(cfg);
  }
  void TearDown() override {
    wccl_comm_destroy(comm_);
    wccl_coord_stop(coord_);
  }
  wccl_coord_t *coord_ = nullptr;
  wccl_comm_t *comm_ = nullptr;
};

TEST_F(CollectiveApi, ArgumentsAreCheckedAndNamed) {
  float v[4] = {1, 2, 3, 4};
  auto expect = [](wccl_result_t got, wccl_result_t want, const char *words) {
    EXPECT_EQ(got, want) << wccl_last_error();
    EXPECT_NE(std::string(wccl_last_error()).find(words), std::string::npos) << wccl_last_error();
  };
  expect(wccl_allreduce(v, v, 4, WCCL_F32, WCCL_SUM, nullptr, nullptr), WCCL_ERR_INVALID_ARGUMENT,
         "comm is NULL");
  expect(wccl_allreduce(nullptr, v, 4, WCCL_F32, WCCL_SUM, comm_, nullptr),
         WCCL_ERR_INVALID_ARGUMENT, "sendbuf");
  expect(wccl_allreduce(v, nullptr, 4, WCCL_F32, WCCL_SUM, comm_, nullptr),
         WCCL_ERR_INVALID_ARGUMENT, "recvbuf");
  expect(wccl_allreduce(v, v, 4, static_cast<wccl_dtype_t>(99), WCCL_SUM, comm_, nullptr),
         WCCL_ERR_INVALID_ARGUMENT, "dtype 99");
  expect(wccl_allreduce(v, v, 4, WCCL_F32, static_cast<wccl_redop_t>(-1), comm_, nullptr),
         WCCL_ERR_INVALID_ARGUMENT, "op -1");
  expect(wccl_broadcast(v, v, 4, WCCL_F32, 1, comm_, nullptr), WCCL_ERR_INVALID_ARGUMENT, "root 1");
  wccl_opts_t o = wccl_opts_default();
  o.size = 8;
  expect(wccl_allreduce(v, v, 4, WCCL_F32, WCCL_SUM, comm_, &o), WCCL_ERR_INVALID_ARGUMENT,
         "opts->size");
  o = wccl_opts_default();
  o.wire = WCCL_WIRE_INT8;
  expect(wccl_allreduce(v, v, 2, WCCL_F64, WCCL_SUM, comm_, &o), WCCL_ERR_INVALID_ARGUMENT,
         "int8 wire carries f32, f16 and bf16 elements, not f64");
  o.wire = WCCL_WIRE_TOPK + 1;
  expect(wccl_allreduce(v, v, 4, WCCL_F32, WCCL_SUM, comm_, &o), WCCL_ERR_INVALID_ARGUMENT,
         "opts->wire 8");
  o.wire = WCCL_WIRE_TOPK;
  o.algo = WCCL_ALGO_RING;
  expect(wccl_allreduce(v, v, 4, WCCL_F32, WCCL_SUM, comm_, &o), WCCL_ERR_INVALID_ARGUMENT,
         "the topk wire is never re-encoded");
  o = wccl_opts_default();
  o.compress = 3;
  expect(wccl_allreduce(v, v, 4, WCCL_F32, WCCL_SUM, comm_, &o), WCCL_ERR_INVALID_ARGUMENT,
         "opts->compress 3");
  o = wccl_opts_default();
  o.max_link_rate = 1000;
  expect(wccl_allreduce(v, v, 4, WCCL_F32, WCCL_SUM, comm_, &o), WCCL_ERR_INVALID_ARGUMENT,
         "opts->max_link_rate is 1000; 0 (unpaced) or at least 125000 bytes per second");
  o.max_link_rate = WCCL_MIN_LINK_RATE - 1;
  expect(wccl_allreduce(v, v, 4, WCCL_F32, WCCL_SUM, comm_, &o), WCCL_ERR_INVALID_ARGUMENT,
         "opts->max_link_rate is 124999");
  o.max_link_rate = -1;
  expect(wccl_allreduce(v, v, 4, WCCL_F32, WCCL_SUM, comm_, &o), WCCL_ERR_INVALID_ARGUMENT,
         "opts->max_link_rate is -1");
  o = wccl_opts_default();
  o.algo = 7;
  expect(wccl_allreduce(v, v, 4, WCCL_F32, WCCL_SUM, comm_, &o), WCCL_ERR_INVALID_ARGUMENT,
         "opts->algo");
  wccl_request_t *req = reinterpret_cast<wccl_request_t *>(&o);
  expect(wccl_iallreduce(&req, v, v, 4, WCCL_F32, static_cast<wccl_redop_t>(9), comm_, nullptr),
         WCCL_ERR_INVALID_ARGUMENT, "op 9");
  EXPECT_EQ(req, nullptr) << "an error return creates no request";
  expect(wccl_wait(nullptr, nullptr), WCCL_ERR_INVALID_ARGUMENT, "req is NULL");
  expect(wccl_ibarrier(nullptr, comm_, nullptr), WCCL_ERR_INVALID_ARGUMENT,
         "wccl_ibarrier: req (the out-handle) is NULL");
  EXPECT_EQ(v[0], 1.0f);
  wccl_request_free(nullptr);
}

TEST_F(CollectiveApi, OnePeerCollectivesComplete) {
  float in[3] = {1, 2, 3}, out[3] = {0, 0, 0};
  ASSERT_EQ(wccl_allreduce(in, out, 3, WCCL_F32, WCCL_AVG, comm_, nullptr), WCCL_OK)
      << wccl_last_error();
  EXPECT_EQ(out[2], 3.0f);
  wccl_opts_t zstd = wccl_opts_default();
  for (int32_t mode : {WCCL_COMPRESS_ZSTD, WCCL_COMPRESS_AUTO}) {
    zstd.compress = mode;
    out[2] = 0;
    EXPECT_EQ(wccl_allreduce(in, out, 3, WCCL_F32, WCCL_SUM, comm_, &zstd),
              wccl::codec::compression_available() ? WCCL_OK : WCCL_ERR_UNSUPPORTED)
        << wccl_last_error();
  }
  wccl_request_t *req = nullptr;
  ASSERT_EQ(wccl_ibarrier(&req, comm_, nullptr), WCCL_OK);
  wccl_op_stats_t stats;
  stats.size = sizeof(stats);
  ASSERT_EQ(wccl_wait(req, &stats), WCCL_OK);
  EXPECT_EQ(stats.world_size, 1);
  int done = 0;
  EXPECT_EQ(wccl_test(req, &done), WCCL_OK);
  EXPECT_EQ(done, 1) << "a collected request stays done";
  wccl_request_free(req);
}

// The collective `coll` on this one member, over two zero elements of dtype, with opts; *fn is set
// to the function's name (which begins its errors' messages).
wccl_result_t run_collective(wccl_comm_t *comm, int coll, wccl_dtype_t dtype, wccl_redop_t op,
                             const wccl_opts_t *opts, const char **fn) {
  alignas(8) uint8_t in[16] = {}, out[16] = {};
  switch (coll) {
    case WCCL_COLL_ALLREDUCE:
      *fn = "wccl_allreduce";
      return wccl_allreduce(in, out, 2, dtype, op, comm, opts);
    case WCCL_COLL_BROADCAST:
      *fn = "wccl_broadcast";
      return wccl_broadcast(in, in, 2, dtype, 0, comm, opts);
    case WCCL_COLL_ALLGATHER:
      *fn = "wccl_allgather";
      return wccl_allgather(in, out, 2, dtype, comm, opts);
    case WCCL_COLL_REDUCE_SCATTER:
      *fn = "wccl_reduce_scatter";
      return wccl_reduce_scatter(in, out, 2, dtype, op, comm, opts);
    default:
      *fn = "wccl_barrier";
      return wccl_barrier(comm, opts);
  }
}

// wccl_last_error() with the function that begins it renamed: what another call would say.
std::string last_error_as(const char *fn, const char *as) {
  std::string e = wccl_last_error();
  const size_t at = e.find(fn);
  return at == std::string::npos ? e : e.replace(at, std::strlen(fn), as);
}

// Options that every rule of the wire and the fields meets one way or the other: each wire by each
// algorithm, TOPK's keep, a keep on another wire, the pacing floor, fields out of range.
std::vector<wccl_opts_t> opts_cases() {
  std::vector<wccl_opts_t> all;
  auto add = [&all](auto change) {
    wccl_opts_t o = wccl_opts_default();
    change(o);
    all.push_back(o);
  };
  for (int32_t wire = WCCL_WIRE_NATIVE; wire <= WCCL_WIRE_TOPK; ++wire) {
    for (int32_t algo = WCCL_ALGO_AUTO; algo <= WCCL_ALGO_ALLGATHER; ++algo) {
      add([=](wccl_opts_t &o) {
        o.wire = wire;
        o.algo = algo;
      });
    }
  }
  for (int32_t algo : {WCCL_ALGO_AUTO, WCCL_ALGO_RING}) {
    add([=](wccl_opts_t &o) {
      o.wire = WCCL_WIRE_TOPK;
      o.topk_keep = 3;
      o.algo = algo;
    });
  }
  add([](wccl_opts_t &o) {
    o.wire = WCCL_WIRE_TOPK;
    o.topk_keep = 65;
  });
  add([](wccl_opts_t &o) {
    o.wire = WCCL_WIRE_INT8;
    o.topk_keep = 3;
  });
  add([](wccl_opts_t &o) { o.wire = WCCL_WIRE_TOPK + 1; });
  for (int64_t rate : {int64_t{-1}, int64_t{WCCL_MIN_LINK_RATE - 1}, int64_t{WCCL_MIN_LINK_RATE}}) {
    add([=](wccl_opts_t &o) {
      o.wire = WCCL_WIRE_INT8;
      o.max_link_rate = rate;
    });
  }
  add([](wccl_opts_t &o) { o.algo = WCCL_ALGO_ALLGATHER + 1; });
  add([](wccl_opts_t &o) { o.compress = WCCL_COMPRESS_ZSTD; });  // UNSUPPORTED without zstd
  add([](wccl_opts_t &o) { o.compress = WCCL_COMPRESS_AUTO + 1; });
  add([](wccl_opts_t &o) { o.timeout_ms = -1; });
  add([](wccl_opts_t &o) { o.size = 8; });
  return all;
}

const wccl_dtype_t kDtypes[] = {WCCL_F32, WCCL_F64, WCCL_F16, WCCL_BF16,
                                WCCL_I8,  WCCL_U8,  WCCL_I32, WCCL_I64};
const wccl_redop_t kOps[] = {WCCL_SUM, WCCL_AVG, WCCL_MIN, WCCL_MAX, WCCL_PROD};

bool reduces(int coll) { return coll == WCCL_COLL_ALLREDUCE || coll == WCCL_COLL_REDUCE_SCATTER; }

std::string describe(int coll, int dtype, int op, const wccl_opts_t &o) {
  return "coll " + std::to_string(coll) + " dtype " + std::to_string(dtype) + " op " +
         std::to_string(op) + " wire " + std::to_string(o.wire) + " keep " +
         std::to_string(o.topk_keep) + " algo " + std::to_string(o.algo) + " rate " +
         std::to_string(o.max_link_rate) + " compress " + std::to_string(o.compress);
}

// wccl_opts_check answers, with the same words, what the collective itself returns for the
// options, for every collective, dtype, op and the cases above: one rule, asked or applied.
TEST_F(CollectiveApi, OptsCheckIsWhatTheCollectiveReturns) {
  int refused = 0;
  for (int coll = WCCL_COLL_ALLREDUCE; coll <= WCCL_COLL_BARRIER; ++coll) {
    for (wccl_dtype_t dtype : kDtypes) {
      for (wccl_redop_t op : kOps) {
        if (!reduces(coll) && op != WCCL_SUM) continue;
        for (const wccl_opts_t &o : opts_cases()) {
          SCOPED_TRACE(describe(coll, dtype, op, o));
          const char *fn = nullptr;
          const wccl_result_t ran = run_collective(comm_, coll, dtype, op, &o, &fn);
          const std::string ran_error = last_error_as(fn, "wccl_opts_check");
          const wccl_result_t checked =
              wccl_opts_check(static_cast<wccl_collective_t>(coll), dtype, op, &o);
          ASSERT_EQ(checked, ran) << ran_error;
          if (ran != WCCL_OK) {
            EXPECT_EQ(std::string(wccl_last_error()), ran_error);
            ++refused;
          }
        }
      }
    }
  }
  EXPECT_GT(refused, 0);
  auto expect = [](wccl_result_t got, const char *words) {
    EXPECT_EQ(got, WCCL_ERR_INVALID_ARGUMENT) << wccl_last_error();
    EXPECT_NE(std::string(wccl_last_error()).find(words), std::string::npos) << wccl_last_error();
  };
  wccl_opts_t o = wccl_opts_default();
  o.wire = WCCL_WIRE_INT8;
  expect(wccl_opts_check(WCCL_COLL_ALLREDUCE, WCCL_I32, WCCL_SUM, &o),
         "the int8 wire carries f32, f16 and bf16 elements, not i32");
  EXPECT_EQ(wccl_opts_check(WCCL_COLL_ALLREDUCE, WCCL_F16, WCCL_MAX, &o), WCCL_OK)
      << "a wire asked for carries MIN, MAX and PROD, within its bound";
  EXPECT_EQ(wccl_opts_check(WCCL_COLL_BARRIER, WCCL_I32, WCCL_SUM, &o), WCCL_OK)
      << "a barrier ignores the wire";
  o.max_link_rate = 1000;
  expect(wccl_opts_check(WCCL_COLL_BARRIER, WCCL_F32, WCCL_SUM, &o),
         "wccl_opts_check: opts->max_link_rate is 1000; 0 (unpaced) or at least 125000");
  o = wccl_opts_default();
  o.wire = WCCL_WIRE_TOPK;
  expect(wccl_opts_check(WCCL_COLL_REDUCE_SCATTER, WCCL_F32, WCCL_SUM, &o),
         "the topk wire is never re-encoded");
  o.algo = WCCL_ALGO_TREE;
  expect(wccl_opts_check(WCCL_COLL_ALLREDUCE, WCCL_F32, WCCL_SUM, &o), "not tree");
  EXPECT_EQ(wccl_opts_check(WCCL_COLL_BROADCAST, WCCL_F32, WCCL_SUM, &o), WCCL_OK);
  EXPECT_EQ(wccl_opts_check(WCCL_COLL_ALLREDUCE, WCCL_F32, WCCL_SUM, nullptr), WCCL_OK);
  expect(wccl_opts_check(static_cast<wccl_collective_t>(9), WCCL_F32, WCCL_SUM, nullptr),
         "coll 9 is not a wccl_collective_t");
  expect(wccl_opts_check(WCCL_COLL_ALLREDUCE, static_cast<wccl_dtype_t>(99), WCCL_SUM, nullptr),
         "dtype 99");
  expect(wccl_opts_check(WCCL_COLL_ALLREDUCE, WCCL_F32, static_cast<wccl_redop_t>(-1), nullptr),
         "op -1");
  EXPECT_EQ(wccl_opts_check(WCCL_COLL_BROADCAST, WCCL_F32, static_cast<wccl_redop_t>(-1), nullptr),
            WCCL_OK)
      << "a broadcast takes no op";
  EXPECT_EQ(wccl_min_link_rate(), WCCL_MIN_LINK_RATE);
  EXPECT_EQ(wccl_topk_default_keep(), WCCL_TOPK_DEFAULT_KEEP);
}

// wccl_opts_for gives an operation a group's wire on the SUM and AVG reductions the wire carries,
// NATIVE elsewhere, and then the options the collective takes, or the collective's error for
// them; a group's options that no operation could take are refused for every one.
TEST(OptsFor, IsTheGroupsWireWhereItAppliesElseNative) {
  for (int coll = WCCL_COLL_ALLREDUCE; coll <= WCCL_COLL_BARRIER; ++coll) {
    for (wccl_dtype_t dtype : kDtypes) {
      for (wccl_redop_t op : kOps) {
        for (const wccl_opts_t &group : opts_cases()) {
          SCOPED_TRACE(describe(coll, dtype, op, group));
          wccl_opts_t native = group, any_algo = group, out;
          native.wire = WCCL_WIRE_NATIVE;
          native.topk_keep = 0;
          any_algo.algo = WCCL_ALGO_AUTO;
          const auto c = static_cast<wccl_collective_t>(coll);
          const bool applies = reduces(coll) && (op == WCCL_SUM || op == WCCL_AVG) &&
                               wccl_opts_check(c, dtype, op, &any_algo) == WCCL_OK;
          const wccl_result_t alone = wccl_opts_check(WCCL_COLL_BARRIER, dtype, op, &group);
          const std::string alone_error = last_error_as("wccl_opts_check", "wccl_opts_for");
          const wccl_opts_t want = applies ? group : native;
          const wccl_result_t want_result =
              alone != WCCL_OK ? alone : wccl_opts_check(c, dtype, op, &want);
          const std::string want_error =
              alone != WCCL_OK ? alone_error : last_error_as("wccl_opts_check", "wccl_opts_for");
          std::memset(&out, 0xab, sizeof(out));
          const wccl_opts_t before = out;
          ASSERT_EQ(wccl_opts_for(c, dtype, op, &group, &out), want_result) << wccl_last_error();
          if (want_result == WCCL_OK) {
            EXPECT_EQ(std::memcmp(&out, &want, sizeof(out)), 0);
          } else {
            EXPECT_EQ(std::string(wccl_last_error()), want_error);
            EXPECT_EQ(std::memcmp(&out, &before, sizeof(out)), 0) << "an error writes nothing";
          }
        }
      }
    }
  }
  wccl_opts_t group = wccl_opts_default(), out;
  group.wire = WCCL_WIRE_INT8;
  ASSERT_EQ(wccl_opts_for(WCCL_COLL_ALLREDUCE, WCCL_BF16, WCCL_AVG, &group, &out), WCCL_OK);
  EXPECT_EQ(out.wire, WCCL_WIRE_INT8);
  for (wccl_redop_t op : {WCCL_MIN, WCCL_MAX, WCCL_PROD}) {
    ASSERT_EQ(wccl_opts_for(WCCL_COLL_ALLREDUCE, WCCL_F32, op, &group, &out), WCCL_OK);
    EXPECT_EQ(out.wire, WCCL_WIRE_NATIVE) << "a group's wire is for SUM and AVG, op " << op;
  }
  ASSERT_EQ(wccl_opts_for(WCCL_COLL_BROADCAST, WCCL_F32, WCCL_SUM, &group, &out), WCCL_OK);
  EXPECT_EQ(out.wire, WCCL_WIRE_NATIVE);
  ASSERT_EQ(wccl_opts_for(WCCL_COLL_ALLREDUCE, WCCL_I64, WCCL_SUM, &group, &out), WCCL_OK);
  EXPECT_EQ(out.wire, WCCL_WIRE_NATIVE);
  group.wire = WCCL_WIRE_TOPK;
  group.topk_keep = 3;
  ASSERT_EQ(wccl_opts_for(WCCL_COLL_REDUCE_SCATTER, WCCL_F32, WCCL_SUM, &group, &out), WCCL_OK);
  EXPECT_EQ(out.wire, WCCL_WIRE_NATIVE);
  EXPECT_EQ(out.topk_keep, 0) << "the keep goes with the wire";
  group.algo = WCCL_ALGO_RING;
  EXPECT_EQ(wccl_opts_for(WCCL_COLL_ALLREDUCE, WCCL_F32, WCCL_SUM, &group, &out),
            WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wccl_last_error()).find("the topk wire is never re-encoded"),
            std::string::npos)
      << wccl_last_error();
  group = wccl_opts_default();
  group.topk_keep = 3;
  EXPECT_EQ(wccl_opts_for(WCCL_COLL_BARRIER, WCCL_F32, WCCL_SUM, &group, &out),
            WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wccl_last_error()).find("wccl_opts_for: opts->topk_keep is 3"),
            std::string::npos)
      << wccl_last_error();
  EXPECT_EQ(wccl_opts_for(WCCL_COLL_ALLREDUCE, WCCL_F32, WCCL_SUM, nullptr, nullptr),
            WCCL_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(wccl_opts_for(WCCL_COLL_ALLREDUCE, WCCL_F32, WCCL_SUM, nullptr, &out), WCCL_OK);
  group = wccl_opts_default();
  EXPECT_EQ(std::memcmp(&out, &group, sizeof(out)), 0);
}

// The hierarchical all-reduce through the C API: a node of two local ranks (threads), each with a
// communicator of its own group (one node: the groups have one member each); its arguments are
// checked and named, and the non-blocking form reports its outcome and stats.
TEST_F(CollectiveApi, HierarchicalAllReduceOverALocalGroupOfThreads) {
  auto expect = [](wccl_result_t got, wccl_result_t want, const char *words) {
    EXPECT_EQ(got, want) << wccl_last_error();
    EXPECT_NE(std::string(wccl_last_error()).find(words), std::string::npos) << wccl_last_error();
  };
  wccl_local_group_t *local[2] = {nullptr, nullptr};
  expect(wccl_local_group_threads(0, local), WCCL_ERR_INVALID_ARGUMENT, "size 0");
  expect(wccl_local_group_threads(2, nullptr), WCCL_ERR_INVALID_ARGUMENT, "groups");
  expect(wccl_local_group_nccl(&local[0], nullptr), WCCL_ERR_INVALID_ARGUMENT, "nccl_comm is NULL");
  EXPECT_EQ(local[0], nullptr);
  if (!WCCL_TEST_HAVE_NCCL) {
    int fake = 0;
    expect(wccl_local_group_nccl(&local[0], &fake), WCCL_ERR_UNSUPPORTED, "built without NCCL");
  }
  ASSERT_EQ(wccl_local_group_threads(2, local), WCCL_OK) << wccl_last_error();
  EXPECT_EQ(wccl_local_group_rank(local[1]), 1);
  EXPECT_EQ(wccl_local_group_size(local[1]), 2);

  wccl_config_t *cfg = nullptr;
  ASSERT_EQ(wccl_config_create(&cfg), WCCL_OK);
  ASSERT_EQ(wccl_config_set(cfg, "tls", "off"), WCCL_OK);
  ASSERT_EQ(wccl_config_set(cfg, "log_level", "error"), WCCL_OK);
  ASSERT_EQ(wccl_config_set(cfg, "group", "local1"), WCCL_OK);
  ASSERT_EQ(wccl_config_set(cfg, "coordinator",
                            ("127.0.0.1:" + std::to_string(wccl_coord_port(coord_))).c_str()),
            WCCL_OK);
  wccl_comm_t *comm1 = nullptr;
  ASSERT_EQ(wccl_comm_join(&comm1, cfg), WCCL_OK) << wccl_last_error();
  wccl_config_destroy(cfg);

  float v[3] = {1, 2, 3};
  expect(wccl_hier_allreduce(v, v, 3, WCCL_F32, WCCL_SUM, nullptr, comm_, nullptr),
         WCCL_ERR_INVALID_ARGUMENT, "local is NULL");
  expect(wccl_hier_allreduce(v, v, 3, WCCL_F32, WCCL_SUM, local[0], nullptr, nullptr),
         WCCL_ERR_INVALID_ARGUMENT, "comm is NULL");
  expect(wccl_hier_allreduce(nullptr, v, 3, WCCL_F32, WCCL_SUM, local[0], comm_, nullptr),
         WCCL_ERR_INVALID_ARGUMENT, "sendbuf");
  expect(wccl_hier_allreduce(v, v, 3, static_cast<wccl_dtype_t>(9), WCCL_SUM, local[0], comm_,
                             nullptr),
         WCCL_ERR_INVALID_ARGUMENT, "dtype 9");
  wccl_opts_t o = wccl_opts_default();
  int stream = 0;
  o.cuda_stream = &stream;
  if (wccl::gpu::available()) {  // as wccl_allreduce answers it
    expect(wccl_hier_allreduce(v, v, 3, WCCL_F32, WCCL_SUM, local[0], comm_, &o),
           WCCL_ERR_INVALID_ARGUMENT, "these are host memory");
  } else {
    expect(wccl_hier_allreduce(v, v, 3, WCCL_F32, WCCL_SUM, local[0], comm_, &o),
           WCCL_ERR_UNSUPPORTED, "no CUDA");
  }
  expect(wccl_ihier_allreduce(nullptr, v, v, 3, WCCL_F32, WCCL_SUM, local[0], comm_, nullptr),
         WCCL_ERR_INVALID_ARGUMENT, "req (the out-handle) is NULL");
  EXPECT_EQ(v[0], 1.0f);

  // Rank 1 blocks in its own thread; rank 0 waits for its non-blocking call.
  float w[3] = {10, 20, 30};
  wccl_result_t rank1 = WCCL_ERR_INTERNAL;
  std::thread t(
      [&] { rank1 = wccl_hier_allreduce(w, w, 3, WCCL_F32, WCCL_AVG, local[1], comm1, nullptr); });
  wccl_request_t *req = nullptr;
  ASSERT_EQ(wccl_ihier_allreduce(&req, v, v, 3, WCCL_F32, WCCL_AVG, local[0], comm_, nullptr),
            WCCL_OK)
      << wccl_last_error();
  wccl_op_stats_t stats;
  stats.size = sizeof(stats);
  EXPECT_EQ(wccl_wait(req, &stats), WCCL_OK) << wccl_last_error();
  t.join();
  EXPECT_EQ(rank1, WCCL_OK);
  EXPECT_EQ(stats.world_size, 1);
  int done = 0;
  EXPECT_EQ(wccl_test(req, &done), WCCL_OK);
  EXPECT_EQ(done, 1);
  wccl_request_free(req);
  for (const float *x : {v, w}) {
    EXPECT_EQ(x[0], 5.5f);
    EXPECT_EQ(x[1], 11.0f);
    EXPECT_EQ(x[2], 16.5f);
  }
  wccl_local_group_destroy(local[0]);
  wccl_local_group_destroy(local[1]);
  wccl_comm_destroy(comm1);
}

// Two members whose calls differ (docs/fault-tolerance.md, "Calls that differ"), through the C
// API: an int32 all-reduce against a float32 one of the same byte width returns
// WCCL_ERR_MISMATCH on both, naming the dtype, both buffers as they were; after wccl_comm_update
// (nobody lost) the matching call succeeds. Without the check both returned OK with different
// results.
TEST(CallsThatDiffer, FailOnEveryMemberWithMismatchNamingTheFieldAndAreCounted) {
  wccl_config_t *cfg = local_group_config(2);
  ASSERT_NE(cfg, nullptr);
  wccl_coord_t *coord = nullptr;
  ASSERT_EQ(wccl_coord_start(&coord, cfg), WCCL_OK) << wccl_last_error();
  const std::string address = "127.0.0.1:" + std::to_string(wccl_coord_port(coord));
  ASSERT_EQ(wccl_config_set(cfg, "coordinator", address.c_str()), WCCL_OK);
  wccl_comm_t *comm[2] = {nullptr, nullptr};
  wccl_result_t joined[2] = {WCCL_ERR_INTERNAL, WCCL_ERR_INTERNAL};
  {
    std::thread other([&] { joined[1] = wccl_comm_join(&comm[1], cfg); });
    joined[0] = wccl_comm_join(&comm[0], cfg);
    other.join();
  }
  wccl_config_destroy(cfg);
  ASSERT_EQ(joined[0], WCCL_OK);
  ASSERT_EQ(joined[1], WCCL_OK);
  // Member k's buffer: four 4-byte elements, as float32 on comm[0] and int32 on comm[1].
  float f[4] = {1, 2, 3, 4};
  int32_t i[4] = {1, 2, 3, 4};
  wccl_result_t got[2] = {WCCL_OK, WCCL_OK};
  std::string why[2];
  {
    std::thread other([&] {
      got[1] = wccl_allreduce(i, i, 4, WCCL_I32, WCCL_SUM, comm[1], nullptr);
      why[1] = wccl_last_error();
    });
    got[0] = wccl_allreduce(f, f, 4, WCCL_F32, WCCL_SUM, comm[0], nullptr);
    why[0] = wccl_last_error();
    other.join();
  }
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(got[k], WCCL_ERR_MISMATCH) << why[k];
    EXPECT_NE(why[k].find("calls differ in dtype"), std::string::npos) << why[k];
    EXPECT_NE(why[k].find("x i32"), std::string::npos) << why[k];
    EXPECT_NE(why[k].find("x f32"), std::string::npos) << why[k];
  }
  EXPECT_EQ(f[3], 4.0F);
  EXPECT_EQ(i[3], 4);
  {
    std::thread other([&] { got[1] = wccl_comm_update(comm[1]); });
    got[0] = wccl_comm_update(comm[0]);
    other.join();
  }
  ASSERT_EQ(got[0], WCCL_OK) << wccl_last_error();
  ASSERT_EQ(got[1], WCCL_OK);
  EXPECT_EQ(wccl_comm_size(comm[0]), 2) << "a mismatch loses nobody";
  float g[4] = {1, 2, 3, 4};
  {
    std::thread other(
        [&] { got[1] = wccl_allreduce(g, g, 4, WCCL_F32, WCCL_SUM, comm[1], nullptr); });
    got[0] = wccl_allreduce(f, f, 4, WCCL_F32, WCCL_SUM, comm[0], nullptr);
    other.join();
  }
  EXPECT_EQ(got[0], WCCL_OK) << wccl_last_error();
  EXPECT_EQ(got[1], WCCL_OK);
  EXPECT_EQ(f[3], 8.0F);
  EXPECT_EQ(g[3], 8.0F);
  // Each member counted it all (wccl_comm_stats): the mismatch failed (not as a loss), the retry
  // committed, the update formed a second epoch; and it holds one link, to the other.
  for (int k = 0; k < 2; ++k) {
    wccl_comm_stats_t st{};
    st.size = sizeof(st);
    ASSERT_EQ(wccl_comm_stats(comm[k], &st), WCCL_OK) << wccl_last_error();
    EXPECT_EQ(st.ops_committed, 1u);
    EXPECT_EQ(st.ops_failed, 1u);
    EXPECT_EQ(st.ops_peer_lost, 0u);
    EXPECT_EQ(st.updates, 1u);
    EXPECT_EQ(st.epochs, 2u);
    EXPECT_GE(st.bytes_sent, 16u) << "the retry's 16 bytes at least";
    EXPECT_GE(st.bytes_received, 16u);
    size_t count = 0;
    ASSERT_EQ(wccl_comm_links(comm[k], nullptr, 0, &count), WCCL_OK) << wccl_last_error();
    ASSERT_EQ(count, 1u);
    wccl_link_stats_t link[2]{};
    ASSERT_EQ(wccl_comm_links(comm[k], link, 2, &count), WCCL_OK);
    EXPECT_EQ(link[0].rank, 1 - wccl_comm_rank(comm[k]));
    EXPECT_GT(link[0].rtt_us, 0u) << "measured by the operations it carried";
  }
  wccl_comm_stats_t wrong{};
  wrong.size = sizeof(wrong) - 8;
  EXPECT_EQ(wccl_comm_stats(comm[0], &wrong), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wccl_last_error()).find("sizeof(wccl_comm_stats_t)"), std::string::npos);
  EXPECT_EQ(wccl_comm_stats(nullptr, &wrong), WCCL_ERR_INVALID_ARGUMENT);
  size_t count = 0;
  EXPECT_EQ(wccl_comm_links(comm[0], nullptr, 1, &count), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(wccl_comm_links(comm[0], nullptr, 0, nullptr), WCCL_ERR_INVALID_ARGUMENT);
  wccl_comm_destroy(comm[0]);
  wccl_comm_destroy(comm[1]);
  wccl_coord_stop(coord);
}

// Whole nodes (docs/fault-tolerance.md, "The node is admitted and leaves whole"): two nodes of two
// communicators (groups g0 and g1, node_groups 2). Node n2's first communicator waits in
// wccl_comm_join while its second has not joined, through an update of n1's communicators; once
// both wait, the next update admits n2 into both groups at once and both joins return. A
// communicator that does not fit its node is refused.
TEST(WholeNodes, JoinReturnsOnceTheNodeIsAdmittedInEveryGroup) {
  wccl_config_t *cfg = local_group_config(1);
  ASSERT_NE(cfg, nullptr);
  wccl_coord_t *coord = nullptr;
  ASSERT_EQ(wccl_coord_start(&coord, cfg), WCCL_OK) << wccl_last_error();
  const std::string address = "127.0.0.1:" + std::to_string(wccl_coord_port(coord));
  ASSERT_EQ(wccl_config_set(cfg, "coordinator", address.c_str()), WCCL_OK);
  ASSERT_EQ(wccl_config_set(cfg, "node_groups", "2"), WCCL_OK);
  auto join = [&](const char *node, int group, wccl_comm_t **comm) {
    wccl_config_t *c = nullptr;
    EXPECT_EQ(wccl_config_create(&c), WCCL_OK);
    for (const char *key : {"tls", "log_level", "listen", "coordinator", "node_groups"}) {
      char value[256];
      size_t size = 0;
      EXPECT_EQ(wccl_config_get(cfg, key, value, sizeof(value), &size), WCCL_OK);
      EXPECT_EQ(wccl_config_set(c, key, value), WCCL_OK);
    }
    EXPECT_EQ(wccl_config_set(c, "node", node), WCCL_OK);
    EXPECT_EQ(wccl_config_set(c, "group", group == 0 ? "g0" : "g1"), WCCL_OK);
    EXPECT_EQ(wccl_config_set(c, "name", (std::string(node) + "-" + std::to_string(group)).c_str()),
              WCCL_OK);
    const wccl_result_t r = wccl_comm_join(comm, c);
    wccl_config_destroy(c);
    return r;
  };
  // Both groups' first epochs form with n1 whole.
  wccl_comm_t *n1[2] = {nullptr, nullptr}, *n2[2] = {nullptr, nullptr};
  wccl_result_t r[2] = {WCCL_ERR_INTERNAL, WCCL_ERR_INTERNAL};
  {
    std::thread other([&] { r[1] = join("n1", 1, &n1[1]); });
    r[0] = join("n1", 0, &n1[0]);
    other.join();
  }
  ASSERT_EQ(r[0], WCCL_OK);
  ASSERT_EQ(r[1], WCCL_OK);
  auto update_n1 = [&] {
    wccl_result_t u[2];
    std::thread other([&] { u[1] = wccl_comm_update(n1[1]); });
    u[0] = wccl_comm_update(n1[0]);
    other.join();
    EXPECT_EQ(u[0], WCCL_OK);
    EXPECT_EQ(u[1], WCCL_OK);
  };
  std::atomic<bool> joined0{false};
  wccl_result_t j2[2] = {WCCL_ERR_INTERNAL, WCCL_ERR_INTERNAL};
  std::thread first([&] {
    j2[0] = join("n2", 0, &n2[0]);
    joined0 = true;
  });
  while (wccl_comm_pending(n1[0]) < 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  update_n1();  // n2 is half there: nobody is admitted
  EXPECT_EQ(wccl_comm_size(n1[0]), 1);
  EXPECT_EQ(wccl_comm_size(n1[1]), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(joined0.load()) << "half a node was admitted";
  std::thread second([&] { j2[1] = join("n2", 1, &n2[1]); });
  while (wccl_comm_pending(n1[1]) < 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  update_n1();  // n2 is whole: it enters both groups
  first.join();
  second.join();
  ASSERT_EQ(j2[0], WCCL_OK);
  ASSERT_EQ(j2[1], WCCL_OK);
  for (wccl_comm_t *c : {n1[0], n1[1], n2[0], n2[1]}) EXPECT_EQ(wccl_comm_size(c), 2);
  // A second communicator of n2 in group g0 does not fit the node; node_groups without a node is
  // the caller's mistake.
  wccl_comm_t *extra = nullptr;
  const wccl_result_t refused = join("n2", 0, &extra);
  EXPECT_EQ(refused, WCCL_ERR_INVALID_USAGE) << wccl_last_error();
  EXPECT_NE(std::string(wccl_last_error()).find("already has a communicator in group"),
            std::string::npos)
      << wccl_last_error();
  EXPECT_EQ(extra, nullptr);
  ASSERT_EQ(wccl_config_set(cfg, "group", "g0"), WCCL_OK);
  EXPECT_EQ(wccl_comm_join(&extra, cfg), WCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(wccl_last_error()).find("node_groups"), std::string::npos);
  wccl_config_destroy(cfg);
  for (wccl_comm_t *c : {n1[0], n1[1], n2[0], n2[1]}) wccl_comm_destroy(c);
  wccl_coord_stop(coord);
}

// Device buffers as the C API sees them, on an emulated GPU (tests/emulated_device.h).
TEST_F(CollectiveApi, DeviceBuffersAreFoundCheckedAndOrderedAfterTheCallersStream) {
  wccl::test::EmulatedGpu gpu;
  gpu.install();
  const float in[3] = {1, 2, 3}, zero[3] = {0, 0, 0};
  float host[3] = {7, 7, 7};
  void *din = gpu.alloc_copy(zero, sizeof(zero));
  void *dout = gpu.alloc_copy(zero, sizeof(zero));
  auto expect = [](wccl_result_t got, wccl_result_t want, const std::string &words) {
    EXPECT_EQ(got, want) << wccl_last_error();
    EXPECT_NE(std::string(wccl_last_error()).find(words), std::string::npos) << wccl_last_error();
  };
  expect(wccl_allreduce(host, dout, 3, WCCL_F32, WCCL_SUM, comm_, nullptr),
         WCCL_ERR_INVALID_ARGUMENT,
         "sendbuf is in host memory and recvbuf in emulated-gpu; both must be on one device or "
         "both in host memory");
  expect(wccl_allgather(din, host, 3, WCCL_F32, comm_, nullptr), WCCL_ERR_INVALID_ARGUMENT,
         "sendbuf is in emulated-gpu and recvbuf in host memory");
  wccl_opts_t o = wccl_opts_default();
  o.cuda_stream = &o;  // any non-null stream with host buffers
  if (wccl::gpu::available()) {
    expect(wccl_allreduce(host, host, 3, WCCL_F32, WCCL_SUM, comm_, &o), WCCL_ERR_INVALID_ARGUMENT,
           "these are host memory");
  } else {
    expect(wccl_allreduce(host, host, 3, WCCL_F32, WCCL_SUM, comm_, &o), WCCL_ERR_UNSUPPORTED,
           "no CUDA");
  }
  EXPECT_EQ(host[0], 7.0f);
  // The input reaches din on a stream of the caller's that nothing has run yet: the operation
  // waits for it.
  wccl::gpu::Stream stream = nullptr;
  ASSERT_TRUE(gpu.create_stream(&stream).ok());
  ASSERT_TRUE(gpu.copy(din, in, sizeof(in), stream).ok());
  o.cuda_stream = stream;
  o.wire = WCCL_WIRE_INT8;
  ASSERT_EQ(wccl_allreduce(din, dout, 3, WCCL_F32, WCCL_SUM, comm_, &o), WCCL_OK)
      << wccl_last_error();
  const std::vector<uint8_t> got = gpu.read(dout, sizeof(in));
  EXPECT_EQ(std::memcmp(got.data(), in, sizeof(in)), 0) << "a world of one copies the input";
  ASSERT_EQ(wccl_broadcast(dout, dout, 3, WCCL_F32, 0, comm_, nullptr), WCCL_OK)
      << wccl_last_error();
  // State sync takes device tensors, whose `device` must say so.
  wccl_tensor_t t = {"w", dout, 3, WCCL_F32, WCCL_DEVICE_HOST};
  uint64_t rev = 4;
  expect(wccl_state_sync(comm_, &t, 1, &rev, WCCL_SYNC_POPULAR, nullptr), WCCL_ERR_INVALID_ARGUMENT,
         "tensor \"w\" is WCCL_DEVICE_HOST, but its data is device memory of emulated-gpu");
  t.device = WCCL_DEVICE_CUDA;
  ASSERT_EQ(wccl_state_sync(comm_, &t, 1, &rev, WCCL_SYNC_POPULAR, nullptr), WCCL_OK)
      << wccl_last_error();
  EXPECT_EQ(rev, 4u);
  gpu.destroy_stream(stream);
  gpu.free(din);
  gpu.free(dout);
  wccl_comm_destroy(comm_);  // it keeps device scratch: it goes before the (emulated) GPU
  comm_ = nullptr;
  EXPECT_EQ(gpu.live_allocations(), 0u);
}

TEST_F(CollectiveApi, StateSyncArgumentsAreChecked) {
  float a[4] = {1, 2, 3, 4}, b[2] = {5, 6};
  wccl_tensor_t t[2] = {{"a", a, 4, WCCL_F32, WCCL_DEVICE_HOST},
                        {"b", b, 2, WCCL_F32, WCCL_DEVICE_HOST}};
  uint64_t rev = 3;
  auto expect = [](wccl_result_t got, wccl_result_t want, const std::string &words) {
    EXPECT_EQ(got, want) << wccl_last_error();
    EXPECT_NE(std::string(wccl_last_error()).find(words), std::string::npos) << wccl_last_error();
  };
  expect(wccl_state_sync(nullptr, t, 2, &rev, WCCL_SYNC_POPULAR, nullptr),
         WCCL_ERR_INVALID_ARGUMENT, "comm is NULL");
  expect(wccl_state_sync(comm_, t, 2, nullptr, WCCL_SYNC_POPULAR, nullptr),
         WCCL_ERR_INVALID_ARGUMENT, "revision");
  expect(wccl_state_sync(comm_, nullptr, 2, &rev, WCCL_SYNC_POPULAR, nullptr),
         WCCL_ERR_INVALID_ARGUMENT, "tensors is NULL");
  expect(wccl_state_sync(comm_, t, 2, &rev, static_cast<wccl_sync_mode_t>(3), nullptr),
         WCCL_ERR_INVALID_ARGUMENT, "mode 3");
  t[1].name = "a";
  expect(wccl_state_sync(comm_, t, 2, &rev, WCCL_SYNC_POPULAR, nullptr), WCCL_ERR_INVALID_ARGUMENT,
         "\"a\" appears twice");
  t[1].name = "";
  expect(wccl_state_sync(comm_, t, 2, &rev, WCCL_SYNC_POPULAR, nullptr), WCCL_ERR_INVALID_ARGUMENT,
         "tensors[1].name");
  t[1].name = "b";
  t[1].dtype = 12;
  expect(wccl_state_sync(comm_, t, 2, &rev, WCCL_SYNC_POPULAR, nullptr), WCCL_ERR_INVALID_ARGUMENT,
         "\"b\": dtype 12");
  t[1].dtype = WCCL_F32;
  t[1].device = WCCL_DEVICE_CUDA;
  if (wccl::gpu::available()) {
    expect(wccl_state_sync(comm_, t, 2, &rev, WCCL_SYNC_POPULAR, nullptr),
           WCCL_ERR_INVALID_ARGUMENT,
           "\"b\" is WCCL_DEVICE_CUDA, but its data is not device memory");
  } else {
    expect(wccl_state_sync(comm_, t, 2, &rev, WCCL_SYNC_POPULAR, nullptr), WCCL_ERR_UNSUPPORTED,
           "this library has no CUDA");
  }
  t[1].device = WCCL_DEVICE_HOST;
  t[1].data = nullptr;
  expect(wccl_state_sync(comm_, t, 2, &rev, WCCL_SYNC_POPULAR, nullptr), WCCL_ERR_INVALID_ARGUMENT,
         "\"b\": data is NULL");
  t[1].data = b;
  wccl_sync_stats_t stats;
  stats.size = 3;
  expect(wccl_state_sync(comm_, t, 2, &rev, WCCL_SYNC_POPULAR, &stats), WCCL_ERR_INVALID_ARGUMENT,
         "stats->size");
  EXPECT_EQ(rev, 3u);

  // Alone, a member's state is the elected one: nothing moves, the revision stays.
  stats.size = sizeof(stats);
  ASSERT_EQ(wccl_state_sync(comm_, t, 2, &rev, WCCL_SYNC_POPULAR, &stats), WCCL_OK)
      << wccl_last_error();
  EXPECT_EQ(rev, 3u);
  EXPECT_EQ(stats.bytes_received, 0u);
  EXPECT_EQ(stats.world_size, 1);
  EXPECT_EQ(a[3], 4.0f);
  expect(wccl_state_sync(comm_, t, 2, &rev, WCCL_SYNC_RECEIVE_ONLY, nullptr),
         WCCL_ERR_INVALID_USAGE, "receive-only");
}

}  // namespace
