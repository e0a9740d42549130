#!/usr/bin/python3
"""Runs one of stoker's programs and checks what it produced, for ctest.

  check_program.py bench <stoker-bench> ARGS...   exits 0, and its JSON line says checksum_ok
  check_program.py log REGEX <program> ARGS...     exits 0, and REGEX matches its stdout or stderr
  check_program.py trace PATH <program> ARGS...    exits 0, and PATH (removed first) is a Chrome
                                                   trace: JSON, a list of events with batch spans
  check_program.py cli <program>                   `--help` exits 0 with "usage: <name>" on
                                                   stdout; an unknown flag exits 2 and stderr
                                                   names it

Prints what it ran and why it failed; exits 1 on a failed check, 2 on bad arguments.
"""
import json
import os
import re
import subprocess
import sys


def fail(why, output=""):
    sys.stdout.write(output)
    print(f"check_program: FAILED: {why}")
    sys.exit(1)


def run(command):
    print("check_program: running " + " ".join(command), flush=True)
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=300)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        fail(f"{command[0]} exited with {done.returncode}", output)
    return done.stdout, output


def check_bench(command):
    stdout, output = run(command)
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        fail("no JSON line in stoker-bench's output", output)
    result = json.loads(lines[-1])
    if result.get("checksum_ok") is not True:
        fail(f"checksum_ok is {result.get('checksum_ok')!r} (checksum {result.get('checksum')})",
             output)
    if not result.get("samples_per_epoch"):
        fail("no samples were loaded", output)
    print(f"check_program: checksum {result['checksum']} OK over "
          f"{result['samples_per_epoch']} samples per epoch")


def check_log(pattern, command):
    _, output = run(command)
    match = re.search(pattern, output)
    if match is None:
        fail(f"no line matches {pattern!r}", output)
    print("check_program: found: " + match.group(0))


def check_trace(path, command):
    if os.path.exists(path):
        os.remove(path)
    _, output = run(command)
    if not os.path.exists(path):
        fail(f"{path} was not written", output)
    with open(path) as f:
        try:
            events = json.load(f)
        except json.JSONDecodeError as e:
            fail(f"{path} is not JSON: {e}", output)
    if not isinstance(events, list):
        fail(f"{path} holds a {type(events).__name__}, not a list of trace events")
    spans = [e for e in events if e.get("ph") == "X" and e.get("cat") == "load"]
    if not spans:
        fail(f"{path} has {len(events)} events but no batch spans")
    print(f"check_program: {path}: {len(events)} events, {len(spans)} batch spans")


def check_cli(program):
    name = os.path.basename(program)
    print(f"check_program: running {program} --help", flush=True)
    done = subprocess.run([program, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=60)
    if done.returncode != 0:
        fail(f"{name} --help exited with {done.returncode}", done.stdout + done.stderr)
    if f"usage: {name}" not in done.stdout:
        fail(f"{name} --help printed no 'usage: {name}' on stdout", done.stdout + done.stderr)
    bogus = "--no-such-flag-xyzzy"
    print(f"check_program: running {program} {bogus}", flush=True)
    done = subprocess.run([program, bogus], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=60)
    if done.returncode != 2:
        fail(f"{name} {bogus} exited with {done.returncode}, not 2", done.stdout + done.stderr)
    if bogus not in done.stderr:
        fail(f"{name} {bogus}: stderr does not name the flag", done.stdout + done.stderr)
    print(f"check_program: {name}: --help prints its usage; {bogus} is refused with exit 2")


def main(argv):
    if len(argv) >= 3 and argv[1] == "bench":
        check_bench(argv[2:])
    elif len(argv) >= 4 and argv[1] == "log":
        check_log(argv[2], argv[3:])
    elif len(argv) >= 4 and argv[1] == "trace":
        check_trace(argv[2], argv[3:])
    elif len(argv) == 3 and argv[1] == "cli":
        check_cli(argv[2])
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv)
