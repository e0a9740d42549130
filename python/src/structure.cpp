// The structure text of structure.hpp: writing it token by token, parsing it back (checking
// every length against what is left), and naming its leaves.
#include "structure.hpp"

#include <charconv>
#include <set>
#include <stdexcept>
#include <string>

namespace stoker::python {

void StructureWriter::start(Mode mode) {
  text_.clear();
  text_ += '1';
  text_ += static_cast<char>(mode);
}

void StructureWriter::leaf(Leaf kind) { text_ += static_cast<char>(kind); }

void StructureWriter::named_leaf(Leaf kind, std::string_view field) {
  text_ += static_cast<char>(kind);
  text_ += '=';
  string(field);
}

void StructureWriter::container(char kind, std::string_view cls, std::size_t count) {
  text_ += kind;
  if (cls.empty()) {
    text_ += '.';
  } else {
    text_ += 'c';
    string(cls);
  }
  text_ += std::to_string(count);
  text_ += ':';
}

void StructureWriter::tuple(std::size_t count) {
  text_ += 'U';
  text_ += std::to_string(count);
  text_ += ':';
}

void StructureWriter::key(std::string_view utf8) {
  text_ += 's';
  string(utf8);
}

void StructureWriter::key(std::int64_t value) {
  text_ += 'i';
  text_ += std::to_string(value);
  text_ += ';';
}

void StructureWriter::string(std::string_view s) {
  text_ += std::to_string(s.size());
  text_ += ':';
  text_ += s;
}

namespace {

// Deep enough for any sample a person writes; a bound so that malformed text cannot recurse
// without end.
constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  void parse(Structure& out) {
    if (take() != '1') fail("version");
    const char mode = take();
    if (mode != 'B' && mode != 'S') fail("mode");
    out.mode = static_cast<Mode>(mode);
    node(out.root, 0);
    if (pos_ != text_.size()) fail("trailing text");
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw std::invalid_argument("stoker: malformed sample structure (" + std::string(what) +
                                " at offset " + std::to_string(pos_) + " of " +
                                std::to_string(text_.size()) + ")");
  }
  char take() {
    if (pos_ >= text_.size()) fail("unexpected end");
    return text_[pos_++];
  }
  std::uint64_t number(char end) {
    std::uint64_t value = 0;
    const char* first = text_.data() + pos_;
    const auto [ptr, ec] = std::from_chars(first, text_.data() + text_.size(), value);
    if (ec != std::errc() || ptr == first) fail("number");
    pos_ += static_cast<std::size_t>(ptr - first);
    if (take() != end) fail("number's end");
    return value;
  }
  std::int64_t signed_number(char end) {
    std::int64_t value = 0;
    const char* first = text_.data() + pos_;
    const auto [ptr, ec] = std::from_chars(first, text_.data() + text_.size(), value);
    if (ec != std::errc() || ptr == first) fail("integer key");
    pos_ += static_cast<std::size_t>(ptr - first);
    if (take() != end) fail("integer key's end");
    return value;
  }
  std::string string() {
    const std::uint64_t n = number(':');
    if (n > text_.size() - pos_) fail("string length");
    std::string s(text_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  std::string cls() {
    const char c = take();
    if (c == '.') return {};
    if (c != 'c') fail("class");
    std::string s = string();
    if (s.empty()) fail("empty class");
    return s;
  }
  std::size_t count() {
    const std::uint64_t n = number(':');
    // Every child takes at least one byte of text.
    if (n > text_.size() - pos_) fail("child count");
    return static_cast<std::size_t>(n);
  }

  void node(Node& out, int depth) {
    if (depth > kMaxDepth) fail("nesting depth");
    out.kind = take();
    switch (out.kind) {
      case 'T':
      case 'I':
      case 'F':
      case 'B':
      case 'S':
      case 'Y':
        if (pos_ < text_.size() && text_[pos_] == '=') {
          ++pos_;
          out.field = string();
          if (out.field.empty()) fail("empty field name");
        }
        return;
      case 'D': {
        out.cls = cls();
        const std::size_t n = count();
        out.children.resize(n);
        out.keys.reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
          const char k = take();
          if (k == 's') {
            out.keys.emplace_back(string());
          } else if (k == 'i') {
            out.keys.emplace_back(signed_number(';'));
          } else {
            fail("key");
          }
          node(out.children[i], depth + 1);
        }
        return;
      }
      case 'N':
      case 'A':
        out.cls = cls();
        [[fallthrough]];
      case 'U': {
        if (out.kind == 'N' && out.cls.empty()) fail("namedtuple without a class");
        const std::size_t n = count();
        out.children.resize(n);
        for (std::size_t i = 0; i < n; ++i) node(out.children[i], depth + 1);
        return;
      }
      default:
        fail("node kind");
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

void collect(Node& node, std::vector<Node*>& leaves, std::vector<std::string>& paths,
             const std::string& path) {
  if (node.is_leaf()) {
    leaves.push_back(&node);
    paths.push_back(path);
    return;
  }
  for (std::size_t i = 0; i < node.children.size(); ++i) {
    std::string segment;
    if (node.kind == 'D') {
      const auto& key = node.keys[i];
      segment = std::holds_alternative<std::string>(key)
                    ? std::get<std::string>(key)
                    : std::to_string(std::get<std::int64_t>(key));
    } else {
      segment = std::to_string(i);
    }
    collect(node.children[i], leaves, paths, path.empty() ? segment : path + "." + segment);
  }
}

}  // namespace

void name_fields(Structure& structure) {
  std::vector<Node*> leaves;
  std::vector<std::string> paths;
  collect(structure.root, leaves, paths, "");
  std::set<std::string> used;
  // Explicit names first: they are the fields' real names (a native dataset's).
  for (const Node* leaf : leaves) {
    if (!leaf->field.empty()) used.insert(leaf->field);
  }
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    Node& leaf = *leaves[i];
    if (!leaf.field.empty()) continue;
    std::string name = paths[i].empty() ? "value" : paths[i];
    // The ragged collate of a text leaf adds "<name>.offsets" beside it.
    auto taken = [&](const std::string& n) {
      return n[0] == '#' || used.count(n) != 0 ||
             (is_text(leaf.leaf()) && used.count(n + ".offsets") != 0);
    };
    if (taken(name)) {
      const std::string base = name[0] == '#' ? "_" + name : name;
      name = base;
      for (std::size_t k = i; taken(name); ++k) name = base + "#" + std::to_string(k);
    }
    used.insert(name);
    if (is_text(leaf.leaf())) used.insert(name + ".offsets");
    leaf.field = std::move(name);
  }
  structure.leaves.assign(leaves.begin(), leaves.end());
  structure.text_fields.clear();
  for (const Node* leaf : leaves) {
    if (is_text(leaf->leaf())) structure.text_fields.push_back(leaf->field);
  }
}

std::shared_ptr<const Structure> parse_structure(std::string_view text) {
  auto structure = std::make_shared<Structure>();
  Parser(text).parse(*structure);
  name_fields(*structure);
  return structure;
}

}  // namespace stoker::python
