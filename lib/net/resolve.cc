#include "net/resolve.h"

#include <netdb.h>

#include <cstring>
#include <memory>

namespace wccl::net {
namespace {

Status resolve_error(const std::string &address, const std::string &host, int rc) {
  // A resolver that is unreachable or busy says nothing about the address.
  const wccl_result_t code =
      rc == UV_EAI_AGAIN || rc == UV_ECANCELED ? WCCL_ERR_IO : WCCL_ERR_INVALID_ARGUMENT;
  return WCCL_ERROR(code, "address \"%s\": cannot resolve \"%s\": %s", address.c_str(),
                    host.c_str(), uv_strerror(rc));
}

struct Lookup {
  uv_getaddrinfo_t req{};
  std::set<uv_getaddrinfo_t *> *in_flight;
  std::string address, host;
  Resolver::Done done;
};

}  // namespace

void Resolver::resolve(uv_loop_t *loop, const std::string &address, const HostPort &hp,
                       bool passive, Done done) {
  auto *lookup = new Lookup{{}, &in_flight_, address, hp.host, std::move(done)};
  lookup->req.data = lookup;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : AI_ADDRCONFIG;
  const std::string port = std::to_string(hp.port);
  in_flight_.insert(&lookup->req);
  const int rc = uv_getaddrinfo(
      loop, &lookup->req,
      [](uv_getaddrinfo_t *req, int status, addrinfo *res) {
        std::unique_ptr<Lookup> l(static_cast<Lookup *>(req->data));
        l->in_flight->erase(req);
        if (status != 0 || res == nullptr) {
          l->done(resolve_error(l->address, l->host, status));
        } else {
          sockaddr_storage sa{};
          std::memcpy(&sa, res->ai_addr, res->ai_addrlen);
          l->done(sa);
        }
        uv_freeaddrinfo(res);
      },
      hp.host.c_str(), port.c_str(), &hints);
  if (rc != 0) {
    std::unique_ptr<Lookup> l(lookup);
    in_flight_.erase(&l->req);
    l->done(resolve_error(address, hp.host, rc));
  }
}

void Resolver::cancel_all() {
  for (uv_getaddrinfo_t *req : in_flight_) uv_cancel(reinterpret_cast<uv_req_t *>(req));
}

}  // namespace wccl::net
