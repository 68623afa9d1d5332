#!/usr/bin/python3
"""HTTP/2 flow control, bodies and streams on examples/hello (h2c), with
Debian's python3-h2 (H2Connection) and hand-built frames: a request body and a
response larger than the initial 65,535-byte window, a zero window held open
(no spinning, the write timeout closes it), bodies both ways, request
trailers, HEAD, 413 over --max-body, 100 concurrent /slow streams completing
out of order, SETTINGS_MAX_CONCURRENT_STREAMS enforced, and a graceful
shutdown with streams in flight."""

import gzip
import os
import re
import signal
import socket
import struct
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
import h2util  # noqa: E402
from h2util import (DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS,  # noqa: E402
                    INITIAL_WINDOW_SIZE, MAX_CONCURRENT_STREAMS, NO_ERROR, PROTOCOL_ERROR,
                    REFUSED_STREAM, RST_STREAM, err_name, frame, rst_stream, window_update)

HELLO = b"Hello, World!"
STATIC = flaretest.temp_dir("flare-h2-static-")
BIG = bytes((i * 131 + (i >> 8) + (i >> 16) * 7) & 0xFF for i in range(2 << 20))   # 2 MiB
with open(os.path.join(STATIC, "2m.bin"), "wb") as f:
    f.write(BIG)


def pattern(n, seed=1):
    return bytes(((i * 2654435761 + seed) >> 13) & 0xFF for i in range(n))


