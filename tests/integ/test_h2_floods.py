#!/usr/bin/python3
"""HTTP/2 defences of examples/hello (h2c), with hand-built frames: rapid
reset (CVE-2023-44487), CONTINUATION flood (CVE-2024-27316), an HPACK bomb,
SETTINGS / PING / PRIORITY / empty DATA / WINDOW_UPDATE floods, a stream
that never sends its body, and an idle connection kept "alive" by PINGs.
Each must end with a GOAWAY (ENHANCE_YOUR_CALM where the issue says so) or a
close within a bounded time, with the server's memory bounded, and the server
must go on serving new connections."""

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

    def rss(self):
        return h2util.proc_stat(self.pid())[1]

    def assertMemoryBounded(self, res=None):
        grown = self.rss() - self.rss0
        if not flaretest.sanitized():   # (ASan's quarantine keeps freed memory resident)
            self.assertLess(grown, RSS_GROWTH_KB, "server RSS grew by %d KiB: %r" % (grown, res))

    def assertCalm(self, res, codes=(ENHANCE_YOUR_CALM,), close_ok=True):
        """The flood ended by the server: GOAWAY with one of codes, or
        (close_ok) a close without one."""
        c = res.conn
        if c.goaway is not None:
            self.assertIn(c.goaway[1], codes, "GOAWAY %s, expected %s: %r" % (
                err_name(c.goaway[1]), "/".join(err_name(x) for x in codes), res))
            self.assertTrue(c.eof, "GOAWAY but the connection stays open: %r" % res)
        else:
            self.assertTrue(close_ok and c.eof, "the server did not stop the flood: %r" % res)
        self.assertLess(res.took, FLOOD_SECONDS + 0.5, repr(res))
        self.assertMemoryBounded(res)
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
        self.assertCalm(res)

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
        self.assertServes()

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
        self.assertCalm(res)

    def test_ping_flood(self):
        c = self.raw()
        c.wait_settings()
        res = flood(c, repeat(h2util.ping(b"floodpin") * 100), read=False)
        self.assertCalm(res)

    def test_priority_flood(self):
        c = self.raw()
        c.wait_settings()

        def frames():
            sid = 1
            while True:
                yield b"".join(h2util.priority(sid + 2 * k, dep=sid + 2 * k + 2) for k in range(100))
                sid = (sid + 200) % (1 << 30) | 1
        res = flood(c, frames())
        self.assertCalm(res)

    def test_empty_data_flood(self):
        c = self.raw()
        c.wait_settings()
        c.headers(1, POST, end_stream=False)
        res = flood(c, repeat(frame(DATA, 0, 1, b"") * 100))
        self.assertCalm(res)

    def test_window_update_flood(self):
        c = self.raw()
        c.wait_settings()
        res = flood(c, repeat(h2util.window_update(0, 1) * 100))
        self.assertCalm(res)

    def test_headers_only_stream_flood(self):
        # many streams opened and answered normally, as fast as possible, is
        # NOT an attack: a fast client with correct use must not be cut off
        c = self.raw()
        c.wait_settings()
        for sid in range(1, 400, 2):
            c.request(sid, "/plaintext")
            status, _, body, _ = c.response(sid)
            self.assertEqual((status, body), (200, b"Hello, World!"))


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


if __name__ == "__main__":
    flaretest.main()
