"""HTTP/2 basics with independent clients (issue 13): curl
--http2-prior-knowledge (h2c on the plaintext port, next to HTTP/1.1),
curl --http2 over TLS (ALPN h2), and nghttp for many concurrent streams.
The frame-level suite is elsewhere; this one checks that every route of
examples/hello works over h2c and h2."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
from flaretest import ServerTestCase  # noqa: E402

STATIC = tempfile.mkdtemp(prefix="flare-h2-")
BIG = os.urandom(300000)  # larger than the stream and connection windows
with open(os.path.join(STATIC, "big.bin"), "wb") as f:
    f.write(BIG)
with open(os.path.join(STATIC, "small.txt"), "wb") as f:
    f.write(b"small file\n")

try:
    import h2.config
    import h2.connection
    import h2.exceptions
    import h2.events
except ImportError:  # python3-h2 (tools/deps.sh test)
    h2 = None

CURL = shutil.which("curl")
NGHTTP = shutil.which("nghttp")


def curl(*args, data=None):
    """(status, http_version, body) of one curl run."""
    cmd = [CURL, "-s", "-o", "-", "-w", "\n%{http_code} %{http_version}", "--max-time", "10"]
    cmd += list(args)
    out = subprocess.run(cmd, input=data, stdout=subprocess.PIPE, check=True).stdout
    body, _, tail = out.rpartition(b"\n")
    code, ver = tail.decode().split()
    return int(code), ver, body


class H2C(ServerTestCase):
    server_args = ("--static", STATIC, "--max-body", "1m")
    server_tls = False
    workers = 1

    def url(self, path):
        return "http://%s:%d%s" % (self.addr[0], self.addr[1], path)

    def h2(self, path, *args, data=None):
        return curl("--http2-prior-knowledge", *args, self.url(path), data=data)

    def test_plaintext_json_params(self):
        self.assertEqual(self.h2("/plaintext"), (200, "2", b"Hello, World!"))
        code, ver, body = self.h2("/json")
        self.assertEqual((code, ver), (200, "2"))
        self.assertIn(b"Hello, World!", body)
        code, _, body = self.h2("/users/42")
        self.assertEqual(code, 200)
        self.assertIn(b"42", body)
        self.assertEqual(self.h2("/no/such/route")[0], 404)

    def test_http11_same_port(self):
        self.assertEqual(curl("--http1.1", self.url("/plaintext")), (200, "1.1", b"Hello, World!"))

    def test_head(self):
        out = subprocess.run([CURL, "-sI", "--http2-prior-knowledge", self.url("/plaintext")],
                             stdout=subprocess.PIPE, check=True).stdout
        self.assertTrue(out.startswith(b"HTTP/2 200"), out)
        self.assertIn(b"content-length: 13", out)

    def test_echo_large_body(self):
        code, ver, body = self.h2("/echo", "--data-binary", "@-", data=BIG)
        self.assertEqual((code, ver), (200, "2"))
        self.assertEqual(body, BIG)

    def test_static(self):
        self.assertEqual(self.h2("/static/small.txt"), (200, "2", b"small file\n"))
        code, _, body = self.h2("/static/big.bin")
        self.assertEqual(code, 200)
        self.assertEqual(body, BIG)

    @unittest.skipIf(NGHTTP is None, "nghttp (nghttp2-client) not installed")
    def test_body_over_limit_413(self):
        path = os.path.join(STATIC, "post.bin")
        with open(path, "wb") as f:
            f.write(b"x" * (2 << 20))
        out = subprocess.run([NGHTTP, "-v", "-d", path, self.url("/echo")], stdout=subprocess.PIPE,
                             timeout=10).stdout
        self.assertIn(b":status: 413", out)

    @unittest.skipIf(NGHTTP is None, "nghttp (nghttp2-client) not installed")
    def test_concurrent_slow_streams(self):
        # 40 streams of 300 ms each on one connection: concurrent, not in turn
        t0 = time.monotonic()
        out = subprocess.run([NGHTTP, "-n", "-s", "-m", "40", self.url("/slow?ms=300")],
                             stdout=subprocess.PIPE, timeout=20, check=True).stdout
        took = time.monotonic() - t0
        self.assertEqual(out.count(b" 200 "), 40, out)
        self.assertLess(took, 3.0)

    def test_sse(self):
        code, _, body = self.h2("/sse?n=3&ms=20", "-N")
        self.assertEqual(code, 200)
        self.assertIn(b"data: 3", body)


def h2_client(addr):
    s = socket.create_connection(addr, timeout=5)
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    s.sendall(c.data_to_send())
    return s, c


def h2_events(s, c):
    """Every event until the server closes (or 5 s pass)."""
    evs = []
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            evs += c.receive_data(d)
            out = c.data_to_send()
            if out:
                s.sendall(out)
    except (OSError, h2.exceptions.ProtocolError):
        pass
    return evs


def goaway_code(evs):
    codes = [e.error_code for e in evs if isinstance(e, h2.events.ConnectionTerminated)]
    return codes[-1] if codes else None


@unittest.skipIf(h2 is None, "python3-h2 not installed")
class H2Defences(ServerTestCase):
    server_tls = False
    workers = 1

    def test_ping_flood(self):
        s, c = h2_client(self.addr)
        for _ in range(500):
            c.ping(b"12345678")
        s.sendall(c.data_to_send())
        self.assertEqual(goaway_code(h2_events(s, c)), 11)  # ENHANCE_YOUR_CALM

    def test_rapid_reset(self):
        s, c = h2_client(self.addr)
        for _ in range(300):
            sid = c.get_next_available_stream_id()
            c.send_headers(sid, [(":method", "GET"), (":path", "/slow?ms=1000"),
                                 (":scheme", "http"), (":authority", "x")])
            c.reset_stream(sid)
        s.sendall(c.data_to_send())
        self.assertEqual(goaway_code(h2_events(s, c)), 11)

    def test_continuation_without_headers(self):
        s, c = h2_client(self.addr)
        s.sendall(b"\x00\x00\x01\x09\x00\x00\x00\x00\x05x")
        self.assertEqual(goaway_code(h2_events(s, c)), 1)  # PROTOCOL_ERROR


@unittest.skipIf(NGHTTP is None, "nghttp (nghttp2-client) not installed")
class H2Shutdown(unittest.TestCase):
    def test_streams_in_flight_complete(self):
        srv = flaretest.Server(workers=1, tls=False).start()
        try:
            url = "http://%s:%d/slow?ms=700" % srv.addr
            p = subprocess.Popen([NGHTTP, "-n", "-s", "-m", "5", url], stdout=subprocess.PIPE)
            time.sleep(0.3)
            rc, _ = srv.stop(5)
            out = p.communicate(timeout=10)[0]
            self.assertEqual(rc, 0)
            self.assertEqual(out.count(b" 200 "), 5, out)
        finally:
            srv.close_log()


class H2TLS(ServerTestCase):
    server_tls = False
    workers = 1

    @classmethod
    def setUpClass(cls):
        cert, key = flaretest.tls_files()
        cls.cert = cert
        cls.server_args = ("--tls-cert", cert, "--tls-key", key)
        super().setUpClass()

    def url(self, path):
        return "https://localhost:%d%s" % (self.addr[1], path)

    def tls(self, *args):
        return curl("--cacert", self.cert, "--resolve", "localhost:%d:127.0.0.1" % self.addr[1],
                    *args)

    def test_alpn_h2(self):
        self.assertEqual(self.tls("--http2", self.url("/plaintext")), (200, "2", b"Hello, World!"))

    def test_alpn_http11_kept(self):
        self.assertEqual(self.tls("--http1.1", self.url("/plaintext")),
                         (200, "1.1", b"Hello, World!"))

    def test_echo_over_h2(self):
        code, ver, body = self.tls("--http2", "--data-binary", "hello", self.url("/echo"))
        self.assertEqual((code, ver, body), (200, "2", b"hello"))


if __name__ == "__main__":
    flaretest.main()
