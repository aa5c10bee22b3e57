#include "net/loop.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>

namespace wccl::net {

Result<std::unique_ptr<Loop>> Loop::start(Logger log) {
  std::unique_ptr<Loop> loop(new Loop(std::move(log)));
  int rc = uv_loop_init(&loop->loop_);
  if (rc != 0) return WCCL_ERROR(WCCL_ERR_INTERNAL, "uv_loop_init: %s", uv_strerror(rc));
  rc = uv_async_init(&loop->loop_, &loop->async_, &Loop::on_async);
  if (rc != 0) {
    uv_loop_close(&loop->loop_);
    return WCCL_ERROR(WCCL_ERR_INTERNAL, "uv_async_init: %s", uv_strerror(rc));
  }
  loop->async_.data = loop.get();
  Loop *self = loop.get();
  loop->thread_ = std::thread([self] {
    // A write to a connection the peer has closed must fail with EPIPE, not kill the process:
    // SIGPIPE is thread-directed, so blocking it here covers every socket this loop writes.
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
    uv_run(&self->loop_, UV_RUN_DEFAULT);
  });
  loop->thread_id_ = loop->thread_.get_id();
  return loop;
}

void Loop::on_async(uv_async_t *handle) { static_cast<Loop *>(handle->data)->drain(); }

void Loop::drain() {
  // Take the tasks queued so far; tasks they post from this thread run inline, and tasks posted
  // by other threads meanwhile are picked up by the next async callback.
  std::deque<std::function<void()>> tasks;
  bool stop_now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(queue_);
    stop_now = stopping_ && !stopped_;
    if (stop_now) stopped_ = true;
  }
  room_.notify_all();
  for (auto &task : tasks) task();
  if (stop_now) {
    if (stop_hook_) stop_hook_();
    uv_close(reinterpret_cast<uv_handle_t *>(&async_), nullptr);
    // uv_run returns once the hook's handles have finished closing.
  }
}

Status Loop::post(std::function<void()> fn, std::chrono::milliseconds wait) {
  if (in_loop_thread()) {
    if (stopped_) return WCCL_ERROR(WCCL_ERR_ABORTED, "the transport is shutting down");
    fn();
    return Status();
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    const bool room =
        room_.wait_for(lock, wait, [&] { return stopping_ || queue_.size() < kQueueCapacity; });
    if (stopping_) return WCCL_ERROR(WCCL_ERR_ABORTED, "the transport is shutting down");
    if (!room) {
      return WCCL_ERROR(WCCL_ERR_TIMEOUT,
                        "the I/O loop's queue stayed full (%zu tasks) for %lld ms", kQueueCapacity,
                        static_cast<long long>(wait.count()));
    }
    queue_.push_back(std::move(fn));
    // Under the mutex: stop() cannot close the loop between the push and the wake-up.
    uv_async_send(&async_);
  }
  return Status();
}

void Loop::stop(std::function<void()> stop_hook) {
  if (in_loop_thread()) {
    std::fprintf(stderr,
                 "wccl: a transport was destroyed from its own I/O thread (a completion "
                 "callback); destroy it from another thread\n");
    std::abort();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    stop_hook_ = std::move(stop_hook);
  }
  room_.notify_all();
  uv_async_send(&async_);
  thread_.join();
  const int rc = uv_loop_close(&loop_);
  if (rc != 0)
    WCCL_LOG(log_, kError, "uv_loop_close: %s (a handle was left open)", uv_strerror(rc));
}

Loop::~Loop() {
  if (thread_.joinable()) stop(nullptr);
}

}  // namespace wccl::net
