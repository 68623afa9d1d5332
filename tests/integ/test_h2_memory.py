#!/usr/bin/python3
"""What one HTTP/2 connection may make examples/hello hold, and what the
worker keeps after it (one worker, so every byte lands in the same one):

- cookie crumbs: many `cookie` fields in one header block (a repeated
  `cookie: a` costs the client one byte with HPACK indexing) count against
  max-head as the joined value they make, so the block is answered 431
  instead of being joined again for every crumb;
- request bodies: the bodies buffered on one connection are bounded by
  max-conn-body (default 4 x max-body): past it the flow-control window is
  not given back (a stream still waiting past half the connection window is
  refused with REFUSED_STREAM), and a single stream with a body up to
  max-body is never held up by it;
- memory given back: after a burst of streams with bodies both ways, once
  the connections are closed, the worker's RSS returns to within a few MiB
  of where it was.

The RSS figures are VmRSS from /proc/PID/status. Under AddressSanitizer
they mean nothing (freed memory stays in its quarantine): only the frame-
level checks are made then."""

import os
import select
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
import h2util  # noqa: E402
from h2util import (DATA, GOAWAY, HEADERS, INITIAL_WINDOW_SIZE, REFUSED_STREAM,  # noqa: E402
                    RST_STREAM, WINDOW_UPDATE, frame)

MIB = 1 << 20
POST = [(":method", "POST"), (":scheme", "http"), (":authority", "localhost"), (":path", "/echo")]
GET = [(":method", "GET"), (":scheme", "http"), (":authority", "localhost"), (":path", "/plaintext")]


def vm_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for pid %d" % pid)


class MemoryCase(h2util.H2TestCase):
    server_tls = False   # the floods write with non-blocking plain sockets

    @classmethod
    def setUpClass(cls):
        h2util.flare_only("examples/hello's flags and RSS")
        cls.server = flaretest.Server(*cls.server_args, workers=1).start()
        cls.addr = cls.server.addr
        cls.cafile = None

    def rss(self):
        return vm_rss_kib(self.pid())

    def settle_rss(self, seconds=3.0):
        """RSS once the worker had time for a sweep or two (the lowest of a
        few samples: a sweep may be giving memory back as we look)."""
        time.sleep(seconds)
        return min(self.rss() for _ in range(3) if time.sleep(0.1) is None)

    def check_rss(self, grown_kib, bound_kib, what):
        sys.stderr.write("%s: RSS grew by %.1f MiB (bound %.1f MiB)\n" % (
            what, grown_kib / 1024, bound_kib / 1024))
        if not flaretest.sanitized():
            self.assertLess(grown_kib, bound_kib, "%s: RSS grew by %.1f MiB" % (what, grown_kib / 1024))


class CookieCrumbs(MemoryCase):
    server_args = ("--max-head", "32k", "--body-timeout", "30s", "--idle-timeout", "30s")

    def test_cookie_crumbs_count_as_joined(self):
        # 120 streams, each a header block of 830 `cookie: a` fields and no
        # END_STREAM: ~1 KB on the wire per stream, 830 x 39 bytes by the
        # RFC's header-list measure (just under 32k), but 830 x 42 once the
        # joined value's bytes are counted too: over max-head, 431
        rss0 = self.rss()
        c = self.raw()
        c.wait_settings()
        sids = list(range(1, 241, 2))
        for sid in sids:
            c.headers(sid, POST + [("cookie", "a")] * 830, end_stream=False)
        answered = {}
        deadline = time.monotonic() + 10
        while len(answered) < len(sids) and time.monotonic() < deadline:
            try:
                f = c.recv_frame(max(deadline - time.monotonic(), 0.01))
            except socket.timeout:
                break
            if f.type == GOAWAY:
                break
            if f.sid in sids and f.sid not in answered:
                if f.type == HEADERS:
                    answered[f.sid] = dict(f.headers).get(":status")
                elif f.type == RST_STREAM:
                    answered[f.sid] = "RST %s" % h2util.err_name(struct.unpack(">I", f.payload)[0])
        grown = self.rss() - rss0
        sys.stderr.write("cookie crumbs: %d of %d streams answered, RSS %.1f MiB -> %.1f MiB\n" % (
            len(answered), len(sids), rss0 / 1024, (rss0 + grown) / 1024))
        statuses = sorted(set(answered.values()))
        self.assertEqual((len(answered), statuses), (len(sids), ["431"]),
                         "120 header blocks of 830 cookie crumbs: %d answered (%r), expected "
                         "431 for each: %s" % (len(answered), statuses, c.history()))
        self.check_rss(grown, 16 * 1024, "120 streams of 830 cookie crumbs, open")
        # the connection still serves, and a few crumbs are still fine
        c.request(sids[-1] + 2, "/plaintext", extra=[("cookie", "a=1"), ("cookie", "b=2")])
        status, _, body, _ = c.response(sids[-1] + 2)
        self.assertEqual((status, body), (200, b"Hello, World!"))
        c.close()
        self.check_rss(self.settle_rss() - rss0, 8 * 1024, "after the connection closed")


