#!/usr/bin/python3
"""Fold `perf script` stacks and render them (stdlib only; used by bench/flame.sh).

usage:
  flame.py fold  [PERF_SCRIPT_TXT]          folded stacks on stdout ("root;...;leaf COUNT")
  flame.py top   FOLDED [-n 20]             Markdown: where the samples are (user space, each
                                            syscall, other kernel) and the top-N self-time table
  flame.py svg   FOLDED [--title T] [--width 1200] [--min-pct 0.1]
                                            a static flame graph (SVG) on stdout
  flame.py html  FOLDED --d3 D3_JS --fg D3_FLAMEGRAPH_JS [--css CSS] [--title T] [--top TOP_MD]
                                            a self-contained interactive page (d3-flame-graph,
                                            both scripts inlined) on stdout

Folding: each sample of `perf script` is a header line ("comm pid ... cpu-clock:") followed by
one line per frame, innermost first ("addr symbol+off (dso)"), and a blank line. A folded line
is the thread name, then the frames outermost first, separated by ";", then the count. Kernel
frames (dso [kernel.kallsyms] or a kernel address) get the suffix "_[k]", as in Brendan Gregg's
stackcollapse-perf; a shared library's function gets " (libname.so)"; offsets are dropped; an
unresolved frame becomes "[dso basename]".
"""
import html
import json
import os
import re
import sys
import zlib
from collections import Counter, defaultdict

FRAME_RE = re.compile(r"^\s*([0-9a-fA-F]+)\s+(.*?)(?:\s+\(([^()]*)\))?\s*$")


def frame_name(addr, sym, dso):
    kernel = dso is not None and (dso.startswith("[kernel") or dso.endswith(".ko"))
    if not kernel and (dso is None or dso == "[unknown]") and addr.lower().startswith("ffffffff"):
        kernel = True
    sym = sym.strip()
    if sym.startswith("[unknown]") or not sym:
        base = os.path.basename(dso) if dso else "unknown"
        name = f"[{base}]" if not base.startswith("[") else base
    else:
        name = re.sub(r"\+0x[0-9a-fA-F]+$", "", sym)
        base = os.path.basename(dso) if dso else ""
        if not kernel and ".so" in base:
            name += f" ({base})"  # a shared library: libc, libcrypto...; the executable's own
            # functions (Flare and the application, statically linked) carry no suffix
    if kernel:
        name += "_[k]"
    return name


def fold(lines):
    counts = Counter()
    comm = None
    stack = []

    def flush():
        if comm is not None and stack:
            counts[";".join([comm] + stack[::-1])] += 1

    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            flush()
            comm, stack = None, []
            continue
        if line[0] not in " \t":
            flush()
            stack = []
            # "comm  pid/tid [cpu] time: period event:" -- comm may contain spaces
            m = re.match(r"^(.*?)\s+\d+(?:/\d+)?\s+(?:\[\d+\]\s+)?[\d.]+:", line)
            comm = (m.group(1) if m else line.split()[0]).strip().replace(";", ":").replace(" ", "_")
            continue
        m = FRAME_RE.match(line)
        if not m:
            continue
        stack.append(frame_name(m.group(1), m.group(2), m.group(3)).replace(";", ":"))
    flush()
    return counts


