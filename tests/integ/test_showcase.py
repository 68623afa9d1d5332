"""examples/showcase (what `make run` starts) over real sockets: every link of
its pages answers, the todo API keeps each user's todos apart, the live feed
sees todo changes, uploads report what was sent, the API is documented."""
import html.parser
import json
import os
import socket
import subprocess
import time
import unittest
import urllib.parse

import flaretest
from flaretest import ServerTestCase, build_request

SHOWCASE = os.path.join(os.path.abspath(flaretest.BUILD_DIR), "examples", "showcase")
DB_DIR = flaretest.temp_dir(prefix="flare-showcase-")


class Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links = []
        self.forms = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("href", "src"):
            if a.get(key):
                self.links.append(a[key])
        if tag == "form" and a.get("action"):
            self.forms.append((a.get("method", "get").upper(), a["action"]))


class Showcase(ServerTestCase):
    server_binary = SHOWCASE
    server_args = ("--db", "sqlite:" + os.path.join(DB_DIR, "showcase.db"))
    server_tls = False

    def call(self, method, path, body=None, sid=None, headers=None, raw=None):
        hdrs = list(headers or [])
        if sid:
            hdrs.append(("Cookie", "showcase_sid=" + sid))
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            hdrs.append(("Content-Type", "application/json"))
        c = self.connect()
        c.send(build_request(method, path, hdrs, data))
        r = c.read_response(head=(method == "HEAD"))
        self.assertCommon(r)
        return r

    def json(self, r):
        self.assertTrue(r.get("Content-Type", "").startswith("application/json"), r)
        return json.loads(r.body)

    def login(self, user):
        r = self.call("POST", "/api/session", {"user": user})
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(self.json(r), {"user": user})
        cookie = r.get("Set-Cookie")
        self.assertTrue(cookie and cookie.startswith("showcase_sid="), cookie)
        self.assertIn("HttpOnly", cookie)
        return cookie.split(";")[0].split("=", 1)[1]

    # -- the site ------------------------------------------------------------
    def test_every_link_answers(self):
        """Every link, script and stylesheet of / and of the pages it links
        to answers 200 (after at most one redirect, /docs -> /docs/)."""
        seen, todo, pages, forms, no_ui = set(), ["/"], 0, set(), None
        while todo:
            path = todo.pop(0)
            if path in seen:
                continue
            seen.add(path)
            r = self.call("GET", path)
            if r.status in (301, 302, 308):
                loc = urllib.parse.urljoin(path, r.get("Location"))
                r = self.call("GET", loc)
            if r.status == 503 and path.startswith("/docs") and b"not installed" in r.body:
                no_ui = r.body.decode(errors="replace").strip()  # npm was missing at build time
                continue
            self.assertEqual(r.status, 200, "%s: %d %r" % (path, r.status, r.body[:300]))
            if not r.get("Content-Type", "").startswith("text/html"):
                continue
            pages += 1
            p = Links()
            p.feed(r.body.decode())
            forms.update(p.forms)
            for link in p.links:
                u = urllib.parse.urlparse(urllib.parse.urljoin(path, link))
                self.assertIn(u.scheme, ("", "http"), "only links to itself: %s on %s" % (link, path))
                # follow the site's own pages, not every file of Swagger UI
                if path == "/" or not u.path.startswith("/docs"):
                    todo.append(u.path + ("?" + u.query if u.query else ""))
        for must in ("/todos.html", "/chat.html", "/events.html", "/upload.html", "/docs/",
                     "/openapi.json", "/metrics", "/healthz", "/readyz", "/status"):
            self.assertIn(must, seen, "the index links %s" % must)
        self.assertGreaterEqual(pages, 6)
        # the upload form posts where the server takes it (test_upload_reports_parts)
        self.assertEqual(forms, {("POST", "/upload")})
        if no_ui:
            self.skipTest("every other link answers; /docs/ could not be checked: " + no_ui)

    def test_ops_routes(self):
        r = self.call("GET", "/metrics")
        self.assertEqual(r.status, 200)
        self.assertIn(b"flare_http_requests_total", r.body)
        self.assertEqual(self.json(self.call("GET", "/healthz"))["status"], "ok")
        self.assertEqual(self.call("GET", "/readyz").status, 200)
        self.assertEqual(self.call("GET", "/status?json").status, 200)

    def test_openapi_documents_the_api(self):
        doc = self.json(self.call("GET", "/openapi.json"))
        self.assertTrue(doc["openapi"].startswith("3.1"), doc["openapi"])
        ops = {(m, p) for p, item in doc["paths"].items() for m in item}
        for op in (("post", "/api/session"), ("get", "/api/session"), ("delete", "/api/session"),
                   ("get", "/api/todos"), ("post", "/api/todos"), ("patch", "/api/todos/{id}"),
                   ("delete", "/api/todos/{id}"), ("post", "/upload")):
            self.assertIn(op, ops)

    # -- todos and sessions --------------------------------------------------
    def test_todos_per_user(self):
        alice, bob = self.login("alice"), self.login("bob.b")
        self.assertEqual(self.json(self.call("GET", "/api/session", sid=alice)), {"user": "alice"})
        r = self.call("POST", "/api/todos", {"title": "buy milk"}, alice)
        self.assertEqual(r.status, 201, r.body)
        t = self.json(r)
        self.assertEqual((t["title"], t["done"]), ("buy milk", False))
        self.assertEqual(r.get("Location"), "/api/todos/%d" % t["id"])
        self.assertEqual(self.json(self.call("GET", "/api/todos", sid=bob)), [])
        self.assertIn(t, self.json(self.call("GET", "/api/todos", sid=alice)))
        path = "/api/todos/%d" % t["id"]
        # another user's todo does not exist for them
        self.assertEqual(self.call("PATCH", path, {"done": True}, bob).status, 404)
        self.assertEqual(self.call("DELETE", path, sid=bob).status, 404)
        r = self.call("PATCH", path, {"done": True}, alice)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(self.json(r), dict(t, done=True))
        self.assertEqual(self.call("DELETE", path, sid=alice).status, 204)
        self.assertEqual(self.call("DELETE", path, sid=alice).status, 404)
        self.assertNotIn(t["id"], [x["id"] for x in self.json(self.call("GET", "/api/todos", sid=alice))])

    def test_bad_input(self):
        for body in ({"user": ""}, {"user": "a b"}, {"user": "x" * 33}, {"user": 5}, {},
                     {"user": "a", "extra": 1}):
            r = self.call("POST", "/api/session", body)
            self.assertEqual(r.status, 400, (body, r.body))
            self.assertIn("errors", self.json(r))
        # the login form shows "reason" to the user: words, never the regular expression
        # (which is there for developers, apart)
        for user in ("a b", "", "x" * 33, 5):
            r = self.call("POST", "/api/session", {"user": user})
            [e] = self.json(r)["errors"]
            self.assertEqual(e["field"], "user")
            self.assertEqual(e["reason"], "use 1 to 32 letters, digits, '.', '_' or '-'", r.body)
        [e] = self.json(self.call("POST", "/api/session", {"user": "a b"}))["errors"]
        self.assertEqual(e["pattern"], "^[A-Za-z0-9_.-]+$")
        [e] = self.json(self.call("POST", "/api/session", {}))["errors"]
        self.assertEqual(e, {"field": "user", "reason": "is required"})
        self.assertEqual(self.call("POST", "/api/session", raw=b"{not json",
                                   headers=[("Content-Type", "application/json")]).status, 400)
        for method, path, body in (("GET", "/api/todos", None), ("POST", "/api/todos", {"title": "x"}),
                                   ("PATCH", "/api/todos/1", {"done": True}),
                                   ("DELETE", "/api/todos/1", None)):
            r = self.call(method, path, body)
            self.assertEqual(r.status, 401, (method, path))
        sid = self.login("carol")
        for body in ({"title": ""}, {"title": "x" * 201}, {"title": 1}, {"title": "x", "done": True}):
            self.assertEqual(self.call("POST", "/api/todos", body, sid).status, 400, body)
        for path in ("/api/todos/0", "/api/todos/abc", "/api/todos/99999999999999999999"):
            self.assertEqual(self.call("PATCH", path, {"done": True}, sid).status, 404, path)
        self.assertEqual(self.call("DELETE", "/api/session", sid=sid).status, 204)
        self.assertEqual(self.call("GET", "/api/todos", sid=sid).status, 401)
        self.assertServerAlive()

    def test_blank_title_refused(self):
        """A title of white space only (ASCII or Unicode spaces) is a 400 in
        the shape of the API's other validation errors, and adds nothing."""
        sid = self.login("dave")
        for title in (" ", "   ", "\t\n", "\u00a0\u3000 ", "\u2003"):
            r = self.call("POST", "/api/todos", {"title": title}, sid)
            self.assertEqual(r.status, 400, (title, r.status, r.body))
            self.assertEqual(self.json(r), {"errors": [{"field": "title",
                                                        "reason": "must not be blank (only spaces)"}]})
        self.assertEqual(self.json(self.call("GET", "/api/todos", sid=sid)), [])
        # spaces around words are kept as sent
        r = self.call("POST", "/api/todos", {"title": " x "}, sid)
        self.assertEqual(r.status, 201, r.body)
        self.assertEqual(self.json(r)["title"], " x ")

    # -- the status page -----------------------------------------------------
    def test_status_rows_and_streams(self):
        """/status?json has one row per route and method (GET, POST and DELETE
        /api/session apart, each naming its method); an SSE stream and a
        WebSocket are counted as streams of their route, not in its latency
        histogram, and /metrics agrees (flare_http_streams_total, no
        duration series for them). The page links back and carries the
        site's icon, stylesheet and navigation bar."""
        s = socket.create_connection(self.addr, timeout=5)
        try:
            s.sendall(b"GET /events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
            buf, deadline = b"", time.monotonic() + 5
            while b"event: clock" not in buf and time.monotonic() < deadline:
                buf += s.recv(4096)
            self.assertIn(b"event: clock", buf)
            time.sleep(0.3)  # a stream lasts: it must not show as a latency
        finally:
            s.close()
        w = socket.create_connection(self.addr, timeout=5)
        try:
            w.sendall(b"GET /ws?name=zed&room=r9 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                      b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                      b"Sec-WebSocket-Version: 13\r\n\r\n")
            self.assertTrue(w.recv(4096).startswith(b"HTTP/1.1 101 "))
        finally:
            w.close()
        self.call("GET", "/api/session")
        self.call("DELETE", "/api/session")
        rows, deadline = None, time.monotonic() + 5
        while time.monotonic() < deadline:
            rows = self.json(self.call("GET", "/status?json"))["routes"]
            by = {(r["method"], r["route"]): r for r in rows}
            if by.get(("GET", "/events"), {}).get("requests", 0) >= 1:
                break
            time.sleep(0.1)
        keys = [(r["method"], r["route"]) for r in rows]
        self.assertEqual(len(keys), len(set(keys)), "one row per route and method: %r" % keys)
        for m in ("GET", "POST", "DELETE"):
            self.assertIn((m, "/api/session"), by)
        self.assertEqual(by[("", "")]["route"], "", "the unmatched row comes first, no method")
        for key in (("GET", "/events"), ("GET", "/ws")):
            r = by[key]
            self.assertGreaterEqual(r["streams"], 1, r)
            # only answers that are not streams are timed: the chat's refused
            # handshakes (other tests), not its upgrades nor the SSE streams
            timed = r["requests"] if key[1] == "/ws" else 0
            self.assertEqual(sum(r["hist"]), timed, "a stream is not a latency: %r" % (r,))
        self.assertEqual(by[("GET", "/api/session")]["streams"], 0)
        self.assertGreaterEqual(sum(by[("GET", "/api/session")]["hist"]), 1)
        m = self.call("GET", "/metrics").body.decode()
        self.assertRegex(m, r'flare_http_streams_total\{route="/events",method="GET"\} [1-9]')
        self.assertRegex(m, r'flare_http_streams_total\{route="/ws",method="GET"\} [1-9]')
        self.assertNotIn('flare_http_request_duration_seconds_count{route="/events"}', m)
        self.assertIn('flare_http_request_duration_seconds_count{route="/api/session"}', m)
        page = self.call("GET", "/status").body.decode()
        for must in ('class="back" href="/"', 'href="/favicon.svg"', 'href="/style.css"',
                     'src="/common.js"', 'name="viewport"'):
            self.assertIn(must, page)

    def test_favicon(self):
        r = self.call("GET", "/favicon.svg")
        self.assertEqual(r.status, 200)
        self.assertTrue(r.get("Content-Type", "").startswith("image/svg+xml"), r)
        r = self.call("GET", "/favicon.ico")
        self.assertEqual((r.status, r.get("Location")), (301, "/favicon.svg"))

    # -- live events ---------------------------------------------------------
    def test_events_clock_and_todo_feed(self):
        s = socket.create_connection(self.addr, timeout=5)
        try:
            s.sendall(b"GET /events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
            buf = b""
            deadline = time.monotonic() + 5
            while b"event: clock" not in buf and time.monotonic() < deadline:
                buf += s.recv(4096)
            self.assertIn(b"200 OK", buf.split(b"\r\n")[0])
            self.assertIn(b"text/event-stream", buf)
            self.assertIn(b"event: clock", buf)
            sid = self.login("dave")
            self.assertEqual(self.call("POST", "/api/todos", {"title": "feed me"}, sid).status, 201)
            deadline = time.monotonic() + 5
            while b"feed me" not in buf and time.monotonic() < deadline:
                buf += s.recv(4096)
            line = [ln for ln in buf.split(b"\n") if b"feed me" in ln]
            self.assertTrue(line, buf)
            ev = json.loads(line[0].split(b"data:", 1)[1])
            self.assertEqual((ev["action"], ev["user"], ev["title"], ev["done"]),
                             ("added", "dave", "feed me", False))
        finally:
            s.close()

    # -- chat ----------------------------------------------------------------
    def test_chat_rooms(self):
        try:
            import websockets
        except ImportError:
            self.skipTest("python3-websockets is not installed (tools/deps.sh test)")
        import asyncio
        base = "ws://%s:%d/ws" % self.addr

        async def recv_json(ws):
            return json.loads(await asyncio.wait_for(ws.recv(), 5))

        async def scenario():
            async with websockets.connect(base + "?name=ann&room=r1") as ann:
                self.assertEqual(await recv_json(ann), {"type": "join", "name": "ann", "room": "r1"})
                async with websockets.connect(base + "?name=ben&room=r1") as ben, \
                        websockets.connect(base + "?name=cat&room=r2") as cat:
                    self.assertEqual((await recv_json(ann))["name"], "ben")
                    await recv_json(ben)  # ben's own join
                    await recv_json(cat)
                    await ann.send("hi <b>\u2713\"")
                    for ws in (ann, ben):
                        self.assertEqual(await recv_json(ws), {"type": "msg", "name": "ann",
                                                               "room": "r1", "text": "hi <b>\u2713\""})
                    await ben.close()
                    self.assertEqual(await recv_json(ann), {"type": "leave", "name": "ben", "room": "r1"})
                    # another room heard none of it
                    with self.assertRaises(asyncio.TimeoutError):
                        await asyncio.wait_for(cat.recv(), 0.3)
                    await ann.send("x" * 2001)  # over the limit: closed with 1009
                    with self.assertRaises(websockets.ConnectionClosed) as cm:
                        await asyncio.wait_for(ann.recv(), 5)
                    self.assertEqual(cm.exception.rcvd.code, 1009)
            for bad in ("?name=a%20b&room=r1", "?room=r1", "?name=ann&room=" + "r" * 33):
                with self.assertRaises(websockets.InvalidStatusCode) as cm:
                    async with websockets.connect(base + bad):
                        pass
                self.assertEqual(cm.exception.status_code, 400, bad)

        asyncio.run(scenario())
        self.assertServerAlive()

    def test_chat_same_origin_only(self):
        """Cross-site WebSocket hijacking: a page on another origin cannot
        open the chat; the showcase's own pages (Origin = Host) can, and so
        can a client that sends no Origin (not a browser)."""
        try:
            import websockets
        except ImportError:
            self.skipTest("python3-websockets is not installed (tools/deps.sh test)")
        import asyncio
        url = "ws://%s:%d/ws?name=o&room=origins" % self.addr

        async def scenario():
            for origin in ("http://%s:%d" % self.addr, None):
                async with websockets.connect(url, origin=origin) as ws:
                    self.assertEqual(json.loads(await asyncio.wait_for(ws.recv(), 5))["type"], "join")
            for origin in ("http://evil.example", "http://%s:%d" % (self.addr[0], self.addr[1] + 1)):
                with self.assertRaises(websockets.InvalidStatusCode) as cm:
                    async with websockets.connect(url, origin=origin):
                        pass
                self.assertEqual(cm.exception.status_code, 403, origin)

        asyncio.run(scenario())

    def test_json_api_needs_a_json_type(self):
        """A cross-origin form or fetch without preflight (text/plain, a form
        type, no type) does not reach the JSON API: 415, naming the type."""
        body = b'{"user": "mallory"}'
        for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
            with self.subTest(ctype=ctype):
                r = self.call("POST", "/api/session", raw=body,
                              headers=[("Content-Type", ctype)] if ctype else [])
                self.assertEqual(r.status, 415, r)
                self.assertIn("application/json", self.json(r)["error"])
                self.assertFalse(r.has("Set-Cookie"))
        r = self.call("POST", "/api/session", raw=body,
                      headers=[("Content-Type", "application/json; charset=utf-8")])
        self.assertEqual(r.status, 200, r)

    # -- uploads -------------------------------------------------------------
    def test_upload_reports_parts(self):
        content = os.urandom(100 * 1024)  # above the in-memory threshold: a temporary file
        b = "----flareshowcase"
        body = (("--%s\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhello\r\n" % b).encode()
                + ("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.bin\"\r\n"
                   "Content-Type: application/octet-stream\r\n\r\n" % b).encode()
                + content + ("\r\n--%s--\r\n" % b).encode())
        r = self.call("POST", "/upload", raw=body,
                      headers=[("Content-Type", "multipart/form-data; boundary=" + b)])
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(self.json(r), {"parts": [
            {"name": "note", "filename": None, "content_type": None, "size": 5},
            {"name": "file", "filename": "x.bin", "content_type": "application/octet-stream",
             "size": len(content)}], "total": len(content) + 5})
        r = self.call("POST", "/upload", raw=b"--x\r\nbroken",
                      headers=[("Content-Type", "multipart/form-data; boundary=x")])
        self.assertEqual(r.status, 400, r.body)
        self.assertIn("error", self.json(r))
        r = self.call("POST", "/upload", raw=b"a=b",
                      headers=[("Content-Type", "application/x-www-form-urlencoded")])
        self.assertGreaterEqual(r.status, 400)
        self.assertLess(r.status, 500)
        self.assertServerAlive()


class ShowcaseAdminListener(ServerTestCase):
    """--admin-listen: /metrics, /status, /healthz, /readyz answer on the
    admin address only (404 on the public one); --ws-origin lets one more
    origin's pages open the chat."""
    server_binary = SHOWCASE
    server_tls = False
    ADMIN_PORT = flaretest.free_port()
    OPS = ("/metrics", "/status", "/status?json", "/healthz", "/readyz")
    server_args = ("--db", "sqlite:" + os.path.join(DB_DIR, "admin.db"),
                   "--admin-listen", "%s:%d" % (flaretest.HOST, ADMIN_PORT),
                   "--ws-origin", "http://app.example")

    def get(self, path, admin):
        c = self.connect(addr=(flaretest.HOST, self.ADMIN_PORT) if admin else None)
        c.send(build_request("GET", path, [], None))
        r = c.read_response()
        self.assertCommon(r)
        return r

    def test_each_path_on_each_listener(self):
        for path in self.OPS:
            with self.subTest(path=path):
                self.assertEqual(self.get(path, admin=False).status, 404)
                self.assertEqual(self.get(path, admin=True).status, 200)
        self.assertIn(b"flare_http_requests_total", self.get("/metrics", admin=True).body)
        # the site itself is on the public listener as always
        self.assertEqual(self.get("/", admin=False).status, 200)
        self.assertEqual(self.get("/chat.html", admin=False).status, 200)

    def test_ws_origin_list(self):
        try:
            import websockets
        except ImportError:
            self.skipTest("python3-websockets is not installed (tools/deps.sh test)")
        import asyncio
        url = "ws://%s:%d/ws?name=w&room=wo" % self.addr

        async def scenario():
            for origin in ("http://app.example", None):
                async with websockets.connect(url, origin=origin) as ws:
                    self.assertEqual(json.loads(await asyncio.wait_for(ws.recv(), 5))["type"], "join")
            # a list replaces the same-origin default: exact origins only
            for origin in ("http://evil.example", "https://app.example", "http://%s:%d" % self.addr):
                with self.assertRaises(websockets.InvalidStatusCode) as cm:
                    async with websockets.connect(url, origin=origin):
                        pass
                self.assertEqual(cm.exception.status_code, 403, origin)

        asyncio.run(scenario())


class ShowcaseStartupErrors(unittest.TestCase):
    """What cannot start says why and exits non-zero, without hanging."""

    def run_showcase(self, *args):
        p = subprocess.run([SHOWCASE, "--workers", "1"] + list(args), stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
        return p.returncode, p.stderr.decode("utf-8", "replace")

    def test_port_in_use(self):
        with socket.socket() as s:
            s.bind((flaretest.HOST, 0))
            s.listen(1)
            addr = "%s:%d" % (flaretest.HOST, s.getsockname()[1])
            rc, err = self.run_showcase("--listen", addr, "--db", "sqlite:" + os.path.join(DB_DIR, "p.db"))
        self.assertNotEqual(rc, 0, err)
        self.assertIn("bind " + addr, err)
        self.assertIn(os.strerror(98), err)  # EADDRINUSE

    def test_bad_database_url(self):
        rc, err = self.run_showcase("--listen", "127.0.0.1:0", "--db", "mysql://nowhere/x")
        self.assertNotEqual(rc, 0, err)
        self.assertIn("--db mysql://nowhere/x", err)
        # a password in the URL is not printed
        rc, err = self.run_showcase("--listen", "127.0.0.1:0", "--db", "mysql://u:secret@nowhere/x")
        self.assertNotEqual(rc, 0, err)
        self.assertIn("--db mysql://***@nowhere/x", err)
        self.assertNotIn("secret", err)
        rc, err = self.run_showcase("--listen", "127.0.0.1:0", "--db", "sqlite:/nonexistent-dir/x.db")
        self.assertNotEqual(rc, 0, err)
        self.assertIn("--db sqlite:/nonexistent-dir/x.db", err)

    def test_missing_site_directory(self):
        rc, err = self.run_showcase("--listen", "127.0.0.1:0", "--static", "/nonexistent-dir",
                                    "--db", "sqlite:" + os.path.join(DB_DIR, "s.db"))
        self.assertNotEqual(rc, 0, err)
        self.assertIn("--static /nonexistent-dir", err)


class ShowcaseDefaults(ServerTestCase):
    """Without --db it uses SQLite under $TMPDIR: nothing to install, nothing
    written to the working directory."""
    server_binary = SHOWCASE
    server_tls = False

    @classmethod
    def setUpClass(cls):
        cls.tmp = flaretest.temp_dir(prefix="flare-showcase-tmp-")
        cls.old = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = cls.tmp
        try:
            super().setUpClass()
        finally:
            if cls.old is None:
                del os.environ["TMPDIR"]
            else:
                os.environ["TMPDIR"] = cls.old

    def test_default_database_in_tmpdir(self):
        self.assertEqual(self.server.proc.poll(), None)
        c = self.connect()
        c.send(build_request("GET", "/healthz", [], None))
        self.assertEqual(c.read_response().status, 200)
        self.assertIn("flare-showcase-%d.db" % os.getuid(), os.listdir(self.tmp))


if __name__ == "__main__":
    flaretest.main()
