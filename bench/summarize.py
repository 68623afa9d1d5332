#!/usr/bin/python3
"""Summarize bench/run.sh's runs.csv into Markdown tables and chart data (stdlib only).

usage: /usr/bin/python3 bench/summarize.py RUNS_CSV [--out-dir DIR] [--] [SERVER_ORDER...]

Prints, per scenario and server: median req/s (min-max over the rounds), median server CPU
microseconds per request (min-max), median p50 and p99 latency, the server's share of its core;
each figure also as a ratio to the null server's (the kernel-path ceiling with the same canned
body: 1.00 means "costs what a canned-response loop costs") and to the best peer's (the best of
nginx, h2o and lighttpd for that figure: highest req/s, lowest CPU and latency). Then a summary
matrix (CPU per request / null per scenario and server), Flare against the best peer, and for
the middleware scenarios the ratio of CPU per request of /mw/plaintext ("flare-mw") to
/plaintext ("flare"): the median of the paired ratios (each pair run back to back, in
alternating order) and the ratio of the medians. Failed runs are left out of the figures and counted.

With --out-dir it also writes DIR/summary.csv (the medians and ratios), DIR/chart.dat and
DIR/chart.gp (gnuplot: chart.png and chart.svg of CPU per request / null).
"""
import csv
import os
import statistics
import sys

PEERS = ("nginx", "h2o", "lighttpd")
MW_TARGET = 1.05  # the target for /mw/plaintext vs /plaintext (CPU per request)
SCENARIO_TITLES = {
    "plaintext": "GET /plaintext, keep-alive",
    "plaintext-512": "GET /plaintext, keep-alive",
    "plaintext-4096": "GET /plaintext, keep-alive",
    "pipeline": "GET /plaintext, pipelined",
    "json": "GET /json",
    "users": "GET /users/123 (path parameter)",
    "echo": "POST /echo, 1 KiB body",
    "static-4k": "GET /static/4k.bin, a 4 KiB static file, keep-alive",
    "static-1m": "GET /static/1m.bin, a 1 MiB static file, keep-alive",
    "middleware": "Flare: /mw/plaintext (10 middlewares) vs /plaintext, keep-alive",
    "middleware-pipeline": "Flare: /mw/plaintext (10 middlewares) vs /plaintext, pipelined",
}


def fmt_int(x):
    return f"{x:,.0f}"