class BodyBudget(MemoryCase):
    # the default budget: 4 x max-body
    server_args = ("--max-body", "1m", "--body-timeout", "30s", "--idle-timeout", "30s")
    BUDGET = 4 * MIB
    CONN_WINDOW = MIB      # the connection's receive window (docs/http2.md)

    def pour(self, c, sids, per_stream, seconds=2.0, cap=48 * MIB):
        """Sends DATA (no END_STREAM) round-robin on sids, per_stream bytes
        each at most (this call), as fast as the windows the server gives
        allow; stops once nothing could be sent for `seconds` or cap bytes
        went out. The windows are kept on c across calls. Returns ({sid:
        bytes sent}, the sids reset or answered, {sid: stream-level
        WINDOW_UPDATE increments})."""
        if not hasattr(c, "flow"):
            swin0 = c.wait_settings().get(INITIAL_WINDOW_SIZE, 65535)
            c.flow = dict(swin0=swin0, conn=65535, win={}, seen=0, reset=set())
        fl = c.flow
        for sid in sids:
            fl["win"].setdefault(sid, fl["swin0"])
        sent = {sid: 0 for sid in sids}
        updates = {sid: 0 for sid in sids}
        chunk = b"x" * 16384
        idle_since = time.monotonic()
        total = 0
        while total < cap:
            # what the server said meanwhile
            while True:
                r, _, _ = select.select([c.sock], [], [], 0)
                if not r and len(c.buf) < 9:
                    break
                try:
                    c.recv_frame(0.5)
                except (socket.timeout, h2util.Closed):
                    break
            for f in c.log[fl["seen"]:]:
                if f.type == WINDOW_UPDATE:
                    inc = struct.unpack(">I", f.payload)[0] & 0x7FFFFFFF
                    if f.sid == 0:
                        fl["conn"] += inc
                    elif f.sid in fl["win"]:
                        fl["win"][f.sid] += inc
                        if f.sid in updates:
                            updates[f.sid] += inc
                elif f.sid in fl["win"] and (f.type == RST_STREAM or f.type == HEADERS):
                    fl["reset"].add(f.sid)
            fl["seen"] = len(c.log)
            if c.eof or c.goaway:
                break
            progressed = False
            for sid in sids:
                if sid in fl["reset"]:
                    continue
                n = min(len(chunk), fl["win"][sid], fl["conn"], per_stream - sent[sid])
                if n <= 0:
                    continue
                c.send(frame(DATA, 0, sid, chunk[:n]))
                fl["win"][sid] -= n
                fl["conn"] -= n
                sent[sid] += n
                total += n
                progressed = True
            if progressed:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > seconds:
                break
            else:
                select.select([c.sock], [], [], 0.05)
        return sent, fl["reset"] & set(sids), updates

    def test_bodies_held_per_connection_bounded(self):
        # 100 streams of ~1 MB (under max-body) without END_STREAM: before,
        # each stream's window came back as its data was buffered, so the
        # connection held 100 MB
        rss0 = self.rss()
        c = self.raw()
        sids = list(range(1, 201, 2))
        for sid in sids:
            c.headers(sid, POST, end_stream=False)
        sent, reset, _ = self.pour(c, sids, 1000000)
        held = sum(n for sid, n in sent.items() if sid not in reset)
        total = sum(sent.values())
        sys.stderr.write("100 bodies: %.1f MiB sent, %.1f MiB on streams not reset, %d streams "
                         "refused\n" % (total / MIB, held / MIB, len(reset)))
        # the budget, what the connection window had let through when it
        # was reached, and the oldest stream's body (always let through)
        bound = self.BUDGET + self.CONN_WINDOW + MIB
        self.assertLessEqual(held, bound, "%.1f MiB of request bodies held on one connection "
                             "(budget 4 MiB): %s" % (held / MIB, c.history()))
        codes = {f.sid: struct.unpack(">I", f.payload)[0] for f in c.log if f.type == RST_STREAM}
        self.assertEqual(set(codes.values()) - {REFUSED_STREAM}, set(), codes)
        self.check_rss(self.rss() - rss0, 24 * 1024, "100 bodies of 1 MB held open")
        # the oldest stream was never held up: it can finish
        c.data(sids[0], b"y" * 10, end_stream=True)
        status, _, body, _ = c.response(sids[0], timeout=10)
        self.assertEqual((status, len(body)), (200, sent[sids[0]] + 10))
        c.close()
        self.check_rss(self.settle_rss() - rss0, 8 * 1024, "after the connection closed")

    def test_window_not_returned_past_budget(self):
        # five streams, one after the other: the first four fill the budget
        # (their windows come back), the fifth gets none back past it
        c = self.raw()
        sids = [1, 3, 5, 7, 9]
        for sid in sids:
            c.headers(sid, POST, end_stream=False)
        sent, reset, updates = self.pour(c, sids[:4], MIB - 4096)
        self.assertEqual(reset, set())
        self.assertEqual(sum(sent.values()), 4 * (MIB - 4096), c.history())
        sent5, reset5, updates5 = self.pour(c, [9], MIB - 4096, seconds=1.0)
        self.assertEqual(reset5, set(), c.history())
        self.assertEqual(updates5[9], 0, "the fifth stream got %d bytes of window back with the "
                         "budget full (%d bytes sent)" % (updates5[9], sent5[9]))
        self.assertLess(sent5[9], MIB - 4096, "the fifth stream sent its whole body with the "
                        "budget full: %s" % c.history())
        # the first stream ends: its answer frees its part, the fifth goes on
        c.data(1, b"", end_stream=True)
        status, _, body, _ = c.response(1, timeout=10)
        self.assertEqual((status, len(body)), (200, MIB - 4096))
        more, reset5, _ = self.pour(c, [9], MIB - 4096 - sent5[9], seconds=1.0)
        self.assertEqual(reset5, set(), c.history())
        self.assertEqual(sent5[9] + more[9], MIB - 4096, "the fifth stream stalled after the first "
                         "one's answer: %s" % c.history())
        c.data(9, b"", end_stream=True)
        status, _, body, _ = c.response(9, timeout=10)
        self.assertEqual((status, len(body)), (200, MIB - 4096))


