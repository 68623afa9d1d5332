#!/usr/bin/env python3
"""The layers of src/ as the code has them: header reach, include cycles, call cycles.

    tools/layers.py [--build DIR] [--max-reach N] [--check]

- Header reach: for each internal header (src/**/*.h), how many of src/'s .c files include it,
  directly or through other headers. The goal (docs/architecture.md): no header above core/ and
  loop/ reaches more than --max-reach (20) of them.
- Include cycles between units: a unit is a folder of src/ (http1, net, ...) or, for the files
  directly in src/, the file's stem (app, module, upgrade, ...). An edge A -> B when a file of A
  includes a header of B; every strongly connected set of more than one unit is a cycle.
- Call cycles between units (with --build: a configured and built tree): the same, with an edge A
  -> B when an object file of A has an undefined symbol that an object file of B defines (nm).

--check exits 1 when a header passes --max-reach or a cycle exists (include or call); without it
the report is printed and the exit status is 0.
"""
import argparse
import os
import re
import subprocess
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
BASE_UNITS = {"core", "loop"}  # the floor: their headers may reach everything

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def src_files():
    out = []
    for d, _, names in os.walk(SRC):
        for n in names:
            if n.endswith((".c", ".h")):
                out.append(os.path.relpath(os.path.join(d, n), SRC))
    return sorted(out)


def unit(rel):
    """The unit of a path relative to src/."""
    parts = rel.split(os.sep)
    if len(parts) > 1:
        return parts[0]
    return os.path.splitext(parts[0])[0]


def resolve(inc, frm):
    """An include's path relative to src/, or None when it is not one of src/'s files."""
    for cand in (os.path.join(os.path.dirname(frm), inc), inc):
        p = os.path.normpath(cand)
        if os.path.isfile(os.path.join(SRC, p)):
            return p
    return None


def includes(files):
    inc = {}
    for f in files:
        text = open(os.path.join(SRC, f), encoding="utf-8", errors="replace").read()
        inc[f] = [r for r in (resolve(i, f) for i in INCLUDE.findall(text)) if r is not None]
    return inc


def closure(f, inc, memo):
    if f in memo:
        return memo[f]
    memo[f] = set()  # a cycle of headers ends here
    seen = set()
    for h in inc.get(f, []):
        seen.add(h)
        seen |= closure(h, inc, memo)
    memo[f] = seen
    return seen


def sccs(nodes, edges):
    """Tarjan's strongly connected components (iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def report_cycles(title, edges, why):
    nodes = set(edges) | {b for bs in edges.values() for b in bs}
    cycles = [c for c in sccs(nodes, edges) if len(c) > 1]
    print(f"## {title}\n")
    if not cycles:
        print("none\n")
        return 0
    for c in cycles:
        print(f"- a cycle through {len(c)} units: {', '.join(c)}")
        members = set(c)
        for a in c:
            for b in sorted(edges.get(a, ())):
                if b in members:
                    print(f"  - {a} -> {b}: {', '.join(sorted(why[(a, b)])[:4])}"
                          f"{' ...' if len(why[(a, b)]) > 4 else ''}")
    print()
    return len(cycles)


def objects(build):
    out = {}
    for d, _, names in os.walk(build):
        for n in names:
            if not n.endswith(".c.o"):
                continue
            p = os.path.join(d, n)
            m = re.search(r"CMakeFiles/flare_obj\.dir/src/(.+)\.o$", p.replace(os.sep, "/"))
            if m:
                out[m.group(1)] = p
    return out


def nm(path):
    defined, undefined = set(), set()
    res = subprocess.run(["nm", path], capture_output=True, text=True, check=True)
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRVWtdbr" and parts[1].isupper():
            defined.add(parts[2])
    return defined, undefined


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", help="a built tree: report the call cycles from its object files")
    ap.add_argument("--max-reach", type=int, default=20)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()

    files = src_files()
    inc = includes(files)
    memo = {}
    cfiles = [f for f in files if f.endswith(".c")]
    reach = defaultdict(set)
    for c in cfiles:
        for h in closure(c, inc, memo):
            reach[h].add(c)
    headers = [f for f in files if f.endswith(".h")]
    over = 0
    print(f"# src/ layers: {len(cfiles)} .c files, {len(headers)} internal headers\n")
    print(f"## Header reach (.c files that include it, directly or not; limit {a.max_reach} "
          f"above {', '.join(sorted(BASE_UNITS))})\n")
    print("| header | .c files | direct |")
    print("|---|---:|---:|")
    for h in sorted(headers, key=lambda h: (-len(reach[h]), h)):
        direct = sum(1 for c in cfiles if h in inc[c])
        flag = ""
        if unit(h) not in BASE_UNITS and len(reach[h]) > a.max_reach:
            flag = " **over**"
            over += 1
        if len(reach[h]) > 5 or flag:
            print(f"| {h}{flag} | {len(reach[h])} | {direct} |")
    print(f"\n{over} header(s) above the floor reach more than {a.max_reach} .c files "
          f"(headers reaching 5 or fewer not listed)\n")

    edges, why = defaultdict(set), defaultdict(set)
    for f in files:
        for h in inc[f]:
            ua, ub = unit(f), unit(h)
            if ua != ub:
                edges[ua].add(ub)
                why[(ua, ub)].add(f"{f} includes {h}")
    ncycles = report_cycles("Include cycles between units", edges, why)

    if a.build:
        objs = objects(a.build)
        if not objs:
            sys.exit(f"layers: no object files of src/ under {a.build} (build it first)")
        defs, undefs = {}, {}
        for src, path in objs.items():
            d, u = nm(path)
            undefs[src] = u
            for s in d:
                defs[s] = src
        cedges, cwhy = defaultdict(set), defaultdict(set)
        nedges = 0
        for src, us in undefs.items():
            for s in us:
                t = defs.get(s)
                if t is None or t == src:
                    continue
                nedges += 1
                ua, ub = unit(src), unit(t)
                if ua != ub:
                    cedges[ua].add(ub)
                    cwhy[(ua, ub)].add(f"{src} -> {s}")
        print(f"({len(objs)} object files, {nedges} cross-file calls or references)\n")
        ncycles += report_cycles("Call cycles between units (object files)", cedges, cwhy)

    if a.check and (over or ncycles):
        sys.exit(1)


if __name__ == "__main__":
    main()
