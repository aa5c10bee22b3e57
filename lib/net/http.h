// HTTP/1.1 for the coordinator's operator endpoints (docs/operations.md): a request parser as a
// state machine without I/O, and the responses it and its server write. Only what a Prometheus
// scraper, a browser and curl send is accepted: GET or HEAD, no body, a head of bounded size. One
// request a connection (every response says Connection: close).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace wccl::net {

struct HttpRequest {
  std::string method;         // "GET" or "HEAD"
  std::string path;           // the target up to '?', as written
  std::string query;          // after '?', as written ("" if none)
  std::string authorization;  // the Authorization header's value ("" if absent)
};

// A request's head (the request line and the headers), at most: longer ones get 431.
inline constexpr size_t kMaxHttpHeadBytes = 8192;
inline constexpr size_t kMaxHttpTargetBytes = 2048;  // longer targets get 414
inline constexpr size_t kMaxHttpHeaders = 64;        // more get 431

// Feed it the bytes of one connection as they arrive. Once it says kComplete or kFailed it takes
// no more: kComplete holds the request, kFailed the status code (4xx/5xx) and reason to answer
// with. Bytes after the head (a pipelined request) are ignored: the connection closes after one
// response.
class HttpRequestParser {
 public:
  enum class State { kReading, kComplete, kFailed };
  // Consumes up to `size` bytes; returns the state after them.
  State feed(const char *data, size_t size);
  State state() const { return state_; }
  const HttpRequest &request() const { return request_; }
  int error_status() const { return error_status_; }   // kFailed
  const std::string &error() const { return error_; }  // kFailed: what was wrong

 private:
  State fail(int status, std::string why);
  State line(const std::string &text);  // one line of the head, without its line end
  State request_line(const std::string &text);
  State header(const std::string &text);

  State state_ = State::kReading;
  HttpRequest request_;
  std::string pending_;  // the current line so far
  size_t head_bytes_ = 0;
  size_t headers_ = 0;
  bool first_line_ = true;
  int error_status_ = 0;
  std::string error_;
};

// A whole response: status line, Content-Type, Content-Length, Connection: close, `extra_headers`
// (each ending in CRLF) and the body, unless `head_only` (HEAD: the same headers, no body).
std::string http_response(int status, const std::string &content_type, const std::string &body,
                          bool head_only = false, const std::string &extra_headers = "");
// "OK", "Not Found", ...: the reason phrase of the codes this server sends.
const char *http_reason(int status);

}  // namespace wccl::net
