#include "coord/ring_order.h"

#include <algorithm>
#include <array>
#include <map>

namespace wccl::coord {
namespace {

// The round trips of the ring's links (link k joins positions k and k + 1), and the positions of
// its three largest: a 2-opt move removes two links, so the largest link it keeps is among them.
struct Links {
  std::vector<uint32_t> rtt;
  std::array<size_t, 3> top{};
  RingCost cost;
};

Links links_of(const std::vector<Member> &ring, const RttOf &rtt) {
  const size_t n = ring.size();
  Links l;
  l.rtt.resize(n);
  for (size_t k = 0; k < n; ++k) {
    l.rtt[k] = rtt(ring[k].id, ring[(k + 1) % n].id);
    l.cost.sum_us += l.rtt[k];
    l.cost.max_us = std::max(l.cost.max_us, l.rtt[k]);
  }
  std::vector<size_t> order(n);
  for (size_t k = 0; k < n; ++k) order[k] = k;
  const size_t top = std::min<size_t>(3, n);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), order.end(),
                    [&](size_t a, size_t b) { return l.rtt[a] > l.rtt[b]; });
  l.top.fill(n);  // n: no link
  std::copy(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), l.top.begin());
  return l;
}

}  // namespace

std::optional<RingCost> ring_cost(const std::vector<Member> &ring, const RttOf &rtt) {
  if (ring.size() < 2) return RingCost{};
  const Links l = links_of(ring, rtt);
  if (std::any_of(l.rtt.begin(), l.rtt.end(), [](uint32_t v) { return v == 0; }))
    return std::nullopt;
  return l.cost;
}

RttOf with_paths(const std::vector<Member> &ring, const RttOf &rtt) {
  const size_t n = ring.size();
  constexpr uint64_t kNone = UINT64_MAX;
  std::vector<uint64_t> d(n * n, kNone);
  for (size_t a = 0; a < n; ++a) {
    d[a * n + a] = 0;
    for (size_t b = 0; b < n; ++b) {
      const uint32_t v = b != a ? rtt(ring[a].id, ring[b].id) : 0;
      if (v != 0) d[a * n + b] = v;
    }
  }
  for (size_t k = 0; k < n; ++k) {  // Floyd-Warshall: n is at most kMaxMeasuredRing
    for (size_t a = 0; a < n; ++a) {
      if (d[a * n + k] == kNone) continue;
      for (size_t b = 0; b < n; ++b) {
        if (d[k * n + b] != kNone)
          d[a * n + b] = std::min(d[a * n + b], d[a * n + k] + d[k * n + b]);
      }
    }
  }
  std::map<PeerId, size_t> at;
  for (size_t a = 0; a < n; ++a) at[ring[a].id] = a;
  return [d = std::move(d), at = std::move(at), n, rtt](PeerId a, PeerId b) -> uint32_t {
    const uint32_t measured = rtt(a, b);
    const auto ia = at.find(a), ib = at.find(b);
    if (measured != 0 || ia == at.end() || ib == at.end()) return measured;
    const uint64_t v = d[ia->second * n + ib->second];
    return v == kNone ? 0 : static_cast<uint32_t>(std::min<uint64_t>(v, UINT32_MAX));
  };
}

std::vector<Member> order_ring(std::vector<Member> ring, const RttOf &rtt) {
  const size_t n = ring.size();
  if (n < 4) return ring;  // every order of 3 members is the same ring
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      if (rtt(ring[a].id, ring[b].id) == 0) return ring;
    }
  }
  // Each accepted move lowers the cost, so this ends; the bound keeps a pathological case short.
  for (size_t moves = 0; moves < 64 * n; ++moves) {
    const Links l = links_of(ring, rtt);
    bool improved = false;
    // Reversing positions i..j replaces links i - 1 and j by (i - 1, j) and (i, j + 1).
    for (size_t i = 1; i < n && !improved; ++i) {
      for (size_t j = i + 1; j < n && !improved; ++j) {
        const size_t before = i - 1, after = (j + 1) % n;
        if (after == before) continue;  // the whole ring reversed: the same ring
        const uint32_t a = rtt(ring[before].id, ring[j].id), b = rtt(ring[i].id, ring[after].id);
        RingCost next;
        next.sum_us = l.cost.sum_us - l.rtt[before] - l.rtt[j] + a + b;
        next.max_us = std::max(a, b);
        for (size_t k : l.top) {
          if (k != n && k != before && k != j) {
            next.max_us = std::max(next.max_us, l.rtt[k]);
            break;
          }
        }
        if (next < l.cost) {
          std::reverse(ring.begin() + static_cast<std::ptrdiff_t>(i),
                       ring.begin() + static_cast<std::ptrdiff_t>(j) + 1);
          improved = true;
        }
      }
    }
    if (!improved) break;
  }
  return ring;
}

}  // namespace wccl::coord
