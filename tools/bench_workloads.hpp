// The fixed synthetic workloads of stoker-bench, shared with the examples and tests that want
// the same data. Each is an ordinary map-style dataset written against the public API.
#pragma once

#include <time.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "stoker/stoker.hpp"

namespace stoker::bench {

// tiny: float32[64] with x[k] = (i + k) * 0.5, label i % 10.
struct TinyDataset {
  std::size_t n = 204800;
  std::size_t size() const { return n; }
  Sample get(std::size_t i) const {
    Tensor x = Tensor::empty(DType::kFloat32, {64});
    float* p = x.data<float>();
    for (std::size_t k = 0; k < 64; ++k) p[k] = static_cast<float>(i + k) * 0.5f;
    Sample s;
    s.set("data", std::move(x));
    s.set("label", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i % 10)));
    return s;
  }
  static double last_value(std::size_t i) { return static_cast<double>(i + 63) * 0.5; }
};

// image: uint8[3][224][224] filled with i % 251, label i % 10.
struct ImageDataset {
  std::size_t n = 6400;
  std::size_t size() const { return n; }
  Sample get(std::size_t i) const {
    Tensor x = Tensor::empty(DType::kUInt8, {3, 224, 224});
    std::memset(x.raw_data(), static_cast<int>(i % 251), x.nbytes());
    Sample s;
    s.set("data", std::move(x));
    s.set("label", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i % 10)));
    return s;
  }
  static double last_value(std::size_t i) { return static_cast<double>(i % 251); }
};

// cpu: spins 200 us on CLOCK_MONOTONIC, then float32[1024] filled with i, label i % 10.
struct CpuDataset {
  std::size_t n = 6400;
  long spin_ns = 200000;
  std::size_t size() const { return n; }
  Sample get(std::size_t i) const {
    timespec start;
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
      clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < spin_ns);
    Tensor x = Tensor::empty(DType::kFloat32, {1024});
    float* p = x.data<float>();
    for (std::size_t k = 0; k < 1024; ++k) p[k] = static_cast<float>(i);
    Sample s;
    s.set("data", std::move(x));
    s.set("label", Tensor::scalar<std::int64_t>(static_cast<std::int64_t>(i % 10)));
    return s;
  }
  static double last_value(std::size_t i) { return static_cast<double>(i); }
};

}  // namespace stoker::bench
