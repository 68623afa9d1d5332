#!/usr/bin/python3
"""The mechanical part of "the docs tell one story": fails, naming each
problem, when

1. a page docs/*.md is not linked from README.md, or a relative link in
   README.md or docs/*.md points at a file that does not exist;
2. a FLARE_* name mentioned in docs/*.md, README.md or a comment of
   include/flare/*.h does not exist in the code: not in the code (comments
   removed) of include/ or src/, not among the enum constants the public
   headers generate (X-macros, read from the preprocessor), not an
   environment variable of the configuration (FLARE_ + a key of
   src/obs/settings.c), and not in the code of the build files, examples,
   tests, bench or tools (CMake options, test variables); names that end in
   '*' ("FLARE_E*") need some existing name with that prefix;
3. a header of include/flare/ is neither included by flare.h nor listed in
   SEPARATE below with the reason.

Standard library only; run by ctest (label docs) as
/usr/bin/python3 tools/doc-check.py [SOURCE_DIR], with CC (default cc) for
the preprocessor."""
import glob
import os
import re
import subprocess
import sys

# Names the docs use as placeholders, never as identifiers. Each with why.
PLACEHOLDERS = {
    # docs/config.md: "an example's own key NAME works as --name and FLARE_NAME"
    "FLARE_NAME": "placeholder for the variable of any key NAME (docs/config.md)",
}

# Public headers that flare.h does not include, each with why.
SEPARATE = {
    "redis.h": "includes session.h, which includes flare.h: from flare.h's tail it would be "
               "read before session.h's types in a file that includes session.h first",
    "settings.h": "includes session.h, static.h and ws.h, which include flare.h: from flare.h's "
                  "tail it would be read before their types in a file that includes one of "
                  "them first",
    "proxy.h": "includes client.h, which includes flare.h: from flare.h's tail it would be read "
               "before client.h's types in a file that includes client.h first",
    "test.h": "for an application's tests, not its code: its calls block the calling thread "
              "and start the app on a thread of their own (docs/testing.md)",
}

NAME = re.compile(r"\bFLARE_[A-Z0-9_]*")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def c_comments(text):
    return [m.group(0) for m in re.finditer(r"/\*.*?\*/|//[^\n]*", text, re.S)]