def read_folded(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            stack, _, n = line.rpartition(" ")
            out.append((stack.split(";"), int(n)))
    return out


def is_kernel(frame):
    return frame.endswith("_[k]")


def plain(frame):
    return frame[:-4] if is_kernel(frame) else frame


SYSCALL_RE = re.compile(r"^(?:__x64_sys_|__ia32_sys_|__se_sys_|__do_sys_|ksys_)(\w+)_\[k\]$")


def category(frames):
    """user space | syscall NAME | kernel, no syscall (interrupts, softirq, scheduler)"""
    leaf = frames[-1]
    if not is_kernel(leaf):
        return "user space"
    for f in frames[1:]:
        m = SYSCALL_RE.match(f)
        if m:
            return f"kernel: {m.group(1)}()"
    return "kernel: no syscall frame (interrupt, softirq, scheduler)"


def top(folded, n=20):
    total = sum(c for _, c in folded)
    if total == 0:
        return "no samples\n"
    self_c = Counter()
    incl_c = Counter()
    cats = Counter()
    for frames, c in folded:
        self_c[frames[-1]] += c
        for f in set(frames[1:]):
            incl_c[f] += c
        cats[category(frames)] += c
    user = cats.get("user space", 0)
    out = []
    out.append(f"{total:,} samples; kernel {100 * (total - user) / total:.1f}%, "
               f"user space {100 * user / total:.1f}%.")
    out.append("")
    out.append("| where the samples are | % of samples |")
    out.append("|---|---:|")
    for k, c in cats.most_common():
        out.append(f"| {k} | {100 * c / total:.1f}% |")
    out.append("")
    out.append(f"Top {n} functions by self time (the CPU was in that function itself):")
    out.append("")
    out.append("| # | function | where | self % | inclusive % |")
    out.append("|---:|---|---|---:|---:|")
    for i, (f, c) in enumerate(self_c.most_common(n), 1):
        where = "kernel" if is_kernel(f) else "user"
        out.append(f"| {i} | `{plain(f)}` | {where} | {100 * c / total:.1f}% "
                   f"| {100 * incl_c.get(f, c) / total:.1f}% |")
    out.append("")
    user_fns = [(f, c) for f, c in self_c.most_common() if not is_kernel(f)][:max(n // 2, 5)]
    if user_fns:
        out.append(f"User space only, top {len(user_fns)} by self time "
                   f"(% of all samples; user space is {100 * user / total:.1f}% in all):")
        out.append("")
        out.append("| # | function | self % | inclusive % |")
        out.append("|---:|---|---:|---:|")
        for i, (f, c) in enumerate(user_fns, 1):
            out.append(f"| {i} | `{f}` | {100 * c / total:.2f}% | {100 * incl_c.get(f, c) / total:.1f}% |")
        out.append("")
    return "\n".join(out)


def tree(folded):
    root = {"name": "all", "value": 0, "children": {}}
    for frames, c in folded:
        root["value"] += c
        node = root
        for f in frames:
            ch = node["children"].get(f)
            if ch is None:
                ch = node["children"][f] = {"name": f, "value": 0, "children": {}}
            ch["value"] += c
            node = ch
    return root


def to_d3(node):
    return {"name": node["name"], "value": node["value"],
            "children": [to_d3(c) for c in sorted(node["children"].values(), key=lambda x: x["name"])]}


def color(name, depth):
    h = zlib.crc32(name.encode()) & 0xFFFF
    v = h / 0xFFFF
    base = plain(name)
    if depth <= 1 or base.startswith("["):  # "all", the thread names, unresolved frames
        return "rgb(200,200,200)"
    if is_kernel(name):  # kernel: orange
        return f"rgb({220 + int(30 * v)},{130 + int(60 * v)},{40 + int(30 * v)})"
    if base.endswith(")") and ".so" in base:  # shared libraries: yellow
        return f"rgb({215 + int(40 * v)},{190 + int(50 * v)},{60 + int(40 * v)})"
    return f"rgb({200 + int(55 * v)},{60 + int(50 * v)},{50 + int(30 * v)})"  # the executable: red


def svg(folded, title="Flame graph", width=1200, min_pct=0.1):
    root = tree(folded)
    total = root["value"] or 1
    fh, pad_top, pad_bottom, side = 16, 46, 28, 10
    min_w = width * min_pct / 100.0
    rects = []
    max_depth = 0

    def walk(node, x, depth):
        nonlocal max_depth
        w = (width - 2 * side) * node["value"] / total
        if w < min_w:
            return
        max_depth = max(max_depth, depth)
        rects.append((node["name"], x, depth, w, node["value"]))
        cx = x
        for ch in sorted(node["children"].values(), key=lambda c: c["name"]):
            walk(ch, cx, depth + 1)
            cx += (width - 2 * side) * ch["value"] / total

    walk(root, side, 0)
    height = pad_top + (max_depth + 1) * fh + pad_bottom
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="Verdana, sans-serif" font-size="11">',
           f'<rect width="100%" height="100%" fill="#fdfdf6"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="15">{html.escape(title)}</text>',
           f'<text x="{width / 2}" y="36" text-anchor="middle" fill="#666">{total:,} samples '
           f'(perf -F 999, cpu-clock); orange = kernel, red = the executable (Flare + app), yellow = shared libraries; '
           f'hover for details</text>']
    for name, x, depth, w, v in rects:
        y = height - pad_bottom - (depth + 1) * fh
        label = plain(name) + (" [kernel]" if is_kernel(name) else "")
        tip = f"{label}: {v:,} samples, {100 * v / total:.2f}%"
        out.append(f'<g><title>{html.escape(tip)}</title>'
                   f'<rect x="{x:.1f}" y="{y}" width="{max(w - 0.4, 0.1):.1f}" height="{fh - 1}" '
                   f'fill="{color(name, depth)}" rx="1.5"/>')
        chars = int((w - 6) / 6.6)
        if chars >= 3:
            text = plain(name)
            if len(text) > chars:
                text = text[:max(chars - 2, 1)] + ".."
            out.append(f'<text x="{x + 3:.1f}" y="{y + fh - 4.5}">{html.escape(text)}</text>')
        out.append("</g>")
    out.append(f'<text x="{side}" y="{height - 8}" fill="#666">Frames narrower than '
               f'{min_pct}% of the samples are left out. Width = share of samples; '
               f'bottom = thread, top = where the CPU was.</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def page(folded, d3_js, fg_js, css, title, top_md):
    data = json.dumps(to_d3(tree(folded)), separators=(",", ":"))
    top_html = html.escape(top_md) if top_md else ""
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{css}</style>
<style>
body {{ font-family: Verdana, sans-serif; margin: 16px; }}
#controls {{ margin: 8px 0; }} #details {{ color: #555; min-height: 1.4em; }}
pre {{ background: #f6f6f6; padding: 8px; font-size: 12px; overflow-x: auto; }}
</style></head>
<body>
<h2>{html.escape(title)}</h2>
<p>Click a frame to zoom in, click the bottom frame to zoom out; search highlights matching
frames. Orange frames are kernel code (names end in <code>_[k]</code>).
Generated by bench/flame.sh with d3-flame-graph (inlined).</p>
<div id="controls"><input id="term" placeholder="search (regex)" size="30">
<button onclick="chart.search(document.getElementById('term').value)">search</button>
<button onclick="chart.clear(); document.getElementById('term').value=''">clear</button>
<button onclick="chart.resetZoom()">reset zoom</button></div>
<div id="details"></div>
<div id="chart"></div>
<h3>Where the time goes</h3>
<pre>{top_html}</pre>
<script>{d3_js}</script>
<script>{fg_js}</script>
<script>
var data = {data};
var fg = (typeof flamegraph === 'function') ? flamegraph : flamegraph.default;
var chart = fg().width(Math.max(960, window.innerWidth - 48)).cellHeight(18)
  .minFrameSize(1).selfValue(false)
  .setDetailsElement(document.getElementById('details'))
  .setColorMapper(function (d, original) {{
    if (d.highlight) return '#e600e6';
    return /_\\[k\\]$/.test(d.data.name) ? '#f2a541' : original;
  }});
if (flamegraph.tooltip && flamegraph.tooltip.defaultFlamegraphTooltip) {{
  chart.tooltip(flamegraph.tooltip.defaultFlamegraphTooltip().text(function (d) {{
    return d.data.name + ': ' + d.data.value + ' samples';
  }}));
}}
d3.select('#chart').datum(data).call(chart);
document.getElementById('term').addEventListener('keyup', function (e) {{
  if (e.key === 'Enter') chart.search(this.value);
}});
</script>
</body></html>
"""


def main():
    a = sys.argv[1:]
    if not a or a[0] in ("-h", "--help"):
        sys.exit(__doc__)
    cmd = a.pop(0)

    def opt(name, default=None):
        if name in a:
            i = a.index(name)
            v = a[i + 1]
            del a[i:i + 2]
            return v
        return default

    if cmd == "fold":
        src = open(a[0], errors="replace") if a else sys.stdin
        for stack, c in sorted(fold(src).items()):
            print(f"{stack} {c}")
    elif cmd == "top":
        n = int(opt("-n", "20"))
        sys.stdout.write(top(read_folded(a[0]), n))
    elif cmd == "svg":
        title = opt("--title", "Flame graph")
        width = int(opt("--width", "1200"))
        min_pct = float(opt("--min-pct", "0.1"))
        sys.stdout.write(svg(read_folded(a[0]), title, width, min_pct))
    elif cmd == "html":
        d3 = open(opt("--d3")).read()
        fg = open(opt("--fg")).read()
        css_path = opt("--css")
        css = open(css_path).read() if css_path else ""
        title = opt("--title", "Flame graph")
        top_path = opt("--top")
        top_md = open(top_path).read() if top_path else ""
        # keep "</script>" inside the inlined libraries from closing the tag
        d3 = d3.replace("</script", "<\\/script")
        fg = fg.replace("</script", "<\\/script")
        sys.stdout.write(page(read_folded(a[0]), d3, fg, css, title, top_md))
    else:
        sys.exit(f"unknown command {cmd}\n" + __doc__)


if __name__ == "__main__":
    main()
