#!/usr/bin/python3
"""Server-sent events in headless Chromium: a page of examples/hello opens
an EventSource on /sse?n=5&ms=50 and must receive the five events (ids 1..5,
data 1..5, in order); when the stream ends the browser reconnects by itself
with Last-Event-ID: 5, and the server's resume gives it nothing twice.
Chromium is driven over the DevTools protocol with cdp.py.

    /usr/bin/python3 tests/browser/sse_browser.py [BUILD_DIR]

Exits 0 when every check passes, 77 when Chromium or python3-websockets is
missing (skipped), 1 otherwise.
"""

import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cdp  # noqa: E402

COLLECT = """
window.got = []; window.opens = 0; window.errors = 0;
window.es = new EventSource('/sse?n=5&ms=50');
es.onopen = () => { opens++; };
es.onerror = () => { errors++; };
es.onmessage = (e) => { got.push([e.data, e.lastEventId, e.type]); };
true
"""


async def scenario(c, base):
    page = await cdp.Page.open(c, base + "/plaintext", "sse")
    await page.wait("document.readyState === 'complete'", "the page to load")
    await page.js(COLLECT)
    await page.wait("window.got.length >= 5", "five events")
    got = await page.js("window.got")
    assert got == [[str(i), str(i), "message"] for i in range(1, 6)], got
    # the stream ended: the browser reconnects (Last-Event-ID: 5) and the
    # server resumes after 5, so nothing arrives twice
    await page.wait("window.opens >= 2", "the reconnection", timeout=15)
    await asyncio.sleep(0.3)
    got = await page.js("window.got")
    assert len(got) == 5, got
    await page.js("es.close(); true")


def main():
    build_dir = cdp.build_dir_from(sys.argv)
    return cdp.main_with_server(sys.argv, os.path.join(build_dir, "examples", "hello"),
                                ["--workers", "2"], scenario, "hello",
                                "EventSource in chromium: ok")


if __name__ == "__main__":
    sys.exit(main())