class Flow(h2util.H2TestCase):
    server_args = ("--max-body", "2m")
    server_static = STATIC

    def test_request_body_larger_than_window(self):
        # 1 MiB: the client sends as the server opens the windows
        body = pattern(1 << 20)
        c = self.client()
        sid = c.post("/echo", body, [("content-type", "application/x-flare")])
        status, headers, got, _, reset = c.wait([sid], timeout=20)[0]
        self.assertIsNone(reset, "stream reset %s" % reset)
        self.assertEqual(status, 200)
        self.assertEqual(dict(headers).get("content-type"), "application/x-flare")
        self.assertEqual(len(got), len(body))
        self.assertTrue(got == body, "echoed body differs")

    def test_response_larger_than_window_opened_slowly(self):
        # client windows of 16 KiB, given back 16 KiB at a time after a pause:
        # the server must never send past them, and every byte must arrive
        c = self.raw(settings=[(INITIAL_WINDOW_SIZE, 16384)])
        c.auto_window = False
        c.request(1, "/static/2m.bin")
        conn_window, stream_window = 65535, 16384
        head, body = None, []
        deadline = time.monotonic() + 30
        while True:
            f = c.until(lambda x: x.sid in (0, 1) and x.type in (HEADERS, DATA, RST_STREAM, GOAWAY),
                        timeout=max(deadline - time.monotonic(), 0.1), what="the 2 MiB response")
            if f.type in (RST_STREAM, GOAWAY):
                self.fail("stream ended early: %s" % c.history())
            if f.type == HEADERS:
                head = dict(f.headers)
            else:
                conn_window -= len(f.payload)
                stream_window -= len(f.payload)
                self.assertGreaterEqual(conn_window, 0, "server overran the connection window")
                self.assertGreaterEqual(stream_window, 0, "server overran the stream window")
                body.append(f.payload)
                if conn_window < 32768:
                    c.send(window_update(0, 65535 - conn_window))
                    conn_window = 65535
                if stream_window == 0 and not f.flags & END_STREAM:
                    time.sleep(0.002)
                    c.send(window_update(1, 16384))
                    stream_window = 16384
            if f.flags & END_STREAM:
                break
        self.assertEqual(head.get(":status"), "200", head)
        self.assertEqual(head.get("content-length"), str(len(BIG)), head)
        got = b"".join(body)
        self.assertEqual(len(got), len(BIG))
        self.assertTrue(got == BIG, "static file bytes differ")

    def test_large_response_takes_turns(self):
        # a 2 MiB file and a small response asked for in one write, the
        # client's windows wide open: the file's DATA takes turns with the
        # other stream's (RFC 9218 incremental: Flare's responses of more than
        # one DATA frame), it does not keep the connection until it is done
        c = self.raw(settings=[(INITIAL_WINDOW_SIZE, (1 << 31) - 1)])
        c.send(window_update(0, (1 << 31) - 1 - 65535))

        def get(path):
            return c.encode([(":method", "GET"), (":scheme", "http"), (":authority", "localhost"),
                             (":path", path)])
        c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, get("/static/2m.bin")) +
               frame(HEADERS, END_STREAM | END_HEADERS, 3, get("/plaintext")))
        status, _, body, _ = c.response(3, timeout=20)
        self.assertEqual((status, body), (200, HELLO))
        self.assertFalse(c.streams.get(1, {}).get("ended"),
                         "the 2 MiB response ended before the small one asked for with it")
        status, _, body, _ = c.response(1, timeout=20)
        self.assertEqual((status, len(body)), (200, len(BIG)))
        self.assertTrue(body == BIG, "static file bytes differ")

    def test_static_file_with_h2connection(self):
        c = self.client()
        sid = c.get("/static/2m.bin")
        status, _, got, _, reset = c.wait([sid], timeout=20)[0]
        self.assertEqual((status, reset, len(got)), (200, None, len(BIG)))
        self.assertTrue(got == BIG)

    def test_cached_file_replaced_while_its_responses_wait(self):
        # a small file is served from the worker's cache by reference: 75
        # responses of it queued for a client that reads slowly, the file
        # changed (the cache lets go of the old contents) and a third of the
        # streams reset while they wait; every stream that completes carries
        # the version it was answered with, whole. (The kernel's buffers take
        # most of what is queued here, so this does not prove the release
        # waits for the queue; the empty-segment marker in ops.c does that.)
        path = os.path.join(STATIC, "c12k.bin")
        old, new = pattern(12288, 3), pattern(12288, 4)
        with open(path, "wb") as f:
            f.write(old)
        c = self.raw()
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32768)   # the server's writes block
        c.send(window_update(0, 16 << 20))
        c.request(1, "/static/c12k.bin")
        self.assertEqual(c.response(1)[2], old)   # now cached
        sids = list(range(3, 3 + 2 * 75, 2))
        for sid in sids:
            c.request(sid, "/static/c12k.bin")
        time.sleep(0.3)   # the server queues what the client does not read
        with open(path, "wb") as f:
            f.write(new)
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))
        last = sids[-1] + 2
        c.request(last, "/static/c12k.bin")
        for sid in sids[::3]:
            c.send(rst_stream(sid, NO_ERROR))
        c.until(lambda f: f.sid == last and f.flags & END_STREAM or f.type == GOAWAY, timeout=30,
                what="the last stream's end")
        c.drain(timeout=1)
        for sid in sids + [last]:
            st = c.streams.get(sid)
            if st is None or st["rst"] is not None or not st["ended"]:
                self.assertIn(sid, sids[::3], "stream %d did not complete: %s" % (sid, c.history()))
                continue
            # answered before the change: the old contents, whole
            self.assertTrue(b"".join(st["body"]) == (old if sid != last else new),
                            "stream %d: not the contents it was answered with" % sid)
        c.alive_check(last + 2)

    def test_bodies_both_ways_on_many_streams(self):
        c = self.client()
        bodies = {}
        for i in range(8):
            b = pattern(1000 + 37000 * i, seed=i)
            bodies[c.post("/echo", b, [("content-type", "application/octet-stream")])] = b
        for sid, (status, _, got, _, reset) in zip(bodies, c.wait(list(bodies), timeout=20)):
            self.assertEqual((status, reset), (200, None))
            self.assertTrue(got == bodies[sid], "stream %d: %d bytes back for %d" % (
                sid, len(got), len(bodies[sid])))

    def test_request_trailers(self):
        c = self.client()
        body = pattern(70000)
        sid = c.post("/echo", body, [("content-type", "text/plain")],
                     trailers=[("x-checksum", "abc123"), ("x-more", "1")])
        status, _, got, _, reset = c.wait([sid], timeout=10)[0]
        self.assertEqual((status, reset), (200, None))
        self.assertTrue(got == body)

    def test_head(self):
        c = self.raw()
        c.request(1, "/plaintext", method="HEAD")
        status, head, body, _ = c.response(1)
        self.assertEqual((status, body), (200, b""))
        self.assertEqual(dict(head).get("content-length"), str(len(HELLO)), head)
        data = [f for f in c.log if f.type == DATA and f.sid == 1 and f.payload]
        self.assertEqual(data, [], "DATA in a HEAD response")

    def test_body_over_max_body_is_413(self):
        big = pattern(3 << 20)
        for declared in (True, False):
            with self.subTest(content_length=declared):
                c = self.client()
                extra = [("content-type", "application/octet-stream")]
                if declared:
                    extra.append(("content-length", str(len(big))))
                sid = c.post("/echo", big, extra)
                try:
                    status, _, _, _, reset = c.wait([sid], timeout=15)[0]
                except AssertionError as e:
                    self.fail("no 413 for a 3 MiB body over --max-body 2m: %s" % e)
                self.assertNotEqual(reset, REFUSED_STREAM, "REFUSED_STREAM (tells the client to retry)")
                self.assertEqual(status, 413, "status %r, reset %r" % (status, reset))
                c.close()

    def test_max_concurrent_streams_enforced(self):
        h2util.flare_only("needs /slow")
        c = self.raw()
        limit = c.wait_settings().get(MAX_CONCURRENT_STREAMS)
        self.assertIsNotNone(limit, "no SETTINGS_MAX_CONCURRENT_STREAMS advertised")
        self.assertGreaterEqual(limit, 100)
        c.until(lambda f: f.type == h2util.SETTINGS and f.flags & h2util.ACK, what="SETTINGS ACK")
        sids = [1 + 2 * i for i in range(limit + 1)]
        for sid in sids:
            c.request(sid, "/slow?ms=1500")
        extra = sids[-1]
        f = c.until(lambda x: x.type == GOAWAY or (x.sid == extra and x.type in (RST_STREAM, HEADERS)),
                    timeout=10, what="REFUSED_STREAM or PROTOCOL_ERROR for stream %d" % extra)
        if f.type == HEADERS:
            self.fail("stream %d over the limit of %d was served" % (extra, limit))
        if f.type == GOAWAY:
            self.assertEqual(c.goaway[1], PROTOCOL_ERROR, c.history())
            return
        code = struct.unpack(">I", f.payload)[0]
        self.assertIn(code, (REFUSED_STREAM, PROTOCOL_ERROR), err_name(code))
        # the others complete
        for sid in sids[:-1]:
            status, _, body, _ = c.response(sid, timeout=15)
            self.assertEqual((status, body), (200, b"slow"))


