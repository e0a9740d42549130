"""Checks the shell commands the documentation shows, so a renamed script, a missing program, a
CMake target or option that no longer exists, or a flag a program does not take is caught.
Registered with ctest as docs.commands (tests/CMakeLists.txt); standard library only.

  /usr/bin/python3 tests/docs/check_docs.py [--build DIR] [--timeout S] [--verbose] [FILE.md ...]

Files: README.md and docs/*.md by default. Commands are the lines of fenced blocks tagged sh,
bash, shell or console (in console blocks, and in untagged blocks, only lines starting with
"$ "; the rest is output). A trailing " # comment" is ignored, a line ending in "\\" continues
on the next, and "&&", "||", ";" and "|" separate commands. For each command:

  - the program must exist: a file in the repository (scripts/demo.sh); a program the build
    makes (build/release/tools/stoker-bench: the last part must be an executable target
    defined in tools/CMakeLists.txt); a stoker program cmake --install puts on PATH
    (stoker-bench); a command on PATH or a shell builtin; or a tool from the table of Debian
    packages below, which is reported, not failed, when it is not installed here;
  - every argument that names a repository path (scripts/, bench/, examples/, build/<dir>/...)
    must exist in the same way;
  - every --flag given to a repository script or a stoker program must appear in its source
    (the script, or the target's .cpp files);
  - cmake --preset P and --build --preset P need preset P in CMakePresets.json, --target T a
    target T, and -DSTOKER_X=... an option STOKER_X.

With --build DIR, the commands that run a stoker program are also run for real, exactly as
written except that build/<anything>/ becomes DIR, each within --timeout seconds (default 60),
from the repository root. A program that was not built is reported, not failed. Repository
scripts (which install packages and build) and other tools are never run.

Markers, an HTML comment on a line of its own before a block:
  <!-- docs-check: no-run -->  check the block's commands but do not run them (long ones)
  <!-- docs-check: skip -->    ignore the block (pseudo-commands, placeholders)
"""
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
USAGE = ("usage: tests/docs/check_docs.py [--build DIR] [--timeout S] [--verbose] "
         "[FILE.md ...]")

# Tools the docs may show that are not part of a minimal system, and their Debian package.
DEBIAN_PACKAGE = {
    "mpirun": "openmpi-bin", "mpiexec": "openmpi-bin", "docker": "docker.io",
    "doxygen": "doxygen", "gdb": "gdb", "perf": "linux-perf", "valgrind": "valgrind",
    "clang-format": "clang-format", "nvidia-smi": "nvidia-smi", "srun": "slurm-client",
    "hwloc-ls": "hwloc", "lstopo": "hwloc", "numactl": "numactl", "pkg-config": "pkg-config",
    "ninja": "ninja-build",
}
# Words that start a command without being its program.
WRAPPERS = {"sudo", "env", "time", "nice", "exec", "command", "nohup"}
# cmake --target names that are not targets of the project.
CMAKE_BUILTIN_TARGETS = {"all", "clean", "install", "test", "help"}

FENCE = re.compile(r"^[ \t]*```")
PROMPT = re.compile(r"^[ \t]*\$ ")
COMMENT_OR_BLANK = re.compile(r"^[ \t]*(#|$)")
TRAILING_COMMENT = re.compile(r"[ \t]+#.*$")
MARKER_SKIP = re.compile(r"^[ \t]*<!--[ \t]*docs-check:[ \t]*skip[ \t]*-->")
MARKER_NO_RUN = re.compile(r"^[ \t]*<!--[ \t]*docs-check:[ \t]*no-run[ \t]*-->")
SEPARATORS = re.compile(r"&&|\|\||;|\|")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
REPO_PATH = re.compile(r"^(\./)?(scripts|bench|tools|examples|docs|tests|include|src|cmake|"
                       r"build/[^/]+)/")
BUILD_ARG = re.compile(r"^(\./)?build/[^/]+/(.*)$")


