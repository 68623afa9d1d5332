#!/usr/bin/python3
"""examples/hello's routes over HTTP/2 with independent clients: curl
--http2-prior-knowledge and nghttp (Debian nghttp2-client) on the plaintext
port (h2c, beside HTTP/1.1 on the same port), curl --http2 and nghttp over
TLS (ALPN h2, http/1.1 still offered), and python3-h2 over TLS."""

import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
import h2util  # noqa: E402

HELLO = b"Hello, World!"
STATIC = flaretest.temp_dir("flare-h2-clients-")
FILE = bytes((i * 7 + (i >> 9)) & 0xFF for i in range(300000))
with open(os.path.join(STATIC, "f.bin"), "wb") as f:
    f.write(FILE)
BODY = bytes(range(256)) * 1000


def need(tool):
    if shutil.which(tool) is None:
        raise unittest.SkipTest("%s not installed (tools/deps.sh test)" % tool)


def run(args, inp=None, timeout=20):
    p = subprocess.run(args, input=inp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


class Base(h2util.H2TestCase):
    server_static = STATIC

    def url(self, path):
        if self.server_tls:
            return "https://localhost:%d%s" % (self.addr[1], path)
        return "http://127.0.0.1:%d%s" % (self.addr[1], path)

    def curl(self, path, *extra, proto=None):
        """(http_version, status, body) from curl."""
        need("curl")
        if proto is None:
            proto = ["--http2"] if self.server_tls else ["--http2-prior-knowledge"]
        args = ["curl", "-sS", "--max-time", "10", "-o", "-", "-w", "\n%{http_version} %{http_code}"]
        if self.server_tls:
            args += ["--cacert", self.cafile, "--resolve", "localhost:%d:127.0.0.1" % self.addr[1]]
        rc, out, err = run(args + list(proto) + list(extra) + [self.url(path)])
        self.assertEqual(rc, 0, "curl %s failed: %s" % (path, err.decode(errors="replace")))
        body, _, tail = out.rpartition(b"\n")
        version, code = tail.decode().split()
        return version, int(code), body

    def nghttp(self, path, *extra):
        """(stdout, stderr) of nghttp -v (frames on stdout with the body)."""
        need("nghttp")
        rc, out, err = run(["nghttp", "-v", "-t", "10"] + list(extra) + [self.url(path)])
        self.assertEqual(rc, 0, "nghttp %s failed: %s\n%s" % (path, err.decode(errors="replace"),
                                                              out[-2000:].decode(errors="replace")))
        return out, err

    def assertCurl(self, path, body, *extra, status=200):
        version, code, got = self.curl(path, *extra)
        self.assertEqual(version, "2", "curl spoke HTTP/%s to %s" % (version, path))
        self.assertEqual(code, status, got[:200])
        if body is not None:
            self.assertEqual(got, body)


class CurlAndNghttpH2c(Base):
    server_tls = False
    def test_curl_routes(self):
        self.assertCurl("/plaintext", HELLO)
        self.assertCurl("/static/f.bin", FILE)
        self.assertCurl("/nope-404", None, status=404)

    def test_curl_hello_routes(self):
        h2util.flare_only("hello's routes")
        self.assertCurl("/json", b'{"message":"Hello, World!"}')
        self.assertCurl("/users/42", b'{"id":"42"}')
        self.assertCurl("/slow?ms=20", b"slow")

    def test_curl_post_echo(self):
        path = os.path.join(STATIC, "post.bin")
        with open(path, "wb") as f:
            f.write(BODY)
        self.assertCurl("/echo", BODY, "-H", "Content-Type: application/x-test", "--data-binary", "@" + path)

    def test_curl_head(self):
        version, code, got = self.curl("/plaintext", "-I")
        self.assertEqual((version, code), ("2", 200))
        self.assertIn(b"content-length: 13", got.lower())

    def test_http1_on_the_same_port(self):
        version, code, body = self.curl("/plaintext", proto=["--http1.1"])
        self.assertEqual((version, code, body), ("1.1", 200, HELLO))

    def test_nghttp_frames(self):
        out, _ = self.nghttp("/plaintext", "-n")
        text = out.decode(errors="replace")
        self.assertIn("recv SETTINGS frame", text)
        self.assertRegex(text, r"recv \(stream_id=\d+\) :status: 200")
        self.assertRegex(text, r"recv DATA frame <length=13, flags=0x01, stream_id=\d+>")
        self.assertNotIn("GOAWAY", text.split("send GOAWAY")[0], "server sent GOAWAY: %s" % text[-2000:])

    def test_nghttp_body_and_multiplexing(self):
        out, _ = self.nghttp("/plaintext")
        self.assertTrue(out.endswith(HELLO) or HELLO in out, out[-300:])
        # several URIs on one connection, one stream each
        need("nghttp")
        rc, out, err = run(["nghttp", "-n", "-s", "-t", "10", self.url("/plaintext"),
                            self.url("/static/f.bin"), self.url("/plaintext?x=1")])
        self.assertEqual(rc, 0, err)
        text = out.decode(errors="replace")
        self.assertEqual(text.count("/plaintext"), 2, text)
        self.assertIn("/static/f.bin", text)

    def test_nghttp_upload(self):
        path = os.path.join(STATIC, "up.bin")
        with open(path, "wb") as f:
            f.write(BODY)
        need("nghttp")
        rc, out, err = run(["nghttp", "-t", "10", "-d", path, "-H", "content-type: application/x-up",
                            self.url("/echo")])
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(out), len(BODY))
        self.assertTrue(out == BODY, "nghttp upload not echoed")


class CurlAndNghttpTLS(CurlAndNghttpH2c):
    server_tls = True
    # the plaintext port's HTTP/1.1 check is test_alpn_http11_kept here (not callable: not collected)
    test_http1_on_the_same_port = None

    def test_curl_many_in_parallel(self):
        # one connection, several streams at once (curl multiplexes). Over
        # TLS only: curl 7.88 with --http2-prior-knowledge fails the second
        # transfer of a --parallel run with "Error in the HTTP2 framing
        # layer" against h2o as well (a client bug); h2c multiplexing is
        # covered by nghttp (test_nghttp_body_and_multiplexing).
        need("curl")
        args = ["curl", "-sS", "--max-time", "15", "--parallel", "--parallel-max", "20",
                "-w", "%{http_version} %{http_code}\n", "--http2", "--cacert", self.cafile,
                "--resolve", "localhost:%d:127.0.0.1" % self.addr[1]]
        for i in range(20):
            args += ["-o", "/dev/null", self.url("/plaintext?i=%d" % i)]
        rc, out, err = run(args)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.decode().split("\n")[:-1], ["2 200"] * 20)


    def test_alpn_http11_kept(self):
        version, code, body = self.curl("/plaintext", proto=["--http1.1"])
        self.assertEqual((version, code, body), ("1.1", 200, HELLO))

    def test_python_h2_over_tls(self):
        c = self.client()
        sids = [c.get("/plaintext") for _ in range(5)] + [c.get("/static/f.bin")]
        res = c.wait(sids, timeout=10)
        for r in res[:5]:
            self.assertEqual((r[0], r[2]), (200, HELLO))
        self.assertEqual((res[5][0], res[5][2]), (200, FILE))

    def test_raw_frames_over_tls(self):
        c = self.raw()
        c.send(h2util.settings_frame([(h2util.ENABLE_PUSH, 2)]))
        c.expect_goaway(h2util.PROTOCOL_ERROR)


if __name__ == "__main__":
    flaretest.main()
