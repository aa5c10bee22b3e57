// One libuv loop on its own thread. Other threads reach it only through post(): a bounded queue
// drained by a uv_async_t callback. Everything that touches a libuv handle runs on this thread.
#pragma once

#include <uv.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "core/log.h"
#include "core/status.h"

namespace wccl::net {

class Loop {
 public:
  // Queue capacity: posts beyond it wait for room (up to their timeout).
  static constexpr size_t kQueueCapacity = 4096;

  // Starts the thread. NO_MEMORY / INTERNAL if libuv cannot initialise.
  static Result<std::unique_ptr<Loop>> start(Logger log);
  // Runs stop_hook on the loop (it must close every handle it owns), then joins the thread.
  // The hook is the last task run; tasks posted afterwards are refused.
  void stop(std::function<void()> stop_hook);
  ~Loop();  // stops with an empty hook if stop() was not called

  uv_loop_t *uv() { return &loop_; }
  bool in_loop_thread() const { return std::this_thread::get_id() == thread_id_; }
  const Logger &log() const { return log_; }

  // Runs fn on the loop thread. Called on the loop thread, fn runs before post returns.
  // Elsewhere fn is queued; when the queue is full the caller waits up to `wait` for room and then
  // gets TIMEOUT. After stop() posts fail with ABORTED. On error fn is not run.
  Status post(std::function<void()> fn,
              std::chrono::milliseconds wait = std::chrono::milliseconds(10000));

 private:
  explicit Loop(Logger log) : log_(std::move(log)) {}
  static void on_async(uv_async_t *handle);
  void drain();

  Logger log_;
  uv_loop_t loop_{};
  uv_async_t async_{};
  std::thread thread_;
  std::thread::id thread_id_;  // set once by start(), before the loop is shared
  std::mutex mu_;
  std::condition_variable room_;
  std::deque<std::function<void()>> queue_;  // at most kQueueCapacity entries
  bool stopping_ = false;
  bool stopped_ = false;
  std::function<void()> stop_hook_;
};

}  // namespace wccl::net
