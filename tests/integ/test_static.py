#!/usr/bin/python3
"""Static files (flare_static) through examples/hello --static DIR, over real
sockets: bodies small (read into the response) and large (sendfile), HEAD,
index and directory redirects, path safety (.., encoded .., NUL, symlinks out
of the root, dotfiles, FIFOs), validators and conditionals (304, 412), byte
ranges (206, 416, If-Range), precompressed .gz, MIME types, pipelining
behind async responses, slow readers, aborted downloads (no descriptor
leak) and many parallel downloads."""

import email.utils
import gzip
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
from flaretest import ServerTestCase, build_request  # noqa: E402

ROOT = tempfile.mkdtemp(prefix="flare-static-")
OUTSIDE = tempfile.mkdtemp(prefix="flare-outside-")


def pattern(n, seed):
    """n deterministic bytes, different per seed."""
    block = bytes((i * 131 + seed * 17 + (i >> 8)) & 0xFF for i in range(65536))
    return (block * (n // len(block) + 1))[:n]


SMALL = pattern(4096, 1)
BIG = pattern(1 << 20, 2)
ODD = pattern(100_003, 3)  # not a multiple of anything


def write(rel, data, root=ROOT):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


write("4k.bin", SMALL)
write("1m.bin", BIG)
write("odd.dat", ODD)
write("wed.dat", ODD)
# modified on a Wednesday: its Last-Modified date starts with 'W', like a weak tag
os.utime(os.path.join(ROOT, "wed.dat"), (1796169600, 1796169600))  # Wed, 02 Dec 2026 00:00:00
write("empty.txt", b"")
write("index.html", b"<!doctype html><title>root</title>\n")
write("css/site.css", b"body{color:red}\n")
write("js/app.js", b"console.log(1)\n")
write("data/x.json", b'{"a":1}\n')
write("UPPER.HTML", b"<p>upper</p>\n")
write("noext", b"raw\n")
write("with space.txt", b"spaced\n")
write("a%20b.txt", b"percent in the name\n")
write("sub/a.txt", b"sub a\n")
write("docs/index.html", b"<p>docs</p>\n")
write(".env", b"SECRET=1\n")
write(".git/config", b"[core]\n")
write("zipped/app.js", b"console.log('plain')\n" * 50)
write("zipped/app.js.gz", gzip.compress(b"console.log('plain')\n" * 50, mtime=0))
os.utime(write("wednesday.dat", ODD), (1796169600, 1796169600))  # Wed, 02 Dec 2026 00:00:00 GMT
write("secret.txt", b"outside the root\n", root=OUTSIDE)
os.symlink(os.path.join(OUTSIDE, "secret.txt"), os.path.join(ROOT, "escape.txt"))
os.symlink(OUTSIDE, os.path.join(ROOT, "escape-dir"))
os.symlink("/etc/passwd", os.path.join(ROOT, "passwd"))
os.symlink("sub/a.txt", os.path.join(ROOT, "inside-link.txt"))
os.mkfifo(os.path.join(ROOT, "fifo"))


def http_date(t):
    return email.utils.formatdate(t, usegmt=True)


class Static(ServerTestCase):
    server_args = ("--static", ROOT)

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(ROOT, ignore_errors=True)
            shutil.rmtree(OUTSIDE, ignore_errors=True)

    def get(self, target, headers=None, conn=None, method="GET"):
        c = conn or self.connect()
        return c.request(method, target, headers=headers)

    def assertFile(self, r, data, ctype="application/octet-stream", status=200):
        self.assertOk(r, data, ctype, status=status)
        return r

    # ---- plain files ----------------------------------------------------

    def test_small_file(self):
        r = self.assertFile(self.get("/static/4k.bin"), SMALL)
        st = os.stat(os.path.join(ROOT, "4k.bin"))
        self.assertEqual(r.get("Last-Modified"), http_date(int(st.st_mtime)))
        self.assertRegex(r.get("ETag"), r'^"[0-9a-f]+\.[0-9a-f]+-1000"$')
        self.assertEqual(r.get("Accept-Ranges"), "bytes")
        self.assertNotIn("close", r.connection_tokens())

    def test_large_file_sendfile(self):
        c = self.connect()
        for _ in range(3):  # the connection stays usable after each
            self.assertFile(self.get("/static/1m.bin", conn=c), BIG)
        self.assertFile(self.get("/static/odd.dat", conn=c), ODD)

    def test_empty_file(self):
        r = self.get("/static/empty.txt")
        self.assertOk(r, b"", "text/plain; charset=utf-8")

    def test_head(self):
        c = self.connect()
        r = self.get("/static/1m.bin", conn=c, method="HEAD")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.get("Content-Length"), str(len(BIG)))
        self.assertEqual(r.body, b"")
        # nothing else was sent: the next response follows at once
        self.assertFile(self.get("/static/4k.bin", conn=c), SMALL)

    def test_mime_types(self):
        cases = {
            "/static/css/site.css": "text/css; charset=utf-8",
            "/static/js/app.js": "text/javascript; charset=utf-8",
            "/static/data/x.json": "application/json",
            "/static/UPPER.HTML": "text/html; charset=utf-8",
            "/static/noext": "application/octet-stream",
            "/static/index.html": "text/html; charset=utf-8",
        }
        c = self.connect()
        for target, ctype in cases.items():
            with self.subTest(target=target):
                r = self.get(target, conn=c)
                self.assertEqual(r.status, 200, r)
                self.assertEqual(r.get("Content-Type"), ctype)

    def test_percent_encoded_name(self):
        self.assertOk(self.get("/static/with%20space.txt"), b"spaced\n")
        # decoded once: "%2520" names the file "a%20b.txt", not "a b.txt"
        self.assertOk(self.get("/static/a%2520b.txt"), b"percent in the name\n")
        self.assertEqual(self.get("/static/a%20b.txt").status, 404)
        self.assertOk(self.get("/static/%73ub/%61.txt"), b"sub a\n")

    def test_dot_and_empty_segments_are_dropped(self):
        c = self.connect()
        self.assertOk(self.get("/static/./sub/./a.txt", conn=c), b"sub a\n")
        self.assertOk(self.get("/static/sub//a.txt", conn=c), b"sub a\n")

    def test_other_methods_405(self):
        c = self.connect()
        for m in ("POST", "PUT", "DELETE"):
            with self.subTest(method=m):
                r = c.request(m, "/static/4k.bin", body=b"" if m != "DELETE" else None)
                self.assertEqual(r.status, 405, r)
                self.assertEqual(r.get("Allow"), "GET, HEAD, OPTIONS")

    # ---- directories ------------------------------------------------------

    def test_root_index(self):
        r = self.get("/static/")
        self.assertOk(r, b"<!doctype html><title>root</title>\n", "text/html; charset=utf-8")

    def test_bare_prefix_redirects(self):
        r = self.get("/static")
        self.assertEqual(r.status, 301, r)
        self.assertEqual(r.get("Location"), "/static/")

    def test_directory_redirect_keeps_query(self):
        r = self.get("/static/docs?v=1")
        self.assertEqual(r.status, 301, r)
        self.assertEqual(r.get("Location"), "/static/docs/?v=1")
        self.assertOk(self.get("/static/docs/"), b"<p>docs</p>\n")

    def test_directory_redirect_after_index_was_cached(self):
        # the cache must tell "docs/" (the index) from "docs" (a redirect)
        c = self.connect()
        for _ in range(3):
            self.assertOk(self.get("/static/docs/", conn=c), b"<p>docs</p>\n")
            r = self.get("/static/docs", conn=c)
            self.assertEqual((r.status, r.get("Location")), (301, "/static/docs/"))
            self.assertEqual(self.get("/static/4k.bin/", conn=c).status, 404)

    def test_directory_without_index_404(self):
        r = self.get("/static/sub/")
        self.assertEqual(r.status, 404, r)

    # ---- path safety ----------------------------------------------------

    def test_dotdot_rejected(self):
        # '.' is unreserved: "%2e" is routed as '.', so an encoded ".." is the
        # same ".." segment as a literal one, and the static handler refuses
        # both; "%2F" stays data until the handler decodes it, then splits
        c = self.connect()
        for target in ("/static/../etc/passwd", "/static/sub/../../x",
                       "/static/%2e%2e/%2e%2e/etc/passwd", "/static/..%2fetc%2fpasswd",
                       "/static/sub/%2E%2E/4k.bin", "/static/..", "/static/.%2e/etc/passwd",
                       "/static/%2E./etc/passwd", "/static/%2e%2e", "/static/sub%2f%2e%2e%2f..%2Fx",
                       "/static/%2e%2e%2f4k.bin", "/static/sub/.%2E"):
            with self.subTest(target=target):
                r = self.get(target, conn=c)
                self.assertEqual(r.status, 400, r)
                self.assertIn(b"..", r.body)
        self.assertServerAlive()

    def test_double_encoded_dots_are_names(self):
        # decoded once: "%252e%252e" names a file called "%2e%2e", not ".."
        c = self.connect()
        for target in ("/static/%252e%252e/etc/passwd", "/static/%252E%252E"):
            with self.subTest(target=target):
                self.assertEqual(self.get(target, conn=c).status, 404)

    def test_unreserved_escapes_normalised(self):
        c = self.connect()
        self.assertOk(self.get("/st%61tic/%73ub/%61.txt", conn=c), b"sub a\n")
        self.assertOk(self.get("/%73%74%61%74%69%63/sub/a%2etxt", conn=c), b"sub a\n")
        # the directory redirect is built from the normal form of the path
        r = self.get("/st%61tic/%73ub", conn=c)
        self.assertEqual((r.status, r.get("Location")), (301, "/static/sub/"), r)

    def test_bad_escapes_and_nul(self):
        # a malformed escape is refused by the request parser (which closes
        # the connection), a NUL by the static handler
        for target in ("/static/%", "/static/a%2", "/static/%zz", "/static/4k.bin%00.txt",
                       "/static/%00"):
            with self.subTest(target=target):
                self.assertEqual(self.get(target, conn=self.connect()).status, 400)

    def test_symlinks_out_of_root_404(self):
        c = self.connect()
        for target in ("/static/escape.txt", "/static/escape-dir/secret.txt", "/static/passwd"):
            with self.subTest(target=target):
                r = self.get(target, conn=c)
                self.assertEqual(r.status, 404, r)
                self.assertNotIn(b"outside", r.body)
                self.assertNotIn(b"root:", r.body)

    def test_symlink_inside_root_served(self):
        self.assertOk(self.get("/static/inside-link.txt"), b"sub a\n")

    def test_dotfiles_hidden(self):
        c = self.connect()
        for target in ("/static/.env", "/static/.git/config", "/static/%2eenv"):
            with self.subTest(target=target):
                self.assertEqual(self.get(target, conn=c).status, 404)

    def test_fifo_not_served_and_does_not_block(self):
        t0 = time.monotonic()
        r = self.get("/static/fifo")
        self.assertEqual(r.status, 404, r)
        self.assertLess(time.monotonic() - t0, 2.0)

    def test_missing(self):
        c = self.connect()
        for target in ("/static/nope", "/static/4k.bin/x", "/static/sub/nope/", "/static/4k.bin/",
                       "/static/sub/a.txt/"):
            with self.subTest(target=target):
                self.assertEqual(self.get(target, conn=c).status, 404)

    # ---- validators and conditionals --------------------------------------

    def etag(self, target="/static/4k.bin"):
        return self.get(target, method="HEAD").get("ETag")

    def test_if_none_match(self):
        tag = self.etag()
        c = self.connect()
        for inm in (tag, "W/" + tag, '"nope", ' + tag, "*"):
            with self.subTest(inm=inm):
                r = self.get("/static/4k.bin", {"If-None-Match": inm}, conn=c)
                self.assertEqual(r.status, 304, r)
                self.assertEqual(r.body, b"")
                self.assertEqual(r.all("Content-Length"), [])
                self.assertEqual(r.get("ETag"), tag)
                self.assertIsNotNone(r.get("Last-Modified"))
        r = self.get("/static/4k.bin", {"If-None-Match": '"other"'}, conn=c)
        self.assertFile(r, SMALL)

    def test_if_modified_since(self):
        st = os.stat(os.path.join(ROOT, "4k.bin"))
        c = self.connect()
        r = self.get("/static/4k.bin", {"If-Modified-Since": http_date(st.st_mtime + 3600)}, conn=c)
        self.assertEqual(r.status, 304, r)
        r = self.get("/static/4k.bin", {"If-Modified-Since": http_date(int(st.st_mtime))}, conn=c)
        self.assertEqual(r.status, 304, r)
        r = self.get("/static/4k.bin", {"If-Modified-Since": http_date(st.st_mtime - 3600)}, conn=c)
        self.assertFile(r, SMALL)
        # the obsolete forms count too; garbage is ignored
        asctime = time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(st.st_mtime + 60))
        r = self.get("/static/4k.bin", {"If-Modified-Since": asctime}, conn=c)
        self.assertEqual(r.status, 304, r)
        r = self.get("/static/4k.bin", {"If-Modified-Since": "yesterday"}, conn=c)
        self.assertFile(r, SMALL)
        # If-None-Match wins over If-Modified-Since
        r = self.get("/static/4k.bin", {"If-None-Match": '"other"',
                                        "If-Modified-Since": http_date(st.st_mtime + 3600)}, conn=c)
        self.assertFile(r, SMALL)

    def test_if_match_and_unmodified_since(self):
        tag = self.etag()
        st = os.stat(os.path.join(ROOT, "4k.bin"))
        c = self.connect()
        self.assertFile(self.get("/static/4k.bin", {"If-Match": tag}, conn=c), SMALL)
        self.assertFile(self.get("/static/4k.bin", {"If-Match": "*"}, conn=c), SMALL)
        for h in ({"If-Match": '"other"'}, {"If-Match": "W/" + tag},
                  {"If-Unmodified-Since": http_date(st.st_mtime - 3600)}):
            with self.subTest(h=h):
                r = self.get("/static/4k.bin", h, conn=c)
                self.assertEqual(r.status, 412, r)
        r = self.get("/static/4k.bin", {"If-Unmodified-Since": http_date(st.st_mtime + 3600)},
                     conn=c)
        self.assertFile(r, SMALL)

    def test_changed_file_changes_etag(self):
        write("changing.txt", b"one\n")
        r1 = self.get("/static/changing.txt")
        self.assertOk(r1, b"one\n")
        time.sleep(0.01)
        write("changing.txt", b"two two\n")
        r2 = self.get("/static/changing.txt", {"If-None-Match": r1.get("ETag")})
        self.assertOk(r2, b"two two\n")
        self.assertNotEqual(r1.get("ETag"), r2.get("ETag"))

    def test_small_file_cache_sees_changes(self):
        # small files are cached per worker: a change in place is seen by
        # the next request read (fstat on the cached descriptor, once per
        # loop turn), a rename or removal once
        # the path is looked up again (cache_ms, 1 s by default)
        c = self.connect()
        write("cached.txt", b"first\n")
        for _ in range(4):  # fill the caches of both workers
            self.assertOk(self.get("/static/cached.txt", conn=self.connect()), b"first\n")
        with open(os.path.join(ROOT, "cached.txt"), "ab") as f:
            f.write(b"appended\n")
        for _ in range(4):
            self.assertOk(self.get("/static/cached.txt", conn=self.connect()), b"first\nappended\n")
        tmp = write("cached.tmp", b"replaced by rename\n")
        os.replace(tmp, os.path.join(ROOT, "cached.txt"))
        time.sleep(1.2)
        for _ in range(4):
            self.assertOk(self.get("/static/cached.txt", conn=self.connect()), b"replaced by rename\n")
        os.unlink(os.path.join(ROOT, "cached.txt"))
        time.sleep(1.2)
        for _ in range(4):
            self.assertEqual(self.get("/static/cached.txt", conn=self.connect()).status, 404)
        self.assertServerAlive()
        c.close()

    def test_cache_eviction_keeps_contents_right(self):
        # more small files than a worker's cache holds (64): entries are
        # evicted and refilled, and every answer is still its own file
        names = ["many/f%03d.txt" % i for i in range(150)]
        for i, n in enumerate(names):
            write(n, b"file %d\n" % i * (1 + i % 7))
        c = self.connect()
        for rnd in range(2):
            for i, n in enumerate(names):
                r = self.get("/static/" + n, conn=c)
                self.assertOk(r, b"file %d\n" % i * (1 + i % 7))
        self.assertServerAlive()

    def test_cached_body_outlives_its_entry(self):
        # cached bodies of 4 KiB and up go out by reference: responses still
        # queued for a slow reader must keep the old contents while the
        # file changes and the entry is dropped, refilled and evicted (with
        # the entry freeing its body outright, ASan reports a use after free)
        old, new = pattern(8192, 7), pattern(8192, 8)
        write("shared8k.bin", old)
        self.assertFile(self.get("/static/shared8k.bin"), old)  # cached now
        a = socket.socket()
        a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        a.settimeout(20)
        a.connect(self.addr)
        a = flaretest.client_socket(a)  # TLS mode: a TLSSocket
        # Over TLS (FLARE_TEST_TLS=1) a record carries at most 16 KiB: 400
        # requests span two records, and the server rightly stops reading the
        # second while its output is blocked, so those are parsed after the
        # change below and get the new contents. 200 fit in one record.
        n = 200 if flaretest.TLS else 400
        try:
            a.sendall(build_request("GET", "/static/shared8k.bin") * n)
            # 3.2 MB of answers (TLS: 1.6 MB): more than the socket buffers
            # hold, so many wait in the server's output, referencing the
            # cached body
            time.sleep(0.3)
            with open(os.path.join(ROOT, "shared8k.bin"), "r+b") as f:
                f.write(new)  # in place: same inode, new mtime
            c = self.connect()
            for _ in range(4):  # both workers drop their entry and refill it
                self.assertFile(self.get("/static/shared8k.bin", conn=self.connect()), new)
            for i in range(150):  # and churn the caches
                write("churn/f%03d.txt" % i, b"churn %d\n" % i)
                self.assertOk(self.get("/static/churn/f%03d.txt" % i, conn=c), b"churn %d\n" % i)
            conn = flaretest.Conn.__new__(flaretest.Conn)
            conn.sock, conn.buf, conn.timeout, conn.eof = a, b"", 20, False
            for i in range(n):
                r = conn.read_response(timeout=20)
                self.assertEqual((r.status, r.body == old), (200, True), "response %d" % i)
        finally:
            a.close()

    def test_cache_keeps_index_and_ranges_right(self):
        c = self.connect()
        for _ in range(3):
            self.assertOk(self.get("/static/docs/", conn=c), b"<p>docs</p>\n")
            r = self.get("/static/4k.bin", {"Range": "bytes=10-19"}, conn=c)
            self.assertEqual((r.status, r.body), (206, SMALL[10:20]))
            r = self.get("/static/4k.bin", conn=c, method="HEAD")
            self.assertEqual((r.status, r.get("Content-Length"), r.body), (200, "4096", b""))

    # ---- ranges ----------------------------------------------------------

    def range(self, spec, target="/static/odd.dat", data=ODD, extra=None, conn=None):
        h = {"Range": spec}
        h.update(extra or {})
        return self.get(target, h, conn=conn), data

    def test_single_ranges(self):
        n = len(ODD)
        cases = [("bytes=0-99", 0, 99), ("bytes=100-", 100, n - 1), ("bytes=-500", n - 500, n - 1),
                 ("bytes=99990-200000", 99990, n - 1), ("bytes=-999999", 0, n - 1),
                 ("bytes=5-5", 5, 5), ("BYTES=10-19", 10, 19), ("bytes= 7-8 ,", 7, 8)]
        c = self.connect()
        for spec, a, b in cases:
            with self.subTest(spec=spec):
                r, _ = self.range(spec, conn=c)
                self.assertEqual(r.status, 206, r)
                self.assertEqual(r.get("Content-Range"), "bytes %d-%d/%d" % (a, b, n))
                self.assertEqual(r.body, ODD[a:b + 1])
                self.assertEqual(r.get("Content-Length"), str(b - a + 1))

    def test_range_of_large_file_uses_offsets(self):
        c = self.connect()
        for a, b in ((0, 70000), (500000, 1048575), (123457, 987653)):
            r, _ = self.range("bytes=%d-%d" % (a, b), "/static/1m.bin", BIG, conn=c)
            self.assertEqual(r.status, 206, r)
            self.assertEqual(r.body, BIG[a:b + 1])

    def test_unsatisfiable_416(self):
        c = self.connect()
        for spec in ("bytes=100003-", "bytes=200000-300000", "bytes=-0", "bytes=100003-100010,200000-"):
            with self.subTest(spec=spec):
                r, _ = self.range(spec, conn=c)
                self.assertEqual(r.status, 416, r)
                self.assertEqual(r.get("Content-Range"), "bytes */100003")

    def test_ignored_ranges_give_200(self):
        c = self.connect()
        for spec in ("bytes=0-1,5-6", "bytes=9-2", "items=0-5", "bytes=", "bytes=a-b", "bytes=1-2x"):
            with self.subTest(spec=spec):
                r, _ = self.range(spec, conn=c)
                self.assertFile(r, ODD)
        r = self.get("/static/empty.txt", {"Range": "bytes=0-5"}, conn=c)
        self.assertOk(r, b"")

    def test_range_on_head_ignored(self):
        r = self.get("/static/odd.dat", {"Range": "bytes=0-9"}, method="HEAD")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.get("Content-Length"), str(len(ODD)))

    def test_if_range(self):
        head = self.get("/static/odd.dat", method="HEAD")
        tag, lm = head.get("ETag"), head.get("Last-Modified")
        c = self.connect()
        r, _ = self.range("bytes=0-9", extra={"If-Range": tag}, conn=c)
        self.assertEqual(r.status, 206, r)
        r, _ = self.range("bytes=0-9", extra={"If-Range": lm}, conn=c)
        self.assertEqual(r.status, 206, r)
        # a date on a Wednesday is a date, not a weak tag (W/"...")
        r = self.get("/static/wednesday.dat", {"Range": "bytes=0-9",
                                                "If-Range": "Wed, 02 Dec 2026 00:00:00 GMT"}, conn=c)
        self.assertEqual(r.status, 206, r)
        for stale in ('"old"', "W/" + tag, "Mon, 01 Jan 2001 00:00:00 GMT"):
            with self.subTest(stale=stale):
                r, _ = self.range("bytes=0-9", extra={"If-Range": stale}, conn=c)
                self.assertFile(r, ODD)

    def test_if_range_date_on_a_wednesday(self):
        head = self.get("/static/wed.dat", method="HEAD")
        self.assertEqual(head.get("Last-Modified"), "Wed, 02 Dec 2026 00:00:00 GMT")
        r, _ = self.range("bytes=0-9", target="/static/wed.dat",
                          extra={"If-Range": "Wed, 02 Dec 2026 00:00:00 GMT"})
        self.assertEqual(r.status, 206, r)

    # ---- precompressed ---------------------------------------------------

    def test_precompressed_gzip(self):
        plain = b"console.log('plain')\n" * 50
        c = self.connect()
        for _ in range(3):  # the first fills the small-file cache, the others hit it
            r = self.get("/static/zipped/app.js", {"Accept-Encoding": "gzip, deflate"}, conn=c)
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.get("Content-Encoding"), "gzip")
            self.assertEqual(r.get("Content-Type"), "text/javascript; charset=utf-8")
            self.assertEqual(r.get("Vary"), "Accept-Encoding")
            self.assertEqual(gzip.decompress(r.body), plain)
            # no sibling: the plain file, also for a client that takes gzip
            r = self.get("/static/js/app.js", {"Accept-Encoding": "gzip"}, conn=c)
            self.assertOk(r, b"console.log(1)\n", "text/javascript; charset=utf-8")
            self.assertIsNone(r.get("Content-Encoding"))
        for ae in (None, "br", "gzip;q=0", "identity", None, "gzip;q=0"):
            with self.subTest(ae=ae):
                r = self.get("/static/zipped/app.js", {"Accept-Encoding": ae} if ae else None,
                             conn=c)
                self.assertOk(r, plain, "text/javascript; charset=utf-8")
                self.assertIsNone(r.get("Content-Encoding"))
                self.assertEqual(r.get("Vary"), "Accept-Encoding")

    # ---- connection behaviour -----------------------------------------------

    def test_pipelined_mix_in_order(self):
        c = self.connect(timeout=20)
        reqs = [("GET", "/static/1m.bin", None), ("GET", "/plaintext", None),
                ("GET", "/static/4k.bin", None), ("GET", "/static/1m.bin", {"Range": "bytes=1000-2999"}),
                ("HEAD", "/static/1m.bin", None), ("GET", "/static/odd.dat", None),
                ("GET", "/static/nope", None), ("GET", "/json", None)]
        c.send(b"".join(build_request(m, t, h) for m, t, h in reqs))
        bodies = [BIG, b"Hello, World!", SMALL, BIG[1000:3000], b"", ODD, None,
                  b'{"message":"Hello, World!"}']
        for (m, t, _), body in zip(reqs, bodies):
            r = c.read_response(head=(m == "HEAD"), timeout=20)
            if body is None:
                self.assertEqual(r.status, 404, r)
            else:
                self.assertIn(r.status, (200, 206), (t, r))
                self.assertEqual(r.body, body, t)

    def test_file_queued_behind_async_response(self):
        # the file response is produced while /slow is still pending: it must
        # wait its turn (the exchange holds the file), then go out whole
        c = self.connect(timeout=20)
        c.send(build_request("GET", "/slow?ms=200") + build_request("GET", "/static/1m.bin") +
               build_request("GET", "/static/4k.bin") + build_request("GET", "/slow?ms=10") +
               build_request("GET", "/static/odd.dat"))
        self.assertOk(c.read_response(timeout=20), b"slow")
        self.assertFile(c.read_response(timeout=20), BIG)
        self.assertFile(c.read_response(timeout=20), SMALL)
        self.assertOk(c.read_response(timeout=20), b"slow")
        self.assertFile(c.read_response(timeout=20), ODD)

    def test_slow_reader(self):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(20)
        s.connect(self.addr)
        s = flaretest.client_socket(s)
        try:
            s.sendall(build_request("GET", "/static/1m.bin") + build_request("GET", "/plaintext"))
            got = b""
            time.sleep(0.5)  # let the server fill the socket and wait for EPOLLOUT
            while len(got) < len(BIG) + 400:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
                if b"Hello, World!" in got[-64:]:
                    break
        finally:
            s.close()
        head, _, rest = got.partition(b"\r\n\r\n")
        self.assertIn(b"200 OK", head)
        self.assertEqual(rest[:len(BIG)], BIG)
        self.assertIn(b"Hello, World!", rest[len(BIG):])

    def fd_count(self):
        return len(os.listdir("/proc/%d/fd" % self.server.proc.pid))

    def settled_fd_count(self):
        """The descriptor count once the server is fully up: it accepts on
        worker 0's socket while the next worker is still being set up (its
        socket, loop, eventfd and reserve descriptor), which a slow build
        (ThreadSanitizer) stretches to where a test can see it."""
        n = self.fd_count()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            time.sleep(0.2)
            m = self.fd_count()
            if m == n:
                break
            n = m
        return n

    def test_aborted_downloads_do_not_leak(self):
        before = self.settled_fd_count()
        for i in range(40):
            s = flaretest.client_socket(socket.create_connection(self.addr))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(build_request("GET", "/static/1m.bin") * 3)
            if i % 2:
                s.recv(1000)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()  # RST in the middle of the file
        # the server notices each close; give it a moment, then compare
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and self.fd_count() > before:
            time.sleep(0.05)
        self.assertLessEqual(self.fd_count(), before, "file descriptors leaked")
        self.assertFile(self.get("/static/1m.bin"), BIG)

    def test_parallel_downloads(self):
        errors = []

        def worker(k):
            try:
                c = flaretest.Conn(self.addr, timeout=30)
                try:
                    for j in range(3):
                        target, data = (("/static/1m.bin", BIG) if (k + j) % 2 else
                                        ("/static/odd.dat", ODD))
                        r = c.request("GET", target, timeout=30)
                        if r.status != 200 or r.body != data:
                            errors.append((k, j, r.status, len(r.body)))
                finally:
                    c.close()
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append((k, repr(e)))

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])
        self.assertServerAlive()


class StaticBadRoot(flaretest.unittest.TestCase):
    def test_missing_root_is_an_error(self):
        srv = flaretest.Server("--static", "/nonexistent/flare-static-root")
        with self.assertRaises(RuntimeError) as cm:
            srv.start(timeout=3)
        self.assertIn("--static", str(cm.exception))
        srv.close_log()


if __name__ == "__main__":
    flaretest.main()
