// test::message_of<E>(f): the what() of the E that f() throws, for tests that assert an error's
// text; the test fails when f() throws nothing or another type.
#pragma once

#include <exception>
#include <string>

#include <catch2/catch.hpp>

namespace stoker::test {

template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("threw another exception type: " << e.what());
  } catch (...) {
    FAIL("threw something that is not a std::exception");
  }
  FAIL("threw nothing");
  return {};
}

}  // namespace stoker::test
