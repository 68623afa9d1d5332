"""The todo_api example over real sockets: sessions, validation, CORS,
every status, header and body of its contract."""
import json
import os
import re
import signal
import sqlite3
import subprocess
import tempfile
import time

import sys

import flaretest
from flaretest import Conn, ServerTestCase, build_request

sys.path.insert(0, os.path.join(flaretest.REPO_ROOT, "tests"))
import services_redis  # noqa: E402  (tests/services_redis.py: a private redis-server)

ORIGIN = "http://localhost:3000"
DB_DIR = tempfile.mkdtemp(prefix="flare-todo-")


class TodoApi(ServerTestCase):
    server_binary = flaretest.TODO_API
    server_args = ("--db", "sqlite:" + os.path.join(DB_DIR, "todo.db"))

    # -- helpers -----------------------------------------------------------
    def call(self, method, path, body=None, cookie=None, headers=None, raw=None):
        hdrs = list(headers or [])
        if cookie:
            hdrs.append(("Cookie", "todo_sid=" + cookie))
        data = None
        if raw is not None:
            data = raw
        elif body is not None:
            data = json.dumps(body).encode()
            hdrs.append(("Content-Type", "application/json"))
        c = self.connect()
        c.send(build_request(method, path, hdrs, data))
        r = c.read_response(head=(method == "HEAD"))
        self.assertCommon(r)
        return r

    def js(self, r):
        self.assertTrue(r.get("Content-Type", "").startswith("application/json"), r)
        return json.loads(r.body)

    def login(self):
        r = self.call("POST", "/api/session", {"user": "alice", "password": "wonderland"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.js(r), {"user": "alice"})
        m = re.match(r"todo_sid=([0-9a-f]{32}); Path=/; Max-Age=\d+; HttpOnly; SameSite=Lax$",
                     r.get("Set-Cookie", ""))
        self.assertIsNotNone(m, r.get("Set-Cookie"))
        return m.group(1)

    def create(self, sid, title="t", done=False):
        r = self.call("POST", "/api/todos", {"title": title, "done": done}, sid)
        self.assertEqual(r.status, 201, r)
        return r, self.js(r)

    # -- sessions ------------------------------------------------------------
    def test_login_wrong_credentials(self):
        for body in ({"user": "alice", "password": "nope"}, {"user": "bob", "password": "wonderland"}):
            r = self.call("POST", "/api/session", body)
            self.assertEqual(r.status, 401, r)
            self.assertEqual(self.js(r), {"error": "invalid user or password"})
            self.assertFalse(r.has("Set-Cookie"))

    def test_login_invalid_body(self):
        r = self.call("POST", "/api/session", {"user": "alice"})
        self.assertEqual(r.status, 400, r)
        self.assertEqual(self.js(r), {"errors": [{"field": "password", "reason": "is required"}]})
        r = self.call("POST", "/api/session", raw=b'{"user": "alice",', headers=[("Content-Type", "application/json")])
        self.assertEqual(r.status, 400, r)
        err = self.js(r)
        self.assertEqual(err["error"], "invalid JSON")
        self.assertEqual(err["line"], 1)
        self.assertIn("column", err)
        r = self.call("POST", "/api/session", raw=b"user=alice", headers=[("Content-Type", "application/x-www-form-urlencoded")])
        self.assertEqual(r.status, 415, r)

    def test_login_and_logout(self):
        sid = self.login()
        r = self.call("GET", "/api/todos", cookie=sid)
        self.assertEqual(r.status, 200, r)
        r = self.call("DELETE", "/api/session", cookie=sid)
        self.assertEqual(r.status, 204, r)
        self.assertEqual(r.get("Set-Cookie"), "todo_sid=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax")
        r = self.call("GET", "/api/todos", cookie=sid)
        self.assertEqual(r.status, 401, r)

    def test_login_regenerates_the_id(self):
        sid1 = self.login()
        r = self.call("POST", "/api/session", {"user": "alice", "password": "wonderland"}, sid1)
        self.assertEqual(r.status, 200)
        sid2 = re.match(r"todo_sid=([0-9a-f]{32});", r.get("Set-Cookie")).group(1)
        self.assertNotEqual(sid1, sid2)
        self.assertEqual(self.call("GET", "/api/todos", cookie=sid1).status, 401)
        self.assertEqual(self.call("GET", "/api/todos", cookie=sid2).status, 200)

    def test_todos_need_a_session(self):
        for method, path, body in (("GET", "/api/todos", None), ("POST", "/api/todos", {"title": "x", "done": False}),
                                   ("GET", "/api/todos/1", None), ("PATCH", "/api/todos/1", {"done": True}),
                                   ("DELETE", "/api/todos/1", None)):
            for cookie in (None, "0" * 32, "not-a-session"):
                r = self.call(method, path, body, cookie)
                self.assertEqual(r.status, 401, (method, path, r))
                self.assertEqual(self.js(r), {"error": "login required"})

    # -- CRUD ------------------------------------------------------------------
    def test_create_get_list(self):
        sid = self.login()
        r, todo = self.create(sid, "buy milk", False)
        self.assertEqual(set(todo), {"id", "title", "done"})
        self.assertEqual((todo["title"], todo["done"]), ("buy milk", False))
        self.assertEqual(r.get("Location"), "/api/todos/%d" % todo["id"])
        r = self.call("GET", r.get("Location"), cookie=sid)
        self.assertEqual((r.status, self.js(r)), (200, todo))
        r = self.call("GET", "/api/todos", cookie=sid)
        self.assertEqual(r.status, 200)
        self.assertIn(todo, self.js(r))

    def test_create_validation_lists_every_field(self):
        sid = self.login()
        r = self.call("POST", "/api/todos", {"title": "", "done": "yes"}, sid)
        self.assertEqual(r.status, 400, r)
        self.assertEqual(self.js(r), {"errors": [
            {"field": "title", "reason": "length must be 1..200"},
            {"field": "done", "reason": "must be a boolean"}]})
        r = self.call("POST", "/api/todos", {}, sid)
        self.assertEqual(r.status, 400)
        fields = [e["field"] for e in self.js(r)["errors"]]
        self.assertEqual(fields, ["title", "done"])
        r = self.call("POST", "/api/todos", {"title": "x" * 201, "done": True}, sid)
        self.assertEqual(r.status, 400)
        self.assertEqual(self.js(r)["errors"][0]["field"], "title")
        r = self.call("POST", "/api/todos", [1, 2], sid)
        self.assertEqual(r.status, 400)

    def test_title_limits(self):
        sid = self.login()
        self.create(sid, "x" * 200, True)
        _, t = self.create(sid, "é" * 200, False)  # 200 characters, 400 bytes
        self.assertEqual(t["title"], "é" * 200)
        _, t = self.create(sid, 'quote " and \\ and \n', False)
        self.assertEqual(t["title"], 'quote " and \\ and \n')

    def test_patch(self):
        sid = self.login()
        _, t = self.create(sid, "old", False)
        path = "/api/todos/%d" % t["id"]
        r = self.call("PATCH", path, {"done": True}, sid)
        self.assertEqual((r.status, self.js(r)), (200, {"id": t["id"], "title": "old", "done": True}))
        r = self.call("PATCH", path, {"title": "new"}, sid)
        self.assertEqual(self.js(r), {"id": t["id"], "title": "new", "done": True})
        r = self.call("PATCH", path, {"title": ""}, sid)
        self.assertEqual(r.status, 400)
        self.assertEqual(self.js(r)["errors"][0]["field"], "title")
        r = self.call("GET", path, cookie=sid)
        self.assertEqual(self.js(r)["title"], "new")
        r = self.call("PATCH", "/api/todos/999999", {"done": True}, sid)
        self.assertEqual(r.status, 404)

    def test_delete(self):
        sid = self.login()
        _, t = self.create(sid)
        path = "/api/todos/%d" % t["id"]
        r = self.call("DELETE", path, cookie=sid)
        self.assertEqual(r.status, 204, r)
        self.assertEqual(r.body, b"")
        self.assertEqual(self.call("GET", path, cookie=sid).status, 404)
        r = self.call("DELETE", path, cookie=sid)
        self.assertEqual(r.status, 404)
        self.assertEqual(self.js(r), {"error": "no such todo"})

    def test_unknown_ids(self):
        sid = self.login()
        for path in ("/api/todos/0", "/api/todos/abc", "/api/todos/99999999999999999999"):
            self.assertEqual(self.call("GET", path, cookie=sid).status, 404, path)

    def test_method_not_allowed(self):
        r = self.call("GET", "/api/session")
        self.assertEqual(r.status, 405)
        self.assertEqual(r.get("Allow"), "POST, DELETE, OPTIONS")

    # -- cross-cutting middleware ----------------------------------------------
    def test_cors(self):
        r = self.call("OPTIONS", "/api/todos", headers=[("Origin", ORIGIN), ("Access-Control-Request-Method", "POST"),
                                                        ("Access-Control-Request-Headers", "content-type")])
        self.assertEqual(r.status, 204, r)
        self.assertEqual(r.get("Access-Control-Allow-Origin"), ORIGIN)
        self.assertEqual(r.get("Access-Control-Allow-Credentials"), "true")
        self.assertIn("POST", r.get("Access-Control-Allow-Methods"))
        self.assertEqual(r.get("Access-Control-Allow-Headers"), "Content-Type")
        self.assertIn("Origin", r.all("Vary"))
        sid = self.login()
        r = self.call("GET", "/api/todos", cookie=sid, headers=[("Origin", ORIGIN)])
        self.assertEqual(r.status, 200)
        self.assertEqual(r.get("Access-Control-Allow-Origin"), ORIGIN)
        self.assertEqual(r.get("Access-Control-Allow-Credentials"), "true")
        r = self.call("GET", "/api/todos", cookie=sid, headers=[("Origin", "http://evil.test")])
        self.assertFalse(r.has("Access-Control-Allow-Origin"))
        r = self.call("OPTIONS", "/api/todos", headers=[("Origin", "http://evil.test"), ("Access-Control-Request-Method", "POST")])
        self.assertEqual(r.status, 403)
        self.assertFalse(r.has("Access-Control-Allow-Origin"))

    def test_security_headers_and_request_id(self):
        for path in ("/api/todos", "/nowhere"):
            r = self.call("GET", path)
            self.assertEqual(r.get("X-Content-Type-Options"), "nosniff")
            self.assertEqual(r.get("X-Frame-Options"), "DENY")
            self.assertEqual(r.get("Referrer-Policy"), "no-referrer")
            self.assertRegex(r.get("X-Request-Id", ""), r"^[0-9a-f]{16}$")
        r = self.call("GET", "/nowhere", headers=[("X-Request-Id", "trace-42")])
        self.assertEqual(r.get("X-Request-Id"), "trace-42")


class TodoApiDatabase(ServerTestCase):
    """The todos live in the database: they survive a restart, the ids are
    never reused, and what the API says is what the table holds."""
    server_binary = flaretest.TODO_API
    path = os.path.join(DB_DIR, "restart.db")
    server_args = ("--db", "sqlite:" + path)

    def call(self, method, path, body=None, cookie=None, addr=None):
        hdrs = [("Cookie", "todo_sid=" + cookie)] if cookie else []
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            hdrs.append(("Content-Type", "application/json"))
        c = self.connect(addr=addr)
        c.send(build_request(method, path, hdrs, data))
        return c.read_response()

    def login(self, addr=None):
        r = self.call("POST", "/api/session", {"user": "alice", "password": "wonderland"},
                      addr=addr)
        self.assertEqual(r.status, 200, r)
        return re.match(r"todo_sid=([0-9a-f]{32});", r.get("Set-Cookie")).group(1)

    def test_survives_a_restart(self):
        sid = self.login()
        made = []
        for title in ("one", "two", "'; DROP TABLE todos; --"):
            r = self.call("POST", "/api/todos", {"title": title, "done": title == "two"}, sid)
            self.assertEqual(r.status, 201, r)
            made.append(json.loads(r.body))
        r = self.call("DELETE", "/api/todos/%d" % made[0]["id"], cookie=sid)
        self.assertEqual(r.status, 204)
        con = sqlite3.connect(self.path, timeout=10)
        rows = con.execute("SELECT id, title, done FROM todos ORDER BY id").fetchall()
        con.close()
        self.assertEqual(rows, [(t["id"], t["title"], int(t["done"])) for t in made[1:]])
        # a second server on the same file: the same todos, after the first is gone
        rc, _ = self.server.stop()
        self.assertEqual(rc, 0, self.server.output())
        self.server.close_log()
        again = flaretest.Server(*self.server_args, binary=flaretest.TODO_API).start()
        try:
            sid = self.login(addr=again.addr)
            r = self.call("GET", "/api/todos", cookie=sid, addr=again.addr)
            self.assertEqual((r.status, json.loads(r.body)), (200, made[1:]))
            r = self.call("POST", "/api/todos", {"title": "three", "done": False}, sid,
                          addr=again.addr)
            self.assertGreater(json.loads(r.body)["id"], made[2]["id"], "ids are not reused")
        finally:
            rc, _ = again.stop()
            again.close_log()
        self.assertEqual(rc, 0)
        # the class's server is stopped: start a fresh one for tearDownClass
        type(self).server = flaretest.Server(*self.server_args, binary=flaretest.TODO_API).start()
        type(self).addr = self.server.addr

    def test_sigterm_right_after_the_port_accepts(self):
        # the port accepts while the other workers are still being set up
        # (their database handles opened): a SIGTERM then must stop the
        # server cleanly, not kill it
        path = os.path.join(DB_DIR, "early-stop.db")
        for _ in range(15):
            srv = flaretest.Server("--db", "sqlite:" + path, binary=flaretest.TODO_API).start()
            try:
                srv.send_signal(signal.SIGTERM)
                rc = srv.wait(10)
                self.assertEqual(rc, 0, "%s\n%s" % (flaretest.describe_rc(rc), srv.output()))
            finally:
                if srv.alive():
                    srv.proc.kill()
                    srv.proc.wait()
                srv.close_log()

    def test_bad_database_url(self):
        for url, why in (("mysql://x", "unknown URL scheme"),
                         ("sqlite:/nonexistent-dir/x/todo.db", "")):
            p = subprocess.run([flaretest.TODO_API, "--listen", "127.0.0.1:%d" % flaretest.free_port(),
                                "--workers", "1", "--db", url], capture_output=True, timeout=30)
            self.assertEqual(p.returncode, 1, p)
            self.assertIn(b"--db", p.stderr)
            self.assertIn(why.encode(), p.stderr)


class TodoApiRedisSessions(ServerTestCase):
    """--sessions redis://: a session survives a restart of the server, two
    instances on the same Redis share it, and while Redis is down a login
    answers 503 rather than handing out a session that was never stored."""
    server_binary = flaretest.TODO_API

    @classmethod
    def setUpClass(cls):
        cls.redis = services_redis.Redis().start()
        cls.server_args = ("--db", "sqlite:" + os.path.join(DB_DIR, "redis.db"),
                           "--sessions", cls.redis.url)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.redis.stop()

    def call(self, method, path, body=None, cookie=None, addr=None):
        hdrs = [("Cookie", "todo_sid=" + cookie)] if cookie else []
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            hdrs.append(("Content-Type", "application/json"))
        c = self.connect(addr=addr)
        c.send(build_request(method, path, hdrs, data))
        return c.read_response()

    def login(self, addr=None):
        r = self.call("POST", "/api/session", {"user": "alice", "password": "wonderland"},
                      addr=addr)
        self.assertEqual(r.status, 200, r)
        return re.match(r"todo_sid=([0-9a-f]{32});", r.get("Set-Cookie")).group(1)

    def test_shared_and_survives_a_restart(self):
        sid = self.login()
        self.assertEqual(self.call("GET", "/api/todos", cookie=sid).status, 200)
        other = flaretest.Server(*self.server_args, binary=flaretest.TODO_API).start()
        try:
            # the second instance knows the session the first one made
            r = self.call("GET", "/api/todos", cookie=sid, addr=other.addr)
            self.assertEqual(r.status, 200, r)
            # and the other way round
            sid2 = self.login(addr=other.addr)
            self.assertEqual(self.call("GET", "/api/todos", cookie=sid2).status, 200)
            # logout on one ends it on both
            self.assertEqual(self.call("DELETE", "/api/session", cookie=sid2,
                                       addr=other.addr).status, 204)
            self.assertEqual(self.call("GET", "/api/todos", cookie=sid2).status, 401)
        finally:
            rc, _ = other.stop()
            other.close_log()
        self.assertEqual(rc, 0)
        # a restart: the first session still works on a new process
        again = flaretest.Server(*self.server_args, binary=flaretest.TODO_API).start()
        try:
            self.assertEqual(self.call("GET", "/api/todos", cookie=sid, addr=again.addr).status,
                             200)
        finally:
            again.stop()
            again.close_log()

    def test_redis_down(self):
        sid = self.login()
        self.redis.stop()
        try:
            r = self.call("POST", "/api/session", {"user": "alice", "password": "wonderland"})
            self.assertEqual(r.status, 503, r)
            self.assertFalse(r.has("Set-Cookie"), "no cookie for a session never stored")
            # a request with a session cookie cannot be told apart from a
            # logged-out one: 503, not 401
            self.assertEqual(self.call("GET", "/api/todos", cookie=sid).status, 503)
        finally:
            self.redis.start()
        # back by itself (reconnect with backoff)
        deadline = time.monotonic() + 20
        status = None
        while time.monotonic() < deadline:
            status = self.call("POST", "/api/session",
                               {"user": "alice", "password": "wonderland"}).status
            if status == 200:
                break
            time.sleep(0.2)
        self.assertEqual(status, 200)


if __name__ == "__main__":
    flaretest.main()
