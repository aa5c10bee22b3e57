// Configuration: string keys with checked string values (the C API's wccl_config_t wraps one).
//
// Each key is described once in the table in config.cc: its built-in default, the form it
// accepts and a description. Values are validated when set, so the typed getters below cannot
// fail for a key that exists.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/log.h"
#include "core/status.h"

namespace wccl {

class Config {
 public:
  // Defaults, then WCCL_<KEY> environment variables. Fails naming the variable on a bad value.
  static Result<Config> from_env();
  // Built-in defaults only.
  static Config defaults();

  Status set(const std::string &key, const std::string &value);
  Result<std::string> get(const std::string &key) const;

  // Typed access for library code. The key must exist (a missing key is a bug: it aborts).
  const std::string &str(const std::string &key) const;
  int64_t integer(const std::string &key) const;
  bool flag(const std::string &key) const;  // "on" / "off" keys
  LogLevel log_level() const;
  // The "name" key, or "<hostname>:<pid>" when it is empty.
  std::string peer_name() const;
  Logger logger() const { return Logger(log_level(), peer_name()); }

  // "key\tdefault\tform\tdescription\n" for every key.
  static const std::string &describe_keys();

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace wccl
