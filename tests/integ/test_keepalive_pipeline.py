#!/usr/bin/python3
"""Connection reuse and pipelining: keep-alive for many requests, pipelined
batches answered in order (also behind asynchronous handlers), bodies of
both framings in a pipeline, requests split at every byte, HTTP/1.0 and
Connection: close, Expect: 100-continue, unread bodies, chunked details."""

import os
import random
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
from flaretest import ServerTestCase, build_request, chunk_body, get  # noqa: E402

HELLO = b"Hello, World!"
JSON_HELLO = b'{"message":"Hello, World!"}'


def user_req(i):
    return get("/users/u%d" % i)


def user_body(i):
    return b'{"id":"u%d"}' % i


class KeepAlivePipeline(ServerTestCase):

    # ---- keep-alive ------------------------------------------------------

    def test_keepalive_1000_requests(self):
        c = self.connect()
        for i in range(1000):
            k = i % 4
            if k == 0:
                r = c.request("GET", "/plaintext")
                self.assertEqual((r.status, r.body), (200, HELLO), r)
            elif k == 1:
                r = c.request("GET", "/users/%d" % i)
                self.assertEqual((r.status, r.body), (200, b'{"id":"%d"}' % i), r)
            elif k == 2:
                r = c.request("POST", "/echo", [("Content-Type", "a/b")], b"b%d" % i)
                self.assertEqual((r.status, r.body), (200, b"b%d" % i), r)
            else:
                r = c.request("HEAD", "/json")
                self.assertEqual((r.status, r.get("Content-Length")), (200, str(len(JSON_HELLO))))
            self.assertNotIn("close", r.connection_tokens(), "closed at request %d" % i)
        self.assertCommon(r)
        self.assertFalse(c.eof)

    # ---- pipelining ------------------------------------------------------

    def pipeline(self, n):
        c = self.connect(timeout=10)
        c.send(b"".join(user_req(i) for i in range(n)))
        for i in range(n):
            r = c.read_response()
            self.assertEqual(r.status, 200, "response %d: %r" % (i, r))
            self.assertEqual(r.body, user_body(i), "response %d out of order" % i)
        self.assertCommon(r)
        # and the connection is still good
        self.assertOk(c.request("GET", "/plaintext"), HELLO)
        self.assertEqual(c.read_available(0.1), b"")

    def test_pipeline_16(self):
        self.pipeline(16)

    def test_pipeline_100(self):
        self.pipeline(100)

    def test_pipeline_1000(self):
        self.pipeline(1000)

    def test_pipeline_mixed_routes_and_statuses(self):
        reqs = [
            (get("/plaintext"), 200, HELLO, False),
            (b"HEAD /json HTTP/1.1\r\nHost: x\r\n\r\n", 200, b"", True),
            (get("/nope"), 404, None, False),
            (b"OPTIONS /echo HTTP/1.1\r\nHost: x\r\n\r\n", 204, b"", False),
            (b"DELETE /json HTTP/1.1\r\nHost: x\r\n\r\n", 405, None, False),
            (get("/json"), 200, JSON_HELLO, False),
            (get("/slow?ms=bad"), 400, None, False),
            (get("/users/last"), 200, b'{"id":"last"}', False),
        ]
        c = self.connect()
        c.send(b"".join(r[0] for r in reqs))
        for i, (_, status, body, head) in enumerate(reqs):
            r = c.read_response(head=head)
            self.assertEqual(r.status, status, "response %d: %r" % (i, r))
            if body is not None:
                self.assertEqual(r.body, body, "response %d: %r" % (i, r))
        self.assertEqual(c.read_available(0.2), b"")

    def test_pipelined_bodies_mixed_framing(self):
        parts, want = [], []
        for i in range(30):
            k = i % 5
            if k == 0:
                body = b"cl-%d-" % i + b"x" * (i * 37)
                parts.append(build_request("POST", "/echo", [("Content-Type", "t/%d" % i)], body))
                want.append(("t/%d" % i, body))
            elif k == 1:
                chunks = [b"ch-%d" % i, b"y" * (i * 13), b"", b"end"]
                parts.append(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: c/%d\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n" % i + chunk_body(chunks))
                want.append(("c/%d" % i, b"".join(chunks)))
            elif k == 2:
                parts.append(user_req(i))
                want.append(("application/json", user_body(i)))
            elif k == 3:
                parts.append(build_request("POST", "/echo", [("Content-Type", "e/%d" % i)], b""))
                want.append(("e/%d" % i, b""))
            else:
                parts.append(get("/plaintext"))
                want.append(("text/plain", HELLO))
        c = self.connect()
        c.send(b"".join(parts))
        for i, (ctype, body) in enumerate(want):
            r = c.read_response()
            self.assertEqual(r.status, 200, "response %d: %r" % (i, r))
            self.assertEqual(r.body, body, "response %d" % i)
            self.assertEqual(r.get("Content-Type"), ctype, "response %d" % i)
        self.assertEqual(c.read_available(0.2), b"")

    def test_pipelined_large_bodies(self):
        bodies = [bytes([65 + i]) * (100000 + i) for i in range(8)]
        data = b"".join(build_request("POST", "/echo", [("Content-Type", "a/b")], b,
                                      chunked=(i % 2 == 1)) for i, b in enumerate(bodies))
        c = self.connect(timeout=15)
        sender = threading.Thread(target=c.send, args=(data,))
        sender.start()
        try:
            for i, b in enumerate(bodies):
                r = c.read_response()
                self.assertEqual(r.status, 200, r)
                self.assertEqual(r.body, b, "body %d" % i)
        finally:
            sender.join(15)

    def test_pipeline_100_async(self):
        # more pipelined async requests than can be in flight at once
        c = self.connect(timeout=15)
        data = b""
        for i in range(100):
            data += get("/slow?ms=%d" % (i % 5 * 10)) if i % 2 == 0 else user_req(i)
        c.send(data)
        for i in range(100):
            r = c.read_response()
            want = b"slow" if i % 2 == 0 else user_body(i)
            self.assertEqual((r.status, r.body), (200, want), "response %d" % i)
        self.assertOk(c.request("GET", "/plaintext"), HELLO)

    def test_pipeline_resumes_after_inflight_pause(self):
        # 64 async requests fill the in-flight window, so reading pauses; the
        # synchronous requests still in the buffer are answered when it
        # resumes, with no later event to flush them (regression: they sat
        # in the output buffer)
        c = self.connect(timeout=15)
        data = b"".join(get("/slow?ms=20") for _ in range(64))
        data += b"".join(user_req(i) for i in range(20))
        c.send(data)
        for i in range(64):
            self.assertEqual(c.read_response().body, b"slow", "response %d" % i)
        for i in range(20):
            self.assertOk(c.read_response(), user_body(i))

    def test_pipelined_heads_across_buffer_boundaries(self):
        # ~5 KB heads: several straddle every read-buffer boundary
        c = self.connect(timeout=10)
        pad = "p" * 5000
        data = b"".join(get("/users/b%d" % i, extra="X-Pad: %s\r\n" % pad) for i in range(40))
        c.send(data)
        for i in range(40):
            self.assertOk(c.read_response(), b'{"id":"b%d"}' % i)

    def test_big_response_queued_behind_async(self):
        c = self.connect(timeout=15)
        big = bytes(range(256)) * 4096   # 1 MiB
        c.send(get("/slow?ms=300") + build_request("POST", "/echo", [("Content-Type", "a/b")], big)
               + user_req(3))
        self.assertOk(c.read_response(), b"slow")
        self.assertOk(c.read_response(), big, "a/b")
        self.assertOk(c.read_response(), user_body(3))

    def test_get_with_body_is_consumed(self):
        c = self.connect()
        c.send(b"GET /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcde" + get("/json"))
        self.assertOk(c.read_response(), HELLO)
        self.assertOk(c.read_response(), JSON_HELLO)
        c.send(b"GET /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               + chunk_body([b"GET /nope HTTP/1.1\r\n\r\n"]) + get("/plaintext"))
        self.assertOk(c.read_response(), JSON_HELLO)
        self.assertOk(c.read_response(), HELLO)
        self.assertEqual(c.read_available(0.2), b"")

    def test_empty_line_between_pipelined_requests(self):
        # RFC 9112 2.2: a server SHOULD ignore at least one empty line before a
        # request-line (some clients add CRLF after a POST body)
        c = self.connect()
        c.send(build_request("POST", "/echo", [("Content-Type", "a/b")], b"xy") + b"\r\n" + get("/json"))
        self.assertOk(c.read_response(), b"xy", "a/b")
        self.assertOk(c.read_response(), JSON_HELLO)

    def test_content_length_leading_zeros(self):
        c = self.connect()
        c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: a/b\r\nContent-Length: 0003\r\n\r\nabc"
               + get("/plaintext"))
        self.assertOk(c.read_response(), b"abc", "a/b")
        self.assertOk(c.read_response(), HELLO)

    def test_random_pipelines_random_splits(self):
        # seeded: the same sequence every run. Every kind of request, bodies of
        # both framings (also unread ones), sent in random pieces.
        rng = random.Random(20261130)
        for rnd in range(6):
            reqs = []   # (bytes, status, body or None, head)
            for i in range(60):
                tag = "r%di%d" % (rnd, i)
                k = rng.randrange(10)
                if k == 0:
                    reqs.append((get("/plaintext"), 200, HELLO, False))
                elif k == 1:
                    reqs.append((get("/users/" + tag), 200, b'{"id":"%s"}' % tag.encode(), False))
                elif k == 2:
                    body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 3000)))
                    reqs.append((build_request("POST", "/echo", [("Content-Type", "t/" + tag)], body),
                                 200, body, False))
                elif k == 3:
                    parts = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 500)))
                             for _ in range(rng.randrange(0, 5))]
                    raw = (b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: c/%s\r\n"
                           b"Transfer-Encoding: chunked\r\n\r\n" % tag.encode()
                           + chunk_body(parts, ["X-T: %s" % tag] if rng.random() < 0.5 else None))
                    reqs.append((raw, 200, b"".join(parts), False))
                elif k == 4:
                    reqs.append((b"HEAD /users/%s HTTP/1.1\r\nHost: x\r\n\r\n" % tag.encode(),
                                 200, b"", True))
                elif k == 5:
                    reqs.append((get("/slow?ms=%d" % rng.randrange(0, 30)), 200, b"slow", False))
                elif k == 6:
                    body = b"u" * rng.randrange(0, 2000)
                    reqs.append((build_request("POST", "/json", None, body,
                                               chunked=rng.random() < 0.5), 405, None, False))
                elif k == 7:
                    reqs.append((build_request("PUT", "/nope/" + tag, None, b"v" * rng.randrange(50)),
                                 404, None, False))
                elif k == 8:
                    reqs.append((b"OPTIONS /echo HTTP/1.1\r\nHost: x\r\n\r\n", 204, b"", False))
                else:
                    reqs.append((get("/json"), 200, JSON_HELLO, False))
            data = b"".join(r[0] for r in reqs)
            c = self.connect(timeout=10)
            pos = 0
            while pos < len(data):
                n = rng.choice([1, 2, 7, 64, 500, 1500, 4096, 20000])
                c.send(data[pos:pos + n])
                pos += n
                if rng.random() < 0.05:
                    time.sleep(0.002)
            for i, (_, status, body, head) in enumerate(reqs):
                r = c.read_response(head=head)
                self.assertEqual(r.status, status, "round %d response %d: %r" % (rnd, i, r))
                if body is not None:
                    self.assertEqual(r.body, body, "round %d response %d" % (rnd, i))
            self.assertEqual(c.read_available(0.1), b"")

    # ---- slow clients ----------------------------------------------------

    def test_request_in_one_byte_sends(self):
        c = self.connect()
        c.send_slowly(get("/users/slowpoke"), step=1, delay=0.002)
        self.assertOk(c.read_response(), b'{"id":"slowpoke"}')
        body = b"trickled body"
        c.send_slowly(build_request("POST", "/echo", [("Content-Type", "a/b")], body), 1, 0.002)
        self.assertOk(c.read_response(), body, "a/b")
        c.send_slowly(build_request("POST", "/echo", [("Content-Type", "a/c")], body, chunked=True),
                      1, 0.002)
        self.assertOk(c.read_response(), body, "a/c")

    def split_everywhere(self, raw, want_body, ctype):
        c = self.connect()
        for i in range(1, len(raw)):
            c.send(raw[:i])
            time.sleep(0.003)
            c.send(raw[i:])
            r = c.read_response()
            self.assertEqual(r.status, 200, "split at %d: %r" % (i, r))
            self.assertEqual(r.body, want_body, "split at %d" % i)
            self.assertEqual(r.get("Content-Type"), ctype, "split at %d" % i)

    def test_split_at_every_byte_content_length(self):
        body = b"0123456789abcdef"
        self.split_everywhere(build_request("POST", "/echo", [("Content-Type", "s/cl")], body),
                              body, "s/cl")

    def test_split_at_every_byte_chunked(self):
        raw = (b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: s/ch\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n"
               b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nT: v\r\n\r\n")
        self.split_everywhere(raw, b"hello world", "s/ch")

    # ---- HTTP/1.0 and Connection -------------------------------------------

    def test_http10_closes_by_default(self):
        c = self.connect()
        c.send(b"GET /plaintext HTTP/1.0\r\nHost: x\r\n\r\n" + get("/json"))
        r = c.read_response()
        self.assertOk(r, HELLO)
        self.assertNotIn("keep-alive", r.connection_tokens())
        self.assertClosed(c)  # and the pipelined second request is not answered

    def test_http10_keepalive(self):
        c = self.connect()
        for i in range(3):
            c.send(b"GET /users/k%d HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" % i)
            r = c.read_response()
            self.assertOk(r, b'{"id":"k%d"}' % i)
            self.assertIn("keep-alive", r.connection_tokens(), r)
            self.assertNotIn("close", r.connection_tokens(), r)
        # 1.0 POST with a body, still keep-alive
        c.send(b"POST /echo HTTP/1.0\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n"
               b"Content-Type: a/b\r\n\r\nhi")
        r = c.read_response()
        self.assertOk(r, b"hi", "a/b")
        self.assertIn("keep-alive", r.connection_tokens(), r)
        # without the token: answered, then closed
        c.send(b"GET /plaintext HTTP/1.0\r\n\r\n")
        r = c.read_response()
        self.assertOk(r, HELLO)
        self.assertNotIn("keep-alive", r.connection_tokens())
        self.assertClosed(c)

    def test_http10_keepalive_async(self):
        c = self.connect()
        c.send(b"GET /slow?ms=50 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
               b"GET /json HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        r = c.read_response()
        self.assertOk(r, b"slow")
        self.assertIn("keep-alive", r.connection_tokens(), r)
        r = c.read_response()
        self.assertOk(r, JSON_HELLO)
        self.assertIn("keep-alive", r.connection_tokens(), r)

    def test_connection_close(self):
        c = self.connect()
        c.send(get("/plaintext", extra="Connection: close\r\n") + get("/json"))
        r = c.read_response()
        self.assertOk(r, HELLO)
        self.assertIn("close", r.connection_tokens())
        self.assertClosed(c)  # the pipelined /json is not answered

    def test_connection_close_in_token_list(self):
        c = self.connect()
        c.send(get("/json", extra="Connection: foo, CLOSE\r\n"))
        r = c.read_response()
        self.assertOk(r, JSON_HELLO)
        self.assertIn("close", r.connection_tokens())
        self.assertClosed(c)

    def test_connection_close_after_keepalive_requests(self):
        c = self.connect()
        c.send(get("/plaintext") + get("/json") + get("/users/z", extra="Connection: close\r\n"))
        self.assertOk(c.read_response(), HELLO)
        self.assertOk(c.read_response(), JSON_HELLO)
        r = c.read_response()
        self.assertOk(r, b'{"id":"z"}')
        self.assertIn("close", r.connection_tokens())
        self.assertClosed(c)

    def test_client_half_close_after_pipeline(self):
        # the client shuts its write side after sending: still all answered
        c = self.connect()
        c.send(get("/plaintext") + user_req(1) + get("/slow?ms=100") + user_req(2))
        c.sock.shutdown(socket.SHUT_WR)
        self.assertOk(c.read_response(), HELLO)
        self.assertOk(c.read_response(), user_body(1))
        self.assertOk(c.read_response(), b"slow")
        self.assertOk(c.read_response(), user_body(2))
        self.assertClosed(c)

    # ---- asynchronous handlers keep the order ------------------------------

    def test_async_then_fast(self):
        c = self.connect()
        t0 = time.monotonic()
        c.send(get("/slow?ms=200") + get("/plaintext"))
        r1 = c.read_response()
        t1 = time.monotonic() - t0
        r2 = c.read_response()
        self.assertOk(r1, b"slow")
        self.assertOk(r2, HELLO)
        self.assertGreaterEqual(t1, 0.19)

    def test_async_ordering_many(self):
        c = self.connect()
        delays = [300, 0, 150, 50, 0, 250, 10]
        data = b""
        want = []
        for i, ms in enumerate(delays):
            data += get("/slow?ms=%d" % ms) + user_req(i)
            want += [b"slow", user_body(i)]
        c.send(data)
        for i, body in enumerate(want):
            r = c.read_response()
            self.assertEqual((r.status, r.body), (200, body), "response %d: %r" % (i, r))

    def test_async_head(self):
        c = self.connect()
        c.send(b"HEAD /slow?ms=50 HTTP/1.1\r\nHost: x\r\n\r\n" + get("/plaintext"))
        r = c.read_response(head=True)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.get("Content-Length"), "4")
        self.assertOk(c.read_response(), HELLO)

    # ---- Expect: 100-continue --------------------------------------------

    def test_100_continue_content_length(self):
        c = self.connect()
        c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: a/b\r\n"
               b"Expect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        r = c.read_response(interim=True)
        self.assertEqual(r.status, 100, r)
        self.assertEqual(r.body, b"")
        c.send(b"hello")
        self.assertOk(c.read_response(), b"hello", "a/b")
        # the connection continues
        self.assertOk(c.request("GET", "/plaintext"), HELLO)

    def test_100_continue_chunked(self):
        c = self.connect()
        c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: a/b\r\n"
               b"Expect: 100-Continue\r\nTransfer-Encoding: chunked\r\n\r\n")
        r = c.read_response(interim=True)
        self.assertEqual(r.status, 100, r)
        c.send(chunk_body([b"chunk", b"ed"]))
        self.assertOk(c.read_response(), b"chunked", "a/b")

    def test_100_continue_body_sent_anyway(self):
        # a client that does not wait: the 100 is optional, the 200 is not
        c = self.connect()
        c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: a/b\r\n"
               b"Expect: 100-continue\r\nContent-Length: 3\r\n\r\nabc" + get("/plaintext"))
        self.assertOk(c.read_response(), b"abc", "a/b")
        self.assertOk(c.read_response(), HELLO)

    def test_100_continue_unknown_route(self):
        c = self.connect()
        c.send(b"POST /nope HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
               b"Content-Length: 5\r\n\r\n")
        r = c.read_response(interim=True)
        self.assertNotEqual(r.status, 100, "100 Continue for an unknown route")
        self.assertEqual(r.status, 404, r)
        self.assertIn("close", r.connection_tokens(), r)
        self.assertClosed(c)

    def test_100_continue_wrong_method(self):
        c = self.connect()
        c.send(b"POST /plaintext HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
               b"Content-Length: 5\r\n\r\n")
        r = c.read_response(interim=True)
        self.assertNotEqual(r.status, 100, "100 Continue for a wrong method")
        self.assertEqual(r.status, 405, r)
        self.assertEqual(r.all("Allow"), ["GET, HEAD, OPTIONS"])
        self.assertIn("close", r.connection_tokens(), r)
        self.assertClosed(c)

    def test_100_continue_too_large(self):
        c = self.connect()
        c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
               b"Content-Length: 2000000\r\n\r\n")
        r = c.read_response(interim=True)
        self.assertNotEqual(r.status, 100, "100 Continue for a too large body")
        self.assertErrorClose(c, r, 413)

    def test_100_continue_after_pipelined_request(self):
        # the 100 must not overtake the response to an earlier request, and
        # must still come once the POST is at the head of the queue
        c = self.connect()
        c.send(get("/slow?ms=200") + b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: a/b\r\n"
               b"Expect: 100-continue\r\nContent-Length: 4\r\n\r\n")
        r = c.read_response(interim=True)
        self.assertEqual((r.status, r.body), (200, b"slow"), r)
        try:
            r = c.read_response(interim=True, timeout=2)
            got = r.status
        except socket.timeout:
            got = None
        # like a real client: send the body anyway after waiting
        if got != 200:
            c.send(b"body")
            self.assertOk(c.read_response(), b"body", "a/b")
        self.assertEqual(got, 100, "no 100 Continue for a pipelined request once it was "
                                   "at the head of the queue (waited 2 s)")

    # ---- bodies the handler never reads ------------------------------------

    def test_unread_body_is_consumed(self):
        c = self.connect()
        c.send(b"POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789"
               + get("/json"))
        r = c.read_response()
        self.assertEqual(r.status, 405, r)
        self.assertEqual(r.all("Allow"), ["GET, HEAD, OPTIONS"])
        self.assertOk(c.read_response(), JSON_HELLO)

    def test_unread_chunked_body_is_consumed(self):
        c = self.connect()
        c.send(b"POST /nope HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               + chunk_body([b"GET /users/smuggled HTTP/1.1\r\nHost: x\r\n\r\n"]) + user_req(5))
        r = c.read_response()
        self.assertEqual(r.status, 404, r)
        self.assertOk(c.read_response(), user_body(5))
        self.assertEqual(c.read_available(0.3), b"", "a request hidden in a body was answered")

    def test_body_that_looks_like_a_request_is_not_parsed(self):
        inner = get("/users/smuggled")
        c = self.connect()
        c.send(b"POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(inner)
               + inner + user_req(7))
        self.assertEqual(c.read_response().status, 405)
        self.assertOk(c.read_response(), user_body(7))
        self.assertEqual(c.read_available(0.3), b"", "a request hidden in a body was answered")

    def test_unread_body_arriving_later(self):
        c = self.connect()
        c.send(b"POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 20000\r\n\r\n")
        time.sleep(0.05)
        c.send(b"q" * 10000)
        time.sleep(0.05)
        c.send(b"q" * 10000 + get("/json"))
        self.assertEqual(c.read_response().status, 405)
        self.assertOk(c.read_response(), JSON_HELLO)

    # ---- chunked details -------------------------------------------------

    def test_chunked_extensions_and_trailers(self):
        c = self.connect()
        c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: a/b\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n"
               b"5;name=value\r\nhello\r\n"
               b"6;a;b=\"quoted;str\"\r\n world\r\n"
               b"0;last\r\nX-Trailer: t\r\nX-Other: u v\r\n\r\n" + get("/plaintext"))
        self.assertOk(c.read_response(), b"hello world", "a/b")
        self.assertOk(c.read_response(), HELLO)

    def test_chunked_hex_forms(self):
        c = self.connect()
        c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: a/b\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n"
               b"A\r\n0123456789\r\n00000a\r\nabcdefghij\r\nf\r\n" + b"F" * 15 + b"\r\n"
               b"000\r\n\r\n")
        self.assertOk(c.read_response(), b"0123456789abcdefghij" + b"F" * 15, "a/b")

    def test_chunked_byte_by_byte(self):
        c = self.connect()
        raw = (b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: a/b\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n"
               b"3;x=y\r\nabc\r\n4\r\ndefg\r\n0\r\nTr: 1\r\n\r\n")
        c.send_slowly(raw, 1, 0.002)
        self.assertOk(c.read_response(), b"abcdefg", "a/b")
        self.assertOk(c.request("GET", "/plaintext"), HELLO)

    def test_chunked_many_small_chunks(self):
        c = self.connect(timeout=15)
        chunks = [bytes([48 + i % 10]) * (i % 7 + 1) for i in range(5000)]
        c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: a/b\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n" + chunk_body(chunks))
        self.assertOk(c.read_response(), b"".join(chunks), "a/b")

    def test_transfer_encoding_case_insensitive(self):
        c = self.connect()
        c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: a/b\r\n"
               b"transfer-encoding: Chunked\r\n\r\n" + chunk_body([b"ci"]))
        self.assertOk(c.read_response(), b"ci", "a/b")


