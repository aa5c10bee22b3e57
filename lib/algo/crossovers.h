// algo=AUTO's crossovers, which the coordinator measures and every member of an epoch holds
// alike (algo/collectives.h chooses by them).
#pragma once

#include <cstdint>

namespace wccl::algo {

// algo=AUTO's crossovers for all-reduce in an epoch, the same on every member: the largest
// all-reduce, in the caller's bytes (count times the dtype's size), that takes the all-gather
// schedule, and the largest that takes the tree; 0: none. The coordinator measures them
// (coord/algo_choice.h).
struct Crossovers {
  uint64_t allgather_max_bytes = 0;
  uint64_t tree_max_bytes = 0;
  bool operator==(const Crossovers &o) const {
    return allgather_max_bytes == o.allgather_max_bytes && tree_max_bytes == o.tree_max_bytes;
  }
};

}  // namespace wccl::algo