class Checker:
    def __init__(self, build, run_timeout, verbose):
        self.build = build
        self.run_timeout = run_timeout
        self.verbose = verbose
        self.errors = 0
        self.checked = 0
        self.ran = 0
        self.notes = []
        self._cmake_texts = None

    # ---- reporting ----

    def fail(self, where, message):
        print("check_docs: %s: %s" % (where, message), file=sys.stderr)
        self.errors += 1

    def note(self, where, message):
        self.notes.append("%s: %s" % (where, message))

    # ---- the project's CMake files ----

    def cmake_texts(self):
        """(path relative to the root, text) of every CMakeLists.txt, build trees excluded."""
        if self._cmake_texts is None:
            found = []
            for dirpath, dirnames, filenames in os.walk(ROOT):
                rel = os.path.relpath(dirpath, ROOT)
                if rel == ".":
                    dirnames[:] = [d for d in dirnames if not d.startswith("build") and d != ".git"]
                if "CMakeLists.txt" in filenames:
                    path = os.path.normpath(os.path.join(rel, "CMakeLists.txt"))
                    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
                        found.append((path, f.read()))
            self._cmake_texts = sorted(found)
        return self._cmake_texts

    @staticmethod
    def _call(commands, name):
        return re.compile(r"^[ \t]*(%s)\([ \t\n]*%s([ \t\n)]|$)" % (commands, re.escape(name)),
                          re.M)

    def target_dir(self, name):
        """The directory (relative, '' for the top level) of the CMakeLists.txt that defines
        executable target `name`, or None. Targets come from add_executable(NAME ...) and
        stoker_example(NAME ...)."""
        pattern = self._call("add_executable|stoker_example", name)
        for path, text in self.cmake_texts():
            if pattern.search(text):
                d = os.path.dirname(path)
                return "" if d in ("", ".") else d
        return None

    def is_target(self, name):
        pattern = self._call("add_executable|add_library|add_custom_target|stoker_example|"
                             "stoker_test|doxygen_add_docs", name)
        return any(pattern.search(text) for _, text in self.cmake_texts())

    def target_sources(self, name, directory):
        """The .cpp files of executable target `name` defined in `directory`: the sources listed
        in its add_executable() call (which may span lines), or NAME.cpp for stoker_example()."""
        cm = os.path.join(directory, "CMakeLists.txt") if directory else "CMakeLists.txt"
        with open(os.path.join(ROOT, cm), encoding="utf-8", errors="replace") as f:
            text = f.read()
        m = self._call("add_executable|stoker_example", name).search(text)
        if not m:
            return []
        prefix = directory + "/" if directory else ""
        if m.group(1) == "stoker_example":
            return [prefix + name + ".cpp"]
        start = text.index("(", m.start()) + 1
        end = text.find(")", start)
        words = text[start:end if end >= 0 else len(text)].split()
        return [prefix + w for w in words if w.endswith(".cpp")]

    def is_installed_program(self, name):
        """Whether `cmake --install` installs program `name`: it is one of the targets of an
        install(TARGETS ...) call."""
        pattern = re.compile(r"install\(TARGETS\b([^)]*)")
        for _, text in self.cmake_texts():
            for m in pattern.finditer(text):
                if name in m.group(1).split():
                    return True
        return False

    # ---- paths ----

    def check_repo_path(self, where, path):
        """Checks repository path `path` (a program or an argument). For a build path
        (build/<dir>/<sub>/<name>) returns (sub, name) of the target; ("", "") for another
        path that is fine; None after reporting a failure."""
        p = path[2:] if path.startswith("./") else path
        parts = p.split("/", 2)
        if p.startswith("build/") and len(parts) == 3:
            rest = parts[2]
            name = rest.rsplit("/", 1)[-1]
            sub = rest.rsplit("/", 1)[0] if "/" in rest else ""
            directory = self.target_dir(name)
            if directory is None:
                self.fail(where, "'%s': no executable target '%s' in any CMakeLists.txt" %
                          (p, name))
                return None
            if directory != sub:
                self.fail(where, "'%s': target '%s' is defined in %s/CMakeLists.txt, so it is "
                          "built as build/<dir>/%s%s" %
                          (p, name, directory or "the top-level directory",
                           directory + "/" if directory else "", name))
                return None
            return (sub, name)
        if p.startswith("build/"):
            return ("", "")  # a file a build writes; only programs are checked
        if not os.path.exists(os.path.join(ROOT, p)):
            self.fail(where, "'%s' does not exist in the repository" % p)
            return None
        return ("", "")

    @staticmethod
    def looks_like_repo_path(word):
        return REPO_PATH.match(word) is not None and "*" not in word

    @staticmethod
    def has_placeholder(text):
        return (re.search(r"<.*>", text) is not None or re.search(r"\{.*\}", text) is not None or
                "\u2026" in text or "..." in text)

    # ---- flags and cmake ----

    def check_flags(self, where, program, sources, words):
        """Each --flag in `words` must appear in one of `sources`."""
        texts = []
        for s in sources:
            try:
                with open(os.path.join(ROOT, s), encoding="utf-8", errors="replace") as f:
                    texts.append(f.read())
            except OSError:
                pass
        for w in words:
            if not (w.startswith("--") and len(w) > 2):
                continue
            flag = w.split("=", 1)[0]
            if not any(flag in t for t in texts):
                self.fail(where, "%s does not take %s (not found in %s)" %
                          (program, flag, " ".join(sources)))

    def cmake_presets(self, kind):
        out = subprocess.run(["cmake", "--list-presets=" + kind], cwd=ROOT,
                             capture_output=True, text=True).stdout
        return out

    def check_cmake(self, where, words):
        for i, w in enumerate(words):
            following = words[i + 1] if i + 1 < len(words) else ""
            if w == "--preset":
                kind = "build" if "--build" in words else "configure"
                if '"%s"' % following not in self.cmake_presets(kind):
                    self.fail(where, "cmake: no %s preset named '%s' in CMakePresets.json" %
                              (kind, following))
            elif w in ("--target", "-t"):
                if following not in CMAKE_BUILTIN_TARGETS and not self.is_target(following):
                    self.fail(where, "cmake: no target named '%s'" % following)
            elif w.startswith("-DSTOKER_"):
                var = re.split(r"[:=]", w[2:], maxsplit=1)[0]
                pattern = re.compile(r"(option\(|set\()%s\s" % re.escape(var))
                if not any(pattern.search(text) for _, text in self.cmake_texts()):
                    self.fail(where, "cmake: there is no option %s" % var)

    # ---- programs ----

    @staticmethod
    def shell_knows(program):
        """A command on PATH, or a bash builtin or keyword (bash's `type -t`)."""
        return subprocess.run(["bash", "-c", 'type -t "$1" >/dev/null 2>&1', "_", program],
                              cwd=ROOT).returncode == 0

    def run_program(self, where, exe, args):
        """Runs a stoker program as the docs write it, build/<x>/ replaced by --build."""
        real = []
        for a in args:
            m = BUILD_ARG.match(a)
            real.append(os.path.join(self.build, m.group(2)) if m else a)
        shown = "%s %s" % (os.path.basename(exe), " ".join(args))
        self.ran += 1
        try:
            done = subprocess.run([exe] + real, cwd=ROOT, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=self.run_timeout)
        except subprocess.TimeoutExpired:
            self.fail(where, "'%s' did not finish within %s s (mark a long block "
                      "<!-- docs-check: no-run -->)" % (shown, self.run_timeout))
            return
        if done.returncode != 0:
            self.fail(where, "'%s' exited with %d; its last lines:" % (shown, done.returncode))
            tail = done.stdout.decode(errors="replace").splitlines()[-5:]
            for line in tail:
                print("    " + line, file=sys.stderr)
        elif self.verbose:
            print("  ran: %s (ok)" % shown)

    def check_command(self, where, mode, text):
        """One simple command (no separators)."""
        words = text.split()
        # Leading VAR=value assignments and wrappers are not the program.
        while words:
            if ASSIGNMENT.match(words[0]) or words[0] in WRAPPERS:
                words = words[1:]
            elif words[0] == "timeout" and len(words) > 2:
                words = words[2:]
            else:
                break
        if not words:
            return
        self.checked += 1
        program, args = words[0], words[1:]
        placeholder = self.has_placeholder(text)
        for w in args:
            if self.looks_like_repo_path(w) and not self.has_placeholder(w):
                self.check_repo_path(where, w)

        exe = ""
        if "/" in program:
            if program.startswith("/"):
                self.note(where, "absolute path %s not checked" % program)
                return
            found = self.check_repo_path(where, program)
            if found is None:
                return
            sub, name = found
            if name:
                sources = self.target_sources(name, sub)
                if sources:
                    self.check_flags(where, name, sources, args)
                if self.build:
                    exe = os.path.join(self.build, sub, name) if sub else os.path.join(
                        self.build, name)
            else:
                script = program[2:] if program.startswith("./") else program
                full = os.path.join(ROOT, script)
                if not os.access(full, os.X_OK):
                    self.fail(where, "'%s' is not executable (chmod +x, or the docs should say "
                              "bash %s)" % (script, script))
                if os.path.isfile(full):
                    sources = [script]
                    with open(full, encoding="utf-8", errors="replace") as f:
                        body = f.read()
                    for target in re.findall(r"--target ([A-Za-z0-9_.-]+)", body):
                        d = self.target_dir(target)
                        if d is not None:
                            sources += self.target_sources(target, d)
                    self.check_flags(where, script, sources, args)
        else:
            sub = self.target_dir(program)
            if sub is not None:
                # A stoker program by its bare name: on PATH once installed.
                if not self.is_installed_program(program):
                    at = sub + "/" if sub else ""
                    self.fail(where, "'%s' is built (%sCMakeLists.txt) but not installed, so not "
                              "on PATH: write build/release/%s%s" % (program, at, at, program))
                sources = self.target_sources(program, sub)
                if sources:
                    self.check_flags(where, program, sources, args)
                if self.build:
                    exe = os.path.join(self.build, sub, program) if sub else os.path.join(
                        self.build, program)
            elif program == "cmake":
                self.check_cmake(where, args)
                return
            elif self.shell_knows(program):
                return
            elif program in DEBIAN_PACKAGE:
                self.note(where, "%s is not installed here (Debian: %s); not checked further" %
                          (program, DEBIAN_PACKAGE[program]))
                return
            else:
                self.fail(where, "'%s' is not a repository file, a stoker program, or a command "
                          "on PATH" % program)
                return

        if not exe or mode == "no-run" or placeholder:
            return
        if not os.access(os.path.join(ROOT, exe), os.X_OK):
            self.note(where, "%s is not built; not run" % exe)
            return
        self.run_program(where, exe, args)


