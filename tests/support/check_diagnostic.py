#!/usr/bin/python3
"""Compiles a file that must not compile and checks the compiler's diagnostics: exactly one
error, and it contains the expected text.

  check_diagnostic.py COMPILER INCLUDE_DIR SOURCE EXPECTED
"""
import re
import subprocess
import sys


def main():
    compiler, include, source, expected = sys.argv[1:5]
    run = subprocess.run([compiler, "-std=c++20", "-fsyntax-only", "-I", include, source],
                         capture_output=True, text=True)
    out = run.stdout + run.stderr
    errors = [line for line in out.splitlines() if re.search(r"\berror:", line)]
    if run.returncode == 0:
        sys.exit(f"{source} compiled, but must not")
    if len(errors) != 1:
        sys.exit(f"{source}: {len(errors)} errors, want exactly 1:\n" + "\n".join(errors))
    if expected not in errors[0]:
        sys.exit(f"{source}: the error does not say '{expected}':\n{errors[0]}")
    print(f"{source}: one error, as expected")


if __name__ == "__main__":
    main()
