#include "datasets/shards/tar_index.hpp"

#include <algorithm>
#include <limits>
#include <utility>

#include "datasets/shards/index_cache.hpp"

namespace stoker::detail {
namespace {
constexpr std::size_t kRecordBytes = 8 + 4 + 4 + 4;
constexpr std::size_t kMemberBytes = 8 + 8 + 4;
constexpr std::size_t kMaxFieldName = kTarMaxPath;
}  // namespace

std::uint32_t TarIndexBuilder::intern(const std::string& field) {
  for (std::size_t i = 0; i < index_.fields.size(); ++i) {
    if (index_.fields[i] == field) return static_cast<std::uint32_t>(i);
  }
  index_.fields.push_back(field);
  return static_cast<std::uint32_t>(index_.fields.size() - 1);
}

void TarIndexBuilder::add(const TarSample& sample) {
  TarIndex::Record record;
  record.offset = sample.offset;
  if (sample.damage || sample.members.empty()) {
    index_.damages.push_back(sample.damage ? *sample.damage : TarDamage{});
    record.damage = static_cast<std::uint32_t>(index_.damages.size());
  } else {
    record.first_member = static_cast<std::uint32_t>(index_.members.size());
    record.members = static_cast<std::uint32_t>(sample.members.size());
    for (const TarSample::Member& m : sample.members) {
      index_.members.push_back(TarIndex::Member{m.data_offset, m.size, intern(m.field)});
    }
  }
  index_.records.push_back(record);
}

bool TarIndex::fits(bool lowercase) const noexcept {
  return lowercase == lowercase_fields ||
         std::none_of(fields.begin(), fields.end(),
                      [](const std::string& f) { return has_uppercase_ascii(f); });
}

TarIndex build_tar_index(StreamSource& in, bool lowercase_fields, std::uint64_t* bytes_read) {
  TarSampleReader reader(in, 0, nullptr, nullptr, lowercase_fields);
  TarIndexBuilder builder;
  TarSample sample;
  while (reader.next(sample, false)) builder.add(sample);
  if (bytes_read != nullptr) *bytes_read = reader.position();
  TarIndex index = builder.take();
  index.lowercase_fields = lowercase_fields;
  return index;
}

std::vector<std::byte> serialize_tar_index(const TarIndex& index) {
  IndexWriter w;
  w.u8(index.lowercase_fields ? 1 : 0);
  w.u32(static_cast<std::uint32_t>(index.fields.size()));
  for (const std::string& f : index.fields) w.string(f);
  w.u64(index.records.size());
  for (const TarIndex::Record& r : index.records) {
    w.u64(r.offset);
    w.u32(r.first_member);
    w.u32(r.members);
    w.u32(r.damage);
  }
  w.u64(index.members.size());
  for (const TarIndex::Member& m : index.members) {
    w.u64(m.data_offset);
    w.u64(m.size);
    w.u32(m.field);
  }
  w.u32(static_cast<std::uint32_t>(index.damages.size()));
  for (const TarDamage& d : index.damages) {
    w.u8(static_cast<std::uint8_t>(d.problem));
    w.u64(d.offset);
    w.u64(d.resume);
    w.string(d.detail);
    w.u8(d.in_member ? 1 : 0);
  }
  return w.take();
}

std::optional<TarIndex> parse_tar_index(std::span<const std::byte> payload,
                                        std::uint64_t shard_size) {
  IndexReader r(payload);
  TarIndex index;
  std::uint8_t lowercase = 0;
  std::uint32_t nfields = 0;
  if (!r.u8(lowercase) || lowercase > 1) return std::nullopt;
  index.lowercase_fields = lowercase != 0;
  if (!r.u32(nfields) || nfields > r.remaining() / 4) return std::nullopt;
  index.fields.resize(nfields);
  for (std::string& f : index.fields) {
    if (!r.string(f, kMaxFieldName)) return std::nullopt;
  }
  std::uint64_t nrecords = 0;
  if (!r.u64(nrecords) || nrecords > r.remaining() / kRecordBytes) return std::nullopt;
  index.records.resize(static_cast<std::size_t>(nrecords));
  for (TarIndex::Record& rec : index.records) {
    if (!r.u64(rec.offset) || !r.u32(rec.first_member) || !r.u32(rec.members) ||
        !r.u32(rec.damage)) {
      return std::nullopt;
    }
  }
  std::uint64_t nmembers = 0;
  if (!r.u64(nmembers) || nmembers > r.remaining() / kMemberBytes ||
      nmembers > std::numeric_limits<std::uint32_t>::max()) {
    return std::nullopt;
  }
  index.members.resize(static_cast<std::size_t>(nmembers));
  for (TarIndex::Member& m : index.members) {
    if (!r.u64(m.data_offset) || !r.u64(m.size) || !r.u32(m.field)) return std::nullopt;
    if (m.field >= nfields || m.data_offset > shard_size || m.size > shard_size - m.data_offset) {
      return std::nullopt;
    }
  }
  std::uint32_t ndamages = 0;
  if (!r.u32(ndamages) || ndamages > r.remaining() / 22) return std::nullopt;
  index.damages.resize(ndamages);
  for (TarDamage& d : index.damages) {
    std::uint8_t problem = 0;
    std::uint8_t in_member = 0;
    if (!r.u8(problem) || !r.u64(d.offset) || !r.u64(d.resume) ||
        !r.string(d.detail, kMaxFieldName) || !r.u8(in_member)) {
      return std::nullopt;
    }
    if (problem > static_cast<std::uint8_t>(TarProblem::kDuplicateField)) return std::nullopt;
    d.problem = static_cast<TarProblem>(problem);
    d.in_member = in_member != 0;
  }
  if (r.remaining() != 0) return std::nullopt;
  for (const TarIndex::Record& rec : index.records) {
    if (rec.offset > shard_size || rec.damage > ndamages) return std::nullopt;
    if (rec.damage == 0) {
      if (rec.members == 0 || rec.first_member > nmembers ||
          rec.members > nmembers - rec.first_member) {
        return std::nullopt;
      }
      // One read takes the record's span: its members must come in file order.
      for (std::uint32_t i = 1; i < rec.members; ++i) {
        if (index.members[rec.first_member + i].data_offset <
            index.span_end(TarIndex::Record{0, rec.first_member, i, 0})) {
          return std::nullopt;
        }
      }
    }
  }
  return index;
}

}  // namespace stoker::detail
