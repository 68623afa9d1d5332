#!/usr/bin/python3
"""TLS listeners, with independent clients (Debian's Python ssl, curl,
openssl s_client, python3-websockets) against examples/hello started with
--tls-cert/--tls-key (an ECDSA P-256 certificate made here) and a second
certificate chosen by SNI (--tls-sni-cert/--tls-sni-key, DNS:other.test):
protocol versions, ALPN, SNI, session resumption across workers (tickets and
the session cache), bad and slow handshakes against the handshake deadline,
plain HTTP on the TLS port, resets in the middle of a record, many
connections, a 1 MiB static file, WebSocket over TLS, renegotiation,
close_notify, a plain listener beside the TLS one, and start-up errors."""

import asyncio
import os
import re
import select
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
from flaretest import Conn, ServerTestCase, TLSSocket, build_request, get  # noqa: E402

try:
    import websockets
except ImportError:  # pragma: no cover
    websockets = None

HELLO = b"Hello, World!"
HANDSHAKE_TIMEOUT = 2  # seconds (--tls-handshake-timeout)

CERTS = flaretest.temp_dir()
CERT, KEY = flaretest.make_cert(CERTS, "localhost", "DNS:localhost,IP:127.0.0.1")
OTHER_CERT, OTHER_KEY = flaretest.make_cert(CERTS, "other", "DNS:other.test")
# a certificate whose key is the other one's: must be refused at start
WRONG_KEY = OTHER_KEY

STATIC = flaretest.temp_dir("flare-tls-static-")
BIG = bytes((i * 131 + (i >> 8) + (i >> 16) * 7) & 0xFF for i in range(1 << 20))
with open(os.path.join(STATIC, "1m.bin"), "wb") as f:
    f.write(BIG)


def der(pem_file):
    with open(pem_file) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


def context(cafile=CERT, alpn=("http/1.1",), version=None, tickets=True, also_trust=()):
    """A verifying client context. version: ssl.TLSVersion to pin."""
    ctx = flaretest.client_context(cafile, alpn)
    for extra in also_trust:
        ctx.load_verify_locations(extra)
    if version is not None:
        ctx.minimum_version = version
        ctx.maximum_version = version
    if not tickets:
        ctx.options |= ssl.OP_NO_TICKET
    return ctx


