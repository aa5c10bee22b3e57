// The virtual clock of wccl-sim (docs/sim.md): a discrete-event engine whose events run while
// every simulated thread waits. Each simulated peer runs the project's algorithm code unchanged on
// a thread of its own; its waits (algo::Channel::wait_until, and the CPU time its kernels are
// charged) go through block(), and the clock moves only when no simulated thread can run. So the
// threads of one instant run truly in parallel, and virtual time never moves under a running one.
//
// Events at the same time run in a fixed order: by the thread that scheduled them (its rank, then
// its own count), and events scheduled by events after those, in the order they were made. A run
// is therefore the same every time for the same inputs, whatever the host's scheduling.
//
// Liveness. When every simulated thread waits and no event is due, nothing can ever happen: each
// waiting thread's block() returns false (the channel reports TIMEOUT), so an algorithm that
// deadlocks fails its operation instead of hanging the simulator.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

namespace wccl::sim {

using Time = int64_t;  // nanoseconds of virtual time
inline constexpr Time kSecond = 1000000000;
inline double seconds(Time t) { return static_cast<double>(t) * 1e-9; }

class Engine {
 public:
  // threads: the simulated threads, numbered 0..threads-1 (one per peer); each must call
  // finished() when it is done.
  explicit Engine(int threads);
  Engine(const Engine &) = delete;
  Engine &operator=(const Engine &) = delete;

  Time now() const;
  // Runs fn at virtual time t (>= now) on the thread driving the clock. `by` is the simulated
  // thread scheduling it (-1: an event), which fixes its place among the events of time t.
  void at(Time t, int by, std::function<void()> fn);
  // From an event: fn may have made simulated thread i's wait condition true; check it after.
  void touch(int i) { touched_.push_back(i); }
  // Simulated thread i waits until ready(); false if nothing can make it true any more.
  bool block(int i, const std::function<bool()> &ready);
  // Simulated thread i spends d of virtual time (CPU work); false as block.
  bool sleep(int i, Time d);
  // Simulated thread i has ended.
  void finished();
  // From an event: simulated thread i stops (its process froze or died). Its waits never succeed
  // again: they return false once nothing else can happen.
  void hold(int i);
  // With no simulated thread: runs events until none is left or the next is after `until`.
  void run(Time until);
  // Events run so far (a measure of the simulation's own work).
  uint64_t events() const;

 private:
  using Key = std::tuple<Time, int, uint64_t>;  // time, scheduler (-1: an event), its count
  struct Waiter {
    const std::function<bool()> *ready = nullptr;
    bool waiting = false, stuck = false, held = false;
    std::condition_variable cv;
  };
  // With mu_ held and every live thread waiting: runs events until some thread may run.
  void drive(std::unique_lock<std::mutex> &lock);
  void release(Waiter &w);

  mutable std::mutex mu_;
  Time now_ = 0;
  std::map<Key, std::function<void()>> events_;
  std::vector<int> touched_;         // the driver's alone
  std::vector<uint64_t> scheduled_;  // per simulated thread: events it has scheduled
  uint64_t event_order_ = 0;
  std::vector<Waiter> waiters_;
  int live_ = 0, waiting_ = 0;
  bool driving_ = false;
  uint64_t events_run_ = 0;
};

}  // namespace wccl::sim
