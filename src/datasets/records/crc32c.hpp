// CRC32C (Castagnoli, the checksum of TFRecord framing) and TFRecord's masked form of it. The
// implementation is picked once per process at run time: the SSE4.2 `crc32` instruction where
// the CPU has it (x86-64), the ARMv8 CRC32 instructions where the build targets them, otherwise
// a portable slicing-by-8 table. Pure functions; either process; never throw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace stoker::detail {

// The CRC32C of `bytes`, continuing from `crc` (the value returned for the bytes before them;
// 0 to start). crc32c("123456789") == 0xE3069283.
std::uint32_t crc32c(std::span<const std::byte> bytes, std::uint32_t crc = 0) noexcept;

// The same through one implementation, for tests: the table is always available; the hardware
// one falls back to the table where the CPU lacks the instruction.
std::uint32_t crc32c_table(std::span<const std::byte> bytes, std::uint32_t crc = 0) noexcept;
std::uint32_t crc32c_hardware(std::span<const std::byte> bytes, std::uint32_t crc = 0) noexcept;

// Which implementation crc32c() uses in this process: "sse4.2", "armv8-crc" or "table".
std::string_view crc32c_implementation() noexcept;

// TFRecord stores checksums rotated and offset, so a CRC of data that holds CRCs stays
// meaningful: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
constexpr std::uint32_t mask_crc32c(std::uint32_t crc) noexcept {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8U;
}

}  // namespace stoker::detail