def extract(path):
    """(line number, mode, command) for every command line of a Markdown file."""
    commands = []
    inside = False
    kind = ""
    mode = "run"
    marker = ""
    cmd = ""
    cmd_line = 0
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        if FENCE.match(line):
            if not inside:
                lang = re.sub(r"^[ \t]*```[ \t]*", "", line)
                lang = re.sub(r"[ \t{].*$", "", lang)
                inside = True
                kind = ""
                if lang in ("sh", "bash", "shell"):
                    kind = "script"
                elif lang in ("console", "shell-session", ""):
                    kind = "prompt"
                if marker == "skip":
                    kind = ""
                mode = "no-run" if marker == "no-run" else "run"
                marker = ""
            else:
                if cmd:
                    commands.append((cmd_line, mode, cmd))
                cmd = ""
                inside = False
            continue
        if inside:
            if not kind:
                continue
            if not cmd:
                if kind == "prompt" or PROMPT.match(line):
                    if not PROMPT.match(line):
                        continue
                    line = PROMPT.sub("", line, count=1)
                if COMMENT_OR_BLANK.match(line):
                    continue
                cmd_line = number
            line = TRAILING_COMMENT.sub("", line, count=1)
            if line.endswith("\\"):
                cmd += line[:-1] + " "
                continue
            cmd += line
            commands.append((cmd_line, mode, cmd))
            cmd = ""
            continue
        if MARKER_SKIP.match(line):
            marker = "skip"
            continue
        if MARKER_NO_RUN.match(line):
            marker = "no-run"
            continue
        if re.search(r"[^ \t]", line):
            marker = ""
    return commands


