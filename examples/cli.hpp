// The examples' command lines, kept out of the examples themselves: each declares its flags,
// then calls done(), which prints the usage for --help (exit 0) and refuses anything it did not
// declare, naming it (exit 2). Flags take their value as "--name value" or "--name=value".
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace example {

class Cli {
 public:
  // `usage`: the lines --help prints, starting with "usage: <program> ...".
  Cli(int argc, char** argv, std::string usage) : usage_(std::move(usage)) {
    const std::string_view path = argc > 0 ? argv[0] : "example";
    program_ = std::string(path.substr(path.find_last_of('/') + 1));
    for (int i = 1; i < argc; ++i) args_.emplace_back(argv[i]);
    used_.assign(args_.size(), false);
  }

  // True when `name` is given.
  bool flag(std::string_view name) {
    bool found = false;
    for (std::size_t i = 0; i < args_.size(); ++i) {
      if (!used_[i] && args_[i] == name) used_[i] = found = true;
    }
    return found;
  }

  // The value of `name`, or `fallback` when it is not given.
  std::string text(std::string_view name, std::string fallback) {
    for (std::size_t i = 0; i < args_.size(); ++i) {
      if (used_[i]) continue;
      const std::string& arg = args_[i];
      if (arg == name) {
        used_[i] = true;
        if (i + 1 >= args_.size()) fail(std::string(name) + " needs a value");
        used_[i + 1] = true;
        return args_[i + 1];
      }
      if (arg.size() > name.size() && arg.compare(0, name.size(), name) == 0 &&
          arg[name.size()] == '=') {
        used_[i] = true;
        return arg.substr(name.size() + 1);
      }
    }
    return fallback;
  }

  // A whole number in [low, high], or `fallback`.
  long number(std::string_view name, long fallback, long low, long high) {
    const std::string value = text(name, "");
    if (value.empty()) return fallback;
    char* end = nullptr;
    const long n = std::strtol(value.c_str(), &end, 10);
    if (*end != '\0' || n < low || n > high) {
      fail(std::string(name) + " must be a whole number from " + std::to_string(low) + " to " +
           std::to_string(high) + ", not '" + value + "'");
    }
    return n;
  }

  // The first argument that is not a flag, or `fallback` (for a program that takes a path).
  std::string positional(std::string fallback) {
    for (std::size_t i = 0; i < args_.size(); ++i) {
      if (!used_[i] && !args_[i].starts_with("-")) {
        used_[i] = true;
        return args_[i];
      }
    }
    return fallback;
  }

  // After the declarations: --help prints the usage and exits 0; an argument nothing
  // declared is an error, and exits 2.
  void done() {
    for (std::size_t i = 0; i < args_.size(); ++i) {
      if (!used_[i] && (args_[i] == "--help" || args_[i] == "-h")) {
        std::printf("%s\n", usage_.c_str());
        std::exit(0);
      }
    }
    for (std::size_t i = 0; i < args_.size(); ++i) {
      if (!used_[i]) fail("unknown argument '" + args_[i] + "'");
    }
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const {
    std::fprintf(stderr, "%s: %s\n%s\n", program_.c_str(), problem.c_str(), usage_.c_str());
    std::exit(2);
  }

  std::string program_;
  std::string usage_;
  std::vector<std::string> args_;
  std::vector<bool> used_;
};

}  // namespace example
