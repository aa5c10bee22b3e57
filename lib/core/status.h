// Status and Result: how errors travel inside wccl.
//
// A Status is a wccl_result_t code plus the cause in words and the source location that raised
// it. Functions return it instead of throwing; WCCL_RETURN_IF_ERROR forwards a failure upward.
// The C API turns the last Status into wccl_last_error().
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <variant>

#include "wccl/wccl.h"

namespace wccl {

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(wccl_result_t code, std::string message, const char *file, int line)
      : code_(code), message_(std::move(message)), file_(file), line_(line) {}

  bool ok() const { return code_ == WCCL_OK; }
  wccl_result_t code() const { return code_; }
  const std::string &message() const { return message_; }
  // "WCCL_ERR_AUTH: <message> [lib/net/tls.cc:42]", or "WCCL_OK".
  std::string to_string() const;

  // The same code and location, with context prepended to the message ("connect 10.0.0.1:5: ...").
  Status with_context(const std::string &context) const;

 private:
  wccl_result_t code_ = WCCL_OK;
  std::string message_;
  const char *file_ = nullptr;
  int line_ = 0;
};

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status &status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T &value() & { return std::get<T>(v_); }
  T &&value() && { return std::get<T>(std::move(v_)); }
  T *operator->() { return &std::get<T>(v_); }
  T &operator*() { return std::get<T>(v_); }

 private:
  std::variant<T, Status> v_;
};

// printf-style message formatting for error construction.
std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace wccl

#define WCCL_ERROR(code, ...) \
  ::wccl::Status((code), ::wccl::format(__VA_ARGS__), __FILE__, __LINE__)

#define WCCL_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::wccl::Status wccl_status_ = (expr);        \
    if (!wccl_status_.ok()) return wccl_status_; \
  } while (0)

// `lhs` (a declaration or an lvalue) = the value of the Result `expr`, or its Status returned.
// (lhs may be a declaration and `result` is a name: neither can be parenthesised.)
// NOLINTBEGIN(bugprone-macro-parentheses)
#define WCCL_ASSIGN_OR_RETURN(lhs, expr) \
  WCCL_ASSIGN_OR_RETURN_(WCCL_CONCAT_(wccl_result_, __LINE__), lhs, expr)
#define WCCL_ASSIGN_OR_RETURN_(result, lhs, expr) \
  auto result = (expr);                           \
  if (!result.ok()) return result.status();       \
  lhs = std::move(result).value()
// NOLINTEND(bugprone-macro-parentheses)
#define WCCL_CONCAT_(a, b) WCCL_CONCAT_INNER_(a, b)
#define WCCL_CONCAT_INNER_(a, b) a##b
