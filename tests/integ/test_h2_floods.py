#!/usr/bin/python3
"""HTTP/2 defences of examples/hello (h2c), with hand-built frames: rapid
reset (CVE-2023-44487), CONTINUATION flood (CVE-2024-27316), an HPACK bomb,
SETTINGS / PING / PRIORITY / empty DATA / WINDOW_UPDATE floods, a stream
that never sends its body, and an idle connection kept "alive" by PINGs.
Each must end with a GOAWAY (ENHANCE_YOUR_CALM where the issue says so) or a
close within a bounded time, with the server's memory bounded, and the server
must go on serving new connections. Each defence is counted once in
/metrics (flare_h2_floods_total{kind}, flare_h2_goaway_total{code}), and a
header block left open is ended by the header timeout, which neither
CONTINUATION frames trickling in nor PINGs extend."""

import os
import select
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
import h2util  # noqa: E402
from h2util import (CONTINUATION, DATA, END_HEADERS, END_STREAM, ENHANCE_YOUR_CALM,  # noqa: E402
                    GOAWAY, HEADERS, PING, RST_STREAM, err_name, frame)

BASE = [(":method", "GET"), (":scheme", "http"), (":authority", "localhost"), (":path", "/plaintext")]
POST = [(":method", "POST"), (":scheme", "http"), (":authority", "localhost"), (":path", "/echo")]
FLOOD_SECONDS = 4        # how long a flood may go on before the server must have acted
CLOSE_SECONDS = 3        # after the flood stops: GOAWAY / close within this
RSS_GROWTH_KB = 48 * 1024


class FloodResult:
    def __init__(self, conn, sent, took, stopped_by):
        self.conn = conn
        self.sent = sent
        self.took = took
        self.stopped_by = stopped_by   # "closed", "goaway", "limit", "time"

    def __repr__(self):
        return "%d bytes sent in %.2f s, stopped by %s; received: %s" % (
            self.sent, self.took, self.stopped_by, self.conn.history())


def flood(conn, chunks, max_bytes=64 << 20, seconds=FLOOD_SECONDS, read=True):
    """Sends the byte strings that `chunks` yields as fast as the socket
    takes them, reading what the server sends meanwhile (read=False: only
    when the server has closed or the flood is over), until the server
    closes, sends GOAWAY, max_bytes went out or `seconds` passed. Then waits
    CLOSE_SECONDS for the GOAWAY / close."""
    sock = conn.sock
    sock.setblocking(False)
    sent = 0
    t0 = time.monotonic()
    stopped = None
    pending = b""
    it = iter(chunks)
    try:
        while stopped is None:
            if time.monotonic() - t0 > seconds:
                stopped = "time"
                break
            if sent >= max_bytes:
                stopped = "limit"
                break
            if not pending:
                try:
                    pending = next(it)
                except StopIteration:
                    stopped = "limit"
                    break
            r, w, _ = select.select([sock] if read else [], [sock], [], 0.2)
            if r:
                stopped = _read_some(conn)
                if stopped:
                    break
            if w:
                try:
                    n = sock.send(pending)
                except BlockingIOError:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    stopped = "closed"
                    break
                sent += n
                pending = pending[n:]
    finally:
        sock.setblocking(True)
    took = time.monotonic() - t0
    if stopped in ("time", "limit"):
        # the flood is over: now the server must act
        if conn.drain(CLOSE_SECONDS):
            stopped = "goaway" if conn.goaway else "closed"
    else:
        conn.drain(CLOSE_SECONDS)
    return FloodResult(conn, sent, took, stopped if not (conn.eof and stopped in ("time", "limit")) else
                       "closed")


def _read_some(conn):
    """Reads and parses what is there (non-blocking socket). Returns
    "goaway" / "closed" when the connection is ending, else None."""
    try:
        data = conn.sock.recv(1 << 20)
    except BlockingIOError:
        return None
    except ConnectionResetError:
        conn.eof = conn.reset = True
        return "closed"
    if not data:
        conn.eof = True
        return "closed"
    conn.buf += data
    # parse the complete frames buffered
    while len(conn.buf) >= 9:
        n = int.from_bytes(conn.buf[:3], "big")
        if len(conn.buf) < 9 + n:
            break
        conn.sock.setblocking(True)
        try:
            conn.recv_frame(timeout=1)
        finally:
            conn.sock.setblocking(False)
    return "goaway" if conn.goaway else None


