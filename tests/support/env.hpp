// test::Env: environment variables set or unset for a scope, restored when it ends.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace stoker::test {

class Env {
 public:
  Env() = default;
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;
  Env(Env&& other) noexcept : saved_(std::move(other.saved_)) { other.saved_.clear(); }

  Env& set(const char* name, const std::string& value) {
    save(name);
    ::setenv(name, value.c_str(), 1);
    return *this;
  }
  Env& unset(const char* name) {
    save(name);
    ::unsetenv(name);
    return *this;
  }
  ~Env() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) {
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      } else {
        ::unsetenv(it->first.c_str());
      }
    }
  }

 private:
  void save(const char* name) {
    const char* v = std::getenv(name);
    saved_.emplace_back(name, v != nullptr ? std::optional<std::string>(v) : std::nullopt);
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace stoker::test
