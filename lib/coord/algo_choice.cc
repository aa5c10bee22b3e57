#include "coord/algo_choice.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "algo/collectives.h"

namespace wccl::coord {

uint64_t tree_crossover_bytes(const std::vector<Member> &ring, const LinkOf &link) {
  const int n = static_cast<int>(ring.size());
  if (n < 3) return 0;
  // A link that never carried a large message (the trees' links that are not the ring's, after
  // ring all-reduces) has no rate of its own: it gets the slower of its two ends' fastest links,
  // since a member's access link is what usually bounds all of its links.
  std::vector<uint64_t> fastest(static_cast<size_t>(n), 0);
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      const uint64_t rate =
          link(ring[static_cast<size_t>(a)].id, ring[static_cast<size_t>(b)].id).bytes_per_s;
      fastest[static_cast<size_t>(a)] = std::max(fastest[static_cast<size_t>(a)], rate);
      fastest[static_cast<size_t>(b)] = std::max(fastest[static_cast<size_t>(b)], rate);
    }
  }
  auto measured = [&](int a, int b) -> std::optional<LinkEstimate> {
    LinkEstimate l = link(ring[static_cast<size_t>(a)].id, ring[static_cast<size_t>(b)].id);
    if (l.bytes_per_s == 0)
      l.bytes_per_s = std::min(fastest[static_cast<size_t>(a)], fastest[static_cast<size_t>(b)]);
    if (l.rtt_us == 0 || l.bytes_per_s == 0) return std::nullopt;
    return l;
  };
  constexpr double kUnbounded = std::numeric_limits<double>::infinity();
  double ring_latency_s = 0, ring_rate = kUnbounded;
  for (int k = 0; k < n; ++k) {
    const auto l = measured(k, (k + 1) % n);
    if (!l) return 0;
    ring_latency_s += 1e-6 * l->rtt_us / 2;
    ring_rate = std::min(ring_rate, static_cast<double>(l->bytes_per_s));
  }
  const double ring_share = 2.0 * (n - 1) / n;
  ring_latency_s *= ring_share;
  // Each tree: the one-way latency from every rank up to the root (parents before children in
  // heap order, so one pass over positions suffices), and its slowest link.
  double tree_latency_s = 0, tree_rate = kUnbounded;
  for (int t = 0; t < 2; ++t) {
    std::vector<double> up(static_cast<size_t>(n), 0);
    for (int pos = 1; pos < n; ++pos) {
      const int r = t == 0 ? pos : n - 1 - pos;
      const int parent = algo::tree_node(t, r, n).parent;
      const auto l = measured(r, parent);
      if (!l) return 0;
      up[static_cast<size_t>(r)] = up[static_cast<size_t>(parent)] + 1e-6 * l->rtt_us / 2;
      tree_latency_s = std::max(tree_latency_s, 2 * up[static_cast<size_t>(r)]);
      tree_rate = std::min(tree_rate, static_cast<double>(l->bytes_per_s));
    }
  }
  const double saved_s = ring_latency_s - tree_latency_s;            // the tree's head start
  const double per_byte_s = 2 / tree_rate - ring_share / ring_rate;  // what it loses per byte
  constexpr double kMax = static_cast<double>(uint64_t{1} << 40);    // tree_max_bytes' own limit
  if (saved_s <= 0) return 1;
  if (per_byte_s <= 0) return static_cast<uint64_t>(kMax);
  return static_cast<uint64_t>(std::clamp(std::floor(saved_s / per_byte_s), 1.0, kMax));
}

}  // namespace wccl::coord
