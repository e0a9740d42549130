#!/bin/sh
# Fails, listing them, when TEST_CASE names under DIR hold a ';' or an unbalanced '[' or ']'.
# catch_discover_tests keeps test names in a CMake list: a ';' splits a name, an unbalanced
# bracket stops the splitting; either way tests merge into one ctest entry that runs none.
#   check_test_names.sh DIR
grep -rhoE --include='*.cpp' 'TEST_CASE\("[^"]*"' "$1" | sed 's/^TEST_CASE("//; s/"$//' | awk '
  { line = $0; opened = gsub(/\[/, "[", line); closed = gsub(/\]/, "]", line)
    if (index($0, ";") > 0 || opened != closed) { print "unsafe test name: " $0; bad = 1 } }
  END { exit bad }'