def old_context(version):
    """A client that offers only TLS 1.0 or 1.1: OpenSSL's security level 0
    so that it builds such a ClientHello at all (level 2 would refuse here,
    before anything reaches the server)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    ctx.minimum_version = version
    ctx.maximum_version = version
    return ctx


def client_hello(ctx=None, hostname="localhost"):
    """The bytes of a real ClientHello (what the first flight would send)."""
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = (ctx or context()).wrap_bio(inc, out, server_hostname=hostname)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    data = out.read()
    assert data[:1] == b"\x16" and len(data) > 100, data[:20]
    return data


def rst_close(sock):
    """Close with a RST (SO_LINGER 0)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class TLSCase(ServerTestCase):
    server_tls = False  # the flags are given here
    server_args = ("--tls-cert", CERT, "--tls-key", KEY,
                   "--tls-sni-cert", OTHER_CERT, "--tls-sni-key", OTHER_KEY,
                   "--tls-handshake-timeout", HANDSHAKE_TIMEOUT, "--static", STATIC)

    def setUp(self):
        super().setUp()
        self._socks = []

    def tearDown(self):
        for s in self._socks:
            try:
                s.close()
            except OSError:
                pass
        super().tearDown()

    def raw(self, timeout=flaretest.READ_TIMEOUT):
        s = socket.create_connection(self.addr, timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socks.append(s)
        return s

    def tls(self, ctx=None, hostname="localhost", session=None, timeout=flaretest.READ_TIMEOUT):
        """A TLS connection, handshake done."""
        s = TLSSocket(self.raw(timeout), ctx or context(), server_hostname=hostname,
                      session=session)
        self._socks.append(s)
        s.do_handshake()
        return s

    def get_ok(self, s, path="/plaintext", body=HELLO, headers=None):
        c = Conn.from_socket(s)
        r = c.request("GET", path, headers=headers)
        self.assertOk(r, body)
        return r

    def assertRefused(self, fn, what):
        """The handshake fails: the server answers with an alert or closes."""
        try:
            s = fn()
        except (ssl.SSLError, ConnectionError) as e:
            # the client itself did not refuse to build its hello
            self.assertNotIn("NO_PROTOCOLS_AVAILABLE", str(e), what)
            self.assertNotIn("NO_CIPHERS_AVAILABLE", str(e), what)
            return str(e)
        self.fail("%s: handshake accepted (%s, ALPN %r)" % (what, s.version(),
                                                              s.selected_alpn_protocol()))

    def assertClosedWithin(self, sock, seconds, t0=None):
        """sock (plain) gets EOF or RST within `seconds` of t0; returns the
        bytes received before it and the time it took."""
        t0 = t0 if t0 is not None else time.monotonic()
        got = b""
        while True:
            left = t0 + seconds - time.monotonic()
            if left <= 0:
                self.fail("connection still open after %.1f s (received %r)" % (seconds, got[:60]))
            sock.settimeout(left)
            try:
                d = sock.recv(65536)
            except socket.timeout:
                continue
            except ConnectionResetError:
                break
            if not d:
                break
            got += d
        return got, time.monotonic() - t0

    # ---- versions -------------------------------------------------------

    def test_tls12_and_tls13_accepted(self):
        for v, name in ((ssl.TLSVersion.TLSv1_2, "TLSv1.2"), (ssl.TLSVersion.TLSv1_3, "TLSv1.3")):
            with self.subTest(version=name):
                s = self.tls(context(version=v))
                self.assertEqual(s.version(), name)
                self.get_ok(s)
                cipher = s.cipher()[0]
                if name == "TLSv1.2":
                    # ECDHE with an AEAD only
                    self.assertRegex(cipher, r"^ECDHE-ECDSA-(AES\d+-GCM|CHACHA20-POLY1305)")
        # the default: the best both sides have
        self.assertEqual(self.tls().version(), "TLSv1.3")

    def test_tls10_and_tls11_refused(self):
        for v in (ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1):
            with self.subTest(version=v.name):
                self.assertRefused(lambda: self.tls(old_context(v)), v.name)
        self.get_ok(self.tls())

    def test_tls12_non_aead_cipher_refused(self):
        ctx = context(version=ssl.TLSVersion.TLSv1_2)
        ctx.set_ciphers("ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA")  # CBC only
        self.assertRefused(lambda: self.tls(ctx), "TLS 1.2 with CBC suites only")

    # ---- ALPN -----------------------------------------------------------

    def test_alpn_http11_chosen(self):
        for offer in (["http/1.1"], ["spdy/3.1", "http/1.1"]):
            with self.subTest(offer=offer):
                s = self.tls(context(alpn=offer))
                self.assertEqual(s.selected_alpn_protocol(), "http/1.1")
                self.get_ok(s)

    def test_alpn_h2_preferred(self):
        # the default list is "h2,http/1.1": ours is the order that wins
        for offer in (["h2"], ["h2", "http/1.1"], ["spdy/3.1", "http/1.1", "h2"]):
            with self.subTest(offer=offer):
                s = self.tls(context(alpn=offer))
                self.assertEqual(s.selected_alpn_protocol(), "h2")

    def test_alpn_without_http11_refused(self):
        for offer in (["spdy/3.1"], ["spdy/3.1", "h3"]):
            with self.subTest(offer=offer):
                err = self.assertRefused(lambda: self.tls(context(alpn=offer)), "ALPN %r" % offer)
                self.assertIn("NO_APPLICATION_PROTOCOL", err.upper().replace(" ", "_"),
                              "refused, but not with the no_application_protocol alert")
        self.assertServerAlive()

    def test_no_alpn_accepted(self):
        s = self.tls(context(alpn=None))
        self.assertIsNone(s.selected_alpn_protocol())
        self.get_ok(s)

    # ---- SNI ------------------------------------------------------------

    def test_sni_picks_the_certificate(self):
        s = self.tls(context(), hostname="localhost")
        self.assertEqual(s.getpeercert(True), der(CERT))
        self.assertIn(("DNS", "localhost"), s.getpeercert()["subjectAltName"])
        self.get_ok(s)
        s = self.tls(context(cafile=OTHER_CERT), hostname="other.test")
        self.assertEqual(s.getpeercert(True), der(OTHER_CERT))
        self.assertEqual(s.getpeercert()["subjectAltName"], (("DNS", "other.test"),))
        self.get_ok(s)
        # a name no certificate has, and no SNI at all: the default one
        loose = context()
        loose.check_hostname = False
        loose.verify_mode = ssl.CERT_NONE
        for name in ("unknown.test", None):
            with self.subTest(sni=name):
                raw = self.raw()
                t = TLSSocket(raw, loose, server_hostname=name)
                self._socks.append(t)
                t.do_handshake()
                self.assertEqual(t.getpeercert(True), der(CERT))
                self.get_ok(t)

    def test_sni_name_is_case_insensitive(self):
        s = self.tls(context(cafile=OTHER_CERT), hostname="OTHER.Test")
        self.assertEqual(s.getpeercert(True), der(OTHER_CERT))

    # ---- resumption -----------------------------------------------------

    def first_session(self, ctx):
        s = self.tls(ctx)
        self.get_ok(s)   # (TLS 1.3: the tickets come after the handshake)
        self.assertFalse(s.session_reused)
        self.assertIsNotNone(s.session)
        return s.session

    def resume(self, ctx, session, n=20, chain=False):
        """n connections resuming `session` (chain: each with the session
        of the one before, as browsers use their newest ticket); with two
        workers each behind SO_REUSEPORT, 20 of them land on both workers
        (the odds that all land on one are 2 in a million), so a session
        issued by one worker must resume on the other. All must resume."""
        reused = []
        for i in range(n):
            s = self.tls(ctx, session=session)
            self.get_ok(s)
            reused.append(s.session_reused)
            if chain:
                session = s.session
            s.close()
        self.assertEqual(reused, [True] * n, "resumed %d of %d" % (sum(reused), n))

    def test_resume_tls13_tickets(self):
        ctx = context(version=ssl.TLSVersion.TLSv1_3)
        self.resume(ctx, self.first_session(ctx), chain=True)

    def test_resume_tls13_same_ticket_repeatedly(self):
        ctx = context(version=ssl.TLSVersion.TLSv1_3)
        self.resume(ctx, self.first_session(ctx))

    def test_resume_tls12_tickets(self):
        ctx = context(version=ssl.TLSVersion.TLSv1_2)
        sess = self.first_session(ctx)
        self.assertTrue(sess.has_ticket, "no session ticket issued for TLS 1.2")
        self.resume(ctx, sess)

    def test_resume_tls12_session_cache(self):
        ctx = context(version=ssl.TLSVersion.TLSv1_2, tickets=False)
        sess = self.first_session(ctx)
        self.assertFalse(sess.has_ticket)
        self.assertTrue(sess.id, "no session id: nothing to resume from the cache")
        self.resume(ctx, sess)

    def test_tls13_tickets_come_without_a_request(self):
        # the server keeps its tickets for the first response to carry, but
        # never past the end of what it read: a client that sends nothing
        # after its Finished still gets them at once
        ctx = context(version=ssl.TLSVersion.TLSv1_3)
        s = self.tls(ctx)
        ready, _, _ = select.select([s.raw], [], [], 2)
        self.assertTrue(ready, "no session ticket within 2 s of the handshake")
        s._read_raw()
        self.assertEqual(s.pending(), 0)   # tickets only, no data
        self.assertTrue(s.obj.session.has_ticket)
        self.resume(ctx, s.obj.session, n=4)

    def test_tls13_finished_and_request_in_one_flight(self):
        # the client's Finished and a Connection: close request in one
        # segment: the tickets, the response and close_notify come back
        # (in one send), and the ticket resumes
        ctx = context(version=ssl.TLSVersion.TLSv1_3)
        raw = self.raw()
        inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = ctx.wrap_bio(inc, out, server_hostname="localhost")
        while True:
            try:
                obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                raw.sendall(out.read())
                data = raw.recv(65536)
                self.assertTrue(data, "closed during the handshake")
                inc.write(data)
        obj.write(get("/plaintext", extra="Connection: close\r\n"))
        raw.sendall(out.read())   # Finished + the request
        body, eof = b"", None
        while eof is None:
            try:
                data = obj.read(65536)
                if not data:   # (SSLObject.read's way of saying close_notify)
                    eof = "close_notify"
                    break
                body += data
                continue
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                eof = "close_notify"
                break
            data = raw.recv(65536)
            if not data:
                eof = "eof"
                break
            inc.write(data)
        self.assertEqual(eof, "close_notify")
        self.assertTrue(body.startswith(b"HTTP/1.1 200 OK\r\n"), body[:80])
        self.assertTrue(body.endswith(b"\r\n\r\n" + HELLO), body[-80:])
        self.assertIn(b"\r\nConnection: close\r\n", body)
        self.assertTrue(obj.session.has_ticket, "no ticket came with the response")
        self.resume(ctx, obj.session, n=4)

    def test_session_for_another_name_not_resumed_with_other_certificate(self):
        # a session made for localhost must not let other.test skip its
        # certificate: the server either does a full handshake (and sends
        # other.test's certificate) or resumes only for the same name
        ctx = context(also_trust=[OTHER_CERT])   # (a session belongs to one context)
        sess = self.first_session(ctx)
        s = self.tls(ctx, hostname="other.test", session=sess)
        if not s.session_reused:
            self.assertEqual(s.getpeercert(True), der(OTHER_CERT))
        self.get_ok(s)

    # ---- bad and slow handshakes ---------------------------------------------

    def test_garbage_instead_of_client_hello(self):
        # bytes that cannot start a TLS record may be taken for plain HTTP
        # (answered with a plain-text 400, like nginx does); record-shaped
        # garbage must get at most an alert
        cases = [("random bytes", b"\x00\xff" + os.urandom(600)),
                 ("not a handshake record", b"\x17\x03\x03\x00\x10" + b"\x00" * 16),
                 ("record too long", b"\x16\x03\x01\xff\xff" + b"\x01" * 1000),
                 ("handshake of another type", b"\x16\x03\x01\x00\x08\x02\x00\x00\x04" + b"\x00" * 4),
                 ("SSLv2 hello", b"\x80\x2e\x01\x00\x02\x00\x15" + os.urandom(45))]
        for name, data in cases:
            with self.subTest(case=name):
                s = self.raw()
                t0 = time.monotonic()
                try:
                    s.sendall(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                got, took = self.assertClosedWithin(s, HANDSHAKE_TIMEOUT + 3, t0)
                self.assertLess(took, HANDSHAKE_TIMEOUT - 0.5,
                                "%s: closed only by the handshake timeout" % name)
                if data[:1] in (b"\x16", b"\x17", b"\x80"):
                    self.assertFalse(got.startswith(b"HTTP/"), "%s: %r" % (name, got[:80]))
                if got and not got.startswith(b"HTTP/1.1 400 "):   # at most an alert record
                    self.assertEqual(got[:1], b"\x15", "%s: %r" % (name, got[:80]))
        self.get_ok(self.tls())

    def test_half_client_hello_closed_by_handshake_timeout(self):
        hello = client_hello()
        s = self.raw(timeout=10)
        t0 = time.monotonic()
        s.sendall(hello[:len(hello) // 2])
        _, took = self.assertClosedWithin(s, HANDSHAKE_TIMEOUT + 3, t0)
        self.assertGreater(took, HANDSHAKE_TIMEOUT - 0.6, "closed before the deadline")
        self.assertLess(took, HANDSHAKE_TIMEOUT + 1.5)

    def test_connect_and_say_nothing_closed_by_handshake_timeout(self):
        s = self.raw(timeout=10)
        t0 = time.monotonic()
        got, took = self.assertClosedWithin(s, HANDSHAKE_TIMEOUT + 3, t0)
        self.assertEqual(got, b"")
        self.assertGreater(took, HANDSHAKE_TIMEOUT - 0.6)
        self.assertLess(took, HANDSHAKE_TIMEOUT + 1.5)

    def test_trickled_client_hello_does_not_extend_the_deadline(self):
        # one byte every 0.5 s: progress must not reset the deadline, which
        # runs from accept
        hello = client_hello()
        s = self.raw(timeout=10)
        t0 = time.monotonic()
        closed_at = None
        for i in range(len(hello)):
            try:
                s.sendall(hello[i:i + 1])
            except (BrokenPipeError, ConnectionResetError):
                closed_at = time.monotonic() - t0
                break
            s.settimeout(0.5)
            try:
                d = s.recv(4096)
                if not d or d[:1] == b"\x15":
                    closed_at = time.monotonic() - t0
                    break
            except socket.timeout:
                pass
            except ConnectionResetError:
                closed_at = time.monotonic() - t0
                break
            if time.monotonic() - t0 > HANDSHAKE_TIMEOUT + 4:
                break
        self.assertIsNotNone(closed_at, "still open %.1f s after accept while trickling"
                             % (time.monotonic() - t0))
        self.assertGreater(closed_at, HANDSHAKE_TIMEOUT - 0.6)
        self.assertLess(closed_at, HANDSHAKE_TIMEOUT + 1.5,
                        "closed at %.1f s: the trickle extended the deadline" % closed_at)

    def test_handshake_done_then_http_timeouts_apply(self):
        # after the handshake the handshake deadline is over: a connection
        # that is slow to send its request is not cut at 2 s
        s = self.tls(timeout=10)
        time.sleep(HANDSHAKE_TIMEOUT + 0.5)
        self.get_ok(s)

    def test_plain_http_on_tls_port_gets_400(self):
        for req in (get("/plaintext"), b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi",
                    b"HEAD / HTTP/1.0\r\n\r\n"):
            with self.subTest(req=req[:20]):
                c = Conn(self.addr, tls=False)
                self._conns.append(c)
                c.send(req)
                # a HEAD gets the head alone
                r = c.read_response(head=req.startswith(b"HEAD "))
                self.assertEqual((r.version, r.status), ("HTTP/1.1", 400), r)
                self.assertTrue(r.raw_head.startswith(b"HTTP/1.1 400"), r.raw_head[:40])
                self.assertIn("close", r.connection_tokens(), r)
                self.assertClosed(c)
        self.get_ok(self.tls())

    # ---- clients that go away -------------------------------------------

    def test_reset_mid_record(self):
        for i in range(20):
            s = self.tls()
            # a record of a request, half of it sent, then a RST
            s.obj.write(get("/plaintext") * (1 + i % 5) + b"X-Pad: " + b"p" * 3000)
            rec = s.outgoing.read()
            s.raw.sendall(rec[:len(rec) // 2])
            time.sleep(0.01)
            rst_close(s.raw)
            # and one in the middle of a handshake
            r = self.raw()
            r.sendall(client_hello()[:100])
            rst_close(r)
        time.sleep(0.2)
        self.assertServerAlive()
        for _ in range(4):
            self.get_ok(self.tls())

    def test_many_concurrent_tls_connections(self):
        n = 200
        socks = []
        for i in range(n):
            socks.append(self.tls(timeout=20))
        conns = [Conn.from_socket(s, timeout=20) for s in socks]
        for i, c in enumerate(conns):
            c.send(get("/users/t%d" % i) + get("/plaintext"))
        for i, c in enumerate(conns):
            r = c.read_response()
            self.assertEqual((r.status, r.body), (200, b'{"id":"t%d"}' % i), "conn %d" % i)
            self.assertEqual(c.read_response().body, HELLO)
        self.assertServerAlive()

    def test_parallel_handshakes(self):
        # handshakes from 8 threads at once, on both workers
        errors = []

        def worker(k):
            try:
                for j in range(10):
                    raw = socket.create_connection(self.addr, timeout=20)
                    t = TLSSocket(raw, context())
                    try:
                        c = Conn.from_socket(t, timeout=20)
                        r = c.request("GET", "/users/p%d-%d" % (k, j))
                        if (r.status, r.body) != (200, b'{"id":"p%d-%d"}' % (k, j)):
                            errors.append((k, j, r.status, r.body))
                    finally:
                        t.close()
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append((k, repr(e)))
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])

    # ---- bodies ---------------------------------------------------------

    def test_static_1mib_over_tls(self):
        s = self.tls(timeout=20)
        c = Conn.from_socket(s, timeout=20)
        for _ in range(3):  # the connection stays usable after each
            r = c.request("GET", "/static/1m.bin")
            self.assertOk(r, BIG, "application/octet-stream")
        r = c.request("HEAD", "/static/1m.bin")
        self.assertEqual((r.status, r.get("Content-Length"), r.body), (200, str(len(BIG)), b""))
        for a, b in ((0, 99), (1000, 2999), (500000, 1048575), (123457, 987653)):
            r = c.request("GET", "/static/1m.bin", headers={"Range": "bytes=%d-%d" % (a, b)})
            self.assertEqual(r.status, 206, r)
            self.assertEqual(r.get("Content-Range"), "bytes %d-%d/%d" % (a, b, len(BIG)))
            self.assertEqual(r.body, BIG[a:b + 1])
        self.assertOk(c.request("GET", "/plaintext"), HELLO)

    def test_static_pipelined_with_slow_reader(self):
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.settimeout(30)
        raw.connect(self.addr)
        self._socks.append(raw)
        s = TLSSocket(raw, context())
        c = Conn.from_socket(s, timeout=30)
        c.send(build_request("GET", "/static/1m.bin") * 2 + build_request("GET", "/plaintext"))
        time.sleep(0.5)  # the server fills the socket and waits
        self.assertEqual(c.read_response().body, BIG)
        self.assertEqual(c.read_response().body, BIG)
        self.assertEqual(c.read_response().body, HELLO)

    def test_large_upload_echoed(self):
        body = os.urandom(300000)
        c = Conn.from_socket(self.tls(timeout=20), timeout=20)
        r = c.request("POST", "/echo", headers={"Content-Type": "a/b"}, body=body)
        self.assertOk(r, body, "a/b")

    # ---- WebSocket over TLS -----------------------------------------------

    def test_wss_echo(self):
        if websockets is None:
            self.skipTest("python3-websockets is not installed (tools/deps.sh test)")
        url = "wss://127.0.0.1:%d/ws/echo" % self.addr[1]

        async def go():
            async with websockets.connect(url, ssl=context(), server_hostname="localhost",
                                          max_size=2 << 20) as ws:
                self.assertEqual(len(ws.extensions), 1, "permessage-deflate not negotiated")
                tls = ws.transport.get_extra_info("ssl_object")
                self.assertEqual(tls.selected_alpn_protocol(), "http/1.1")
                for n in (0, 1, 125, 126, 65535, 65536, 300000, 1 << 20):
                    text = ("flare " * (n // 6 + 1))[:n]
                    await ws.send(text)
                    self.assertEqual(await ws.recv(), text)
                    data = os.urandom(n)
                    await ws.send(data)
                    self.assertEqual(await ws.recv(), data)
                pong = await ws.ping(b"tls")
                await asyncio.wait_for(pong, 5)
            self.assertEqual(ws.close_code, 1000)
        asyncio.run(asyncio.wait_for(go(), 60))

    def test_ws_raw_handshake_over_tls(self):
        c = Conn.from_socket(self.tls())
        c.send(b"GET /ws/echo HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
               b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
               b"Sec-WebSocket-Version: 13\r\n\r\n")
        r = c.read_response(head=True, interim=True)
        self.assertEqual(r.status, 101, r)
        self.assertEqual(r.get("Sec-WebSocket-Accept"), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
        # a masked text frame "hi", then its echo (unmasked)
        c.send(b"\x81\x82" + b"\x01\x02\x03\x04" + bytes([ord("h") ^ 1, ord("i") ^ 2]))
        deadline = time.monotonic() + 5
        while len(c.buf) < 4 and c._fill(deadline):
            pass
        self.assertEqual(c.buf[:4], b"\x81\x02hi")

    # ---- renegotiation, curl, close_notify ---------------------------------------

    def test_renegotiation_refused(self):
        # openssl s_client, TLS 1.2 (1.3 has no renegotiation): "R" asks for
        # one. The server must not renegotiate: it refuses (alert) or closes.
        cmd = ["openssl", "s_client", "-connect", "127.0.0.1:%d" % self.addr[1],
               "-servername", "localhost", "-CAfile", CERT, "-tls1_2", "-alpn", "http/1.1"]
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        try:
            time.sleep(1.0)
            p.stdin.write(b"R\n")
            p.stdin.flush()
            time.sleep(1.0)
            try:
                p.stdin.write(b"GET /plaintext HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                p.stdin.flush()
            except BrokenPipeError:
                pass
            try:
                out, _ = p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        text = out.decode("utf-8", "replace")
        self.assertIn("Verify return code: 0 (ok)", text, text[-2000:])
        self.assertIn("RENEGOTIATING", text, "s_client did not try: %s" % text[-2000:])
        # refused: a no_renegotiation alert or a closed connection; never a
        # second handshake followed by a served request
        after = text.split("RENEGOTIATING", 1)[1]
        refused = re.search(r"no renegotiation|alert|errno|closed|error", after, re.I)
        self.assertTrue(refused or "Hello, World!" not in after,
                        "renegotiation seems to have been accepted:\n%s" % after[-2000:])
        self.assertNotIn("Hello, World!", after,
                         "a request was served after a renegotiation:\n%s" % after[-2000:])
        self.assertServerAlive()
        self.get_ok(self.tls())

    def curl(self, *args):
        port = self.addr[1]
        cmd = ["curl", "-sS", "--max-time", "10", "--cacert", CERT,
               "--resolve", "localhost:%d:127.0.0.1" % port,
               "-w", "\\n%{http_code} %{http_version} %{ssl_verify_result}"] + list(args)
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
        self.assertEqual(p.returncode, 0, "curl %s: %s" % (args, p.stderr.decode()))
        body, _, tail = p.stdout.rpartition(b"\n")
        return body, tail.decode().split()

    def test_curl(self):
        if shutil.which("curl") is None:
            self.skipTest("curl is not installed (tools/deps.sh test)")
        url = "https://localhost:%d/plaintext" % self.addr[1]
        for extra in ([], ["--http1.1"], ["--tlsv1.3"], ["--tlsv1.2", "--tls-max", "1.2"]):
            with self.subTest(args=extra):
                body, (code, version, verify) = self.curl(*extra, url)
                # curl offers h2 first unless told --http1.1 (ALPN: h2 preferred)
                want = "1.1" if "--http1.1" in extra else "2"
                self.assertEqual((body, code, version, verify), (HELLO, "200", want, "0"))
        body, (code, _, _) = self.curl("https://localhost:%d/static/1m.bin" % self.addr[1])
        self.assertEqual((code, body == BIG), ("200", True))
        # several requests on one connection: curl reuses it
        p = subprocess.run(["curl", "-sS", "-v", "--cacert", CERT, "--resolve",
                            "localhost:%d:127.0.0.1" % self.addr[1], url, url, url],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
        self.assertEqual(p.stdout, HELLO * 3)
        self.assertIn(b"Re-using existing connection", p.stderr)

    def test_close_notify_after_connection_close(self):
        s = self.tls()
        c = Conn.from_socket(s)
        r = c.request("GET", "/plaintext", headers={"Connection": "close"})
        self.assertOk(r, HELLO)
        self.assertIn("close", r.connection_tokens())
        self.assertEqual(c.wait_closed(), b"")
        self.assertEqual(s.eof, "close_notify", "the server closed without close_notify")
        s.unwrap()   # our close_notify back: a clean bidirectional close

    def test_close_notify_after_error(self):
        s = self.tls()
        c = Conn.from_socket(s)
        c.send(b"GET /plaintext HTTP/1.1\r\nHost : x\r\n\r\n")
        r = c.read_response()
        self.assertErrorClose(c, r, 400)
        self.assertEqual(s.eof, "close_notify", "the server closed without close_notify")

    def test_unwrap_both_ways_by_client(self):
        # the client ends first with close_notify: the server answers with
        # its own and closes (TLS 1.3: what was asked before is answered)
        s = self.tls()
        c = Conn.from_socket(s)
        c.send(get("/plaintext") + get("/json"))
        s.shutdown(socket.SHUT_WR)
        self.assertOk(c.read_response(), HELLO)
        self.assertOk(c.read_response(), b'{"message":"Hello, World!"}')
        self.assertEqual(c.wait_closed(), b"")
        self.assertEqual(s.eof, "close_notify")

    def test_keepalive_many_requests_one_connection(self):
        c = Conn.from_socket(self.tls())
        for i in range(200):
            self.assertOk(c.request("GET", "/users/%d" % i), b'{"id":"%d"}' % i)
        # pipelined: 50 in one write, answers in order
        c.send(b"".join(get("/users/q%d" % i) for i in range(50)))
        for i in range(50):
            self.assertEqual(c.read_response().body, b'{"id":"q%d"}' % i)


class PlainBesideTLS(ServerTestCase):
    """--listen-plain: a plain listener beside the TLS one (80 + 443)."""
    server_tls = False
    PLAIN_PORT = flaretest.free_port()
    server_args = ("--tls-cert", CERT, "--tls-key", KEY,
                   "--listen-plain", "%s:%d" % (flaretest.HOST, PLAIN_PORT))

    def test_both_listeners_serve(self):
        plain = (flaretest.HOST, self.PLAIN_PORT)
        c = Conn(plain, tls=False)
        self._conns.append(c)
        self.assertOk(c.request("GET", "/plaintext"), HELLO)
        c = Conn(self.addr, tls=True, context=context())
        self._conns.append(c)
        self.assertOk(c.request("GET", "/json"), b'{"message":"Hello, World!"}')
        self.assertEqual(c.sock.version(), "TLSv1.3")

    def test_each_listener_its_own_protocol(self):
        # TLS on the plain port: the server reads the ClientHello as HTTP (400)
        raw = socket.create_connection((flaretest.HOST, self.PLAIN_PORT), timeout=5)
        t = TLSSocket(raw, context())
        try:
            with self.assertRaises((ssl.SSLError, ConnectionError)):
                t.do_handshake()
        finally:
            t.close()
        # plain HTTP on the TLS port: 400 in plain text
        c = Conn(self.addr, tls=False)
        self._conns.append(c)
        r = c.request("GET", "/plaintext")
        self.assertEqual(r.status, 400, r)


SHOWCASE = os.path.join(os.path.abspath(flaretest.BUILD_DIR), "examples", "showcase")


class SessionCookieSecure(ServerTestCase):
    """The session cookie carries Secure when the request came over TLS, and
    not over plain HTTP (examples/showcase: --tls-cert plus --listen-plain)."""
    server_binary = SHOWCASE
    server_tls = False
    PLAIN_PORT = flaretest.free_port()
    server_args = ("--tls-cert", CERT, "--tls-key", KEY,
                   "--listen-plain", "%s:%d" % (flaretest.HOST, PLAIN_PORT),
                   "--db", "sqlite:" + os.path.join(CERTS, "showcase.db"))

    def login(self, tls):
        if tls:
            c = Conn(self.addr, tls=True, context=context())
        else:
            c = Conn((flaretest.HOST, self.PLAIN_PORT), tls=False)
        self._conns.append(c)
        c.send(build_request("POST", "/api/session", [("Content-Type", "application/json")],
                             b'{"user": "ann"}'))
        r = c.read_response()
        self.assertEqual(r.status, 200, r)
        return r.get("Set-Cookie", "")

    def test_secure_over_tls(self):
        cookie = self.login(tls=True)
        self.assertRegex(cookie, r"^showcase_sid=[0-9a-f]{32};")
        self.assertIn("; Secure", cookie)

    def test_not_secure_over_plain_http(self):
        cookie = self.login(tls=False)
        self.assertRegex(cookie, r"^showcase_sid=[0-9a-f]{32};")
        self.assertNotIn("Secure", cookie)


class StartupErrors(unittest.TestCase):
    """Bad TLS flags: a message naming the cause and exit 1 (or 2 for usage)."""

    def run_hello(self, *args):
        port = flaretest.free_port()
        p = subprocess.run([flaretest.HELLO, "--listen", "127.0.0.1:%d" % port, "--workers", "1"]
                           + [str(a) for a in args],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
        return p.returncode, p.stderr.decode("utf-8", "replace")

    def test_missing_certificate_file(self):
        rc, err = self.run_hello("--tls-cert", "/nonexistent/cert.pem", "--tls-key", KEY)
        self.assertEqual(rc, 1, err)
        self.assertIn("/nonexistent/cert.pem", err)

    def test_key_does_not_match_certificate(self):
        rc, err = self.run_hello("--tls-cert", CERT, "--tls-key", WRONG_KEY)
        self.assertEqual(rc, 1, err)
        self.assertRegex(err.lower(), r"key|match")

    def test_not_a_certificate(self):
        d = tempfile.mkdtemp(dir=CERTS)
        bad = os.path.join(d, "bad.pem")
        with open(bad, "w") as f:
            f.write("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
        rc, err = self.run_hello("--tls-cert", bad, "--tls-key", KEY)
        self.assertEqual(rc, 1, err)
        self.assertIn("bad.pem", err)

    def test_usage_errors(self):
        for args in (["--tls-cert", CERT], ["--tls-key", KEY],
                     ["--tls-cert", CERT, "--tls-key", KEY, "--tls-sni-cert", OTHER_CERT],
                     ["--tls-sni-cert", OTHER_CERT, "--tls-sni-key", OTHER_KEY],
                     ["--tls-cert", CERT, "--tls-key", KEY, "--tls-handshake-timeout", "0"]):
            with self.subTest(args=args):
                rc, err = self.run_hello(*args)
                self.assertEqual(rc, 2, err)


if __name__ == "__main__":
    flaretest.main()
