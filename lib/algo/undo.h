// The caller's output buffer, written in place during the data phase (no copy after the commit),
// and what a failed operation needs to leave it as it was: just before a range of it is first
// written, its old bytes are copied to `saved`, a buffer of the output's size in the same memory,
// at the same offsets. The communicator copies them back if the operation is not committed.
//
// Saving just before the first write spreads the copy over the data phase, where the worker
// mostly waits for the network, instead of a copy of the whole result after the commit, when
// every peer is idle and waiting for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>

#include "algo/memory.h"
#include "core/status.h"

namespace wccl::algo {

class Undo {
 public:
  Undo(Memory &mem, void *out, size_t bytes, void *saved)
      : mem_(mem),
        out_(static_cast<uint8_t *>(out)),
        bytes_(bytes),
        saved_(static_cast<uint8_t *>(saved)) {}

  // [at, at + len) is about to be written: saves the part of it in the output buffer that was not
  // saved before. Addresses outside the output buffer (the algorithm's own scratch) are ignored.
  Status will_write(const void *at, size_t len);

  // Copies every saved range back with copy(dst, src, n); the ranges are forgotten.
  Status restore(const std::function<Status(void *dst, const void *src, size_t n)> &copy);

  size_t saved_bytes() const;

 private:
  Memory &mem_;
  uint8_t *out_;
  size_t bytes_;
  uint8_t *saved_;
  std::map<size_t, size_t> ranges_;  // begin -> end, disjoint and not touching
};

}  // namespace wccl::algo
