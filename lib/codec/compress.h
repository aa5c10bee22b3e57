// zstd with byte shuffle, for state sync's pieces (DESIGN §5, §6). Floats compress poorly as they
// are, because each element's high (sign and exponent) bytes, which repeat, alternate with its low
// mantissa bytes, which do not; grouping byte b of every element together (a byte shuffle, as
// Blosc does) hands zstd long runs of similar exponent bytes. Level 1: the point is to save link
// time, not to squeeze.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"

namespace wccl::codec {

// True when the library was built with zstd (WCCL_HAVE_ZSTD).
bool compression_available();

// out[b * n + i] = in[i * es + b] for the n = len / es whole elements; the len % es bytes left
// over are copied after them. unshuffle is its inverse. es = 1 is a copy.
void shuffle(const uint8_t *in, size_t len, size_t es, uint8_t *out);
void unshuffle(const uint8_t *in, size_t len, size_t es, uint8_t *out);

// One thread's compression state (zstd contexts and a shuffle buffer), reused across calls. The
// contexts are made on first use: every collective's schedule holds one, and most never compress.
class Compressor {
 public:
  Compressor();
  ~Compressor();
  Compressor(const Compressor &) = delete;
  Compressor &operator=(const Compressor &) = delete;

  // Shuffles len bytes of es-byte elements and compresses them into dst (capacity cap) as one
  // zstd frame that records len. Returns the frame's size, or 0 when the frame would not be
  // shorter than len (the caller sends the bytes as they are) or zstd is not built in.
  size_t compress(const void *src, size_t len, size_t es, void *dst, size_t cap);
  // Decompresses the frame of n bytes at src into exactly len bytes at dst and unshuffles them;
  // dst may overlap src (the frame is read whole before dst is written). PROTOCOL, with dst
  // unspecified, unless src is one valid zstd frame of content size len.
  Status decompress(const void *src, size_t n, size_t es, void *dst, size_t len);

 private:
  struct Contexts;
  std::unique_ptr<Contexts> z_;
  std::vector<uint8_t> shuffled_;
};

}  // namespace wccl::codec
