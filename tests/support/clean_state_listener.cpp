// Every process test, whether or not it calls STOKER_REQUIRE_CLEAN itself, must leave the
// process as it found it: this listener snapshots the state when a TEST_CASE starts and
// compares when it ends. A difference names the test and what was left behind, and makes the
// run exit with status 1 once Catch has written its report (listeners hear of the run's end
// before the reporter does, so the exit is left to an atexit handler).
#include <cstdio>
#include <cstdlib>
#include <string>

#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include "support/clean_state.hpp"

namespace {

class CleanStateListener : public Catch::TestEventListenerBase {
 public:
  using Catch::TestEventListenerBase::TestEventListenerBase;

  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    TestEventListenerBase::testCaseStarting(info);
    if (const auto settle = stoker::test::settle_hook()) settle();
    baseline_ = stoker::test::process_state();
  }

  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    std::string diff;
    if (const auto settle = stoker::test::settle_hook()) diff = settle();
    if (diff.empty()) diff = stoker::test::differences(baseline_, stoker::test::process_state());
    if (!diff.empty()) {
      std::fprintf(stderr, "clean-state check failed after TEST_CASE \"%s\": %s\n",
                   stats.testInfo.name.c_str(), diff.c_str());
      dirty_ = true;
    }
    TestEventListenerBase::testCaseEnded(stats);
  }

  void testRunEnded(const Catch::TestRunStats& stats) override {
    TestEventListenerBase::testRunEnded(stats);
    if (dirty_) std::atexit([] { std::_Exit(1); });
  }

 private:
  stoker::test::ProcessState baseline_;
  bool dirty_ = false;
};

}  // namespace

CATCH_REGISTER_LISTENER(CleanStateListener)