class Concurrency(h2util.H2TestCase):
    def test_100_streams_out_of_order(self):
        h2util.flare_only("needs /slow")
        c = self.client(timeout=20)
        delays = [1200, 800, 400, 50]
        sids, delay_of = [], {}
        for i in range(100):
            sid = c.get("/slow?ms=%d" % delays[i % 4])
            sids.append(sid)
            delay_of[sid] = delays[i % 4]
        t0 = time.monotonic()
        results = c.wait(sids, timeout=20)
        took = time.monotonic() - t0
        for sid, (status, _, body, _, reset) in zip(sids, results):
            self.assertEqual((status, body, reset), (200, b"slow", None), "stream %d" % sid)
        self.assertNotEqual(c.order, sids, "completed in request order")
        last_fast = max(c.order.index(s) for s in sids if delay_of[s] == 50)
        first_slow = min(c.order.index(s) for s in sids if delay_of[s] == 1200)
        self.assertLess(last_fast, first_slow, "a 50 ms stream completed after a 1200 ms one")
        # concurrently, not one after another (25 x 1.2 s alone would be 30 s)
        self.assertLess(took, 8, "100 streams took %.1f s" % took)

    def test_async_stream_does_not_hold_up_others(self):
        h2util.flare_only("needs /slow")
        c = self.client()
        slow = c.get("/slow?ms=1500")
        t0 = time.monotonic()
        fast = [c.get("/plaintext") for _ in range(10)]
        for status, _, body, _, _ in c.wait(fast):
            self.assertEqual((status, body), (200, HELLO))
        self.assertLess(time.monotonic() - t0, 1.0, "fast streams waited for the slow one")
        self.assertEqual(c.wait([slow])[0][:3:2], (200, b"slow"))


