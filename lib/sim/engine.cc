#include "sim/engine.h"

namespace wccl::sim {

Engine::Engine(int threads)
    : scheduled_(static_cast<size_t>(threads), 0),
      waiters_(static_cast<size_t>(threads)),
      live_(threads) {}

Time Engine::now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return now_;
}

uint64_t Engine::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_run_;
}

void Engine::at(Time t, int by, std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t count = by < 0 ? event_order_++ : scheduled_[static_cast<size_t>(by)]++;
  events_.emplace(Key{t < now_ ? now_ : t, by, count}, std::move(fn));
}

void Engine::release(Waiter &w) {
  w.waiting = false;
  --waiting_;
  w.cv.notify_one();
}

void Engine::drive(std::unique_lock<std::mutex> &lock) {
  driving_ = true;
  for (;;) {
    if (events_.empty()) {
      // Every live thread waits and nothing is due: none of them can ever run again.
      for (Waiter &w : waiters_) {
        if (!w.waiting) continue;
        w.stuck = true;
        release(w);
      }
      break;
    }
    auto first = events_.begin();
    now_ = std::get<0>(first->first);
    std::function<void()> fn = std::move(first->second);
    events_.erase(first);
    ++events_run_;
    lock.unlock();  // fn may schedule more (at() locks)
    fn();
    lock.lock();
    bool any = false;
    for (int i : touched_) {
      Waiter &w = waiters_[static_cast<size_t>(i)];
      if (w.waiting && !w.held && (*w.ready)()) {
        release(w);
        any = true;
      }
    }
    touched_.clear();
    if (any) break;
  }
  driving_ = false;
}

bool Engine::block(int i, const std::function<bool()> &ready) {
  std::unique_lock<std::mutex> lock(mu_);
  Waiter &w = waiters_[static_cast<size_t>(i)];
  if (!w.held && ready()) return true;
  w.ready = &ready;
  w.waiting = true;
  w.stuck = false;
  ++waiting_;
  while (w.waiting) {
    if (waiting_ == live_ && !driving_) {
      drive(lock);  // this thread is the last to wait: it moves the clock
    } else {
      w.cv.wait(lock);
    }
  }
  w.ready = nullptr;
  return !w.stuck;
}

void Engine::run(Time until) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!events_.empty() && std::get<0>(events_.begin()->first) <= until) {
    auto first = events_.begin();
    now_ = std::get<0>(first->first);
    std::function<void()> fn = std::move(first->second);
    events_.erase(first);
    ++events_run_;
    lock.unlock();
    fn();
    lock.lock();
    touched_.clear();
  }
}

bool Engine::sleep(int i, Time d) {
  if (d <= 0) return true;
  auto woke = std::make_shared<bool>(false);
  at(now() + d, i, [this, i, woke] {
    *woke = true;
    touch(i);
  });
  return block(i, [woke] { return *woke; });
}

void Engine::hold(int i) {
  std::lock_guard<std::mutex> lock(mu_);
  waiters_[static_cast<size_t>(i)].held = true;
}

void Engine::finished() {
  std::unique_lock<std::mutex> lock(mu_);
  --live_;
  if (live_ > 0 && waiting_ == live_ && !driving_) drive(lock);
}

}  // namespace wccl::sim
