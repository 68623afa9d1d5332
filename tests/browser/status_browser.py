#!/usr/bin/python3
"""The status page (flare_status_route, served by examples/hello at /status)
in headless Chromium: the page renders its cards, charts and route table
from /status?json, fetches nothing from anywhere else, and its numbers move
while a load runs. Chromium is driven over the DevTools protocol with the
driver of cdp.py (python3-websockets, no driver binary).

    /usr/bin/python3 tests/browser/status_browser.py [BUILD_DIR]

Exits 0 when every check passes, 77 when Chromium or python3-websockets is
missing (skipped), 1 otherwise.
"""

import os
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cdp  # noqa: E402


def load(port, seconds, stop):
    """Keep-alive GET /plaintext for `seconds`; returns how many were answered."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    n = 0
    end = time.monotonic() + seconds
    req = b"GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n" * 10
    buf = b""
    while time.monotonic() < end and not stop.is_set():
        s.sendall(req)
        while buf.count(b"Hello, World!") < 10:
            buf += s.recv(65536)
        buf = buf.replace(b"Hello, World!", b"", 10)
        n += 10
        time.sleep(0.002)
    s.close()
    return n


async def scenario(c, base):
    page = await cdp.Page.open(c, base + "/status", "status")
    num = "(() => { const t = document.getElementById('total'); return t ? +t.textContent : NaN })()"
    await page.wait("!isNaN(%s)" % num, "the page to show a request count")
    t0 = await page.js(num)
    stop = threading.Event()
    th = threading.Thread(target=lambda: load(int(base.rsplit(":", 1)[1]), 4, stop))
    th.start()
    try:
        await page.wait("%s >= %d" % (num, t0 + 500), "the request count to move under load")
        await page.wait("+document.getElementById('rps').textContent > 0",
                        "a requests/s figure above 0")
        await page.wait("[...document.querySelectorAll('#routes tbody tr')].some(r => "
                        "r.cells[0].textContent === 'GET' && r.cells[1].textContent === '/plaintext' && +r.cells[2].textContent > 0)",
                        "a /plaintext row with requests in the route table")
        await page.wait("document.querySelectorAll('#c_rps polyline').length === 1 && "
                        "document.querySelector('#c_rps polyline').getAttribute('points')"
                        ".split(' ').length >= 3", "the requests/s chart to draw")
        await page.wait("/\\d/.test(document.getElementById('pct').textContent)",
                        "latency percentiles")
        await page.wait("/^\\d+ \\/ \\d+ \\/ \\d+$/.test(document.getElementById('conns')"
                        ".textContent)", "the connections card")
    finally:
        stop.set()
        th.join()
    # nothing came from anywhere but the server itself
    origins = await page.js("[...performance.getEntriesByType('resource')]"
                            ".map(e => new URL(e.name).origin)")
    bad = [o for o in origins if o != base]
    if bad:
        raise AssertionError("the page fetched from elsewhere: %r" % bad)


def main():
    build_dir = cdp.build_dir_from(sys.argv)
    return cdp.main_with_server(sys.argv, os.path.join(build_dir, "examples", "hello"),
                                ["--workers", "2"], scenario, "hello",
                                "status page in chromium: ok", check_sigterm=False)


if __name__ == "__main__":
    sys.exit(main())