def text_body(kb):
    """What GET /text?kb=N answers (examples/hello.c text_kib)."""
    tail = b" the quick brown fox jumps over the lazy dog 0123456789\n"
    return b"".join(b"%05d.%02d" % (k % 100000, j) + tail for k in range(kb) for j in range(16))


class Exchanges(h2util.H2TestCase):
    """The protocol-neutral exchange over h2: streaming responses, the
    compression middleware, SSE, streams the client cancels mid-way."""

    def setUp(self):
        super().setUp()
        h2util.flare_only("hello's /text, /sse, /slow")

    def test_streaming_response(self):
        c = self.raw()
        c.request(1, "/text?kb=8&stream=20")
        status, head, body, _ = c.response(1)
        self.assertEqual(status, 200)
        self.assertEqual(body, text_body(8))
        frames = [f for f in c.log if f.sid == 1 and f.type == DATA and f.payload]
        self.assertGreaterEqual(len(frames), 2, "a streamed response in %d DATA frame(s)" % len(frames))

    def test_streaming_response_paced_by_backpressure(self):
        # /text?pace=1 writes while flare_res_backpressured() is false and
        # resumes from its drain callback (flare_res_on_drain): a client
        # that opens its flow-control windows slowly makes it pause, each
        # pause ends with a drain, and every byte arrives in order
        kb = 2048
        c = self.raw(settings=[(INITIAL_WINDOW_SIZE, 16384)])
        c.auto_window = False
        c.request(1, "/text?kb=%d&pace=1" % kb)
        conn_window, stream_window = 65535, 16384
        head, body = None, []
        deadline = time.monotonic() + 60
        while True:
            f = c.until(lambda x: x.sid in (0, 1) and x.type in (HEADERS, DATA, RST_STREAM, GOAWAY),
                        timeout=max(deadline - time.monotonic(), 0.1), what="the paced response")
            if f.type in (RST_STREAM, GOAWAY):
                self.fail("stream ended early: %s" % c.history())
            if f.type == HEADERS:
                head = dict(f.headers)
            else:
                conn_window -= len(f.payload)
                stream_window -= len(f.payload)
                body.append(f.payload)
                if conn_window < 32768:
                    c.send(window_update(0, 65535 - conn_window))
                    conn_window = 65535
                if stream_window == 0 and not f.flags & END_STREAM:
                    time.sleep(0.001)
                    c.send(window_update(1, 16384))
                    stream_window = 16384
            if f.flags & END_STREAM:
                break
        self.assertEqual(head.get(":status"), "200", head)
        got = b"".join(body)
        want = text_body(kb)
        self.assertEqual(got[:len(want)], want)
        m = re.fullmatch(rb"paused (\d+) drained (\d+)\n", got[len(want):])
        self.assertIsNotNone(m, got[len(want):][:200])
        paused, drained = int(m[1]), int(m[2])
        self.assertGreaterEqual(paused, 1, "the producer never saw backpressure")
        self.assertEqual(drained, paused, "a pause that no drain callback ended")

    def test_compressed_response(self):
        c = self.raw()
        c.request(1, "/text?kb=16", extra=[("accept-encoding", "gzip")])
        status, head, body, _ = c.response(1)
        h = dict(head)
        self.assertEqual((status, h.get("content-encoding")), (200, "gzip"), head)
        self.assertEqual(gzip.decompress(body), text_body(16))

    def test_sse(self):
        c = self.raw()
        c.request(1, "/sse?n=3&ms=30")
        status, head, body, _ = c.response(1)
        self.assertEqual(status, 200)
        self.assertTrue(dict(head).get("content-type", "").startswith("text/event-stream"), head)
        events = [e for e in body.decode().split("\n\n") if e.strip()]
        self.assertEqual(len(events), 3, body)
        for i, e in enumerate(events, 1):
            self.assertIn("id: %d" % i, e)
            self.assertIn("data: %d" % i, e)

    def test_client_cancels_streaming_response(self):
        c = self.raw()
        c.request(1, "/text?kb=2000&stream=20")
        c.until(lambda x: x.sid == 1 and x.type == DATA and x.payload, what="the first DATA")
        c.send(h2util.rst_stream(1, h2util.CANCEL))
        c.request(3, "/slow?ms=300")
        c.send(h2util.rst_stream(3, h2util.CANCEL))   # its handler completes on a gone stream
        time.sleep(0.6)
        c.alive_check(5)
        extra = [f for f in c.log if f.sid == 3 and f.type == HEADERS]
        self.assertEqual(extra, [], "a response on stream 3 after the client cancelled it")


