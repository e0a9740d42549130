#include "datasets/records/crc32c.hpp"

#include <array>
#include <bit>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif
#if defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#endif

namespace stoker::detail {
namespace {

constexpr std::uint32_t kPolynomial = 0x82F63B78U;  // CRC32C, bit-reflected

// kTables[k][b]: the CRC register after byte b followed by k zero bytes (slicing-by-8).
using Tables = std::array<std::array<std::uint32_t, 256>, 8>;
constexpr Tables make_tables() {
  Tables t{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    std::uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1U) != 0 ? kPolynomial : 0U);
    t[0][b] = crc;
  }
  for (std::size_t k = 1; k < 8; ++k) {
    for (std::size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFU];
  }
  return t;
}
constexpr Tables kTables = make_tables();

std::uint64_t load_le64(const unsigned char* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

// The raw register update (no pre- or post-inversion) of both implementations.
std::uint32_t update_table(std::uint32_t crc, const unsigned char* p, std::size_t n) noexcept {
  while (n >= 8) {
    const std::uint64_t v = load_le64(p) ^ crc;
    crc = kTables[7][v & 0xFFU] ^ kTables[6][(v >> 8) & 0xFFU] ^ kTables[5][(v >> 16) & 0xFFU] ^
          kTables[4][(v >> 24) & 0xFFU] ^ kTables[3][(v >> 32) & 0xFFU] ^
          kTables[2][(v >> 40) & 0xFFU] ^ kTables[1][(v >> 48) & 0xFFU] ^ kTables[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = (crc >> 8) ^ kTables[0][(crc ^ *p++) & 0xFFU];
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t update_hardware(std::uint32_t crc,
                                                                const unsigned char* p,
                                                                std::size_t n) noexcept {
  std::uint64_t c = crc;
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, sizeof(v));
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<std::uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
bool have_hardware() noexcept { return __builtin_cpu_supports("sse4.2") != 0; }
constexpr std::string_view kHardwareName = "sse4.2";
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
std::uint32_t update_hardware(std::uint32_t crc, const unsigned char* p, std::size_t n) noexcept {
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, sizeof(v));
    crc = __crc32cd(crc, v);
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = __crc32cb(crc, *p++);
  return crc;
}
bool have_hardware() noexcept { return true; }  // the build targets the CRC extension
constexpr std::string_view kHardwareName = "armv8-crc";
#else
std::uint32_t update_hardware(std::uint32_t crc, const unsigned char* p, std::size_t n) noexcept {
  return update_table(crc, p, n);
}
bool have_hardware() noexcept { return false; }
constexpr std::string_view kHardwareName = "table";
#endif

using UpdateFn = std::uint32_t (*)(std::uint32_t, const unsigned char*, std::size_t) noexcept;

// Decided once, on first use (a function-local static: thread-safe, and fork() inherits it).
UpdateFn chosen_update() noexcept {
  static const UpdateFn update = have_hardware() ? &update_hardware : &update_table;
  return update;
}

std::uint32_t run(UpdateFn update, std::span<const std::byte> bytes, std::uint32_t crc) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  return ~update(~crc, p, bytes.size());
}

}  // namespace

std::uint32_t crc32c(std::span<const std::byte> bytes, std::uint32_t crc) noexcept {
  return run(chosen_update(), bytes, crc);
}

std::uint32_t crc32c_table(std::span<const std::byte> bytes, std::uint32_t crc) noexcept {
  return run(&update_table, bytes, crc);
}

std::uint32_t crc32c_hardware(std::span<const std::byte> bytes, std::uint32_t crc) noexcept {
  return run(have_hardware() ? &update_hardware : &update_table, bytes, crc);
}

std::string_view crc32c_implementation() noexcept {
  return chosen_update() == &update_table ? std::string_view("table") : kHardwareName;
}

}  // namespace stoker::detail
