#!/usr/bin/python3
"""Swagger UI (flare_swagger_ui) of examples/todo_api in headless Chromium:
/docs/ renders, lists every operation of /openapi.json (method, path and
summary), shows the cookie security scheme (the Authorize button), expands
an operation to its parameters, and fetches nothing from anywhere but the
server (the page works offline). Chromium is driven over the DevTools
protocol with the driver of cdp.py (python3-websockets, no
driver binary).

    /usr/bin/python3 tests/browser/openapi_browser.py [BUILD_DIR]

Exits 0 when every check passes, 77 when Chromium or python3-websockets is
missing (skipped), 1 otherwise.
"""

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cdp as cb  # noqa: E402  (tests/browser/cdp.py: the DevTools driver)

OPS = "[...document.querySelectorAll('.opblock')].map(b => [" \
      "b.querySelector('.opblock-summary-method').textContent.trim(), " \
      "b.querySelector('.opblock-summary-path').getAttribute('data-path'), " \
      "(b.querySelector('.opblock-summary-description') || {textContent: ''})" \
      ".textContent.trim()])"


def start_todo_api(build_dir, db_dir):
    port = cb.free_port()
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([os.path.join(build_dir, "examples", "todo_api"), "--listen",
                             "127.0.0.1:%d" % port, "--workers", "1",
                             "--db", "sqlite:" + os.path.join(db_dir, "todo.db")],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port, log
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    proc.kill()
    log.seek(0)
    raise RuntimeError("todo_api did not start: %s" % log.read().decode(errors="replace"))


def expected_ops(base):
    with urllib.request.urlopen(base + "/openapi.json", timeout=10) as r:
        doc = json.load(r)
    out = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            out.append([method.upper(), path, op.get("summary", "")])
    return sorted(out)


async def scenario(cdp, base):
    want = expected_ops(base)
    page = await cb.Page.open(cdp, base + "/docs/", "docs")
    await page.wait("document.querySelectorAll('.opblock').length === %d" % len(want),
                    "Swagger UI to list the %d operations" % len(want), timeout=30)
    got = sorted(await page.js(OPS))
    if got != want:
        raise AssertionError("operations on the page %r, in the document %r" % (got, want))
    title = await page.js("document.querySelector('.info .title').textContent")
    if "Flare todo API" not in title:
        raise AssertionError("title %r" % title)
    await page.wait("!!document.querySelector('.btn.authorize')",
                    "the Authorize button (the cookie security scheme)")
    # open GET /api/todos/{id}: its path parameter is listed
    await page.js("[...document.querySelectorAll('.opblock')].find(b => "
                  "b.querySelector('.opblock-summary-path').getAttribute('data-path') === "
                  "'/api/todos/{id}' && b.classList.contains('opblock-get'))"
                  ".querySelector('.opblock-summary-control').click(); true")
    await page.wait("[...document.querySelectorAll('.opblock.is-open .parameters "
                    ".parameter__name')].some(e => e.textContent.trim().startsWith('id'))",
                    "the id parameter of GET /api/todos/{id}")
    # everything came from the server itself
    origins = await page.js("[...performance.getEntriesByType('resource')]"
                            ".map(e => new URL(e.name).origin)")
    bad = [o for o in origins if o != base]
    if bad:
        raise AssertionError("the page fetched from elsewhere: %r" % bad)
    names = await page.js("[...performance.getEntriesByType('resource')]"
                          ".map(e => new URL(e.name).pathname)")
    for need in ("/docs/swagger-ui-bundle.js", "/docs/swagger-ui.css", "/openapi.json"):
        if need not in names:
            raise AssertionError("%s was not loaded: %r" % (need, names))
    print("docs page lists %d operations" % len(got))


def main():
    build_dir = (sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FLARE_BUILD_DIR")
                 or os.path.join(cb.REPO, "build"))
    chromium = cb.find_chromium()
    if chromium is None or cb.websockets is None:
        print("skipped: needs chromium and python3-websockets (tools/deps.sh test)")
        return cb.SKIP
    profile = tempfile.mkdtemp(prefix="flare-chromium-")
    db_dir = tempfile.mkdtemp(prefix="flare-todo-")
    server, port, log = start_todo_api(build_dir, db_dir)
    browser = None
    try:
        browser, url = cb.start_chromium(chromium, profile)

        async def run():
            cdp = await cb.Cdp.connect(url)
            try:
                await scenario(cdp, "http://127.0.0.1:%d" % port)
            finally:
                await cdp.close()

        asyncio.run(asyncio.wait_for(run(), 120))
        if server.poll() is not None:
            raise AssertionError("todo_api died")
        print("swagger ui in chromium: ok")
        return 0
    finally:
        if browser is not None:
            cb.stop_group(browser)
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
        shutil.rmtree(profile, ignore_errors=True)
        shutil.rmtree(db_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
