#!/usr/bin/python3
"""Response compression from outside: examples/hello's GET /text?kb=N behind
the compression middleware, decoded by curl (--compressed), Python's zlib and
Debian's python3-brotli and compared byte for byte with the text; Vary on
every answer; HEAD with the header fields GET gets (HTTP/1.1 and HTTP/2); a
chunked stream decodes piece by piece while the handler is still writing; precompressed .br and .gz static siblings, each
with its own ETag, 304 and ranges as for any file."""

import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
from flaretest import ServerTestCase  # noqa: E402

try:
    import brotli  # Debian's python3-brotli (tools/deps.sh test)
except ImportError:  # pragma: no cover - the dependency is listed
    brotli = None

TAIL = b" the quick brown fox jumps over the lazy dog 0123456789\n"


def text(kb):
    """What GET /text?kb=N sends: 16 lines of 64 bytes per KiB."""
    out = bytearray()
    for k in range(kb):
        for j in range(16):
            out += b"%05d.%02d" % (k % 100000, j) + TAIL
    return bytes(out)


ROOT = tempfile.mkdtemp(prefix="flare-compress-")
PAGE = b"<html>" + b"<p>precompressed static text</p>\n" * 200 + b"</html>\n"
with open(os.path.join(ROOT, "page.html"), "wb") as f:
    f.write(PAGE)
with open(os.path.join(ROOT, "page.html.gz"), "wb") as f:
    f.write(gzip.compress(PAGE, mtime=0))
if brotli is not None:
    with open(os.path.join(ROOT, "page.html.br"), "wb") as f:
        f.write(brotli.compress(PAGE))
    with open(os.path.join(ROOT, "only-br.txt"), "wb") as f:
        f.write(b"plain\n" * 100)
    with open(os.path.join(ROOT, "only-br.txt.br"), "wb") as f:
        f.write(brotli.compress(b"plain\n" * 100))


