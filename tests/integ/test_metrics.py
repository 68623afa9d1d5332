#!/usr/bin/python3
"""Metrics and health against examples/hello: exact request counts by route,
method and status (unmatched under route=""), exact byte counts, parse
errors by status, the connections gauge, `promtool check metrics`, a real
Prometheus scraping during a load run and the series read back from its
HTTP API; /healthz with the pid, /readyz with a failing check, and /readyz
turning 503 during the drain (pipelined behind a request in flight, on two
connections)."""

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
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
from flaretest import Server, ServerTestCase, free_port  # noqa: E402

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """{(name, ((label, value), ...)): float}"""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, "malformed sample line %r" % line
        labels = tuple(sorted(LABEL.findall(m.group(3) or "")))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def key(name, **labels):
    return (name, tuple(sorted(labels.items())))


def req_key(route, method, status):
    return key("flare_http_requests_total", route=route, method=method, status=str(status))


class Raw:
    """A keep-alive client that keeps the exact bytes it sent and received."""

    def __init__(self, port, timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        self.sent = 0
        self.received = 0

    def send(self, data):
        self.sock.sendall(data)
        self.sent += len(data)

    def _fill(self):
        d = self.sock.recv(65536)
        if not d:
            raise ConnectionError("closed")
        self.buf += d

    def response(self, head_only=False):
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for ln in lines[1:]:
            n, _, v = ln.partition(":")
            headers[n.strip().lower()] = v.strip()
        n = 0 if head_only else int(headers.get("content-length", "0"))
        self.buf = rest
        while len(self.buf) < n:
            self._fill()
        body, self.buf = self.buf[:n], self.buf[n:]
        self.received += len(head) + 4 + n
        return status, headers, body

    def request(self, method, path, body=None, head_only=False):
        req = "%s %s HTTP/1.1\r\nHost: localhost\r\n" % (method, path)
        if body is not None:
            req += "Content-Length: %d\r\n" % len(body)
        data = (req + "\r\n").encode() + (body or b"")
        self.send(data)
        return self.response(head_only=head_only or method == "HEAD")

    def close(self):
        self.sock.close()


def scrape(port):
    c = Raw(port)
    st, h, body = c.request("GET", "/metrics")
    c.close()
    assert st == 200, st
    assert h["content-type"] == "text/plain; version=0.0.4; charset=utf-8", h
    return body.decode(), c.sent, c.received


class Metrics(ServerTestCase):
    workers = 2

    def scrape(self):
        return parse(scrape(self.server.port)[0])

    def test_exact_counts_and_bytes(self):
        port = self.server.port
        sent_key = key("flare_http_bytes_sent_total")
        # A response is counted once its write returned, which may be after
        # its client read it: an earlier test's last response (the server
        # is the class's) could be counted after this first scrape rendered
        # (seen under ThreadSanitizer: one scrape's 9.6 kB too many). Scrape
        # until one scrape's bytes show in the next and nothing else does.
        text0, _, first_resp = scrape(port)
        for _ in range(100):
            text_b, _, resp_b = scrape(port)
            settled = parse(text_b).get(sent_key, 0) - parse(text0).get(sent_key, 0) == first_resp
            text0, first_resp = text_b, resp_b
            if settled:
                break
            time.sleep(0.02)
        before = parse(text0)
        conns = [Raw(port) for _ in range(4)]
        plan = ([("GET", "/plaintext", None, 200)] * 50 + [("GET", "/users/%d", None, 200)] * 20 +
                [("POST", "/echo", b"x" * 100, 200)] * 10 + [("GET", "/nope/%d", None, 404)] * 7 +
                [("HEAD", "/plaintext", None, 200)] * 3 + [("DELETE", "/plaintext", None, 405)] * 5)
        for i, (m, p, b, want) in enumerate(plan):
            st, _, _ = conns[i % 4].request(m, p % i if "%d" in p else p, b)
            self.assertEqual(st, want, (m, p))
        for c in conns:
            c.close()
        # the same at the end: the last responses may be counted after the
        # scrape rendered; scrape again (each scrape's own request and
        # response are known) until they show
        got_so_far = sum(c.received for c in conns) + first_resp
        extra_req = 0
        for _ in range(100):
            text1, last_req, last_resp = scrape(port)
            after = parse(text1)
            if after.get(sent_key, 0) - before.get(sent_key, 0) >= got_so_far:
                break
            extra_req += last_req
            got_so_far += last_resp
            time.sleep(0.02)
        last_req += extra_req

        def delta(k):
            return after.get(k, 0) - before.get(k, 0)

        self.assertEqual(delta(req_key("/plaintext", "GET", 200)), 50)
        self.assertEqual(delta(req_key("/users/{id}", "GET", 200)), 20)
        self.assertEqual(delta(req_key("/echo", "POST", 200)), 10)
        self.assertEqual(delta(req_key("", "GET", 404)), 7)  # never the raw path
        self.assertEqual(delta(req_key("/plaintext", "HEAD", 200)), 3)
        self.assertEqual(delta(req_key("", "DELETE", 405)), 5)
        for (name, labels) in after:
            if name == "flare_http_requests_total":
                self.assertNotIn("/nope", dict(labels)["route"])
        self.assertEqual(delta(key("flare_http_request_duration_seconds_count",
                                   route="/users/{id}")), 20)
        # durations are on the loop's cached clock: a request answered in
        # the wake-up that read it (these handlers answer at once) takes 0
        self.assertEqual(delta(key("flare_http_request_duration_seconds_sum",
                                   route="/users/{id}")), 0)
        # bytes: what the clients sent (and the second scrape's request,
        # read before it rendered), what they got (and the first scrape's
        # response, written after it rendered)
        sent = sum(c.sent for c in conns) + last_req
        got = got_so_far
        self.assertEqual(delta(key("flare_http_bytes_received_total")), sent)
        self.assertEqual(delta(key("flare_http_bytes_sent_total")), got)

    def test_parse_errors_by_status(self):
        before = self.scrape()
        bad = [b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
               b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
               b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
               b"GET / HTTP/9.9\r\nHost: x\r\n\r\n"]
        seen = {}
        for data in bad:
            c = Raw(self.server.port)
            c.send(data)
            st, _, _ = c.response()
            c.close()
            seen[st] = seen.get(st, 0) + 1
        self.assertGreaterEqual(len(seen), 2, seen)
        after = self.scrape()
        for st, n in seen.items():
            k = key("flare_http_parse_errors_total", status=str(st))
            self.assertEqual(after.get(k, 0) - before.get(k, 0), n, (st, seen))

    def test_connections_gauge(self):
        conns = [Raw(self.server.port) for _ in range(5)]
        for c in conns:
            c.request("GET", "/plaintext")
        slow = Raw(self.server.port)
        slow.send(b"GET /slow?ms=1500 HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.7)  # sampled every 250 ms
        m = self.scrape()
        self.assertGreaterEqual(m[key("flare_http_connections", state="open")], 6)
        self.assertGreaterEqual(m[key("flare_http_connections", state="active")], 1)
        self.assertGreaterEqual(m[key("flare_http_connections", state="idle")], 5)
        self.assertEqual(m[key("flare_http_connections", state="open")],
                         m[key("flare_http_connections", state="active")] +
                         m[key("flare_http_connections", state="idle")])
        self.assertEqual(slow.response()[0], 200)
        for c in conns + [slow]:
            c.close()
        time.sleep(0.7)
        m = self.scrape()
        self.assertLessEqual(m[key("flare_http_connections", state="open")], 1)

    def test_connections_by_protocol(self):
        # the gauges read each connection through its protocol's operations
        # table: an h2c connection (HTTP/1.1's object taken over in place by
        # the preface) counts as HTTP/2 with its open stream, and as open and
        # active; an idle HTTP/1.1 one as open only
        import h2util  # python3-h2, as the HTTP/2 suite
        h2c = h2util.RawH2(("127.0.0.1", self.server.port))
        h2c.wait_settings()
        h2c.request(1, path="/slow?ms=1500")
        idle = Raw(self.server.port)
        self.assertEqual(idle.request("GET", "/plaintext")[0], 200)
        time.sleep(0.7)  # sampled every 250 ms
        m = self.scrape()
        self.assertEqual(m[key("flare_h2_connections")], 1)
        self.assertEqual(m[key("flare_h2_streams")], 1)
        # the h2c connection and the idle one (the scrape's may come after the sample)
        self.assertGreaterEqual(m[key("flare_http_connections", state="open")], 2)
        self.assertGreaterEqual(m[key("flare_http_connections", state="active")], 1)
        self.assertGreaterEqual(m[key("flare_http_connections", state="idle")], 1)
        self.assertEqual(h2c.response(1)[0], 200)
        time.sleep(0.7)
        m = self.scrape()
        self.assertEqual(m[key("flare_h2_connections")], 1)
        self.assertEqual(m[key("flare_h2_streams")], 0)
        h2c.sock.close()
        idle.close()
        time.sleep(0.7)
        m = self.scrape()
        self.assertEqual(m[key("flare_h2_connections")], 0)
        self.assertLessEqual(m[key("flare_http_connections", state="open")], 1)

    def test_promtool_accepts_the_output(self):
        promtool = shutil.which("promtool")
        if promtool is None:
            self.skipTest("promtool not installed (tools/deps.sh test installs prometheus)")
        Raw(self.server.port).request("GET", "/nope")
        text = scrape(self.server.port)[0]
        p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        for name in ("flare_http_requests_total", "flare_http_request_duration_seconds",
                     "flare_http_connections", "flare_http_bytes_received_total",
                     "flare_http_bytes_sent_total", "flare_http_parse_errors_total",
                     "flare_timeouts_total", "flare_ws_connections", "flare_ws_messages_total",
                     "flare_jobs_queued", "process_cpu_seconds_total",
                     "process_resident_memory_bytes", "process_open_fds", "process_max_fds",
                     "process_start_time_seconds", "flare_log_lines_dropped_total"):
            self.assertIn("# TYPE %s " % name, text)
        self.assertIn("\nflare_log_lines_dropped_total 0\n", text)

    def test_healthz_and_readyz(self):
        c = Raw(self.server.port)
        st, h, body = c.request("GET", "/healthz")
        self.assertEqual(st, 200)
        j = json.loads(body)
        self.assertEqual(j["status"], "ok")
        self.assertEqual(j["pid"], self.server.proc.pid)
        st, _, body = c.request("GET", "/readyz")
        self.assertEqual((st, json.loads(body)["status"]), (200, "ready"))
        c.close()

    def test_sse_stream_is_not_a_ws_connection(self):
        # An open server-sent event stream is held by the worker through a
        # drain, as a WebSocket is, but flare_ws_connections counts only
        # WebSocket connections (it counted both once).
        s = socket.create_connection(("127.0.0.1", self.server.port), timeout=10)
        try:
            s.sendall(b"GET /sse?n=2&ms=60000 HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            while b"data: 1" not in got:
                chunk = s.recv(4096)
                self.assertTrue(chunk, "the stream ended early: %r" % got)
                got += chunk
            self.assertTrue(got.startswith(b"HTTP/1.1 200"), got)
            time.sleep(1.2)  # past a sweep, which samples the gauges
            mid = self.scrape()
            self.assertEqual(mid[key("flare_ws_connections")], 0)
            self.assertGreaterEqual(mid[key("flare_http_connections", state="open")], 1)
        finally:
            s.close()

    def test_ws_messages_counted(self):
        import wstest
        before = self.scrape()
        c = wstest.WsClient(self.server.addr)
        self.assertEqual(c.response.status, 101)
        for i in range(6):
            c.send_message(wstest.OP_TEXT, b"m%d" % i)
            self.assertEqual(c.recv_message(), (wstest.OP_TEXT, b"m%d" % i))
        # the gauge is kept by the WebSocket layer as connections open and
        # close: no sampling delay
        mid = self.scrape()
        self.assertEqual(mid[key("flare_ws_connections")], 1)
        c.close()
        deadline = time.monotonic() + 5
        while True:
            after = self.scrape()
            if after[key("flare_ws_connections")] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(after[key("flare_ws_connections")], 0)
        for d in ("received", "sent"):
            k = key("flare_ws_messages_total", direction=d)
            self.assertEqual(after[k] - before.get(k, 0), 6, d)


class Prometheus(ServerTestCase):
    """A private Prometheus scrapes hello every second during a load run."""
    workers = 2

    def test_scraped_series_match(self):
        prom = shutil.which("prometheus")
        if prom is None:
            self.skipTest("prometheus not installed (tools/deps.sh test)")
        tmp = tempfile.mkdtemp(prefix="flare-prom-")
        pport = free_port()
        with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
                    "scrape_configs:\n  - job_name: hello\n    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % self.server.port)
        log = open(os.path.join(tmp, "log"), "wb")
        p = subprocess.Popen([prom, "--config.file=" + os.path.join(tmp, "prometheus.yml"),
                              "--storage.tsdb.path=" + os.path.join(tmp, "data"),
                              "--web.listen-address=127.0.0.1:%d" % pport],
                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        base = "http://127.0.0.1:%d" % pport
        try:
            def query(q):
                u = base + "/api/v1/query?" + urllib.parse.urlencode({"query": q})
                with urllib.request.urlopen(u, timeout=5) as r:
                    j = json.load(r)
                self.assertEqual(j["status"], "success", j)
                return j["data"]["result"]

            deadline = time.monotonic() + 60
            while True:
                try:
                    if query("up") and query("up")[0]["value"][1] == "1":
                        break
                except OSError:
                    pass
                self.assertLess(time.monotonic(), deadline, "prometheus never scraped hello")
                time.sleep(0.3)
            before = parse(scrape(self.server.port)[0])
            n_threads, per = 4, 300
            errors = []

            def load(t):
                try:
                    c = Raw(self.server.port)
                    for i in range(per):
                        path = "/json" if i % 3 == 0 else "/users/%d" % i
                        if c.request("GET", path)[0] != 200:
                            errors.append(path)
                        if i % 25 == 0:
                            time.sleep(0.25)  # spread over several scrapes (3 s)
                    c.close()
                except Exception as e:  # noqa: BLE001
                    errors.append(repr(e))

            ts = [threading.Thread(target=load, args=(t,)) for t in range(n_threads)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            self.assertEqual(errors, [])
            want_json = before.get(req_key("/json", "GET", 200), 0) + n_threads * (per // 3)
            want_users = (before.get(req_key("/users/{id}", "GET", 200), 0) +
                          n_threads * (per - per // 3))
            deadline = time.monotonic() + 30
            while True:
                r = query('flare_http_requests_total{route="/json",method="GET",status="200"}')
                u = query('flare_http_requests_total{route="/users/{id}",method="GET",'
                          'status="200"}')
                got = (float(r[0]["value"][1]) if r else -1, float(u[0]["value"][1]) if u else -1)
                if got == (want_json, want_users):
                    break
                self.assertLess(time.monotonic(), deadline,
                                "prometheus has %r, sent %r" % (got, (want_json, want_users)))
                time.sleep(0.5)
            # the histogram and the process series arrived too
            c = query('flare_http_request_duration_seconds_count{route="/json"}')
            self.assertEqual(float(c[0]["value"][1]), want_json)
            self.assertTrue(query("process_resident_memory_bytes"))
            # several scrapes saw the counter grow during the run
            rng = query('count_over_time(flare_http_requests_total{route="/users/{id}"}[2m])')
            self.assertGreaterEqual(float(rng[0]["value"][1]), 3)
        finally:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            log.close()
            shutil.rmtree(tmp, ignore_errors=True)


class ReadinessCheck(unittest.TestCase):
    """hello's "maintenance" check: 503 naming it while the file exists."""

    def test_failing_check_named(self):
        tmp = tempfile.mkdtemp(prefix="flare-ready-")
        flag = os.path.join(tmp, "maintenance")
        os.environ["HELLO_MAINTENANCE_FILE"] = flag
        srv = Server(workers=2)
        try:
            srv.start()
        finally:
            del os.environ["HELLO_MAINTENANCE_FILE"]
        try:
            c = Raw(srv.port)
            self.assertEqual(c.request("GET", "/readyz")[0], 200)
            open(flag, "w").close()
            st, _, body = c.request("GET", "/readyz")
            self.assertEqual(st, 503)
            self.assertEqual(json.loads(body)["failing"], "maintenance")
            self.assertEqual(c.request("GET", "/healthz")[0], 200)  # alive all the same
            os.unlink(flag)
            self.assertEqual(c.request("GET", "/readyz")[0], 200)
            c.close()
        finally:
            self.assertEqual(srv.stop()[0], 0)
            shutil.rmtree(tmp, ignore_errors=True)


class ReadinessDuringDrain(unittest.TestCase):
    def test_readyz_503_once_draining(self):
        srv = Server(workers=2)
        srv.start()
        try:
            fresh = Raw(srv.port)
            self.assertEqual(fresh.request("GET", "/readyz")[0], 200)
            fresh.close()
            # two connections, each a slow request in flight with a /readyz
            # pipelined behind it (read and dispatched before the SIGTERM)
            a, b = Raw(srv.port), Raw(srv.port)
            a.send(b"GET /slow?ms=1500 HTTP/1.1\r\nHost: x\r\n\r\n"
                   b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
            b.send(b"GET /slow?ms=1000 HTTP/1.1\r\nHost: x\r\n\r\n"
                   b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(0.3)
            srv.send_signal(signal.SIGTERM)
            for c in (a, b):
                st, _, body = c.response()
                self.assertEqual((st, body), (200, b"slow"))
                st, h, body = c.response()
                self.assertEqual(st, 503, body)
                self.assertEqual(json.loads(body)["failing"], "draining")
                self.assertEqual(h.get("connection"), "close")
                c.close()
            self.assertEqual(srv.wait(10), 0)
        finally:
            if srv.alive():
                srv.stop()


if __name__ == "__main__":
    flaretest.main()
