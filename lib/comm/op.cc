#include "comm/op.h"

#include <algorithm>
#include <cstring>

#include "algo/state_sync.h"
#include "algo/undo.h"
#include "codec/wire.h"

namespace wccl::comm {

Status Op::deliver() const {
  if (outcome.ok() && algo::widened(c)) {  // the committed F32 result, rounded once
    const size_t count = algo::out_count(c, size);
    const auto *out32 = reinterpret_cast<const float *>(scratch.get());
    const Status narrowed = device != nullptr ? device->narrow_out(c.dtype, out32, count, c.out)
                                              : codec::encode(codec::half_wire(c.dtype), out32,
                                                              count, static_cast<uint8_t *>(c.out));
    if (narrowed.ok()) return outcome;
    return WCCL_ERROR(narrowed.code(),
                      "operation %llu committed, but copying its result out failed: %s",
                      static_cast<unsigned long long>(seq), narrowed.message().c_str());
  }
  if (outcome.ok() && c.kind == algo::Kind::kStateSync) {
    const Status copied = algo::deliver_received(
        *c.sync, scratch.get(),
        [](void *to, const uint8_t *from, size_t n, algo::DeviceMemory *gpu) {
          if (gpu != nullptr) return gpu->copy_out(to, from, n);
          std::memcpy(to, from, n);
          return Status();
        });
    if (copied.ok()) return outcome;  // else committed everywhere, but not in this member's tensors
    return WCCL_ERROR(copied.code(),
                      "operation %llu committed, but copying its result out failed: %s",
                      static_cast<unsigned long long>(seq), copied.message().c_str());
  }
  if (outcome.ok() || undo == nullptr) return outcome;
  // Not committed: the output's saved ranges go back, so the caller's buffers hold what they held.
  algo::DeviceMemory *gpu = device;
  const Status restored = undo->restore([gpu](void *dst, const void *src, size_t n) {
    if (gpu != nullptr) return gpu->copy_out(dst, src, n);
    std::memcpy(dst, src, n);
    return Status();
  });
  if (restored.ok()) return outcome;
  return WCCL_ERROR(restored.code(),
                    "%s; and putting the output buffer's old bytes back failed: %s",
                    outcome.message().c_str(), restored.message().c_str());
}

algo::Bytes ScratchSpares::take(const algo::Memory &memory, size_t n, size_t *size) {
  auto best = spares_.end();
  for (auto it = spares_.begin(); it != spares_.end(); ++it) {
    if (it->second.get_deleter().memory == &memory && it->first >= n &&
        (best == spares_.end() || it->first < best->first)) {
      best = it;
    }
  }
  if (best == spares_.end()) return algo::Bytes(nullptr, algo::ReturnBytes{});
  *size = best->first;
  algo::Bytes out = std::move(best->second);
  spares_.erase(best);
  return out;
}

void ScratchSpares::put(size_t size, algo::Bytes bytes) {
  if (!bytes) return;
  if (spares_.size() < kMax) {
    spares_.emplace_back(size, std::move(bytes));
    return;
  }
  auto smallest = std::min_element(spares_.begin(), spares_.end(),
                                   [](const auto &a, const auto &b) { return a.first < b.first; });
  if (smallest->first < size) *smallest = {size, std::move(bytes)};
}

}  // namespace wccl::comm
