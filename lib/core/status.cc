#include "core/status.h"

#include <cstdarg>
#include <cstring>

namespace wccl {

std::string format(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  va_end(args);
  return out;
}

std::string Status::to_string() const {
  std::string out = wccl_result_name(code_);
  if (ok()) return out;
  out += ": ";
  out += message_;
  if (file_ != nullptr) {
    // Keep the path from the source tree's top (lib/..., tools/...), not the build machine's.
    const char *rel = std::strstr(file_, "lib/");
    out += format(" [%s:%d]", rel != nullptr ? rel : file_, line_);
  }
  return out;
}

Status Status::with_context(const std::string &context) const {
  if (ok()) return *this;
  Status s = *this;
  s.message_ = context + ": " + message_;
  return s;
}

}  // namespace wccl
