// TarBuilder: tar archives byte by byte, for the parser's tests: ustar headers with a right
// (or deliberately wrong) checksum, pax and GNU long-name headers, and damage on request. It is
// written from the POSIX layout independently of stoker's WebDatasetWriter, so the two check each
// other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace stoker::test {

class TarBuilder {
 public:
  // A header block for `name` (at most 100 bytes; `prefix` is ustar's prefix field).
  TarBuilder& header(std::string_view name, std::uint64_t size, char type = '0',
                     std::string_view prefix = "", bool gnu_magic = false) {
    std::vector<std::byte> b(512, std::byte{0});
    std::memcpy(b.data(), name.data(), name.size() < 100 ? name.size() : 100);
    octal(b, 100, 8, 0644);
    octal(b, 108, 8, 0);
    octal(b, 116, 8, 0);
    octal(b, 124, 12, size);
    octal(b, 136, 12, 1700000000);
    b[156] = static_cast<std::byte>(type);
    if (gnu_magic) {
      std::memcpy(b.data() + 257, "ustar  ", 8);
    } else {
      std::memcpy(b.data() + 257, "ustar", 6);
      std::memcpy(b.data() + 263, "00", 2);
      std::memcpy(b.data() + 345, prefix.data(), prefix.size());
    }
    std::memset(b.data() + 148, ' ', 8);
    unsigned sum = 0;
    for (const std::byte c : b) sum += std::to_integer<unsigned>(c);
    octal(b, 148, 7, sum);
    bytes.insert(bytes.end(), b.begin(), b.end());
    return *this;
  }
  // Data padded to a block.
  TarBuilder& data(std::string_view d) {
    for (const char c : d) bytes.push_back(static_cast<std::byte>(c));
    while (bytes.size() % 512 != 0) bytes.push_back(std::byte{0});
    return *this;
  }
  TarBuilder& file(std::string_view name, std::string_view d) {
    return header(name, d.size()).data(d);
  }
  // A pax 'x' header setting the next member's path (and size when given).
  TarBuilder& pax(std::string_view path, std::string_view size = "") {
    std::string payload = record("path", path);
    if (!size.empty()) payload += record("size", size);
    return header("././@PaxHeader", payload.size(), 'x').data(payload);
  }
  // A GNU long-name 'L' member naming the next member.
  TarBuilder& long_name(std::string_view name) {
    std::string payload(name);
    payload.push_back('\0');
    return header("././@LongLink", payload.size(), 'L', "", true).data(payload);
  }
  TarBuilder& end() {
    bytes.insert(bytes.end(), 1024, std::byte{0});
    return *this;
  }
  // Breaks the checksum of the header block at `offset` (adds 1 to a name byte).
  TarBuilder& corrupt(std::size_t offset) {
    bytes[offset + 5] = static_cast<std::byte>(std::to_integer<int>(bytes[offset + 5]) + 1);
    return *this;
  }
  // Breaks the checksum of the header block at `offset` in its mode field, leaving the name.
  TarBuilder& corrupt_mode(std::size_t offset) {
    bytes[offset + 101] = static_cast<std::byte>('7');
    return *this;
  }
  std::size_t size() const { return bytes.size(); }

  std::vector<std::byte> bytes;

 private:
  static void octal(std::vector<std::byte>& b, std::size_t at, std::size_t len, std::uint64_t v) {
    for (std::size_t i = len - 1; i-- > 0;) {
      b[at + i] = static_cast<std::byte>('0' + (v & 7));
      v >>= 3;
    }
  }
  static std::string record(std::string_view key, std::string_view value) {
    const std::size_t body = key.size() + value.size() + 3;
    std::size_t n = body + 1;
    while (std::to_string(n).size() + body != n) ++n;
    return std::to_string(n) + " " + std::string(key) + "=" + std::string(value) + "\n";
  }
};

}  // namespace stoker::test
