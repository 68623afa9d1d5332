#!/usr/bin/python3
"""The error log and the access log of examples/hello under concurrent load:
every line parses (combined and JSON), N requests give N access lines, the
request ids are unique and equal to the X-Request-Id each client saw (with
the request-id middleware) and to the id in the request's error-log line
(flare_req_log through GET /log); quotes, control bytes and UTF-8 sent by
clients are escaped; bad flags are refused; "-" is stdout for the access
log and stderr for the error log; the files are created 0640, also when
reopened."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
from flaretest import Conn, Server  # noqa: E402

CLIENTS = 16
PER_CLIENT = 60

COMBINED_RE = re.compile(
    r'^(?P<peer>\S+) - - \[(?P<time>\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d \+0000)\] '
    r'"(?P<method>\S+) (?P<target>\S+) (?P<proto>HTTP/1\.[01])" (?P<status>\d{3}) (?P<bytes>\d+) '
    r'"(?P<referer>[^"]*)" "(?P<ua>[^"]*)" "(?P<id>[^"]+)" (?P<us>\d+)$')
TEXT_RE = re.compile(
    r'^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (?P<level>ERROR|WARN|INFO|DEBUG) '
    r'w(?P<worker>\d+|-) req=(?P<id>\S+) (?P<msg>.*)$')
ISO_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
HEX16 = re.compile(r"^[0-9a-f]{16}$")


def load(c):
    """One client: keep-alive requests to /log and /plaintext, returning
    [(target, status, x-request-id or None)]."""
    seen = []
    for i in range(PER_CLIENT):
        target = "/log?c%di%d" % (c, i) if i % 2 == 0 else "/plaintext"
        r = c_conn[c].request("GET", target, headers=[("User-Agent", "load/%d" % c)])
        seen.append((target, r.status, r.get("X-Request-Id")))
    return seen


c_conn = {}


class Logging(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="flare-log-")
        self.server = None

    def tearDown(self):
        if self.server is not None:
            self.server.stop()
            self.server.close_log()
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def start(self, *args):
        self.server = Server(*args, tls=False).start()
        return self.server

    def stop(self):
        rc, _ = self.server.stop()
        self.assertEqual(rc, 0, self.server.output())

    def run_load(self):
        results = {}
        errors = []

        def client(c):
            try:
                c_conn[c] = Conn(self.server.addr)
                results[c] = load(c)
                c_conn[c].close()
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        return [x for c in range(CLIENTS) for x in results[c]]

    def read_lines(self, name):
        with open(self.path(name), "rb") as f:
            data = f.read()
        self.assertTrue(data.endswith(b"\n") or data == b"", data[-200:])
        return data.decode("utf-8").splitlines()

    def test_combined_with_request_id_under_load(self):
        self.start("--log", self.path("error.log"), "--log-level", "info",
                   "--access-log", self.path("access.log"), "--request-id", "on")
        seen = self.run_load()
        self.stop()  # the rings are flushed before the process exits
        n = CLIENTS * PER_CLIENT
        self.assertEqual(len(seen), n)
        self.assertTrue(all(s == 200 for _, s, _ in seen))
        client_ids = [rid for _, _, rid in seen]
        self.assertTrue(all(rid is not None for rid in client_ids))
        self.assertEqual(len(set(client_ids)), n, "ids are unique")

        access = self.read_lines("access.log")
        self.assertEqual(len(access), n)
        by_id = {}
        for line in access:
            m = COMBINED_RE.match(line)
            self.assertIsNotNone(m, line)
            self.assertEqual(m["peer"], "127.0.0.1")
            self.assertEqual(m["method"], "GET")
            self.assertEqual(m["proto"], "HTTP/1.1")
            self.assertEqual(m["status"], "200")
            self.assertTrue(m["ua"].startswith("load/"), line)
            self.assertEqual(m["referer"], "-")
            self.assertLess(int(m["us"]), 10_000_000)
            self.assertNotIn(m["id"], by_id, "one access line per id")
            by_id[m["id"]] = m
        for target, _, rid in seen:
            m = by_id.get(rid)
            self.assertIsNotNone(m, "the X-Request-Id the client saw is in the access log")
            self.assertEqual(m["target"], target)
            self.assertEqual(m["bytes"], "13" if target == "/plaintext" else "7")

        # every /log request wrote one error-log line with its id and query
        errors = [TEXT_RE.match(line) for line in self.read_lines("error.log")]
        self.assertTrue(all(errors), self.read_lines("error.log")[:5])
        # the one start-up line that names the I/O backend (docs/io_uring.md), then the requests'
        startup = [m for m in errors if m["level"] == "INFO" and m["msg"].startswith("io: ")]
        self.assertEqual(len(startup), 1, [m["msg"] for m in startup])
        info = {m["id"]: m for m in errors
                if m["level"] == "INFO" and not m["msg"].startswith("io: ")}
        logged = [(t, rid) for t, _, rid in seen if t.startswith("/log")]
        self.assertEqual(len(info), len(logged))
        for target, rid in logged:
            self.assertEqual(info[rid]["msg"], "hello /log " + target.split("?", 1)[1])
            self.assertIn(info[rid]["worker"], ("0", "1"))

    def test_json_lines_without_middleware(self):
        self.start("--log", self.path("error.log"), "--log-level", "info",
                   "--log-format", "json", "--access-log", self.path("access.log"),
                   "--access-log-format", "json")
        seen = self.run_load()
        # what clients send is escaped: quotes, a backslash, UTF-8, and bytes
        # that are not UTF-8 (control bytes never get this far: 400)
        c = Conn(self.server.addr)
        ua = 'odd "agent" \\ caf\u00e9'.encode("utf-8") + b" \xff\xfe"
        c.send(b"GET /plaintext?q=\"x\" HTTP/1.1\r\nHost: x\r\nUser-Agent: " + ua +
               b"\r\nReferer: http://r/\r\n\r\n")
        r = c.read_response()
        self.assertEqual(r.status, 200)
        self.assertEqual(c.request("HEAD", "/plaintext").status, 200)
        self.assertEqual(c.request("GET", "/missing").status, 404)
        c.close()
        self.stop()
        n = CLIENTS * PER_CLIENT + 3
        recs = [json.loads(line) for line in self.read_lines("access.log")]
        self.assertEqual(len(recs), n)
        ids = [r["request_id"] for r in recs]
        self.assertEqual(len(set(ids)), n, "ids are unique")
        for r in recs:
            self.assertTrue(ISO_RE.match(r["ts"]), r)
            self.assertTrue(HEX16.match(r["request_id"]), r)
            self.assertEqual(r["peer"], "127.0.0.1")
            self.assertEqual(r["protocol"], "HTTP/1.1")
            self.assertIsInstance(r["duration_us"], int)
            self.assertIsInstance(r["bytes"], int)
        odd = [r for r in recs if r["user_agent"].startswith("odd")]
        self.assertEqual(len(odd), 1)
        self.assertEqual(odd[0]["user_agent"], 'odd "agent" \\ caf\u00e9 \ufffd\ufffd')
        self.assertEqual(odd[0]["path"], '/plaintext?q="x"')
        self.assertEqual(odd[0]["referer"], "http://r/")
        self.assertEqual((odd[0]["status"], odd[0]["bytes"]), (200, 13))
        head = [r for r in recs if r["method"] == "HEAD"]
        self.assertEqual((head[0]["status"], head[0]["bytes"]), (200, 0))
        missing = [r for r in recs if r["path"] == "/missing"]
        self.assertEqual(missing[0]["status"], 404)

        # the error log's lines carry the same ids as the access lines
        errs = [json.loads(line) for line in self.read_lines("error.log")]
        by_id = {r["request_id"]: r for r in recs}
        self.assertEqual(len([e for e in errs if e["msg"].startswith("io: ")]), 1)
        logged = [e for e in errs if e["level"] == "info" and not e["msg"].startswith("io: ")]
        self.assertEqual(len(logged), CLIENTS * PER_CLIENT // 2)
        for e in logged:
            self.assertTrue(ISO_RE.match(e["ts"]))
            self.assertIn(e["worker"], (0, 1))
            a = by_id[e["request_id"]]
            self.assertEqual(e["msg"], "hello /log " + a["path"].split("?", 1)[1])

    def test_level_filters(self):
        # at the default level (error) flare_req_log's info lines are not written
        self.start("--log", self.path("error.log"), "--access-log", self.path("access.log"))
        c = Conn(self.server.addr)
        for i in range(5):
            self.assertEqual(c.request("GET", "/log?x%d" % i).status, 200)
        c.close()
        self.stop()
        self.assertEqual(self.read_lines("error.log"), [])
        self.assertEqual(len(self.read_lines("access.log")), 5)

    def test_bad_request_logged(self):
        # a framing error has its line, without a request line to show
        self.start("--access-log", self.path("access.log"))
        c = Conn(self.server.addr)
        c.send(b"GET /plaintext HTTP/1.1\r\nBad Header\r\n\r\n")
        r = c.read_response()
        self.assertEqual(r.status, 400)
        c.close()
        c = Conn(self.server.addr)
        self.assertEqual(c.request("GET", "/plaintext").status, 200)
        c.close()
        self.stop()
        lines = self.read_lines("access.log")
        self.assertEqual(len(lines), 2, lines)
        self.assertRegex(lines[0] if '"-" 400' in lines[0] else lines[1],
                         r'^127\.0\.0\.1 - - \[[^]]+\] "-" 400 \d+ "-" "-" "[0-9a-f]{16}" \d+$')
        self.assertTrue(any(COMBINED_RE.match(x) for x in lines), lines)

    def test_file_and_async_responses(self):
        # sendfile (a static file) and an asynchronous handler (/slow) are
        # logged with their status and body bytes
        www = os.path.join(self.dir, "www")
        os.mkdir(www)
        with open(os.path.join(www, "f.bin"), "wb") as f:
            f.write(b"x" * 70000)
        self.start("--access-log", self.path("access.log"), "--access-log-format", "json",
                   "--static", www)
        c = Conn(self.server.addr)
        r = c.request("GET", "/static/f.bin")
        self.assertEqual((r.status, len(r.body)), (200, 70000))
        r = c.request("GET", "/slow")
        self.assertEqual(r.status, 200)
        slow_len = len(r.body)
        c.close()
        self.stop()
        recs = {r["path"]: r for r in map(json.loads, self.read_lines("access.log"))}
        self.assertEqual((recs["/static/f.bin"]["status"], recs["/static/f.bin"]["bytes"]),
                         (200, 70000))
        self.assertEqual((recs["/slow"]["status"], recs["/slow"]["bytes"]), (200, slow_len))

    def test_std_targets(self):
        """--access-log - writes to stdout, --log - to stderr (the container
        convention: nginx's /dev/stdout access log), each only there."""
        out_path, err_path = self.path("stdout"), self.path("stderr")
        port = flaretest.free_port()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [flaretest.HELLO, "--listen", "%s:%d" % (flaretest.HOST, port), "--workers", "1",
                 "--access-log", "-", "--log", "-", "--log-level", "debug"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        try:
            deadline = time.monotonic() + 10
            while True:
                self.assertIsNone(proc.poll(), "hello exited")
                try:
                    socket.create_connection((flaretest.HOST, port), timeout=1).close()
                    break
                except OSError:
                    self.assertLess(time.monotonic(), deadline, "hello did not start")
                    time.sleep(0.02)
            c = Conn((flaretest.HOST, port))
            self.assertEqual(c.request("GET", "/log?to-std").status, 200)
            c.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(timeout=10), 0)
        with open(out_path) as f:
            stdout = f.read()
        with open(err_path) as f:
            stderr = f.read()
        access = r'127\.0\.0\.1 - - \[[^]]+\] "GET /log\?to-std HTTP/1\.1" 200 7 '
        error = r"INFO w\d req=[0-9a-f]{16} hello /log to-std\n"
        self.assertRegex(stdout, access)
        self.assertNotRegex(stderr, access)
        self.assertRegex(stderr, error)
        self.assertNotRegex(stdout, error)

    def test_files_are_0640(self):
        """The logs hold client addresses and request targets: created 0640
        (under the usual umask 022), also when SIGHUP reopens them after a
        rotation (renamed away: the reopen creates them)."""
        old = os.umask(0o022)
        try:
            elog, alog = self.path("error.log"), self.path("access.log")
            self.start("--log", elog, "--log-level", "info", "--access-log", alog)
            c = Conn(self.server.addr)
            self.assertEqual(c.request("GET", "/log?mode").status, 200)
            for f in (elog, alog):
                self.assertEqual(oct(os.stat(f).st_mode & 0o777), oct(0o640), f)
            os.rename(elog, elog + ".1")
            os.rename(alog, alog + ".1")
            self.server.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and not (os.path.exists(elog) and
                                                       os.path.exists(alog)):
                time.sleep(0.02)
            self.assertEqual(c.request("GET", "/log?after").status, 200)
            c.close()
            for f in (elog, alog):
                self.assertEqual(oct(os.stat(f).st_mode & 0o777), oct(0o640), f)
            self.stop()
            self.assertIn("/log?after", "".join(self.read_lines("access.log")))
        finally:
            os.umask(old)

    def test_bad_flags(self):
        for args, rc, msg in (
                (["--log-level", "loud"], 2, "--log-level: expected error|warn|info|debug"),
                (["--access-log-format", "xml"], 2, "--access-log-format: expected"),
                (["--request-id", "maybe"], 2, "--request-id: expected on or off"),
                (["--log", os.path.join(self.dir, "no", "such", "dir.log")], 1, "cannot open"),
                (["--access-log", os.path.join(self.dir, "no", "a.log")], 1, "cannot open")):
            s = Server(*args, tls=False)
            with self.assertRaises(RuntimeError) as cm:
                s.start(timeout=3)
            self.assertIn("rc=%d" % rc, str(cm.exception))
            self.assertIn(msg, str(cm.exception))
            s.close_log()


if __name__ == "__main__":
    unittest.main(verbosity=2)