class ZeroWindow(h2util.H2TestCase):
    """A client that never opens its window: the server waits without
    spinning, and the write timeout ends the connection."""
    server_args = ("--write-timeout", "2s", "--idle-timeout", "60s")
    server_static = STATIC

    def test_zero_window_held_open(self):
        h2util.flare_only("--write-timeout")
        c = self.raw(settings=[(INITIAL_WINDOW_SIZE, 0)])
        c.request(1, "/static/2m.bin")
        f = c.until(lambda x: x.sid == 1, what="the response HEADERS")
        self.assertEqual(f.type, HEADERS, c.history())
        self.assertEqual(dict(f.headers).get(":status"), "200")
        cpu0, _ = h2util.proc_stat(self.pid())
        t0 = time.monotonic()
        time.sleep(2.0)
        cpu1, _ = h2util.proc_stat(self.pid())
        spent = cpu1 - cpu0
        self.assertLess(spent, 0.2, "server used %.2f s of CPU in %.1f s with a zero window" % (
            spent, time.monotonic() - t0))
        data = [x for x in c.log if x.type == DATA and x.payload]
        self.assertEqual(data, [], "DATA sent into a zero window")
        # the write timeout (2 s) ends it; allow for a coarse sweep
        closed = c.drain(timeout=8)
        self.assertTrue(closed, "connection still open %.1f s after the window closed (%s)" % (
            time.monotonic() - t0, c.history()))
        if c.goaway is not None:
            self.assertNotEqual(c.goaway[1], PROTOCOL_ERROR, c.history())


class GracefulShutdown(unittest.TestCase):
    def test_streams_in_flight_complete(self):
        h2util.flare_only("needs /slow")
        srv = h2util.start_server("--drain-timeout", "10s")
        try:
            c = h2util.RawH2(srv.addr, timeout=10)
            c.wait_settings()
            sids = [1, 3, 5, 7, 9]
            for sid in sids:
                c.request(sid, "/slow?ms=%d" % (1000 + 100 * sid))
            time.sleep(0.3)   # the server has them all
            srv.send_signal(signal.SIGTERM)
            goaways = []
            done, ended = {}, set()
            deadline = time.monotonic() + 10
            while len(ended) < len(sids):
                f = c.until(lambda x: x.type == GOAWAY or x.sid in sids,
                            timeout=max(deadline - time.monotonic(), 0.1), what="the in-flight responses")
                if f.type == GOAWAY:
                    goaways.append(c.goaway)
                    continue
                if f.type == RST_STREAM:
                    self.fail("stream %d reset during the drain: %s" % (f.sid, c.history()))
                if f.type == HEADERS and f.headers and dict(f.headers).get(":status"):
                    done.setdefault(f.sid, dict(f.headers)[":status"])
                if f.flags & END_STREAM:
                    ended.add(f.sid)
            self.assertTrue(goaways, "no GOAWAY on SIGTERM (%s)" % c.history())
            for last, code, _ in goaways:
                self.assertEqual(code, NO_ERROR, "GOAWAY %s on graceful shutdown" % err_name(code))
            self.assertGreaterEqual(goaways[-1][0], max(sids), "last stream id %d" % goaways[-1][0])
            self.assertEqual(done, {s: "200" for s in sids})
            self.assertTrue(c.drain(timeout=5), "connection not closed after the drain")
            rc = srv.wait(10)
            self.assertEqual(rc, 0, "server exit %r after the drain:\n%s" % (rc, srv.output()[-2000:]))
        finally:
            srv.stop(5)
            srv.close_log()


if __name__ == "__main__":
    flaretest.main()
