#!/usr/bin/python3
"""Summarize bench/run.sh's runs.csv into a Markdown table (stdlib only).

usage: /usr/bin/python3 bench/summarize.py RUNS_CSV [SERVER_ORDER...]

Per scenario and server: median req/s with its min-max over the rounds, median server CPU
microseconds per request, that figure divided by the null server's (the kernel-path ceiling:
1.00 means "costs what a canned-response loop costs"), the median share of its core the
server used, and how busy the server's and wrk's cores were as a whole (a noise indicator:
core busy well above the server's share means something else ran there). Failed runs are
left out of the figures and counted in the last column.
"""
import csv
import statistics
import sys


def fmt_int(x):
    return f"{x:,.0f}"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    with open(sys.argv[1], newline="") as f:
        rows = list(csv.DictReader(f))
    order = sys.argv[2:]
    for r in rows:
        if r["server"] not in order:
            order.append(r["server"])
    scenarios = []
    for r in rows:
        if r["scenario"] not in scenarios:
            scenarios.append(r["scenario"])

    out = []
    for sc in scenarios:
        conns = {r["connections"] for r in rows if r["scenario"] == sc}
        depth = {r["depth"] for r in rows if r["scenario"] == sc}
        out.append(f"### {sc} ({'/'.join(sorted(conns))} connections, "
                   f"{'/'.join(sorted(depth))} request(s) per write)")
        out.append("")
        out.append("| server | req/s median (min–max) | CPU µs/request | CPU/request vs null "
                   "| server CPU | cores busy (server/wrk) | runs |")
        out.append("|---|---:|---:|---:|---:|---:|---|")
        med_cpu = {}
        stats = {}
        for srv in order:
            runs = [r for r in rows if r["scenario"] == sc and r["server"] == srv]
            if not runs:
                continue
            ok = [r for r in runs if r["status"] == "ok"]
            failed = len(runs) - len(ok)
            if ok:
                rps = [float(r["req_per_s"]) for r in ok]
                cpu = [float(r["cpu_us_per_req"]) for r in ok]
                pct = [float(r["server_cpu_pct"]) for r in ok]
                sc_busy = [float(r.get("server_core_busy_pct") or 0) for r in ok]
                cl_busy = [float(r.get("client_core_busy_pct") or 0) for r in ok]
                med_cpu[srv] = statistics.median(cpu)
                stats[srv] = (statistics.median(rps), min(rps), max(rps), med_cpu[srv],
                              statistics.median(pct), statistics.median(sc_busy),
                              statistics.median(cl_busy))
            stats.setdefault(srv, None)
            stats[srv] = (stats[srv], len(ok), failed)
        base = med_cpu.get("null")
        for srv in order:
            if srv not in stats:
                continue
            s, nok, failed = stats[srv]
            runs_txt = f"{nok}" + (f", **{failed} FAILED**" if failed else "")
            if s is None:
                out.append(f"| {srv} | FAILED | – | – | – | – | {runs_txt} |")
                continue
            med, lo, hi, cpu, pct, sbusy, cbusy = s
            ratio = f"{cpu / base:.2f}×" if base else "n/a"
            out.append(f"| {srv} | {fmt_int(med)} ({fmt_int(lo)}–{fmt_int(hi)}) | {cpu:.2f} "
                       f"| {ratio} | {pct:.0f}% | {sbusy:.0f}% / {cbusy:.0f}% | {runs_txt} |")
        out.append("")
    print("\n".join(out))


if __name__ == "__main__":
    main()
