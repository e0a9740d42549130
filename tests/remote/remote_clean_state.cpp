// The remote tests are checked around every TEST_CASE as the process tests are
// (support/clean_state_listener.cpp), once the HTTP client has closed the idle connections it
// keeps for reuse and the transfers of the test have ended.
#include <chrono>
#include <string>

#include "os/net/http_client.hpp"
#include "support/clean_state.hpp"

namespace {

std::string close_connections() {
  if (stoker::detail::net::HttpClient::process().close_idle_connections(std::chrono::seconds(30))) {
    return {};
  }
  return "HTTP transfers still pending 30 s after the test case ended";
}

const bool registered = [] {
  stoker::test::set_settle_hook(&close_connections);
  return true;
}();

}  // namespace
