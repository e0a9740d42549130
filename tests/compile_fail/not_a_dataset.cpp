// Neither kind of dataset: DataLoader names both in one diagnostic.
#include <stoker/stoker.hpp>

struct NotADataset {
  int value = 0;
};

int main() { stoker::DataLoader loader(NotADataset{}); }
