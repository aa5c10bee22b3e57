// The ring order the coordinator chooses from measured round trips (DESIGN §5), without I/O.
//
// A ring all-reduce moves the same bytes over every link of the ring, each link's TCP streams
// carrying at most their windows per round trip, and each segment crosses n - 1 links one after
// the other. So an order is better when its slowest link (the largest round trip) is smaller,
// and, for the same slowest link, when the sum of its round trips is smaller: in that order
// (RingCost). order_ring improves an order by 2-opt moves (reversing a stretch of the ring) until
// no move improves it; members with round trips of 10 ms within a continent and 90 ms across
// end up in one run per continent, crossing the ocean twice.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "coord/membership.h"

namespace wccl::coord {

// The measured round trip between two members in microseconds; 0: not measured.
using RttOf = std::function<uint32_t(PeerId, PeerId)>;

struct RingCost {
  uint32_t max_us = 0;  // the ring's slowest link
  uint64_t sum_us = 0;  // all its links
  bool operator<(const RingCost &o) const {
    return max_us != o.max_us ? max_us < o.max_us : sum_us < o.sum_us;
  }
};

// The cost of `ring` in its order, or nullopt if a pair of neighbours has no measurement.
std::optional<RingCost> ring_cost(const std::vector<Member> &ring, const RttOf &rtt);

// The round trips between the members of `ring`: measured where `rtt` has them, else the
// shortest path's over measured pairs among them (0 where none connects the two). Members link
// only to their schedule neighbours (algo::schedule_neighbours), so most pairs are never
// measured; internet round trips roughly obey the triangle inequality, so a path's sum is an
// estimate from above, and the next ring's links measure the pairs an order chose by it.
RttOf with_paths(const std::vector<Member> &ring, const RttOf &rtt);

// The best order 2-opt finds, starting from `ring` (so `ring` itself when no move improves it).
// `ring` unchanged if some pair of its members has no measurement: any two may become neighbours.
std::vector<Member> order_ring(std::vector<Member> ring, const RttOf &rtt);

}  // namespace wccl::coord
