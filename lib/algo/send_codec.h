// The sending side of wire compression, shared by the collectives (opts.compress) and state sync:
// which messages go as zstd frames of their byte-shuffled bytes (codec/compress.h). A compressed
// message is always shorter than the bytes it carries, and receivers post their receives with a
// capacity of the raw length, so they tell the two forms apart by length: the decision is the
// sender's alone, and peers need not agree on it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/compress.h"

namespace wccl::algo {

enum class Compress {
  kOff,     // never
  kAuto,    // where it pays (below)
  kAlways,  // every message of at least kMinCompressBytes that shrinks (opts.compress = ZSTD)
};

inline constexpr size_t kMinCompressBytes = 4096;  // shorter messages go as they are

// kAuto: the sender measures its link on its first kProbeSkip + kProbeBytes, sent as they are (the
// rate at which its sends complete, after the first kProbeSkip, which mostly fill socket buffers),
// then tries one message of each stream of data (`key`: a tensor, or the whole operation): the key
// is compressed from then on if that message shrank to 7/8 or less and zstd ran faster than the
// link. Compressing and sending pipeline, so the slower sets the pace: on
// a link faster than zstd, compression would cost more time than the bytes it saves.
class SendCodec {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kProbeSkip = size_t{4} << 20;
  static constexpr size_t kProbeBytes = size_t{8} << 20;
  SendCodec(Compress mode, size_t keys) : mode_(mode), decided_(keys, kUntried) {}

  // The bytes to send for len bytes at src (elements of es bytes) of stream `key`: src itself, or
  // a zstd frame in *slot, which must stay unchanged until the send completes. Sets *wire_len.
  const uint8_t *encode(size_t key, const uint8_t *src, size_t len, size_t es,
                        std::vector<uint8_t> *slot, size_t *wire_len);
  // A send of wire_len bytes completed; `raw` if it carried its bytes as they are.
  void sent(size_t wire_len, bool raw);

 private:
  enum { kUntried, kCompressed, kRaw };
  Compress mode_;
  std::vector<int> decided_;
  codec::Compressor zstd_;
  size_t retired_raw_ = 0;
  bool probing_ = false;
  Clock::time_point probe_start_{};
  size_t probe_from_ = 0;
  double link_bytes_per_ns_ = 0;  // measured by the probe; 0 until then
};

}  // namespace wccl::algo
