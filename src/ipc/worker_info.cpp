#include "stoker/worker_info.hpp"

#include "ipc/worker_process.hpp"

namespace stoker {
namespace {
WorkerInfo g_info;
bool g_in_worker = false;
}  // namespace

const WorkerInfo* worker_info() noexcept { return g_in_worker ? &g_info : nullptr; }

namespace detail {
void set_worker_info(const WorkerInfo& info) noexcept {
  g_info = info;
  g_in_worker = true;
}
}  // namespace detail

}  // namespace stoker
