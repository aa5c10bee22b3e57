// Internal: name resolution for listen and connect, on libuv's thread pool.
#pragma once

#include <sys/socket.h>
#include <uv.h>

#include <functional>
#include <set>
#include <string>

#include "core/status.h"
#include "net/address.h"

namespace wccl::net {

// The lookups of one loop. Loop thread only.
class Resolver {
 public:
  using Done = std::function<void(Result<sockaddr_storage>)>;

  // Resolves hp (parsed from `address`, which messages quote) to its first address; passive: one
  // to listen on. done runs on the loop thread, from a later callback or before resolve returns
  // when the lookup cannot start, with the address or IO (the resolver is unreachable or busy,
  // or the lookup was cancelled) or INVALID_ARGUMENT (the name does not resolve).
  void resolve(uv_loop_t *loop, const std::string &address, const HostPort &hp, bool passive,
               Done done);
  // Cancels the lookups still queued (their done runs with IO); one already running on the thread
  // pool finishes first.
  void cancel_all();

 private:
  std::set<uv_getaddrinfo_t *> in_flight_;
};

}  // namespace wccl::net