class BodyBudgetTight(MemoryCase):
    # the budget set to max-body itself: a single body of max-body passes,
    # and so do bodies on many streams one after the other and together
    server_args = ("--max-body", "1m", "--max-conn-body", "1m")

    def test_single_stream_max_body(self):
        c = self.client()
        body = bytes(range(256)) * 4096   # exactly 1 MiB
        sid = c.post("/echo", body)
        status, _, got, _, reset = c.wait([sid], timeout=20)[0]
        self.assertEqual((status, reset, got == body), (200, None, True))

    def test_concurrent_bodies_complete(self):
        # eight bodies of 900 KB together through a 1 MiB budget: the oldest
        # stream always goes on; streams refused (REFUSED_STREAM: never
        # processed, RFC 9113 8.7) are sent again, as clients do
        c = self.client()
        todo = {i: bytes([65 + i]) * 900000 for i in range(8)}
        done = {}
        deadline = time.monotonic() + 60
        while todo and time.monotonic() < deadline:
            sids = {c.post("/echo", b): i for i, b in todo.items()}
            for sid, (status, _, got, _, reset) in zip(sids, c.wait(list(sids), timeout=30)):
                i = sids[sid]
                if reset == REFUSED_STREAM:
                    continue
                self.assertEqual((status, reset, got == todo[i]), (200, None, True))
                done[i] = todo.pop(i)
        self.assertEqual(todo, {}, "bodies never completed")


class PoolsGiveBack(MemoryCase):
    server_args = ("--max-body", "1m", "--idle-timeout", "30s")

    def test_rss_returns_after_burst(self):
        # 3 connections x 100 streams, each a 60 KB body echoed back, with
        # the answers held behind closed windows so that all 300 exchanges
        # live at once; then read everything and close
        rss0 = self.settle_rss(0.5)
        conns = []
        body = b"z" * 60000
        for _ in range(3):
            c = self.raw()
            c.auto_window = False
            c.wait_settings()
            conns.append(c)
        for c in conns:
            for sid in range(1, 201, 2):
                c.headers(sid, POST + [("content-length", str(len(body)))], end_stream=False)
                for off in range(0, len(body), 16384):
                    c.data(sid, body[off:off + 16384], end_stream=off + 16384 >= len(body))
        time.sleep(1.0)
        peak = self.rss()
        for c in conns:
            c.auto_window = True
            c.send(h2util.window_update(0, 64 * MIB))
            for sid in range(1, 201, 2):
                c.send(h2util.window_update(sid, 1 * MIB))
            for sid in range(1, 201, 2):
                status, _, got, _ = c.response(sid, timeout=20)
                self.assertEqual((status, len(got)), (200, len(body)))
        for c in conns:
            c.close()
        rss1 = self.settle_rss()
        sys.stderr.write("burst: RSS %.1f MiB before, %.1f MiB at its peak, %.1f MiB after\n" % (
            rss0 / 1024, peak / 1024, rss1 / 1024))
        self.check_rss(rss1 - rss0, 12 * 1024, "after a burst of 300 exchanges")


if __name__ == "__main__":
    flaretest.main()
