// What the seeded control-plane simulations share (test_coord_control_sim.cc,
// test_coord_job_sim.cc): virtual time as a queue of events in time order (ties in the order they
// were queued), every random draw from one seed, and the loop over seeds.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <queue>
#include <random>
#include <string>
#include <vector>

namespace wccl::testing_sim {

class SimClock {
 protected:
  explicit SimClock(uint64_t seed) : rng_(seed) {}

  struct Event {
    int64_t at;
    uint64_t order;
    std::function<void()> fn;
    bool operator>(const Event &o) const { return at != o.at ? at > o.at : order > o.order; }
  };
  void at(int64_t t, std::function<void()> fn) { events_.push({t, order_++, std::move(fn)}); }
  void after(int64_t delay, std::function<void()> fn) { at(now_ + delay, std::move(fn)); }
  int64_t jitter(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  // Runs the events in order until none is left, the next is past `end`, or `stop()` holds;
  // `each` runs after every event.
  void run_until(int64_t end, const std::function<bool()> &stop,
                 const std::function<void()> &each = nullptr) {
    while (!events_.empty() && !stop()) {
      Event e = std::move(const_cast<Event &>(events_.top()));  // popped at once
      events_.pop();
      if (e.at > end) break;
      now_ = e.at;
      e.fn();
      if (each) each();
    }
  }

  std::mt19937_64 rng_;
  int64_t now_ = 0;
  uint64_t order_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
};

// Runs Sim(seed, trace).run() (a failure's text, "" if none) for WCCL_SIM_SEED alone, printing its
// trace (Sim::log()), or for seeds 1..WCCL_SIM_SEEDS (default `seeds`), each failure a test
// failure with its one-line reproduction, stopping after five.
template <typename Sim>
void run_seeds(uint64_t seeds, const char *binary) {
  if (const char *one = std::getenv("WCCL_SIM_SEED")) {
    Sim sim(std::strtoull(one, nullptr, 10), /*trace=*/true);
    const std::string failure = sim.run();
    std::fputs(sim.log().c_str(), stdout);
    EXPECT_EQ(failure, "");
    return;
  }
  if (const char *n = std::getenv("WCCL_SIM_SEEDS")) seeds = std::strtoull(n, nullptr, 10);
  int failures = 0;
  for (uint64_t seed = 1; seed <= seeds && failures < 5; ++seed) {
    Sim sim(seed, false);
    const std::string failure = sim.run();
    if (!failure.empty()) {
      ++failures;
      ADD_FAILURE() << "seed " << seed << ": " << failure << "\n  reproduce: WCCL_SIM_SEED=" << seed
                    << " " << binary;
    }
  }
}

}  // namespace wccl::testing_sim