def c_code(text):
    """C without its comments (string literals kept: environment variables
    are named in them)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def hash_code(text):
    """Python, shell or CMake without '#' comments (a '#' at the start of a
    line or after a blank; good enough for names)."""
    return "\n".join(re.sub(r"(^|\s)#.*", "", line) for line in text.splitlines())


def known_names(root):
    names = set()
    for path in glob.glob(os.path.join(root, "include", "**", "*.h"), recursive=True) + \
            glob.glob(os.path.join(root, "src", "**", "*.[ch]"), recursive=True):
        names |= set(NAME.findall(c_code(read(path))))
    # enum constants the public headers generate with X-macros
    cc = os.environ.get("CC") or "cc"
    pp = subprocess.run([cc, "-E", "-P", "-std=c17", "-I", os.path.join(root, "include"), "-"],
                        input='#include "flare/flare.h"\n' +
                        "".join('#include "flare/%s"\n' % os.path.basename(h) for h in
                                glob.glob(os.path.join(root, "include", "flare", "*.h"))),
                        capture_output=True, text=True)
    if pp.returncode != 0:
        sys.exit("doc-check: %s -E on the public headers failed:\n%s" % (cc, pp.stderr))
    names |= set(NAME.findall(pp.stdout))
    # FLARE_<KEY> for every configuration key (src/obs/settings.c's table)
    for key in re.findall(r'\{\s*"([a-z0-9-]+)",\s*K_', read(os.path.join(root, "src", "obs",
                                                                          "settings.c"))):
        names.add("FLARE_" + key.upper().replace("-", "_"))
    # the rest of the tree's code: CMake options, test variables, examples
    for pattern in ("CMakeLists.txt", "cmake/*", "*/CMakeLists.txt", "*/*/CMakeLists.txt",
                    "Makefile", ".ci/run", "tools/*", "tests/**/*.py", "tests/**/*.sh",
                    "bench/**/*.sh", "bench/**/*.py", "examples/**/*.sh", "fuzz/**/*.sh"):
        for path in glob.glob(os.path.join(root, pattern), recursive=True):
            if os.path.isfile(path) and not path.endswith("doc-check.py"):
                names |= set(NAME.findall(hash_code(read(path))))
    for pattern in ("examples/**/*.[ch]", "tests/**/*.[ch]", "bench/**/*.[ch]",
                    "fuzz/**/*.[ch]"):
        for path in glob.glob(os.path.join(root, pattern), recursive=True):
            names |= set(NAME.findall(c_code(read(path))))
    return names


def check_links(root, problems):
    readme = read(os.path.join(root, "README.md"))
    linked = {os.path.normpath(t) for t in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", readme)}
    for page in sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
        rel = os.path.relpath(page, root)
        if rel not in linked:
            problems.append("README.md does not link %s" % rel)
    for page in [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs",
                                                                                   "*.md"))):
        text = read(page)
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path = os.path.normpath(os.path.join(os.path.dirname(page), target))
            if not os.path.exists(path):
                problems.append("%s links %s, which does not exist" %
                                (os.path.relpath(page, root), target))


def check_names(root, problems):
    known = known_names(root)
    mentions = []  # (file, line, name, is_prefix)
    sources = [(p, read(p)) for p in [os.path.join(root, "README.md")] +
               sorted(glob.glob(os.path.join(root, "docs", "*.md")))]
    for h in sorted(glob.glob(os.path.join(root, "include", "flare", "*.h"))):
        text = read(h)
        # only the comments: a header's code is checked by the compiler
        kept = re.sub(r"[^\n]", " ", text)
        for m in re.finditer(r"/\*.*?\*/|//[^\n]*", text, re.S):
            kept = kept[:m.start()] + m.group(0) + kept[m.end():]
        sources.append((h, kept))
    for path, text in sources:
        for m in NAME.finditer(text):
            name = m.group(0)
            after = text[m.end():m.end() + 1]
            line = text.count("\n", 0, m.start()) + 1
            mentions.append((path, line, name, after == "*" or name.endswith("_")))
    for path, line, name, prefix in mentions:
        if name in PLACEHOLDERS:
            continue
        ok = any(k.startswith(name) for k in known) if prefix else name in known
        if not ok:
            problems.append("%s:%d: %s%s is not a name in the code" %
                            (os.path.relpath(path, root), line, name, "*" if prefix else ""))


def check_umbrella(root, problems):
    inc = os.path.join(root, "include", "flare")
    included = set(re.findall(r'#include\s+"flare/([^"]+)"', read(os.path.join(inc, "flare.h"))))
    for h in sorted(os.listdir(inc)):
        if not h.endswith(".h") or h == "flare.h":
            continue
        if h not in included and h not in SEPARATE:
            problems.append("include/flare/flare.h does not include flare/%s (include it, or list "
                            "it in SEPARATE in tools/doc-check.py with the reason)" % h)
    for h in SEPARATE:
        if h in included:
            problems.append("flare/%s is in SEPARATE but flare.h includes it" % h)
        if not os.path.exists(os.path.join(inc, h)):
            problems.append("flare/%s is in SEPARATE but does not exist" % h)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    problems = []
    check_links(root, problems)
    check_names(root, problems)
    check_umbrella(root, problems)
    for p in problems:
        print("doc-check: " + p)
    if problems:
        print("doc-check: %d problem(s)" % len(problems))
        return 1
    print("doc-check: README links every page, every FLARE_* name exists, flare.h includes "
          "every header not listed as separate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
