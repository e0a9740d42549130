// The other include order: stoker first, then libtorch's DLPack header (see
// dlpack_layout_check.cpp).
#include "stoker/stoker.hpp"

#include <ATen/DLConvertor.h>

static_assert(sizeof(stoker::dlpack::DLManagedTensor) == sizeof(::DLManagedTensor));

int main() { return 0; }
