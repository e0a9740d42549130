// The structure of a Python sample (dicts, tuples, lists and namedtuples of leaves) as text, so
// that a worker can flatten a sample into a stoker::Sample of named fields and the main process
// can rebuild torch.utils.data.default_collate's structure around the batch's tensors without
// pickling anything. Pure C++: the classes a structure names are resolved in to_python.cpp.
//
// The text travels as the name of one zero-byte field (kStructureField + text) of every
// sample, so a batch describes itself and the engine's collate checks that all of its samples
// share one structure. Grammar (integers in decimal):
//
//   structure := '1' mode node              mode: 'B' rows of a batch, 'S' one value as is
//   node      := leaf | container
//   leaf      := kind ['=' string]          kind: T tensor or array, I int, F float, B bool,
//                                           S str, Y bytes; '=' names its field explicitly
//   container := 'D' class count ':' (key node)*      dict or other mapping
//              | 'N' class count ':' node*            namedtuple
//              | 'U' count ':' node*                  tuple
//              | 'A' class count ':' node*            list or other sequence
//   class     := '.'                        the builtin type (dict, list)
//              | 'c' string                 "module\tqualname" of a subclass or namedtuple
//   key       := 's' string | 'i' integer ';'
//   string    := length ':' bytes
//
// A leaf without an explicit name gets one from its path (field_names()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace stoker::python {

// The field whose name carries a sample's structure: this prefix, then the text.
inline constexpr std::string_view kStructureField = "#structure ";

enum class Mode : char { kBatch = 'B', kSingle = 'S' };

// What a leaf holds; the letters are the grammar's.
enum class Leaf : char {
  kTensor = 'T',  // numpy array or scalar, torch tensor
  kInt = 'I',     // Python int: int64
  kFloat = 'F',   // Python float: float64
  kBool = 'B',    // Python bool
  kStr = 'S',     // str: UTF-8 bytes, a ragged field when batched
  kBytes = 'Y',   // bytes, likewise
};
inline bool is_text(Leaf leaf) noexcept { return leaf == Leaf::kStr || leaf == Leaf::kBytes; }

struct Node {
  char kind = 'T';  // a Leaf letter, or D N U A
  std::string cls;  // D N A: "module\tqualname", empty for the builtin type
  std::vector<std::variant<std::string, std::int64_t>> keys;  // D: one per child
  std::vector<Node> children;
  std::string field;  // a leaf: its field's name
  bool is_leaf() const noexcept { return kind != 'D' && kind != 'N' && kind != 'U' && kind != 'A'; }
  Leaf leaf() const noexcept { return static_cast<Leaf>(kind); }
};

struct Structure {
  Mode mode = Mode::kBatch;
  Node root;
  std::vector<const Node*> leaves;       // in walk order (the order of the sample's fields)
  std::vector<std::string> text_fields;  // the fields of str / bytes leaves
};

// Writes the text of a structure, one call per token, in walk order.
class StructureWriter {
 public:
  void start(Mode mode);
  void leaf(Leaf kind);
  void named_leaf(Leaf kind, std::string_view field);
  void container(char kind, std::string_view cls, std::size_t count);  // D N A (cls may be "")
  void tuple(std::size_t count);
  void key(std::string_view utf8);
  void key(std::int64_t value);
  const std::string& text() const noexcept { return text_; }
  void clear() noexcept { text_.clear(); }

 private:
  void string(std::string_view s);
  std::string text_;
};

// Parses a structure's text and names its leaves. Throws std::invalid_argument naming the
// position of what is malformed.
std::shared_ptr<const Structure> parse_structure(std::string_view text);

// A leaf's field name from its path ("image", "0.label"; "value" for a leaf at the root), made
// unique within the sample and never starting with '#' (which kStructureField starts with);
// parse_structure() applies it to the leaves without an explicit name.
void name_fields(Structure& structure);

}  // namespace stoker::python