class Compress(ServerTestCase):
    server_args = ("--static", ROOT)

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(ROOT, ignore_errors=True)

    def get(self, target, ae=None, method="GET", extra=None):
        c = self.connect()
        h = {} if ae is None else {"Accept-Encoding": ae}
        h.update(extra or {})
        return c.request(method, target, headers=h)

    def assertVary(self, r):
        self.assertIn("Accept-Encoding", ", ".join(r.all("Vary")), r)

    # ---- buffered bodies ---------------------------------------------------

    def test_identity_without_accept_encoding(self):
        for kb in (1, 7, 64):
            r = self.get("/text?kb=%d" % kb)
            self.assertOk(r, text(kb), "text/plain; charset=utf-8")
            self.assertIsNone(r.get("Content-Encoding"))
            self.assertVary(r)

    def test_gzip_decodes_exactly(self):
        for kb in (1, 3, 100, 1024):
            r = self.get("/text?kb=%d" % kb, "gzip")
            self.assertEqual(r.status, 200)
            self.assertEqual(r.get("Content-Encoding"), "gzip")
            self.assertVary(r)
            self.assertEqual(int(r.get("Content-Length")), len(r.body))
            self.assertLess(len(r.body), kb * 1024 // 4)
            self.assertEqual(gzip.decompress(r.body), text(kb))

    def test_brotli_decodes_exactly(self):
        if brotli is None:
            self.fail("python3-brotli is not installed (tools/deps.sh test installs it)")
        for kb in (1, 5, 1000):
            r = self.get("/text?kb=%d" % kb, "gzip, deflate, br")
            self.assertEqual(r.get("Content-Encoding"), "br")
            self.assertVary(r)
            self.assertEqual(brotli.decompress(r.body), text(kb))

    def test_q_values_choose(self):
        self.assertEqual(self.get("/text?kb=2", "br;q=0.5, gzip").get("Content-Encoding"),
                         "gzip")
        self.assertEqual(self.get("/text?kb=2", "gzip;q=0, *").get("Content-Encoding"), "br")
        self.assertEqual(self.get("/text?kb=2", "*;q=0.1").get("Content-Encoding"), "br")
        for ae in ("deflate", "gzip;q=0, br;q=0", "identity", "", "gzip;q=7", "identity, gzip;q=0.5"):
            r = self.get("/text?kb=2", ae)
            self.assertOk(r, text(2), "text/plain; charset=utf-8")
            self.assertIsNone(r.get("Content-Encoding"), ae)
            self.assertVary(r)
        # identity refused and nothing acceptable: identity anyway (documented)
        r = self.get("/text?kb=2", "identity;q=0, compress")
        self.assertOk(r, text(2), "text/plain; charset=utf-8")

    def test_curl_compressed(self):
        curl = shutil.which("curl")
        if curl is None:
            self.fail("curl is not installed (tools/deps.sh test installs it)")
        if flaretest.TLS:
            self.skipTest("plain-HTTP curl check")  # the suite's TLS mode is not registered here
        url = "http://%s:%d/text?kb=200" % self.addr
        out = subprocess.run([curl, "-s", "--compressed", "-D", "-", "-o", "-", url],
                             capture_output=True, timeout=30, check=True).stdout
        head, _, body = out.partition(b"\r\n\r\n")
        self.assertRegex(head, rb"(?i)\r\ncontent-encoding: (gzip|br)\r\n")
        self.assertEqual(body, text(200))

    def test_bad_kb_is_400(self):
        for q in ("", "kb=0", "kb=10241", "kb=-1", "kb=abc", "kb=1x", "kb=99999999999",
                  "kb=1&stream=x", "kb=1&stream=10001"):
            r = self.get("/text?" + q, "gzip")
            self.assertEqual(r.status, 400, q)
            self.assertVary(r)

    def test_largest_text(self):
        r = self.get("/text?kb=10240", "gzip")
        self.assertEqual(r.get("Content-Encoding"), "gzip")
        self.assertEqual(zlib.decompress(r.body, 16 + zlib.MAX_WBITS), text(10240))

    def test_head_same_fields_as_get(self):
        """RFC 9110 §9.3.2: HEAD gets the header fields GET would get:
        Content-Encoding, Vary, the ETag and the Content-Length of the coded
        body GET sends (a buffered one), and no body."""
        for ae, coding in (("gzip", "gzip"), ("gzip, br", "br" if brotli else None),
                           (None, None), ("identity", None)):
            if ae == "gzip, br" and brotli is None:
                continue
            for target in ("/text?kb=64", "/text?kb=4"):
                g = self.get(target, ae)
                h = self.get(target, ae, method="HEAD")
                self.assertEqual((g.status, h.status), (200, 200))
                self.assertEqual(h.body, b"")
                self.assertEqual(g.get("Content-Encoding"), coding, (target, ae))
                self.assertEqual(h.get("Content-Encoding"), coding, (target, ae))
                self.assertEqual(h.get("Content-Length"), g.get("Content-Length"), (target, ae))
                self.assertEqual(int(g.get("Content-Length")), len(g.body))
                self.assertEqual(h.get("ETag"), g.get("ETag"))
                self.assertVary(h)
        # a stream: the coding is announced, nothing is sent
        g = self.get("/text?kb=3&stream=0", "gzip")
        h = self.get("/text?kb=3&stream=0", "gzip", method="HEAD")
        self.assertEqual(g.get("Content-Encoding"), "gzip")
        self.assertEqual(h.get("Content-Encoding"), "gzip")
        self.assertEqual(h.body, b"")
        self.assertIsNone(h.get("Content-Length"))
        self.assertVary(h)
        # the connection goes on: a GET after a HEAD on the same one
        c = self.connect()
        self.assertEqual(c.request("HEAD", "/text?kb=64",
                                   headers={"Accept-Encoding": "gzip"}).body, b"")
        r = c.request("GET", "/text?kb=64", headers={"Accept-Encoding": "gzip"})
        self.assertEqual(gzip.decompress(r.body), text(64))

    def test_head_same_fields_as_get_h2(self):
        import h2util  # python3-h2 and python3-hpack (tools/deps.sh test)
        tls = flaretest.tls_files()[0] if self.server.tls else None
        c = h2util.RawH2(self.addr, tls=tls)
        try:
            c.request(1, "/text?kb=64", "GET", extra=[("accept-encoding", "gzip")],
                      scheme="https" if tls else "http")
            c.request(3, "/text?kb=64", "HEAD", extra=[("accept-encoding", "gzip")],
                      scheme="https" if tls else "http")
            gs, gh, gb, _ = c.response(1)
            hs, hh, hb, _ = c.response(3)
        finally:
            c.close()
        gh = {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
              for k, v in gh}
        hh = {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
              for k, v in hh}
        self.assertEqual((gs, hs), (200, 200))
        self.assertEqual(gh.get("content-encoding"), "gzip")
        self.assertEqual(gzip.decompress(gb), text(64))
        self.assertEqual(hh.get("content-encoding"), "gzip")
        self.assertEqual(hh.get("content-length"), gh.get("content-length"))
        self.assertEqual(int(gh["content-length"]), len(gb))
        self.assertIn("accept-encoding", hh.get("vary", "").lower())
        self.assertEqual(hb, b"")

    def test_keepalive_many(self):
        # one connection, codings alternating: the worker's zlib state is reused
        c = self.connect()
        for i in range(30):
            ae = ("gzip", "br", "identity")[i % 3]
            r = c.request("GET", "/text?kb=%d" % (1 + i), headers={"Accept-Encoding": ae})
            if ae == "gzip":
                self.assertEqual(gzip.decompress(r.body), text(1 + i))
            elif ae == "br" and brotli is not None:
                self.assertEqual(brotli.decompress(r.body), text(1 + i))
            elif ae == "identity":
                self.assertEqual(r.body, text(1 + i))

    # ---- streamed bodies ---------------------------------------------------

    def read_chunk(self, c, deadline):
        """One chunk of a chunked body: its bytes (b'' for the last)."""
        line = c._read_until(b"\r\n", deadline)
        n = int(line.split(b";")[0].strip(), 16)
        data = c._read_exact(n + 2, deadline)  # the last one: "0" CRLF CRLF (no trailers)
        self.assertEqual(data[n:], b"\r\n")
        return data[:n]

    def stream_incrementally(self, ae, decoder):
        # 6 KiB, one KiB every 300 ms: each write must decode on arrival,
        # long before the handler is done
        c = self.connect()
        c.send(flaretest.build_request("GET", "/text?kb=6&stream=300",
                                       headers={"Accept-Encoding": ae}))
        deadline = time.monotonic() + 10
        head = c._read_until(b"\r\n\r\n", deadline)
        self.assertIn(b"Transfer-Encoding: chunked", head)
        self.assertIn(("Content-Encoding: %s" % ae).encode(), head)
        self.assertIn(b"Vary: Accept-Encoding", head)
        t0 = time.monotonic()
        got = b""
        first_at = None
        while True:
            data = self.read_chunk(c, deadline)
            if data == b"":
                break
            got += decoder.process(data)
            if first_at is None and len(got) >= 1024:
                first_at = time.monotonic() - t0
                self.assertEqual(got[:1024], text(1)[:1024])
        got += decoder.flush()
        self.assertEqual(got, text(6))
        # the first KiB decoded before the rest was even written (5 x 300 ms)
        self.assertIsNotNone(first_at)
        self.assertLess(first_at, 1.0)

    def test_stream_gzip_flushed_per_write(self):
        class Gz:
            def __init__(self):
                self.d = zlib.decompressobj(16 + zlib.MAX_WBITS)

            def process(self, b):
                return self.d.decompress(b)

            def flush(self):
                return self.d.flush()
        self.stream_incrementally("gzip", Gz())

    def test_stream_brotli_flushed_per_write(self):
        if brotli is None:
            self.fail("python3-brotli is not installed")

        class Br:
            def __init__(self):
                self.d = brotli.Decompressor()

            def process(self, b):
                return self.d.process(b)

            def flush(self):
                self.assertFinished()
                return b""

            def assertFinished(self):
                if not self.d.is_finished():
                    raise AssertionError("brotli stream not finished")
        self.stream_incrementally("br", Br())

    def test_stream_identity(self):
        r = self.get("/text?kb=3&stream=0")
        self.assertEqual(r.status, 200)
        self.assertIsNone(r.get("Content-Encoding"))
        self.assertVary(r)
        self.assertEqual(r.body, text(3))

    def test_stream_client_leaves(self):
        # a client that goes mid-stream: the encoder is freed, the server goes on
        for ae in ("gzip", "br"):
            c = self.connect()
            c.send(flaretest.build_request("GET", "/text?kb=50&stream=20",
                                           headers={"Accept-Encoding": ae}))
            time.sleep(0.1)
            c.abort()
        time.sleep(1.2)
        r = self.get("/text?kb=2", "gzip")
        self.assertEqual(gzip.decompress(r.body), text(2))

    # ---- precompressed static siblings -------------------------------------

    def test_static_siblings_by_q(self):
        if brotli is None:
            self.fail("python3-brotli is not installed")
        r_id = self.get("/static/page.html")
        r_gz = self.get("/static/page.html", "gzip")
        r_br = self.get("/static/page.html", "gzip, br")
        r_gz2 = self.get("/static/page.html", "gzip, br;q=0.5")
        self.assertEqual(r_id.body, PAGE)
        self.assertIsNone(r_id.get("Content-Encoding"))
        self.assertEqual(r_gz.get("Content-Encoding"), "gzip")
        self.assertEqual(gzip.decompress(r_gz.body), PAGE)
        self.assertEqual(r_br.get("Content-Encoding"), "br")
        self.assertEqual(brotli.decompress(r_br.body), PAGE)
        self.assertEqual(r_gz2.get("Content-Encoding"), "gzip")
        for r in (r_id, r_gz, r_br):
            self.assertVary(r)
        etags = {r_id.get("ETag"), r_gz.get("ETag"), r_br.get("ETag")}
        self.assertEqual(len(etags), 3, etags)  # one per representation
        # only .br there, gzip preferred: the .br sibling is the fallback
        r = self.get("/static/only-br.txt", "gzip, br;q=0.1")
        self.assertEqual(r.get("Content-Encoding"), "br")
        r = self.get("/static/only-br.txt", "gzip")
        self.assertIsNone(r.get("Content-Encoding"))
        self.assertEqual(r.body, b"plain\n" * 100)

    def test_static_br_conditional_and_range(self):
        if brotli is None:
            self.fail("python3-brotli is not installed")
        r = self.get("/static/page.html", "br")
        etag = r.get("ETag")
        r304 = self.get("/static/page.html", "br", extra={"If-None-Match": etag})
        self.assertEqual(r304.status, 304)
        self.assertEqual(r304.body, b"")
        self.assertEqual(r304.get("ETag"), etag)
        # the br tag does not validate the gzip representation
        r200 = self.get("/static/page.html", "gzip", extra={"If-None-Match": etag})
        self.assertEqual(r200.status, 200)
        self.assertEqual(r200.get("Content-Encoding"), "gzip")
        # a range of the selected representation, bytes as stored
        rr = self.get("/static/page.html", "br", extra={"Range": "bytes=0-9"})
        self.assertEqual(rr.status, 206)
        self.assertEqual(rr.get("Content-Encoding"), "br")
        with open(os.path.join(ROOT, "page.html.br"), "rb") as f:
            self.assertEqual(rr.body, f.read()[:10])


class CompressFlags(ServerTestCase):
    """hello's --gzip-level, --br-quality, --compress-min reach the middleware."""
    server_args = ("--gzip-level", "1", "--br-quality", "11", "--compress-min", "70000")
    workers = 1

    def get(self, target, ae, timeout=None):
        return self.connect().request("GET", target, headers={"Accept-Encoding": ae},
                                      timeout=timeout)

    def test_min_size(self):
        r = self.get("/text?kb=68", "gzip")  # 69632 bytes < 70000
        self.assertIsNone(r.get("Content-Encoding"))
        self.assertEqual(r.body, text(68))
        self.assertIn("Accept-Encoding", r.get("Vary"))
        r = self.get("/text?kb=69", "gzip")  # 70656
        self.assertEqual(gzip.decompress(r.body), text(69))

    def test_levels(self):
        # level 1 against the default level 6 of the first class's server: a
        # fresh compression of the same text at 1 and at 9 by zlib itself
        r = self.get("/text?kb=512", "gzip")
        body = text(512)
        self.assertEqual(gzip.decompress(r.body), body)
        at1 = len(gzip.compress(body, compresslevel=1))
        at9 = len(gzip.compress(body, compresslevel=9))
        self.assertNotEqual(at1, at9)
        self.assertLess(abs(len(r.body) - at1), abs(len(r.body) - at9))
        if brotli is not None:
            # quality 11 is brotli's slowest (about 1 MB/s): a smaller text,
            # still past --compress-min, and room for a loaded machine
            body = text(96)
            r = self.get("/text?kb=96", "br", timeout=60)
            self.assertEqual(brotli.decompress(r.body), body)
            self.assertLess(len(r.body), len(brotli.compress(body, quality=1)))

    def test_bad_flags_refused(self):
        for flag, val in (("--gzip-level", "0"), ("--gzip-level", "10"),
                          ("--br-quality", "12"), ("--compress-min", "x")):
            p = subprocess.run([flaretest.HELLO, "--listen", "127.0.0.1:0", flag, val],
                               capture_output=True, timeout=10)
            self.assertEqual(p.returncode, 2, (flag, val, p.stderr))
            # the settings library names the flag and what it expected
            self.assertIn(flag.encode() + b": expected", p.stderr)


if __name__ == "__main__":
    flaretest.main()
