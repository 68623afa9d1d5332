"""Streaming request bodies (flare/body.h) over real sockets.

tests/stream_server (routes that report what their callbacks saw) with an
app body limit of 1 KiB: Content-Length and chunked bodies in odd splits,
per-route limits above and below the app's, Expect: 100-continue, pause /
resume (the client's send blocks, the server idles), a client that goes
away mid-body (on_end gets FLARE_ECLOSED, temporary files are closed),
pipelining after a streamed body, early answers. Then examples/hello's
POST /upload and POST /sha256 against hashes computed here, and a 1 GiB
/sha256 with the server's RSS sampled while it streams.
"""

import atexit
import hashlib
import json
import os
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import flaretest  # noqa: E402

STREAM_SERVER = os.path.join(os.path.abspath(flaretest.BUILD_DIR), "tests", "stream_server")
ECLOSED, ETOOBIG, EINVAL, ETIMEDOUT = -9, -10, -2, -17
TMPDIR = tempfile.mkdtemp(prefix="flare-stream-")
atexit.register(shutil.rmtree, TMPDIR, True)


def proc_cpu(pid):
    """utime + stime of pid in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vm_rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def tmp_fds(pid, directory):
    """Open descriptors of pid on files in directory (O_TMPFILE ones read
    "DIR/#123 (deleted)")."""
    out = []
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith(directory + "/"):
            out.append(target)
    return out


def send_in_splits(sock, data, rng, sizes=(1, 2, 3, 7, 13, 100, 1000, 4093, 65537)):
    """Sends data in pieces of varied sizes, pausing now and then so the
    server sees them in separate reads."""
    pos = 0
    n = 0
    while pos < len(data):
        step = rng.choice(sizes)
        sock.sendall(data[pos:pos + step])
        pos += step
        n += 1
        if n % 7 == 0:
            time.sleep(0.002)


def multipart(parts, boundary):
    """parts: (headers list, content bytes)."""
    out = b""
    for headers, content in parts:
        out += b"--" + boundary + b"\r\n"
        for h in headers:
            out += h.encode("utf-8") + b"\r\n"
        out += b"\r\n" + content + b"\r\n"
    return out + b"--" + boundary + b"--\r\n"


class StreamBodyTest(flaretest.ServerTestCase):
    server_binary = STREAM_SERVER
    server_args = ("--max-body", "1024", "--tmpdir", TMPDIR)
    server_tls = False
    workers = 1

    def stats(self):
        c = self.connect()
        r = c.request("GET", "/stats")
        self.assertOk(r)
        return json.loads(r.body)

    def test_content_length_odd_splits(self):
        rng = random.Random(1)
        body = bytes(rng.getrandbits(8) for _ in range(200000))
        c = self.connect()
        c.sock.sendall(b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
        send_in_splits(c.sock, body, rng)
        r = c.read_response()
        self.assertOk(r)
        got = json.loads(r.body)
        self.assertEqual(got["bytes"], len(body))
        self.assertGreater(got["chunks"], 1, "delivered as it arrived, not buffered whole")
        # the connection is still usable
        self.assertOk(c.request("GET", "/stats"))

    def test_chunked_odd_splits(self):
        rng = random.Random(2)
        pieces = [bytes(rng.getrandbits(8) for _ in range(rng.choice((1, 5, 300, 5000, 40000))))
                  for _ in range(40)]
        total = sum(len(p) for p in pieces)
        wire = flaretest.chunk_body(pieces, trailers=["X-T: 1"])
        c = self.connect()
        c.sock.sendall(b"POST /big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        send_in_splits(c.sock, wire, rng)
        r = c.read_response()
        self.assertOk(r)
        self.assertEqual(json.loads(r.body)["bytes"], total)

    def test_route_limit_above_and_below_app(self):
        # /big: 64 MiB on an app whose limit is 1 KiB
        c = self.connect()
        r = c.request("POST", "/big", body=b"x" * 5000)
        self.assertOk(r)
        self.assertEqual(json.loads(r.body)["bytes"], 5000)
        # the buffered route keeps the app's 1 KiB
        c = self.connect()
        self.assertErrorClose(c, c.request("POST", "/buffered", body=b"x" * 2000), 413)
        # a streaming route without a limit of its own: the app's
        c = self.connect()
        self.assertErrorClose(c, c.request("POST", "/count", body=b"x" * 1025), 413)
        c = self.connect()
        self.assertOk(c.request("POST", "/count", body=b"x" * 1024))
        # /small: 100 bytes, below the app's
        c = self.connect()
        self.assertOk(c.request("POST", "/small", body=b"x" * 100))
        c = self.connect()
        self.assertErrorClose(c, c.request("POST", "/small", body=b"x" * 101), 413)
        # chunked past the limit: on_end hears FLARE_ETOOBIG, the client a 413
        before = len(self.stats()["ends"])
        c = self.connect()
        r = c.request("POST", "/small", body=b"y" * 150, chunked=True)
        self.assertErrorClose(c, r, 413)
        ends = self.stats()["ends"][before:]
        self.assertIn(ETOOBIG, ends)

    def test_bad_chunked_framing(self):
        before = len(self.stats()["ends"])
        c = self.connect()
        c.send(b"POST /big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"5\r\nhello\r\nzz\r\n")
        self.assertErrorClose(c, c.read_response(), 400)
        self.assertIn(EINVAL, self.stats()["ends"][before:])

    def test_expect_continue(self):
        c = self.connect()
        c.send(b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n"
               b"Expect: 100-continue\r\n\r\n")
        r = c.read_response(interim=True)
        self.assertEqual(r.status, 100)
        c.send(b"0123456789")
        r = c.read_response()
        self.assertOk(r)
        self.assertEqual(json.loads(r.body)["bytes"], 10)
        # refused at the head: the final status, no 100
        c = self.connect()
        c.send(b"POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n"
               b"Expect: 100-continue\r\n\r\n")
        r = c.read_response(interim=True)
        self.assertErrorClose(c, r, 413)
        # answered by on_start: no 100 either
        c = self.connect()
        c.send(b"POST /early HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n"
               b"Expect: 100-continue\r\n\r\n")
        r = c.read_response(interim=True)
        self.assertEqual(r.status, 403)
        self.assertIn("close", r.connection_tokens())
        self.assertClosed(c)

    def test_async_middleware_before_body(self):
        # the body is in the server's buffer while a middleware waits: it
        # is delivered once the chain reaches the handler
        c = self.connect()
        c.send(b"POST /wait HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\n\r\n" + b"m" * 30)
        self.assertEqual(c.read_available(0.3), b"")
        self.assertOk(self.connect().request("GET", "/resume"))
        r = c.read_response()
        self.assertOk(r)
        self.assertEqual(json.loads(r.body)["bytes"], 30)
        # with Expect: 100-continue, the 100 waits for the middleware too
        c = self.connect()
        c.send(b"POST /wait HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
               b"Expect: 100-continue\r\n\r\n")
        self.assertEqual(c.read_available(0.3), b"")
        self.assertOk(self.connect().request("GET", "/resume"))
        self.assertEqual(c.read_response(interim=True).status, 100)
        c.send(b"12345")
        r = c.read_response()
        self.assertOk(r)
        self.assertEqual(json.loads(r.body)["bytes"], 5)

    def test_early_answer_closes(self):
        c = self.connect()
        c.send(b"POST /early HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + b"z" * 1000)
        r = c.read_response()
        self.assertEqual(r.status, 403)
        self.assertIn("close", r.connection_tokens())
        c.close()

    def test_pause_resume(self):
        pid = self.server.proc.pid
        total = 48 << 20
        s = socket.create_connection(self.addr)
        s.sendall(b"POST /pause HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % total)
        s.setblocking(False)
        block = b"p" * 65536
        sent = 0
        # send until the send blocks for a while: the server stopped reading
        last_progress = time.monotonic()
        while time.monotonic() - last_progress < 0.5 and sent < total:
            try:
                n = s.send(block[:min(len(block), total - sent)])
                sent += n
                last_progress = time.monotonic()
            except BlockingIOError:
                time.sleep(0.01)
        self.assertLess(sent, total // 2, "the client's send should block while paused")
        self.assertEqual(self.stats()["paused"], 1)
        rss0 = vm_rss(pid)
        cpu0 = proc_cpu(pid)
        time.sleep(1.0)
        cpu1 = proc_cpu(pid)
        self.assertLess(cpu1 - cpu0, 0.1, "a paused body should cost no CPU")
        self.assertLess(vm_rss(pid) - rss0, 1 << 20)
        # resume from another connection, then the rest goes through
        r = self.connect().request("GET", "/resume")
        self.assertOk(r, body=b"1\n")
        s.setblocking(True)
        s.settimeout(20)
        while sent < total:
            sent += s.send(block[:min(len(block), total - sent)])
        c = flaretest.Conn.from_socket(s, timeout=20)
        r = c.read_response()
        self.assertOk(r)
        self.assertEqual(json.loads(r.body)["bytes"], total)
        s.close()

    def test_client_gone_mid_body(self):
        pid = self.server.proc.pid
        before = len(self.stats()["ends"])
        boundary = b"gone123"
        head = (b"--" + boundary + b"\r\nContent-Disposition: form-data; name=\"f\"; "
                b"filename=\"a.bin\"\r\n\r\n")
        s = socket.create_connection(self.addr)
        s.sendall(b"POST /store HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n"
                  b"Content-Type: multipart/form-data; boundary=gone123\r\n\r\n" + head +
                  b"q" * 200000)
        deadline = time.monotonic() + 5
        while not tmp_fds(pid, TMPDIR) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertTrue(tmp_fds(pid, TMPDIR), "a part past the threshold goes to a file")
        s.close()
        deadline = time.monotonic() + 5
        while tmp_fds(pid, TMPDIR) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(tmp_fds(pid, TMPDIR), [], "temporary files closed when the client goes")
        self.assertEqual(os.listdir(TMPDIR), [], "no temporary file left behind")
        self.assertIn(ECLOSED, self.stats()["ends"][before:])
        # the same with the handler paused
        before = len(self.stats()["ends"])
        s = socket.create_connection(self.addr)
        s.sendall(b"POST /pause HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" +
                  b"w" * 1000)
        deadline = time.monotonic() + 5
        while self.stats()["paused"] != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        s.close()
        # a paused connection is off read interest: it sees the client's
        # end when the handler resumes
        time.sleep(0.2)
        self.assertEqual(self.stats()["ends"][before:], [])
        self.assertOk(self.connect().request("GET", "/resume"), body=b"1\n")
        deadline = time.monotonic() + 5
        while ECLOSED not in self.stats()["ends"][before:] and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertIn(ECLOSED, self.stats()["ends"][before:])
        self.assertEqual(self.stats()["paused"], 0)

    def test_store_fields(self):
        boundary = b"st0re"
        small = b"tiny value"
        big = os.urandom(5000)
        body = multipart([
            (['Content-Disposition: form-data; name="a"'], small),
            (['Content-Disposition: form-data; name="b"; filename="b.bin"',
              "Content-Type: application/octet-stream"], big),
        ], boundary)
        c = self.connect()
        c.sock.sendall(b"POST /store HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                       b"Content-Type: multipart/form-data; boundary=st0re\r\n\r\n" % len(body))
        send_in_splits(c.sock, body, random.Random(3))
        r = c.read_response()
        self.assertOk(r)
        got = json.loads(r.body)
        self.assertEqual(got["fields"], [{"size": len(small), "file": False, "mem": len(small)},
                                         {"size": len(big), "file": True, "mem": 0}])
        self.assertEqual(os.listdir(TMPDIR), [])
        # a multipart error mid-stream: the precise status
        bad = b"--st0re\r\nContent-Disposition: form-data\r\n\r\nx\r\n--st0re--\r\n"
        c = self.connect()
        r = c.request("POST", "/store", body=bad,
                      headers={"Content-Type": "multipart/form-data; boundary=st0re"})
        self.assertEqual(r.status, 400)
        c = self.connect()
        r = c.request("POST", "/store", body=b"abc", headers={"Content-Type": "text/plain"})
        self.assertEqual(r.status, 415)

    def test_pipelining_after_streamed_body(self):
        body = b"a" * 3000
        reqs = (flaretest.build_request("POST", "/big", body=body) +
                flaretest.build_request("POST", "/big", body=b"b" * 2500, chunked=True) +
                flaretest.get("/stats") +
                flaretest.build_request("POST", "/count", body=b"c" * 10))
        c = self.connect()
        c.send(reqs)
        r1 = c.read_response()
        r2 = c.read_response()
        r3 = c.read_response()
        r4 = c.read_response()
        self.assertEqual(json.loads(r1.body)["bytes"], 3000)
        self.assertEqual(json.loads(r2.body)["bytes"], 2500)
        self.assertIn("ends", json.loads(r3.body))
        self.assertEqual(json.loads(r4.body)["bytes"], 10)
        for r in (r1, r2, r3, r4):
            self.assertOk(r)
        # byte at a time, two requests
        c = self.connect()
        c.send_slowly(flaretest.build_request("POST", "/big", body=b"d" * 40, chunked=True) +
                      flaretest.build_request("POST", "/big", body=b"e" * 30))
        self.assertEqual(json.loads(c.read_response().body)["bytes"], 40)
        self.assertEqual(json.loads(c.read_response().body)["bytes"], 30)


class StreamTimeoutTest(flaretest.ServerTestCase):
    server_binary = STREAM_SERVER
    server_args = ("--body-timeout-ms", "400", "--tmpdir", TMPDIR)
    server_tls = False
    workers = 1

    def test_body_timeout_and_paused_exempt(self):
        # a client that stops sending: on_end(FLARE_ETIMEDOUT), then a 408
        c = self.connect()
        c.send(b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"a" * 10)
        self.assertErrorClose(c, c.read_response(timeout=5), 408)
        r = self.connect().request("GET", "/stats")
        self.assertIn(ETIMEDOUT, json.loads(r.body)["ends"])
        # a paused body waits for its handler, not for the client: no 408
        c = self.connect()
        c.send(b"POST /pause HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n" + b"b" * 10)
        time.sleep(1.2)
        self.assertEqual(c.read_available(0.1), b"")
        self.assertOk(self.connect().request("GET", "/resume"), body=b"1\n")
        c.send(b"c" * 10)
        r = c.read_response()
        self.assertOk(r)
        self.assertEqual(json.loads(r.body)["bytes"], 20)


class HelloUploadTest(flaretest.ServerTestCase):
    workers = 1

    def test_upload_hashes(self):
        rng = random.Random(4)
        binary = bytes(rng.getrandbits(8) for _ in range(300000)) + b"\r\n--not-it\r\n"
        parts = [
            (['Content-Disposition: form-data; name="title"'], b"hello world"),
            (['Content-Disposition: form-data; name="file"; filename="data.bin"',
              "Content-Type: application/octet-stream"], binary),
            (["Content-Disposition: form-data; name=\"doc\"; filename=\"fallback.txt\"; "
              "filename*=UTF-8''r%C3%A9sum%C3%A9.txt", "Content-Type: text/plain"],
             "caf\u00e9\n".encode("utf-8") * 100),
            (['Content-Disposition: form-data; name="empty"'], b""),
        ]
        boundary = b"----flareboundary7MA4YWxk"
        body = multipart(parts, boundary)
        c = self.connect()
        c.sock.sendall(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                       b"Content-Type: multipart/form-data; boundary=" % len(body) + boundary +
                       b"\r\n\r\n")
        send_in_splits(c.sock, body, rng)
        r = c.read_response()
        self.assertOk(r, ctype="application/json")
        got = json.loads(r.body)
        want = [
            {"name": "title", "filename": None, "content_type": None, "size": 11,
             "sha256": hashlib.sha256(b"hello world").hexdigest()},
            {"name": "file", "filename": "data.bin", "content_type": "application/octet-stream",
             "size": len(binary), "sha256": hashlib.sha256(binary).hexdigest()},
            {"name": "doc", "filename": "r\u00e9sum\u00e9.txt", "content_type": "text/plain",
             "size": len(parts[2][1]), "sha256": hashlib.sha256(parts[2][1]).hexdigest()},
            {"name": "empty", "filename": None, "content_type": None, "size": 0,
             "sha256": hashlib.sha256(b"").hexdigest()},
        ]
        self.assertEqual(got, want)
        # chunked framing, the same answer
        c = self.connect()
        r = c.request("POST", "/upload", body=body, chunked=True,
                      headers={"Content-Type": "multipart/form-data; boundary=" +
                               boundary.decode()})
        self.assertOk(r)
        self.assertEqual(json.loads(r.body), want)
        # not multipart: 415; truncated: 400
        c = self.connect()
        self.assertEqual(c.request("POST", "/upload", body=b"x",
                                   headers={"Content-Type": "text/plain"}).status, 415)
        c = self.connect()
        r = c.request("POST", "/upload", body=body[:-10],
                      headers={"Content-Type": "multipart/form-data; boundary=" +
                               boundary.decode()})
        self.assertEqual(r.status, 400)

    def test_sha256_small(self):
        for body in (b"", b"abc", os.urandom(100000)):
            c = self.connect()
            r = c.request("POST", "/sha256", body=body)
            self.assertOk(r, ctype="application/json")
            self.assertEqual(json.loads(r.body), {"sha256": hashlib.sha256(body).hexdigest(),
                                                  "length": len(body)})
        # past --max-body (the default 1 MiB here): 413
        c = self.connect()
        c.send(b"POST /sha256 HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (2 << 20))
        self.assertErrorClose(c, c.read_response(), 413)


class HelloBigBodyTest(flaretest.ServerTestCase):
    server_args = ("--max-body", "2147483648")
    workers = 1

    def test_sha256_1gib_flat_rss(self):
        pid = self.server.proc.pid
        total = 1 << 30
        block = bytes(random.Random(5).getrandbits(8) for _ in range(1 << 20))
        digest = hashlib.sha256()
        rss = [vm_rss(pid)]
        done = threading.Event()

        def sample():
            while not done.is_set():
                rss.append(vm_rss(pid))
                time.sleep(0.05)

        t = threading.Thread(target=sample, daemon=True)
        t.start()
        c = self.connect(timeout=60)
        t0 = time.monotonic()
        c.sock.sendall(b"POST /sha256 HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % total)
        for _ in range(total // len(block)):
            c.sock.sendall(block)
            digest.update(block)
        r = c.read_response(timeout=60)
        took = time.monotonic() - t0
        done.set()
        t.join()
        self.assertOk(r)
        self.assertEqual(json.loads(r.body), {"sha256": digest.hexdigest(), "length": total})
        growth = max(rss) - rss[0]
        sys.stderr.write("1 GiB /sha256 in %.1f s, RSS growth %.1f MiB (%d samples)\n" %
                         (took, growth / 1048576, len(rss)))
        if not flaretest.sanitized():
            self.assertLess(growth, 8 << 20, "RSS grew by %d bytes" % growth)


if __name__ == "__main__":
    flaretest.main()
