#include "algo/undo.h"

#include <algorithm>
#include <vector>

namespace wccl::algo {

Status Undo::will_write(const void *at, size_t len) {
  // As integers: `at` may lie in another object than the output (the algorithm's scratch).
  const auto p = reinterpret_cast<uintptr_t>(at), out = reinterpret_cast<uintptr_t>(out_);
  if (len == 0 || out_ == nullptr || p + len <= out || p >= out + bytes_) return Status();
  size_t begin = p > out ? p - out : 0;
  const size_t end = std::min(bytes_, p + len - out);
  // The gaps of [begin, end) not yet saved, then one range for all of it.
  auto it = ranges_.upper_bound(begin);
  if (it != ranges_.begin() && std::prev(it)->second >= begin) {
    --it;
    begin = std::min(begin, it->first);
  }
  size_t from = begin, merged_end = end;
  std::vector<std::map<size_t, size_t>::iterator> covered;
  for (; it != ranges_.end() && it->first <= end; ++it) {
    if (from < it->first)
      WCCL_RETURN_IF_ERROR(mem_.save(saved_ + from, out_ + from, it->first - from));
    from = std::max(from, it->second);
    merged_end = std::max(merged_end, it->second);
    covered.push_back(it);
  }
  if (from < end) WCCL_RETURN_IF_ERROR(mem_.save(saved_ + from, out_ + from, end - from));
  for (auto &c : covered) ranges_.erase(c);
  ranges_[begin] = merged_end;
  return Status();
}

Status Undo::restore(const std::function<Status(void *dst, const void *src, size_t n)> &copy) {
  for (const auto &[begin, end] : ranges_)
    WCCL_RETURN_IF_ERROR(copy(out_ + begin, saved_ + begin, end - begin));
  ranges_.clear();
  return Status();
}

size_t Undo::saved_bytes() const {
  size_t n = 0;
  for (const auto &[begin, end] : ranges_) n += end - begin;
  return n;
}

}  // namespace wccl::algo