def repeat(data, times=None):
    i = 0
    while times is None or i < times:
        yield data
        i += 1


class Floods(h2util.H2TestCase):
    server_tls = False   # the floods write with non-blocking plain sockets
    server_args = ("--idle-timeout", "30s", "--body-timeout", "30s")

    def setUp(self):
        super().setUp()
        self.rss0 = self.rss()
        # before the test's connection: its counters are the only ones moving
        self.m0 = h2util.scrape(self.addr) if h2util.PEER == "flare" else None

    def rss(self):
        return h2util.proc_stat(self.pid())[1]

    def assertMemoryBounded(self, res=None):
        grown = self.rss() - self.rss0
        if not flaretest.sanitized():   # (ASan quarantine, TSan shadow: RSS means nothing)
            self.assertLess(grown, RSS_GROWTH_KB, "server RSS grew by %d KiB: %r" % (grown, res))

    def assertCounted(self, kind):
        """/metrics counted this test's connection, one defence of kind and
        one GOAWAY ENHANCE_YOUR_CALM."""
        if self.m0 is None:
            return
        m1 = h2util.scrape(self.addr)
        moved = {n: h2util.counted(self.m0, m1, n) for n in (
            "flare_h2_connections_total", 'flare_h2_floods_total{kind="%s"}' % kind,
            'flare_h2_goaway_total{code="enhance_your_calm"}')}
        self.assertEqual(list(moved.values()), [1, 1, 1], moved)
        others = {n: h2util.counted(self.m0, m1, n) for n in m1
                  if n.startswith("flare_h2_floods_total") and kind not in n}
        self.assertEqual(sum(others.values()), 0, others)

    def assertCalm(self, res, codes=(ENHANCE_YOUR_CALM,), close_ok=True, kind=None):
        """The flood ended by the server: GOAWAY with one of codes, or
        (close_ok) a close without one; kind: the defence /metrics must
        have counted."""
        c = res.conn
        if c.goaway is not None:
            self.assertIn(c.goaway[1], codes, "GOAWAY %s, expected %s: %r" % (
                err_name(c.goaway[1]), "/".join(err_name(x) for x in codes), res))
            self.assertTrue(c.eof, "GOAWAY but the connection stays open: %r" % res)
        else:
            self.assertTrue(close_ok and c.eof, "the server did not stop the flood: %r" % res)
        self.assertLess(res.took, FLOOD_SECONDS + 0.5, repr(res))
        self.assertMemoryBounded(res)
        if kind is not None:
            self.assertCounted(kind)
        self.assertServes()

    def assertServes(self):
        c = self.raw()
        c.alive_check(1)
        c.close()

    def test_rapid_reset(self):
        c = self.raw()
        c.wait_settings()

        def streams():
            sid = 1
            while sid < (1 << 31) - 2:
                yield frame(HEADERS, END_STREAM | END_HEADERS, sid, c.encode(BASE)) + \
                    h2util.rst_stream(sid, h2util.CANCEL)
                sid += 2
        res = flood(c, streams())
        # the issue: ENHANCE_YOUR_CALM, not just a close
        self.assertIsNotNone(c.goaway, "no GOAWAY for rapid reset: %r" % res)
        self.assertCalm(res, kind="rapid_reset")

    def test_continuation_flood(self):
        c = self.raw()
        c.wait_settings()
        c.send(frame(HEADERS, END_STREAM, 1, c.encode(BASE)))
        # endless CONTINUATION frames without END_HEADERS, each full of new
        # literal fields (never indexed: 0x10), so that they decode to fields
        field = b"\x10\x06x-cont" + bytes([100]) + b"v" * 100
        block = field * (16000 // len(field))
        res = flood(c, repeat(frame(CONTINUATION, 0, 1, block)))
        self.assertIsNotNone(c.goaway, "no GOAWAY for a CONTINUATION flood: %r" % res)
        self.assertTrue(c.eof, repr(res))
        self.assertLess(res.took, FLOOD_SECONDS + 0.5, repr(res))
        self.assertMemoryBounded(res)
        # 16 KB frames: the block outgrows max-head + 16 KiB (after 3 of
        # them) long before it reaches 32 frames
        self.assertCounted("header_list")
        self.assertServes()

    def test_continuation_small_frames(self):
        # CONTINUATION frames of one field each: the frame count defence
        # (nghttp2's own, 8 frames, where it has one; Flare's, 32, otherwise)
        c = self.raw()
        c.wait_settings()
        c.send(frame(HEADERS, END_STREAM, 1, c.encode(BASE)))
        res = flood(c, repeat(frame(CONTINUATION, 0, 1, b"\x10\x01a\x01b"), 200))
        self.assertIsNotNone(c.goaway, "no GOAWAY for 200 CONTINUATION frames: %r" % res)
        self.assertCalm(res, kind="continuation")

    def test_hpack_bomb(self):
        # one 4,000-byte value in the dynamic table (literal with incremental
        # indexing, 0x40), then the same index (62) over and over: each 1-byte
        # reference decodes to 4 KB; 15 x 16 KB frames of them decode to ~1 GB
        c = self.raw()
        c.wait_settings()
        value = b"B" * 4000
        first = b"\x40\x06x-bomb" + b"\x7f" + self._hpack_int(len(value) - 127) + value
        refs = b"\xbe" * 16000   # indexed field 62 (0x80 | 62)
        block = c.enc.encode(BASE) + first
        c.send(frame(HEADERS, END_STREAM, 1, block))
        for _ in range(14):
            c.send(frame(CONTINUATION, 0, 1, refs))
        try:
            c.send(frame(CONTINUATION, END_HEADERS, 1, refs))
        except (BrokenPipeError, ConnectionResetError):
            pass
        f = c.until(lambda x: x.type == GOAWAY or (x.sid == 1 and x.type in (HEADERS, RST_STREAM)),
                    timeout=10, what="the HPACK bomb refused")
        if f.type == HEADERS:
            status = dict(f.headers).get(":status")
            self.assertEqual(status, "431", "a decoded header list of ~1 GB answered %s" % status)
        self.assertMemoryBounded()
        self.assertServes()

    @staticmethod
    def _hpack_int(n):
        out = b""
        while n >= 128:
            out += bytes([(n & 0x7F) | 0x80])
            n >>= 7
        return out + bytes([n])

    def test_settings_flood(self):
        c = self.raw()
        c.wait_settings()
        res = flood(c, repeat(h2util.settings_frame([(h2util.ENABLE_PUSH, 0)]) * 100), read=False)
        self.assertCalm(res, kind="settings")

    def test_ping_flood(self):
        c = self.raw()
        c.wait_settings()
        res = flood(c, repeat(h2util.ping(b"floodpin") * 100), read=False)
        self.assertCalm(res, kind="ping")

    def test_priority_flood(self):
        c = self.raw()
        c.wait_settings()

        def frames():
            sid = 1
            while True:
                yield b"".join(h2util.priority(sid + 2 * k, dep=sid + 2 * k + 2) for k in range(100))
                sid = (sid + 200) % (1 << 30) | 1
        res = flood(c, frames())
        self.assertCalm(res, kind="priority")

    def test_empty_data_flood(self):
        c = self.raw()
        c.wait_settings()
        c.headers(1, POST, end_stream=False)
        res = flood(c, repeat(frame(DATA, 0, 1, b"") * 100))
        self.assertCalm(res, kind="empty_data")

    def test_window_update_flood(self):
        c = self.raw()
        c.wait_settings()
        res = flood(c, repeat(h2util.window_update(0, 1) * 100))
        self.assertCalm(res, kind="window_update")

    def test_headers_only_stream_flood(self):
        # many streams opened and answered normally, as fast as possible, is
        # NOT an attack: a fast client with correct use must not be cut off
        c = self.raw()
        c.wait_settings()
        for sid in range(1, 400, 2):
            c.request(sid, "/plaintext")
            status, _, body, _ = c.response(sid)
            self.assertEqual((status, body), (200, b"Hello, World!"))
        if self.m0 is not None:
            m1 = h2util.scrape(self.addr)
            moved = {n: h2util.counted(self.m0, m1, n) for n in m1
                     if n.startswith("flare_h2_") and "_total" in n}
            moved = {n: v for n, v in moved.items() if v}
            self.assertEqual(moved, {"flare_h2_connections_total": 1, "flare_h2_streams_total": 200},
                             "200 streams answered on one connection")


class BodyAndIdleTimeouts(h2util.H2TestCase):
    server_tls = False
    server_args = ("--body-timeout", "1s", "--idle-timeout", "1s")

    def setUp(self):
        super().setUp()
        h2util.flare_only("--body-timeout / --idle-timeout")

    def ping_until_end(self, c, sid, seconds):
        """PING every 100 ms until the stream or connection ends; returns
        (what ended, after how long)."""
        t0 = time.monotonic()
        n = 0
        while time.monotonic() - t0 < seconds:
            try:
                c.send(h2util.ping(b"keep%04d" % (n % 10000)))
            except (BrokenPipeError, ConnectionResetError):
                return "closed", time.monotonic() - t0
            n += 1
            deadline = time.monotonic() + 0.1
            while time.monotonic() < deadline:
                try:
                    f = c.recv_frame(max(deadline - time.monotonic(), 0.001))
                except h2util.Closed:
                    return "closed", time.monotonic() - t0
                except socket.timeout:
                    break
                if f.type == GOAWAY:
                    c.drain(3)
                    return "goaway", time.monotonic() - t0
                if sid and f.sid == sid and (f.type == RST_STREAM or
                                             (f.type in (HEADERS, DATA) and f.flags & END_STREAM)):
                    return "stream", time.monotonic() - t0
        return None, time.monotonic() - t0

    def test_body_never_sent(self):
        c = self.raw()
        c.headers(1, POST + [("content-length", "100")], end_stream=False)
        what, took = self.ping_until_end(c, 1, 8)
        self.assertIsNotNone(what, "a stream without its body outlived the 1 s body timeout by 8 s "
                             "(PINGs every 100 ms): %s" % c.history())
        self.assertGreaterEqual(took, 0.8, "ended after %.2f s: %s" % (took, c.history()))
        self.assertLess(took, 5, "ended only after %.2f s" % took)
        heads = [dict(f.headers) for f in c.log if f.type == HEADERS and f.sid == 1]
        if heads:
            self.assertEqual(heads[0].get(":status"), "408", heads)
        pongs = [f for f in c.log if f.type == PING and f.flags & h2util.ACK]
        self.assertTrue(pongs, "PINGs never answered")

    def test_idle_connection_kept_alive_by_pings(self):
        c = self.raw()
        c.alive_check(1)
        what, took = self.ping_until_end(c, 0, 8)
        self.assertIn(what, ("goaway", "closed"), "idle connection outlived the 1 s idle timeout by 8 s "
                      "(PINGs every 100 ms): %s" % c.history())
        self.assertLess(took, 5, "closed only after %.2f s" % took)
        if c.goaway:
            self.assertEqual(c.goaway[1], h2util.NO_ERROR, c.history())


class Counters(h2util.H2TestCase):
    """flare_h2_* in /metrics: exact counts of what one test's connection
    did, and the sampled gauges."""
    server_tls = False
    server_args = ("--idle-timeout", "1s")

    def setUp(self):
        super().setUp()
        h2util.flare_only("examples/hello's /metrics")
        self.m0 = h2util.scrape(self.addr)

    def moved(self, name):
        return h2util.counted(self.m0, h2util.scrape(self.addr), name)

    def gauges(self):
        time.sleep(0.35)   # the gauges are sampled every 250 ms
        m = h2util.scrape(self.addr)
        return m["flare_h2_connections"], m["flare_h2_streams"]

    def test_gauges(self):
        self.assertEqual(self.gauges(), (0, 0))
        c = self.raw()
        c.alive_check(1)
        self.assertEqual(self.gauges(), (1, 0))
        c.headers(3, POST + [("content-length", "10")], end_stream=False)
        c.headers(5, POST + [("content-length", "10")], end_stream=False)
        self.assertEqual(self.gauges(), (1, 2))
        c.data(3, b"0123456789", end_stream=True)
        self.assertEqual(c.response(3)[2], b"0123456789")
        self.assertEqual(self.gauges(), (1, 1))
        c.close()
        self.assertEqual(self.gauges(), (0, 0))

    def test_rst_stream_sent(self):
        # a Content-Length over --max-body: 413 at once, then RST_STREAM
        # NO_ERROR so that the client stops sending the body (RFC 9113 8.1)
        c = self.raw()
        c.headers(1, POST + [("content-length", str(1 << 40))], end_stream=False)
        status, _, _, _ = c.response(1)
        self.assertEqual(status, 413)
        c.until(lambda f: f.type == RST_STREAM and f.sid == 1, what="RST_STREAM on stream 1")
        self.assertEqual(self.moved("flare_h2_rst_stream_total"), 1)
        self.assertEqual(self.moved("flare_h2_streams_total"), 1)

    def test_goaway_codes(self):
        # the idle timeout: GOAWAY NO_ERROR; a frame on stream 0 that must
        # not be there: GOAWAY PROTOCOL_ERROR
        c = self.raw()
        c.alive_check(1)
        c.expect_goaway(h2util.NO_ERROR, timeout=5)
        c = self.raw()
        c.wait_settings()
        c.send(frame(DATA, 0, 0, b"x"))
        c.expect_goaway(h2util.PROTOCOL_ERROR)
        m1 = h2util.scrape(self.addr)
        got = {code: h2util.counted(self.m0, m1, 'flare_h2_goaway_total{code="%s"}' % code)
               for code in ("no_error", "protocol_error", "enhance_your_calm", "internal_error")}
        self.assertEqual(got, {"no_error": 1, "protocol_error": 1, "enhance_your_calm": 0,
                               "internal_error": 0})
        self.assertEqual(h2util.counted(self.m0, m1, "flare_h2_connections_total"), 2)


class HeaderBlockTimeout(h2util.H2TestCase):
    """A header block left open (HEADERS without END_HEADERS) holds the
    whole connection: nothing but its CONTINUATION may follow. The header
    timeout ends it with GOAWAY, as --header-timeout ends an HTTP/1.1 head
    that never completes; body and idle timeouts are far away here."""
    server_tls = False
    server_args = ("--header-timeout", "1s", "--body-timeout", "30s", "--idle-timeout", "30s")

    def setUp(self):
        super().setUp()
        h2util.flare_only("--header-timeout")
        self.m0 = h2util.scrape(self.addr)

    def open_block(self):
        c = self.raw()
        c.wait_settings()
        c.send(frame(HEADERS, END_STREAM, 1, c.encode(BASE)))   # no END_HEADERS
        return c, time.monotonic()

    def assertHeaderTimeout(self, c, t0):
        if c.goaway is None:
            c.until(lambda f: f.type == GOAWAY, 5, "GOAWAY for the header timeout")
        took = time.monotonic() - t0
        self.assertEqual(c.goaway[1], h2util.NO_ERROR, c.history())
        self.assertTrue(c.drain(3), "still open after GOAWAY: %s" % c.history())
        # the sweep runs once a second: 1 s, plus up to one period
        self.assertGreaterEqual(took, 0.9, c.history())
        self.assertLess(took, 3.0, c.history())
        self.assertFalse([f for f in c.log if f.sid == 1], "stream 1 was answered: %s" % c.history())
        m1 = h2util.scrape(self.addr)
        self.assertEqual(h2util.counted(self.m0, m1, 'flare_timeouts_total{kind="header"}'), 1)
        self.assertEqual(h2util.counted(self.m0, m1, 'flare_h2_goaway_total{code="no_error"}'), 1)

    def test_silent_after_headers(self):
        c, t0 = self.open_block()
        self.assertHeaderTimeout(c, t0)

    def test_continuation_trickle(self):
        # a field every 350 ms keeps the block going but not the timeout
        # (fewer than the 8 CONTINUATION frames nghttp2 allows a block)
        c, t0 = self.open_block()
        sent = 0
        try:
            while time.monotonic() - t0 < 5 and c.goaway is None:
                c.send(frame(CONTINUATION, 0, 1, b"\x10\x01a\x01b"))
                sent += 1
                try:
                    c.recv_frame(0.35)
                except socket.timeout:
                    pass
        except (BrokenPipeError, ConnectionResetError, h2util.Closed):
            pass
        self.assertGreaterEqual(sent, 4, c.history())
        self.assertHeaderTimeout(c, t0)

    def test_ping_in_header_block(self):
        # a PING cannot keep the connection: inside a header block it is a
        # connection error at once (RFC 9113 6.10), long before the timeout
        c, t0 = self.open_block()
        c.send(h2util.ping(b"keep0000"))
        c.expect_goaway(h2util.PROTOCOL_ERROR, timeout=5)
        self.assertLess(time.monotonic() - t0, 0.9, c.history())
        self.assertFalse([f for f in c.log if f.type == PING], c.history())
        m1 = h2util.scrape(self.addr)
        self.assertEqual(h2util.counted(self.m0, m1, 'flare_timeouts_total{kind="header"}'), 0)

    def test_block_completed_disarms(self):
        # HEADERS + CONTINUATION with END_HEADERS: served; the connection then
        # stays open past the header timeout and serves again
        c, _ = self.open_block()
        c.send(frame(CONTINUATION, END_HEADERS, 1, b"\x10\x01a\x01b"))
        status, _, body, _ = c.response(1)
        self.assertEqual((status, body), (200, b"Hello, World!"))
        time.sleep(2.2)
        c.alive_check(3)
        self.assertIsNone(c.goaway, c.history())
        m1 = h2util.scrape(self.addr)
        self.assertEqual(h2util.counted(self.m0, m1, 'flare_timeouts_total{kind="header"}'), 0)



class HeaderBlockUnderBodyTimeout(h2util.H2TestCase):
    """A stream whose header block is still open is under the header
    timeout, not the body timeout, even when the body timeout is the
    shorter one; its body's clock starts once the block is complete."""
    server_tls = False
    server_args = ("--header-timeout", "4s", "--body-timeout", "1s", "--idle-timeout", "30s")

    def setUp(self):
        super().setUp()
        h2util.flare_only("--header-timeout")
        self.m0 = h2util.scrape(self.addr)

    def slow_block(self, headers, end_stream):
        c = self.raw()
        c.wait_settings()
        c.send(frame(HEADERS, END_STREAM if end_stream else 0, 1, c.encode(headers)))
        time.sleep(2.3)  # two sweeps past the body timeout, well inside the header one
        c.send(frame(CONTINUATION, END_HEADERS, 1, b"\x10\x01a\x01b"))
        return c

    def test_get_completed_after_the_body_timeout(self):
        c = self.slow_block(BASE, end_stream=True)
        status, _, body, _ = c.response(1)
        self.assertEqual((status, body), (200, b"Hello, World!"), c.history())
        m1 = h2util.scrape(self.addr)
        self.assertEqual(h2util.counted(self.m0, m1, 'flare_timeouts_total{kind="body"}'), 0)
        self.assertEqual(h2util.counted(self.m0, m1, 'flare_timeouts_total{kind="header"}'), 0)

    def test_body_clock_starts_after_the_block(self):
        c = self.slow_block(POST, end_stream=False)
        time.sleep(0.4)
        c.send(frame(DATA, END_STREAM, 1, b"late but in time"))
        status, _, body, _ = c.response(1)
        self.assertEqual((status, body), (200, b"late but in time"), c.history())
        # and the body timeout still holds for a body that never comes
        c.send(frame(HEADERS, END_HEADERS, 3, c.encode(POST)))
        status, _, _, _ = c.response(3, timeout=5)
        self.assertEqual(status, 408, c.history())
        m1 = h2util.scrape(self.addr)
        self.assertEqual(h2util.counted(self.m0, m1, 'flare_timeouts_total{kind="body"}'), 1)


if __name__ == "__main__":
    flaretest.main()
