#!/usr/bin/python3
"""Reads Doxygen's warning log for include/flare/ (make docs) and fails on
  - a public function without its comment (WARN_IF_UNDOCUMENTED, "(function)");
  - any other warning than "is not documented" (a malformed comment).
Undocumented types, macros, struct fields and enum values are counted, not
failed on yet (docs/api.md says what is left). Only warnings about
include/flare/ are read: that is all Doxygen is given.
Usage: doxy-check.py WARNINGS_LOG"""
import re
import sys

FATAL_KINDS = {"function"}


def main():
    with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
        lines = [l.rstrip("\n") for l in f if "include/flare/" in l and "warning:" in l]
    lines = sorted(set(lines))
    fatal, later = [], {}
    for l in lines:
        m = re.search(r"is not documented", l)
        if not m:
            fatal.append(l)
            continue
        k = re.search(r"\((function|variable|macro definition|typedef|enumeration|enumvalue)\)", l)
        kind = k.group(1) if k else "compound" if "Compound" in l else "other"
        if kind in FATAL_KINDS:
            fatal.append(l)
        else:
            later[kind] = later.get(kind, 0) + 1
    for l in fatal:
        print(l)
    if later:
        print("doxy-check: not checked yet, undocumented: " +
              ", ".join("%d %s" % (n, k) for k, n in sorted(later.items())))
    if fatal:
        print("doxy-check: %d problem(s) in include/flare/: document each public function in a "
              "comment right above it (docs/api.md)" % len(fatal))
        return 1
    print("doxy-check: every public function in include/flare/ is documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