def fmt_lat(us):
    if us is None:
        return "–"
    if us >= 10000:
        return f"{us / 1000:.1f} ms"
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.0f} µs"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt_ratio(r):
    return "–" if r is None else f"{r:.2f}×"


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fnum(x):
    """a latency from the CSV; wrk prints 0.00us for percentiles it did not record (it keeps
    fewer latency samples than requests when pipelining): treat that as missing"""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v > 0 else None


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        sys.exit(__doc__)
    path = args.pop(0)
    out_dir = None
    order = []
    while args:
        a = args.pop(0)
        if a == "--out-dir":
            out_dir = args.pop(0)
        elif a == "--":
            order.extend(args)
            break
        else:
            order.append(a)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    scenarios = []
    # scenario order: as measured (the "n/a" rows are written first, so they do not count)
    for r in sorted(rows, key=lambda r: r["status"] == "n/a"):
        if r["scenario"] not in scenarios:
            scenarios.append(r["scenario"])
        if r["server"] not in order:
            order.append(r["server"])
    # flare-mw right after flare
    if "flare-mw" in order and "flare" in order:
        order.remove("flare-mw")
        order.insert(order.index("flare") + 1, "flare-mw")

    out = []
    summary_rows = []
    cpu_vs_null = {}  # (scenario, server) -> ratio
    flare_vs_peer = {}  # scenario -> dict
    mw_results = []

    for sc in scenarios:
        sc_rows = [r for r in rows if r["scenario"] == sc]
        conns = sorted({r["connections"] for r in sc_rows}, key=int)
        depth = sorted({r["depth"] for r in sc_rows}, key=int)
        stats = {}
        na = {}
        for srv in order:
            runs = [r for r in sc_rows if r["server"] == srv]
            if not runs:
                continue
            if all(r["status"] == "n/a" for r in runs):
                na[srv] = runs[0].get("note", "")
                continue
            ok = [r for r in runs if r["status"] == "ok"]
            failed = len(runs) - len(ok)
            s = {"ok": len(ok), "failed": failed}
            if ok:
                rps = [float(r["req_per_s"]) for r in ok]
                cpu = [float(r["cpu_us_per_req"]) for r in ok]
                s.update(
                    rps=statistics.median(rps), rps_lo=min(rps), rps_hi=max(rps),
                    cpu=statistics.median(cpu), cpu_lo=min(cpu), cpu_hi=max(cpu),
                    p50=med([fnum(r["latency_p50_us"]) for r in ok]),
                    p99=med([fnum(r["latency_p99_us"]) for r in ok]),
                    pct=statistics.median(float(r["server_cpu_pct"]) for r in ok),
                    sbusy=statistics.median(float(r["server_core_busy_pct"] or 0) for r in ok),
                    cbusy=statistics.median(float(r["client_core_busy_pct"] or 0) for r in ok),
                    by_round={r["round"]: float(r["cpu_us_per_req"]) for r in ok},
                    rps_by_round={r["round"]: float(r["req_per_s"]) for r in ok},
                )
            stats[srv] = s

        null = stats.get("null") if stats.get("null", {}).get("ok") else None
        peers = {p: stats[p] for p in PEERS if p in stats and stats[p].get("ok")}
        best = {}
        if peers:
            best["rps"] = max(peers, key=lambda p: peers[p]["rps"])
            best["cpu"] = min(peers, key=lambda p: peers[p]["cpu"])
            lat50 = [p for p in peers if peers[p]["p50"] is not None]
            lat99 = [p for p in peers if peers[p]["p99"] is not None]
            if lat50:
                best["p50"] = min(lat50, key=lambda p: peers[p]["p50"])
            if lat99:
                best["p99"] = min(lat99, key=lambda p: peers[p]["p99"])

        def ref(key, which):
            if which == "null":
                return null[key] if null else None
            b = best.get(key)
            return peers[b][key] if b else None

        title = SCENARIO_TITLES.get(sc, sc)
        out.append(f"### {sc}: {title} ({'/'.join(conns)} connections, "
                   f"{'/'.join(depth)} request(s) per write)")
        out.append("")
        out.append("| server | req/s median (min–max) | ÷ null | ÷ peer | CPU µs/req (min–max) "
                   "| ÷ null | ÷ peer | p50 | p99 | p50, p99 ÷ null | p50, p99 ÷ peer "
                   "| server CPU (cores busy) | runs |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for srv in order:
            if srv in na:
                out.append(f"| {srv} | n/a | | | | | | | | | | | {na[srv]} |")
                continue
            if srv not in stats:
                continue
            s = stats[srv]
            runs_txt = f"{s['ok']}" + (f", **{s['failed']} FAILED**" if s["failed"] else "")
            if not s["ok"]:
                out.append(f"| {srv} | FAILED | | | | | | | | | | | {runs_txt} |")
                continue
            rn = ratio(s["rps"], ref("rps", "null"))
            rp = ratio(s["rps"], ref("rps", "peer"))
            cn = ratio(s["cpu"], ref("cpu", "null"))
            cp = ratio(s["cpu"], ref("cpu", "peer"))
            l50n, l99n = ratio(s["p50"], ref("p50", "null")), ratio(s["p99"], ref("p99", "null"))
            l50p, l99p = ratio(s["p50"], ref("p50", "peer")), ratio(s["p99"], ref("p99", "peer"))
            out.append(
                f"| {srv} | {fmt_int(s['rps'])} ({fmt_int(s['rps_lo'])}–{fmt_int(s['rps_hi'])}) "
                f"| {fmt_ratio(rn)} | {fmt_ratio(rp)} "
                f"| {s['cpu']:.2f} ({s['cpu_lo']:.2f}–{s['cpu_hi']:.2f}) "
                f"| {fmt_ratio(cn)} | {fmt_ratio(cp)} "
                f"| {fmt_lat(s['p50'])} | {fmt_lat(s['p99'])} "
                f"| {fmt_ratio(l50n)}, {fmt_ratio(l99n)} | {fmt_ratio(l50p)}, {fmt_ratio(l99p)} "
                f"| {s['pct']:.0f}% ({s['sbusy']:.0f}%/{s['cbusy']:.0f}%) | {runs_txt} |")
            if cn is not None:
                cpu_vs_null[(sc, srv)] = cn
            summary_rows.append({
                "scenario": sc, "server": srv, "runs_ok": s["ok"], "runs_failed": s["failed"],
                "req_per_s": f"{s['rps']:.0f}", "cpu_us_per_req": f"{s['cpu']:.3f}",
                "p50_us": "" if s["p50"] is None else f"{s['p50']:.1f}",
                "p99_us": "" if s["p99"] is None else f"{s['p99']:.1f}",
                "rps_vs_null": "" if rn is None else f"{rn:.3f}",
                "cpu_vs_null": "" if cn is None else f"{cn:.3f}",
                "rps_vs_peer": "" if rp is None else f"{rp:.3f}",
                "cpu_vs_peer": "" if cp is None else f"{cp:.3f}",
                "p99_vs_peer": "" if l99p is None else f"{l99p:.3f}",
            })
            if srv == "flare" and peers:
                flare_vs_peer[sc] = (rp, cp, l50p, l99p, best)
        for srv in order:
            if srv in stats and not stats[srv]["ok"] and (sc, srv) not in cpu_vs_null:
                cpu_vs_null.setdefault((sc, srv), "FAILED")
        out.append("")
        if best:
            out.append("Best peer: " + "; ".join(
                f"{k.replace('rps', 'req/s').replace('cpu', 'CPU/req')} {v}" for k, v in best.items()) + ".")
            out.append("")

        if "flare-mw" in stats and "flare" in stats and stats["flare"]["ok"] and stats["flare-mw"]["ok"]:
            a, b = stats["flare"], stats["flare-mw"]
            paired = [b["by_round"][k] / a["by_round"][k]
                      for k in a["by_round"] if k in b["by_round"] and a["by_round"][k] > 0]
            paired_rps = [b["rps_by_round"][k] / a["rps_by_round"][k]
                          for k in a["rps_by_round"] if k in b["rps_by_round"] and a["rps_by_round"][k] > 0]
            pm = statistics.median(paired)
            verdict = "within" if pm <= MW_TARGET else "**over**"
            line = (f"**Middleware cost ({sc})**: CPU µs/request of /mw/plaintext ÷ /plaintext = "
                    f"**{pm:.3f}** (median of {len(paired)} paired ratios, each pair run back to back, "
                    f"{min(paired):.3f}–{max(paired):.3f}; ratio of medians {b['cpu'] / a['cpu']:.3f}); "
                    f"req/s ratio {statistics.median(paired_rps):.3f}. "
                    f"Target ≤ {MW_TARGET:.2f}: {verdict}.")
            out.append(line)
            out.append("")
            mw_results.append((sc, pm, min(paired), max(paired), b["cpu"] / a["cpu"]))

    # Summary matrix: CPU per request / null
    chart_scenarios = [sc for sc in scenarios if any(k[0] == sc and k[1] != "null" for k in cpu_vs_null)]
    chart_servers = [s for s in order if s not in ("flare-mw",)
                     and any((sc, s) in cpu_vs_null for sc in chart_scenarios)]
    if chart_scenarios:
        out.append("### Summary: server CPU per request ÷ null server (lower is better; 1.00× = the kernel-path ceiling)")
        out.append("")
        out.append("| scenario | " + " | ".join(chart_servers) + " |")
        out.append("|---|" + "---:|" * len(chart_servers))
        for sc in chart_scenarios:
            cells = []
            for s in chart_servers:
                v = cpu_vs_null.get((sc, s))
                if v is None:
                    na_rows = [r for r in rows if r["scenario"] == sc and r["server"] == s and r["status"] == "n/a"]
                    cells.append("n/a" if na_rows else "–")
                elif v == "FAILED":
                    cells.append("FAILED")
                else:
                    cells.append(f"{v:.2f}×")
            out.append(f"| {sc} | " + " | ".join(cells) + " |")
        out.append("")
    if flare_vs_peer:
        out.append("### Summary: Flare ÷ best peer (req/s: higher is better; CPU and latency: lower is better)")
        out.append("")
        out.append("| scenario | req/s | CPU µs/req | p50 | p99 |")
        out.append("|---|---:|---:|---:|---:|")
        for sc, (rp, cp, l50, l99, best) in flare_vs_peer.items():
            out.append(f"| {sc} | {fmt_ratio(rp)} | {fmt_ratio(cp)} | {fmt_ratio(l50)} | {fmt_ratio(l99)} |")
        out.append("")
    if mw_results:
        out.append("### Summary: middleware cost (10 pass-through middlewares, CPU per request ÷ the same route without)")
        out.append("")
        out.append("| scenario | median of the paired ratios | min–max | ratio of the medians |")
        out.append("|---|---:|---:|---:|")
        for sc, pm, lo, hi, rm in mw_results:
            out.append(f"| {sc} | {pm:.3f} | {lo:.3f}–{hi:.3f} | {rm:.3f} |")
        out.append("")
    print("\n".join(out))

    if out_dir:
        with open(os.path.join(out_dir, "summary.csv"), "w", newline="") as f:
            fields = ["scenario", "server", "runs_ok", "runs_failed", "req_per_s", "cpu_us_per_req",
                      "p50_us", "p99_us", "rps_vs_null", "cpu_vs_null", "rps_vs_peer",
                      "cpu_vs_peer", "p99_vs_peer"]
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(summary_rows)
        write_chart(out_dir, chart_scenarios, chart_servers, cpu_vs_null)


def write_chart(out_dir, scenarios, servers, cpu_vs_null):
    dat = os.path.join(out_dir, "chart.dat")
    if not scenarios:
        open(dat, "w").close()
        return
    top = 1.0
    low = 1.0
    with open(dat, "w") as f:
        f.write("# scenario " + " ".join(servers) + "\n")
        for sc in scenarios:
            vals = []
            for s in servers:
                v = cpu_vs_null.get((sc, s))
                if isinstance(v, float):
                    vals.append(f"{v:.4f}")
                    top = max(top, v)
                    low = min(low, v)
                else:
                    vals.append("?")
            f.write(sc + " " + " ".join(vals) + "\n")
    n = len(servers)
    gap = 1.5
    na_path = os.path.join(out_dir, "chart-na.dat")
    with open(na_path, "w") as f:  # "n/a" written where a server has no bar
        for i, sc in enumerate(scenarios):
            for j, s in enumerate(servers):
                if not isinstance(cpu_vs_null.get((sc, s)), float):
                    f.write(f"{i + (j - (n - 1) / 2) / (n + gap):.4f} n/a\n")
    colors = {"flare": "#d9480f", "flare-uring": "#f08c00", "null": "#868e96",
              "null-uring": "#ced4da", "nginx": "#2b8a3e", "h2o": "#1c7ed6",
              "lighttpd": "#ae3ec9"}
    plots = []
    for j, s in enumerate(servers):
        col = j + 2
        color = colors.get(s, "#495057")
        plots.append(f"'chart.dat' using {col}:xtic(1) title '{s}' lc rgb '{color}'")
    labels = []
    for j in range(n):
        col = j + 2
        off = (j - (n - 1) / 2) / (n + gap)
        labels.append(f"'chart.dat' using ($0+{off:.4f}):(column({col})*1.04):"
                      f"(sprintf('%.2f', column({col}))) with labels rotate by 90 left "
                      f"font ',8' notitle")
    ymax = 2 ** (len(bin(int(top * 1.6))) - 2)
    # the bottom: 0.5, or lower when a ratio is below ~0.55 (a sendfile server against the null
    # server's write() of a 1 MiB body), so that every bar shows
    ymin = 0.5
    while low < ymin * 1.1 and ymin > 1 / 64:
        ymin /= 2
    ytics = []
    t = ymin
    while t <= max(ymax * 2, 64):
        ytics.append(f"'{t:g}' {t:g}")
        t *= 2
    na_plot = ""
    if os.path.getsize(na_path):
        na_plot = (f", \\\n     'chart-na.dat' using 1:({ymin * 1.12:g}):2 with labels rotate by 90 "
                   "left font ',8' tc rgb '#777777' notitle")
    gp = f"""# gnuplot script written by bench/summarize.py: gnuplot chart.gp (in this directory)
set datafile missing '?'
set style data histograms
set style histogram clustered gap {gap}
set style fill solid 0.85 border -1
set boxwidth 0.95
set logscale y 2
set yrange [{ymin:g}:{ymax * 2}]
set ytics ({', '.join(ytics)})
set grid ytics lc rgb '#dddddd'
set key top left horizontal
set ylabel 'server CPU per request / null server (log scale)'
set title 'Server CPU per request relative to the null server (lower is better; 1 = kernel-path ceiling)'
set arrow from graph 0, first 1 to graph 1, first 1 nohead lc rgb '#555555' dt 2
set xrange [-0.6:{len(scenarios) - 0.4}]
set xtics nomirror
set border 3
plot {', '.join(plots)}, \\
     {', '.join(labels)}{na_plot}
"""
    with open(os.path.join(out_dir, "chart.gp"), "w") as f:
        f.write("set terminal pngcairo size 1280,640 font 'DejaVu Sans,10'\n")
        f.write("set output 'chart.png'\n")
        f.write(gp)
        f.write("set terminal svg size 1280,640 dynamic font 'DejaVu Sans,10' background '#ffffff'\n")
        f.write("set output 'chart.svg'\n")
        f.write("replot\n")


if __name__ == "__main__":
    main()
