#!/usr/bin/python3
"""Request trailers stay trailers, on both protocols: never merged into the
header fields (so never a Cookie, an Authorization, an X-Request-Id the
server acts on: a front proxy that strips those from the head must not be
bypassed by sending them after the body), readable by the handler through
flare_req_trailer once the body has ended.

examples/hello's POST /trailer answers what the handler sees for the field
named by ?name=: the trailer's value (flare_req_trailer) and the header's
(flare_req_header). examples/showcase checks the consequences that
matter: a session cookie only in the trailers of GET /api/session does not
log in, an X-Request-Id trailer is not echoed. HTTP/2 over h2c with prior
knowledge (python3-h2's HPACK, raw frames), HTTP/1.1 with chunked bodies;
both again over TLS with FLARE_TEST_TLS=1 (hello only)."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
import h2util  # noqa: E402
from flaretest import ServerTestCase, build_request  # noqa: E402

SHOWCASE = os.path.join(os.path.abspath(flaretest.BUILD_DIR), "examples", "showcase")
DB_DIR = flaretest.temp_dir(prefix="flare-trailers-")


def h2_post(c, sid, path, body, head=(), trailers=(), authority="localhost", method="POST"):
    hdrs = [(":method", method), (":scheme", "http"), (":authority", authority), (":path", path)]
    c.headers(sid, hdrs + list(head), end_stream=False)
    if body:
        c.data(sid, body)
    c.headers(sid, list(trailers), end_stream=True)
    return c.response(sid)


def h1_chunked(method, path, body, head=(), trailers=()):
    """A request with a chunked body (one chunk, or none when empty) and a
    trailer section."""
    req = build_request(method, path, list(head) + [("Transfer-Encoding", "chunked")])
    chunks = (b"%x\r\n%s\r\n" % (len(body), body)) if body else b""
    tr = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in trailers)
    return req + chunks + b"0\r\n" + tr + b"\r\n"


def seen(body):
    """hello's /trailer answer: {"trailer": v or None, "header": v or None}."""
    return json.loads(body)


class HelloTrailers(ServerTestCase):
    """Through examples/hello's POST /trailer."""

    def h2(self):
        c = h2util.RawH2(self.server.addr, tls=flaretest.tls_files()[0] if self.server.tls else None)
        self.addCleanup(c.close)
        return c

    def test_h2_trailer_readable_not_a_header(self):
        c = self.h2()
        status, _, body, _ = h2_post(c, 1, "/trailer?name=x-checksum", b"hello",
                                     trailers=[("x-checksum", "abc123")])
        self.assertEqual(status, 200, body)
        self.assertEqual(seen(body), {"trailer": "abc123", "header": None, "body": "hello"})

    def test_h2_header_is_not_a_trailer(self):
        c = self.h2()
        status, _, body, _ = h2_post(c, 1, "/trailer?name=x-checksum", b"hello",
                                     head=[("x-checksum", "in-head")], trailers=[("x-other", "1")])
        self.assertEqual(status, 200, body)
        self.assertEqual(seen(body), {"trailer": None, "header": "in-head", "body": "hello"})

    def test_h2_same_name_in_both(self):
        # each stays where it was sent
        c = self.h2()
        for sid in (1, 3, 5):
            status, _, body, _ = h2_post(c, sid, "/trailer?name=cookie", b"x" * sid,
                                         head=[("cookie", "a=head")],
                                         trailers=[("cookie", "b=trailer"), ("x-n", str(sid))])
            self.assertEqual(status, 200, body)
            self.assertEqual(seen(body), {"trailer": "b=trailer", "header": "a=head", "body": "x" * sid})

    def test_h2_streaming_route_reads_trailer_at_end(self):
        c = self.h2()
        status, _, body, _ = h2_post(c, 1, "/sha256?trailer=x-digest", b"abc" * 100,
                                     trailers=[("x-digest", "sha-256=abc")])
        self.assertEqual(status, 200, body)
        got = json.loads(body)
        self.assertEqual((got["length"], got["trailer"]), (300, "sha-256=abc"))

    def test_h2_trailers_without_body(self):
        c = self.h2()
        status, _, body, _ = h2_post(c, 1, "/trailer?name=x-t", b"", trailers=[("x-t", "v")])
        self.assertEqual(status, 200, body)
        self.assertEqual(seen(body), {"trailer": "v", "header": None, "body": ""})

    def test_h1_chunked_trailer_readable_not_a_header(self):
        c = self.connect()
        c.send(h1_chunked("POST", "/trailer?name=X-Checksum", b"hello",
                          trailers=[("X-Checksum", "abc123"), ("X-Other", " spaced \t")]))
        r = c.read_response()
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual(seen(r.body), {"trailer": "abc123", "header": None, "body": "hello"})
        # the next request on the connection sees none of them
        c.send(h1_chunked("POST", "/trailer?name=X-Checksum", b"again"))
        r = c.read_response()
        self.assertEqual(seen(r.body), {"trailer": None, "header": None, "body": "again"})
        c.send(build_request("POST", "/trailer?name=X-Other", [], b"ok"))
        r = c.read_response()
        self.assertEqual(seen(r.body), {"trailer": None, "header": None, "body": "ok"})

    def test_h1_trailer_value_trimmed(self):
        c = self.connect()
        c.send(h1_chunked("POST", "/trailer?name=x-other", b"b",
                          trailers=[("X-Checksum", "abc123"), ("X-Other", " spaced \t")]))
        r = c.read_response()
        self.assertEqual(seen(r.body), {"trailer": "spaced", "header": None, "body": "b"})

    def test_h1_trailers_split_across_reads(self):
        # the trailer section arrives a few bytes at a time
        c = self.connect()
        data = h1_chunked("POST", "/trailer?name=x-late", b"hello",
                          trailers=[("X-Early", "1"), ("X-Late", "value-" + "z" * 300)])
        cut = data.index(b"0\r\n") + 3
        c.send(data[:cut])
        rest = data[cut:]
        for i in range(0, len(rest), 7):
            c.send(rest[i:i + 7])
            if i < 40:
                time.sleep(0.01)
        r = c.read_response()
        self.assertEqual(seen(r.body), {"trailer": "value-" + "z" * 300, "header": None, "body": "hello"})

    def test_h1_streaming_route_reads_trailer_at_end(self):
        # POST /sha256 streams its body (flare/body.h): the trailer is
        # readable in on_end, split or whole
        body = b"0123456789" * 1000
        for split in (None, 5, 1):
            with self.subTest(split=split):
                c = self.connect()
                data = h1_chunked("POST", "/sha256?trailer=x-digest", body,
                                  trailers=[("X-Digest", "sha-256=abc")])
                if split is None:
                    c.send(data)
                else:
                    cut = data.index(b"0\r\n") + 3
                    c.send(data[:cut])
                    for i in range(cut, len(data), split):
                        c.send(data[i:i + split])
                r = c.read_response()
                self.assertEqual(r.status, 200, r.body)
                got = json.loads(r.body)
                self.assertEqual((got["length"], got["trailer"]), (len(body), "sha-256=abc"))
                c.send(h1_chunked("POST", "/sha256?trailer=x-digest", b"x"))
                self.assertIsNone(json.loads(c.read_response().body)["trailer"])

    def test_h1_pipelined_after_trailers(self):
        c = self.connect()
        c.send(h1_chunked("POST", "/trailer?name=x-a", b"one", trailers=[("X-A", "1")]) +
               h1_chunked("POST", "/trailer?name=x-a", b"two", trailers=[("X-A", "2")]) +
               h1_chunked("POST", "/trailer?name=x-a", b"three"))
        got = [seen(c.read_response().body) for _ in range(3)]
        self.assertEqual(got, [{"trailer": "1", "header": None, "body": "one"},
                               {"trailer": "2", "header": None, "body": "two"},
                               {"trailer": None, "header": None, "body": "three"}])