class LateBodyOnClosingConnection(ServerTestCase):
    """Requests that close the connection after their response, whose body
    arrives in a later packet than the head. Separate server: a stuck
    connection left by a failure here must not be blamed on the others."""
    stop_timeout = 15  # a connection stuck by a failure delays the drain

    def late_body(self, head, body, want, ctype="a/b"):
        c = self.connect()
        c.send(head)
        time.sleep(0.15)
        c.send(body)
        try:
            r = c.read_response()
        except socket.timeout:
            self.fail("no response: the body sent after the head was never read")
        self.assertOk(r, want, ctype)
        if head.split(b"\r\n")[0].endswith(b"HTTP/1.1"):
            self.assertIn("close", r.connection_tokens())
        else:
            self.assertNotIn("keep-alive", r.connection_tokens())
        self.assertClosed(c)

    def test_connection_close_content_length(self):
        self.late_body(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: a/b\r\n"
                       b"Connection: close\r\nContent-Length: 5\r\n\r\n", b"later", b"later")

    def test_connection_close_chunked(self):
        self.late_body(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: a/b\r\n"
                       b"Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n",
                       chunk_body([b"lat", b"er"]), b"later")

    def test_http10_content_length(self):
        self.late_body(b"POST /echo HTTP/1.0\r\nContent-Type: a/b\r\nContent-Length: 5\r\n\r\n",
                       b"later", b"later")

    def test_expect_in_http10_ignored(self):
        # RFC 9110 10.1.1: a 100-continue in an HTTP/1.0 request is ignored
        c = self.connect()
        c.send(b"POST /echo HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n"
               b"Content-Type: a/b\r\n\r\n")
        self.assertEqual(c.read_available(0.5), b"", "100 Continue sent to an HTTP/1.0 client")
        c.send(b"ok")
        try:
            r = c.read_response()
        except socket.timeout:
            self.fail("no response: the body sent after the head was never read")
        self.assertOk(r, b"ok", "a/b")
        self.assertClosed(c)

    def test_large_body_with_connection_close(self):
        # a body larger than one read: necessarily spans several reads
        body = bytes(range(256)) * 2000
        c = self.connect(timeout=10)
        c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: a/b\r\nConnection: close\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body) + body)
        try:
            r = c.read_response()
        except socket.timeout:
            self.fail("no response to a 512 KB upload with Connection: close")
        self.assertOk(r, body, "a/b")
        self.assertClosed(c)


if __name__ == "__main__":
    flaretest.main()