def main(argv):
    build = ""
    run_timeout = 60.0
    verbose = False
    files = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--build", "--timeout"):
            if i + 1 >= len(argv):
                print(USAGE, file=sys.stderr)
                return 2
            if a == "--build":
                build = argv[i + 1]
                if build.endswith("/"):
                    build = build[:-1]
            else:
                try:
                    run_timeout = float(argv[i + 1])
                except ValueError:
                    print(USAGE, file=sys.stderr)
                    return 2
            i += 2
            continue
        if a in ("--verbose", "-v"):
            verbose = True
        elif a in ("-h", "--help"):
            print(__doc__.strip())
            return 0
        elif a.startswith("-"):
            print(USAGE, file=sys.stderr)
            return 2
        else:
            files.append(a)
        i += 1
    if not files:
        files = ["README.md"] + sorted(os.path.relpath(p, ROOT)
                                       for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    # Relative paths (--build, FILE.md) are from the repository root, where programs run.
    if build and not os.path.isdir(os.path.join(ROOT, build)):
        print("check_docs: build directory %s does not exist" % build, file=sys.stderr)
        return 2

    checker = Checker(build, run_timeout, verbose)
    for f in files:
        if not os.path.isfile(os.path.join(ROOT, f)):
            checker.fail(f, "no such file")
            continue
        for line, mode, cmd in extract(f):
            where = "%s:%d" % (f, line)
            if verbose:
                print("%s: %s" % (where, cmd))
            # Separators; naive about quotes, which the docs' commands do not need.
            for part in SEPARATORS.split(cmd):
                part = part.lstrip()
                if part:
                    checker.check_command(where, mode, part)
    for n in checker.notes:
        print("check_docs: note: " + n)
    print("check_docs: %d files, %d commands checked, %d run, %d problems" %
          (len(files), checker.checked, checker.ran, checker.errors))
    return 0 if checker.errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