class ShowcaseTrailers(ServerTestCase):
    """What a trailer must not do: examples/showcase's session and request
    id middlewares read the head only."""
    server_binary = SHOWCASE
    server_args = ("--db", "sqlite:" + os.path.join(DB_DIR, "showcase.db"))
    server_tls = False

    def login(self):
        c = self.connect()
        body = json.dumps({"user": "alice"}).encode()
        c.send(build_request("POST", "/api/session", [("Content-Type", "application/json")], body))
        r = c.read_response()
        self.assertEqual(r.status, 200, r.body)
        cookie = r.get("Set-Cookie").split(";")[0]
        self.assertTrue(cookie.startswith("showcase_sid="), cookie)
        return cookie

    def test_h2_cookie_in_trailers_does_not_log_in(self):
        cookie = self.login()
        c = h2util.RawH2(self.server.addr)
        self.addCleanup(c.close)
        # the session cookie in the head: logged in (the reference)
        status, _, body, _ = h2_post(c, 1, "/api/session", b"", method="GET", head=[("cookie", cookie)])
        self.assertEqual(status, 200, body)
        # only in the trailers: not
        status, _, body, _ = h2_post(c, 3, "/api/session", b"", method="GET", trailers=[("cookie", cookie)])
        self.assertEqual(status, 401, "a cookie sent only in trailers logged in: %r" % body)
        # nor joined to a cookie of the head (RFC 9113 8.2.3 joins the head's only)
        status, _, body, _ = h2_post(c, 5, "/api/session", b"", method="GET", head=[("cookie", "x=1")],
                                     trailers=[("cookie", cookie)])
        self.assertEqual(status, 401, "a trailer cookie joined the head's: %r" % body)

    def test_h2_request_id_trailer_not_echoed(self):
        c = h2util.RawH2(self.server.addr)
        self.addCleanup(c.close)
        status, head, _, _ = h2_post(c, 1, "/api/session", b"", method="GET",
                                     head=[("x-request-id", "from-the-head")])
        self.assertEqual(dict(head).get("x-request-id"), "from-the-head")
        status, head, _, _ = h2_post(c, 3, "/api/session", b"", method="GET",
                                     trailers=[("x-request-id", "from-a-trailer")])
        self.assertNotEqual(dict(head).get("x-request-id"), "from-a-trailer", head)
        self.assertTrue(dict(head).get("x-request-id"), head)

    def test_h1_cookie_in_trailers_does_not_log_in(self):
        cookie = self.login()
        c = self.connect()
        c.send(h1_chunked("GET", "/api/session", b"", head=[("Cookie", cookie)]))
        self.assertEqual(c.read_response().status, 200)
        c.send(h1_chunked("GET", "/api/session", b"", trailers=[("Cookie", cookie),
                                                               ("X-Request-Id", "from-a-trailer")]))
        r = c.read_response()
        self.assertEqual(r.status, 401, r.body)
        self.assertNotEqual(r.get("X-Request-Id"), "from-a-trailer")


if __name__ == "__main__":
    flaretest.main()
