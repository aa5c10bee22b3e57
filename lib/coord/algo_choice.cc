#include "coord/algo_choice.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "algo/collectives.h"

namespace wccl::coord {
namespace {

constexpr double kUnbounded = std::numeric_limits<double>::infinity();
constexpr double kMaxTreeBytes = static_cast<double>(uint64_t{1} << 40);  // tree_max_bytes' limit

// An algorithm's time for a buffer of S bytes: at0_s + S * per_byte_s.
struct Line {
  double at0_s = 0;
  double per_byte_s = 0;
};

// The largest S (whole bytes, at most cap) up to which a is faster than b: 0 if a is not faster
// at S = 0 (where it wins only larger buffers, it is not taken: the rule takes a up to a size),
// cap if it is faster at every size. Differences within rounding count as none, so that lines
// the model makes equal (the all-gather and the trees at n = 3 on even links) tie, and a tie
// keeps b.
double last_win(const Line &a, const Line &b, double cap) {
  constexpr double kRounding = 1e-9;
  const double head_start_s = b.at0_s - a.at0_s;  // what a gains at S = 0
  const double loss_per_byte_s = a.per_byte_s - b.per_byte_s;
  if (head_start_s <= kRounding * std::max(a.at0_s, b.at0_s)) return 0;
  if (loss_per_byte_s <= kRounding * std::max(a.per_byte_s, b.per_byte_s)) return cap;
  return std::min(std::floor(head_start_s / loss_per_byte_s), cap);
}

class Model {
 public:
  Model(const std::vector<Member> &ring, const LinkOf &link)
      : ring_(ring), link_(link), n_(static_cast<int>(ring.size())) {
    // A link that never carried a large message (the trees' links that are not the ring's, after
    // ring all-reduces) has no rate of its own: it gets the slower of its two ends' fastest links,
    // since a member's access link is what usually bounds all of its links.
    fastest_.assign(ring.size(), 0);
    for (int a = 0; a < n_; ++a) {
      for (int b = a + 1; b < n_; ++b) {
        const uint64_t rate = link_(id(a), id(b)).bytes_per_s;
        fastest_[static_cast<size_t>(a)] = std::max(fastest_[static_cast<size_t>(a)], rate);
        fastest_[static_cast<size_t>(b)] = std::max(fastest_[static_cast<size_t>(b)], rate);
      }
    }
  }

  // L (the sum of RTT/2 over the ring's links) and B_ring, if every link of the ring has them.
  struct RingLinks {
    double latency_s, rate;
  };
  std::optional<RingLinks> ring_links() const {
    double latency_s = 0, rate = kUnbounded;
    for (int k = 0; k < n_; ++k) {
      const auto l = measured(k, (k + 1) % n_);
      if (!l) return std::nullopt;
      latency_s += 1e-6 * l->rtt_us / 2;
      rate = std::min(rate, static_cast<double>(l->bytes_per_s));
    }
    return RingLinks{latency_s, rate};
  }

  // Each tree: the one-way latency from every rank up to the root (parents before children in
  // heap order, so one pass over positions suffices), and its slowest link.
  std::optional<Line> tree() const {
    double latency_s = 0, rate = kUnbounded;
    for (int t = 0; t < 2; ++t) {
      std::vector<double> up(static_cast<size_t>(n_), 0);
      for (int pos = 1; pos < n_; ++pos) {
        const int r = t == 0 ? pos : n_ - 1 - pos;
        const int parent = algo::tree_node(t, r, n_).parent;
        const auto l = measured(r, parent);
        if (!l) return std::nullopt;
        up[static_cast<size_t>(r)] = up[static_cast<size_t>(parent)] + 1e-6 * l->rtt_us / 2;
        latency_s = std::max(latency_s, 2 * up[static_cast<size_t>(r)]);
        rate = std::min(rate, static_cast<double>(l->bytes_per_s));
      }
    }
    return Line{latency_s, 2 / rate};
  }

 private:
  PeerId id(int rank) const { return ring_[static_cast<size_t>(rank)].id; }
  std::optional<LinkEstimate> measured(int a, int b) const {
    LinkEstimate l = link_(id(a), id(b));
    if (l.bytes_per_s == 0)
      l.bytes_per_s = std::min(fastest_[static_cast<size_t>(a)], fastest_[static_cast<size_t>(b)]);
    if (l.rtt_us == 0 || l.bytes_per_s == 0) return std::nullopt;
    return l;
  }

  const std::vector<Member> &ring_;
  const LinkOf &link_;
  const int n_;
  std::vector<uint64_t> fastest_;
};

}  // namespace

algo::Crossovers crossovers(const std::vector<Member> &ring, const LinkOf &link) {
  const int n = static_cast<int>(ring.size());
  algo::Crossovers out;
  if (n < 2) return out;
  const Model model(ring, link);
  const auto links = model.ring_links();
  if (!links) return out;
  const double ring_share = 2.0 * (n - 1) / n;  // how many times the ring's steps go round it
  const Line ring_line{links->latency_s * ring_share, ring_share / links->rate};
  const Line allgather_line{links->latency_s * (n - 1) / n, (n - 1) / links->rate};
  const auto cap = static_cast<double>(kMaxAllgatherBytes);
  double allgather_max = last_win(allgather_line, ring_line, cap);
  if (n >= 3) {
    if (const std::optional<Line> tree_line = model.tree()) {
      const double tree_max = last_win(*tree_line, ring_line, kMaxTreeBytes);
      out.tree_max_bytes = static_cast<uint64_t>(std::max(1.0, tree_max));
      // A tree that never wins (taken for empty buffers only) does not bound the all-gather.
      if (tree_max > 0)
        allgather_max = std::min(allgather_max, last_win(allgather_line, *tree_line, cap));
    }
  }
  out.allgather_max_bytes = static_cast<uint64_t>(allgather_max);
  return out;
}

}  // namespace wccl::coord
