#include "memory_channel.h"

#include <algorithm>
#include <cstring>

namespace wccl::test {

class MemoryChannel : public algo::Channel {
 public:
  MemoryChannel(Fabric *f, int rank) : f_(f), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return f_->n_; }
  Status send(int peer, uint32_t tag, const void *data, size_t len,
              algo::Completion done) override {
    return f_->send(rank_, peer, tag, data, len, std::move(done));
  }
  Status recv(int peer, uint32_t tag, void *data, size_t len, size_t *got,
              algo::Completion done) override {
    return f_->recv(peer, rank_, tag, data, len, got, std::move(done));
  }
  void abort(const Status &why) override { f_->kill(rank_, why); }

 private:
  Fabric *f_;
  int rank_;
};

namespace {

void run_calls(std::vector<std::pair<algo::Completion, Status>> *calls) {
  for (auto &[fn, st] : *calls) fn(st);
  calls->clear();
}

Status lost(int rank) { return WCCL_ERROR(WCCL_ERR_IO, "peer %d is gone", rank); }

}  // namespace

Fabric::Fabric(int n, Options options) : n_(n), opt_(options), rng_(options.seed) {
  if (opt_.shuffle) pump_ = std::thread([this] { pump(); });
}

Fabric::~Fabric() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (pump_.joinable()) pump_.join();
}

std::unique_ptr<algo::Channel> Fabric::channel(int rank) {
  return std::make_unique<MemoryChannel>(this, rank);
}

void Fabric::kill_at_send(int rank, uint64_t after_sends) {
  std::lock_guard<std::mutex> lock(mu_);
  kill_at_[rank] = after_sends;
}

Status Fabric::death(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = dead_.find(rank);
  return it != dead_.end() ? it->second : Status();
}

uint64_t Fabric::sends(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  return sends_[rank];
}

void Fabric::kill(int rank, const Status &why) {
  Calls calls;
  {
    std::lock_guard<std::mutex> lock(mu_);
    kill_locked(rank, why, &calls);
  }
  run_calls(&calls);
}

void Fabric::kill_locked(int rank, const Status &why, Calls *calls) {
  if (dead_.count(rank) != 0) return;
  dead_[rank] = why;
  for (auto it = recvs_.begin(); it != recvs_.end();) {
    const auto [from, to, tag] = it->first;
    if (from == rank || to == rank) {
      calls->emplace_back(std::move(it->second.done), to == rank ? why : lost(rank));
      it = recvs_.erase(it);
    } else {
      ++it;
    }
  }
}

Status Fabric::send(int from, int to, uint32_t tag, const void *data, size_t len,
                    algo::Completion done) {
  if (to < 0 || to >= n_ || to == from)
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "bad peer %d", to);
  Calls calls;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t count = ++sends_[from];
    auto k = kill_at_.find(from);
    if (k != kill_at_.end() && count >= k->second) kill_locked(from, lost(from), &calls);
    Status st;
    if (dead_.count(from) != 0) {
      st = dead_[from];
    } else if (dead_.count(to) != 0) {
      st = lost(to);
    } else {
      Message m{{from, to, tag},
                std::vector<uint8_t>(static_cast<const uint8_t *>(data),
                                     static_cast<const uint8_t *>(data) + len)};
      auto pass = [&](Message msg) {
        if (opt_.shuffle) {
          queue_.push_back(std::move(msg));
          cv_.notify_all();
        } else {
          deliver(std::move(msg), &calls);
        }
      };
      const Key key = m.key;
      const bool held = std::any_of(
          opt_.holds.begin(), opt_.holds.end(),
          [&](const Options::Hold &h) { return h.first == key && sent_keys_.count(h.until) == 0; });
      if (held) {
        held_.push_back(std::move(m));
      } else {
        pass(std::move(m));
      }
      if (!opt_.holds.empty()) {
        sent_keys_.insert(key);
        for (auto it = held_.begin(); it != held_.end();) {
          const Key first = it->key;
          const bool still =
              std::any_of(opt_.holds.begin(), opt_.holds.end(), [&](const Options::Hold &h) {
                return h.first == first && sent_keys_.count(h.until) == 0;
              });
          if (still) {
            ++it;
          } else {
            pass(std::move(*it));
            it = held_.erase(it);
          }
        }
      }
    }
    calls.emplace_back(std::move(done), st);  // the bytes were copied: the sender's buffer is free
  }
  run_calls(&calls);
  return Status();
}

Status Fabric::recv(int from, int to, uint32_t tag, void *data, size_t len, size_t *got_len,
                    algo::Completion done) {
  if (from < 0 || from >= n_ || from == to)
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "bad peer %d", from);
  Calls calls;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Key key{from, to, tag};
    auto got = arrived_.find(key);
    if (dead_.count(to) != 0) {
      calls.emplace_back(std::move(done), dead_[to]);
    } else if (got != arrived_.end()) {
      const Status st =
          place(got->second, Recv{static_cast<uint8_t *>(data), len, got_len, nullptr});
      arrived_.erase(got);
      calls.emplace_back(std::move(done), st);
    } else if (dead_.count(from) != 0) {
      calls.emplace_back(std::move(done), lost(from));
    } else if (recvs_.count(key) != 0) {
      return WCCL_ERROR(WCCL_ERR_INVALID_USAGE, "a second receive of one message");
    } else {
      recvs_[key] = Recv{static_cast<uint8_t *>(data), len, got_len, std::move(done)};
    }
  }
  run_calls(&calls);
  return Status();
}

// Copies a message into a receive's buffer under the Channel contract's length rule.
Status Fabric::place(const std::vector<uint8_t> &bytes, const Recv &r) {
  if (r.got == nullptr ? bytes.size() != r.len : bytes.size() > r.len) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "message of %zu bytes for a receive of %zu", bytes.size(),
                      r.len);
  }
  if (!bytes.empty()) std::memcpy(r.data, bytes.data(), bytes.size());
  if (r.got != nullptr) *r.got = bytes.size();
  return Status();
}

void Fabric::deliver(Message m, Calls *calls) {
  auto r = recvs_.find(m.key);
  if (r == recvs_.end()) {
    arrived_[m.key] = std::move(m.bytes);
    return;
  }
  const Status st = place(m.bytes, r->second);
  calls->emplace_back(std::move(r->second.done), st);
  recvs_.erase(r);
}

void Fabric::pump() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const size_t pick = std::uniform_int_distribution<size_t>(0, queue_.size() - 1)(rng_);
    Message m = std::move(queue_[pick]);
    queue_.erase(queue_.begin() + static_cast<long>(pick));
    Calls calls;
    const int from = std::get<0>(m.key), to = std::get<1>(m.key);
    if (dead_.count(from) == 0 && dead_.count(to) == 0) deliver(std::move(m), &calls);
    lock.unlock();
    run_calls(&calls);
    lock.lock();
  }
}

}  // namespace wccl::test
