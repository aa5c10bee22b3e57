#include "net/http.h"

#include <cstring>

#include "core/status.h"

namespace wccl::net {
namespace {

// RFC 9110's tchar: what a method and a header name are made of.
bool is_token_char(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c != 0 && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr);
}

bool is_token(const std::string &s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (!is_token_char(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

bool iequals(const std::string &a, const char *b) {
  const size_t n = std::strlen(b);
  if (a.size() != n) return false;
  for (size_t i = 0; i < n; ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::string trim_ows(const std::string &s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return s.substr(b, e - b);
}

}  // namespace

HttpRequestParser::State HttpRequestParser::fail(int status, std::string why) {
  state_ = State::kFailed;
  error_status_ = status;
  error_ = std::move(why);
  return state_;
}

HttpRequestParser::State HttpRequestParser::feed(const char *data, size_t size) {
  for (size_t i = 0; i < size && state_ == State::kReading; ++i) {
    const char c = data[i];
    if (++head_bytes_ > kMaxHttpHeadBytes) {
      return first_line_ ? fail(414, "the request line is longer than the limit")
                         : fail(431, "the request's head is longer than the limit");
    }
    if (c != '\n') {
      pending_.push_back(c);
      continue;
    }
    if (!pending_.empty() && pending_.back() == '\r') pending_.pop_back();
    const std::string text = std::move(pending_);
    pending_.clear();
    line(text);
  }
  return state_;
}

HttpRequestParser::State HttpRequestParser::line(const std::string &text) {
  if (first_line_) {
    if (text.empty()) return state_;  // RFC 9112 §2.2: empty lines before the request line
    first_line_ = false;
    return request_line(text);
  }
  if (text.empty()) {
    state_ = State::kComplete;
    return state_;
  }
  return header(text);
}

HttpRequestParser::State HttpRequestParser::request_line(const std::string &text) {
  const size_t sp1 = text.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? sp1 : text.find(' ', sp1 + 1);
  if (sp2 == std::string::npos || text.find(' ', sp2 + 1) != std::string::npos) {
    return fail(400, "the request line is not METHOD TARGET VERSION");
  }
  const std::string method = text.substr(0, sp1);
  const std::string target = text.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string version = text.substr(sp2 + 1);
  if (!is_token(method)) return fail(400, "the method is not a token");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    if (version.size() == 8 && version.compare(0, 5, "HTTP/") == 0) {
      return fail(505, "HTTP version " + version.substr(5) + " (this server speaks 1.0 and 1.1)");
    }
    return fail(400, "the request line's version is not HTTP/1.x");
  }
  if (target.size() > kMaxHttpTargetBytes) return fail(414, "the target is longer than the limit");
  if (target.empty() || target[0] != '/') return fail(400, "the target is not a path");
  for (const char c : target) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) return fail(400, "the target has a byte that is not visible ASCII");
  }
  if (method != "GET" && method != "HEAD") {
    return fail(405, "method " + method + " (this server answers GET and HEAD)");
  }
  request_.method = method;
  const size_t q = target.find('?');
  request_.path = target.substr(0, q);
  if (q != std::string::npos) request_.query = target.substr(q + 1);
  return state_;
}

HttpRequestParser::State HttpRequestParser::header(const std::string &text) {
  if (text[0] == ' ' || text[0] == '\t') return fail(400, "a folded header line");
  if (++headers_ > kMaxHttpHeaders) return fail(431, "more headers than the limit");
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return fail(400, "a header line without a colon");
  const std::string name = text.substr(0, colon);
  if (!is_token(name)) return fail(400, "a header name that is not a token");
  const std::string value = trim_ows(text.substr(colon + 1));
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && u != '\t') || u == 0x7f) return fail(400, "a control byte in header " + name);
  }
  if (iequals(name, "content-length")) {
    if (value != "0") return fail(413, "a request body (this server takes none)");
  } else if (iequals(name, "transfer-encoding")) {
    return fail(501, "Transfer-Encoding (this server takes no request body)");
  } else if (iequals(name, "authorization")) {
    if (!request_.authorization.empty()) return fail(400, "two Authorization headers");
    request_.authorization = value;
  }
  return state_;
}

const char *http_reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

std::string http_response(int status, const std::string &content_type, const std::string &body,
                          bool head_only, const std::string &extra_headers) {
  std::string out = format(
      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
      "Cache-Control: no-store\r\nConnection: close\r\n",
      status, http_reason(status), content_type.c_str(), body.size());
  out += extra_headers;
  out += "\r\n";
  if (!head_only) out += body;
  return out;
}

}  // namespace wccl::net
