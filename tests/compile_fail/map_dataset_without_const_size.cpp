// A map-style dataset whose size() is not const: DataLoader must say what a map-style dataset
// needs, in one diagnostic (no cascade about next() or the loader's internals).
#include <stoker/stoker.hpp>

struct AlmostMapStyle {
  std::size_t size() { return 1; }  // the mistake: not const
  stoker::Sample get(std::size_t) { return {}; }
};

int main() { stoker::DataLoader loader(AlmostMapStyle{}); }
