"""Raw WebSocket client helpers for Flare's integration tests (standard
library only): the opening handshake over flaretest.Conn, frames built by
hand (any opcode, RSV bits, length encoding, masking), a strict frame reader
(server frames must be unmasked, minimal lengths), permessage-deflate with
zlib, and the assertions the Autobahn-style cases share.
"""

import base64
import hashlib
import os
import socket
import struct
import time
import zlib

import flaretest

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10


class WsError(AssertionError):
    """The server sent something that is not a valid WebSocket frame."""


def accept_for(key):
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def frame(opcode, payload=b"", fin=True, rsv=0, mask=True, key=None, length=None):
    """Bytes of one client frame. rsv: the 3 RSV bits (0..7, RSV1 = 4).
    length: a declared length other than len(payload)."""
    if isinstance(payload, str):
        payload = payload.encode()
    n = len(payload) if length is None else length
    b0 = (0x80 if fin else 0) | (rsv & 7) << 4 | (opcode & 0x0F)
    mbit = 0x80 if mask else 0
    if n < 126:
        head = struct.pack("!BB", b0, mbit | n)
    elif n < 65536:
        head = struct.pack("!BBH", b0, mbit | 126, n)
    else:
        head = struct.pack("!BBQ", b0, mbit | 127, n)
    if not mask:
        return head + payload
    key = key if key is not None else os.urandom(4)
    return head + key + apply_mask(payload, key)


def apply_mask(data, key):
    if not data:
        return b""
    # XOR through big integers: fast enough for megabytes
    k = (key * (len(data) // 4 + 1))[:len(data)]
    return (int.from_bytes(data, "big") ^ int.from_bytes(k, "big")).to_bytes(len(data), "big")


def close_payload(code=None, reason=b""):
    if code is None:
        return b""
    if isinstance(reason, str):
        reason = reason.encode()
    return struct.pack("!H", code) + reason


class Deflate:
    """permessage-deflate as the client: compress what we send, inflate
    what the server sends, honouring the negotiated context takeover."""

    def __init__(self, params):
        self.params = params  # dict from the server's answer
        self.client_nct = "client_no_context_takeover" in params
        self.server_nct = "server_no_context_takeover" in params
        cbits = int(params.get("client_max_window_bits") or 15)
        self.cbits = max(cbits, 9)
        self.comp = zlib.compressobj(6, zlib.DEFLATED, -self.cbits)
        self.decomp = zlib.decompressobj(-15)

    def compress(self, data):
        out = self.comp.compress(data) + self.comp.flush(zlib.Z_SYNC_FLUSH)
        assert out.endswith(b"\x00\x00\xff\xff")
        if self.client_nct:
            self.comp = zlib.compressobj(6, zlib.DEFLATED, -self.cbits)
        return out[:-4]

    def decompress(self, data):
        out = self.decomp.decompress(data + b"\x00\x00\xff\xff")
        if self.server_nct:
            self.decomp = zlib.decompressobj(-15)
        return out


def parse_extension(value):
    """'permessage-deflate; a; b=1' -> ('permessage-deflate', {a: None, b: '1'})"""
    parts = [p.strip() for p in value.split(";")]
    params = {}
    for p in parts[1:]:
        name, _, v = p.partition("=")
        params[name.strip()] = v.strip().strip('"') or None
    return parts[0], params


class WsClient:
    def __init__(self, addr, path="/ws/echo", headers=None, extensions=None, protocols=None,
                 timeout=flaretest.READ_TIMEOUT, key=None):
        self.conn = flaretest.Conn(addr, timeout=timeout)
        self.sock = self.conn.sock
        self.timeout = timeout
        self.deflate = None
        self.key = key or base64.b64encode(os.urandom(16)).decode()
        hdrs = [("Upgrade", "websocket"), ("Connection", "Upgrade"),
                ("Sec-WebSocket-Key", self.key), ("Sec-WebSocket-Version", "13")]
        if extensions:
            hdrs.append(("Sec-WebSocket-Extensions", extensions))
        if protocols:
            hdrs.append(("Sec-WebSocket-Protocol", protocols))
        hdrs += list(headers or [])
        self.conn.send(flaretest.build_request("GET", path, hdrs))
        self.response = self.conn.read_response(interim=True, timeout=timeout)

    @classmethod
    def open(cls, testcase, addr, path="/ws/echo", extensions=None, **kw):
        """Connects and checks a successful handshake (101 and its headers)."""
        c = cls(addr, path, extensions=extensions, **kw)
        testcase._ws.append(c)
        r = c.response
        testcase.assertEqual(r.status, 101, r)
        testcase.assertEqual(r.get("Upgrade", "").lower(), "websocket", r)
        testcase.assertIn("upgrade", r.connection_tokens(), r)
        testcase.assertEqual(r.get("Sec-WebSocket-Accept"), accept_for(c.key), r)
        ext = r.get("Sec-WebSocket-Extensions")
        if ext is not None:
            name, params = parse_extension(ext)
            testcase.assertEqual(name, "permessage-deflate")
            c.deflate = Deflate(params)
        return c

    def close(self):
        self.conn.close()

    # ---- sending ----
    def send_raw(self, data, chop=None, delay=0.0):
        if chop:
            for i in range(0, len(data), chop):
                self.sock.sendall(data[i:i + chop])
                if delay:
                    time.sleep(delay)
        else:
            self.sock.sendall(data)

    def send(self, opcode, payload=b"", fin=True, rsv=0, chop=None, **kw):
        self.send_raw(frame(opcode, payload, fin=fin, rsv=rsv, **kw), chop=chop)

    def send_message(self, opcode, payload, compress=False):
        if isinstance(payload, str):
            payload = payload.encode()
        if compress:
            self.send(opcode, self.deflate.compress(payload), rsv=4)
        else:
            self.send(opcode, payload)

    def send_close(self, code=None, reason=b""):
        self.send(OP_CLOSE, close_payload(code, reason))

    # ---- receiving ----
    def _need(self, n, deadline):
        while len(self.conn.buf) < n:
            if not self.conn._fill(deadline):
                raise flaretest.ClosedError("closed with %d of %d bytes" % (len(self.conn.buf), n))

    def recv_frame(self, timeout=None):
        """(fin, rsv, opcode, payload) of the next server frame."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        self._need(2, deadline)
        b0, b1 = self.conn.buf[0], self.conn.buf[1]
        if b1 & 0x80:
            raise WsError("server frame is masked")
        n = b1 & 0x7F
        hl = 2
        if n == 126:
            self._need(4, deadline)
            n = struct.unpack("!H", self.conn.buf[2:4])[0]
            hl = 4
            if n < 126:
                raise WsError("non-minimal 16-bit length %d" % n)
        elif n == 127:
            self._need(10, deadline)
            n = struct.unpack("!Q", self.conn.buf[2:10])[0]
            hl = 10
            if n < 65536:
                raise WsError("non-minimal 64-bit length %d" % n)
        self._need(hl + n, deadline)
        payload = self.conn.buf[hl:hl + n]
        self.conn.buf = self.conn.buf[hl + n:]
        opcode = b0 & 0x0F
        if opcode >= 8 and (n > 125 or not b0 & 0x80):
            raise WsError("bad control frame from server")
        return bool(b0 & 0x80), (b0 >> 4) & 7, opcode, payload

    def recv_message(self, timeout=None):
        """(opcode, payload) of the next data message (pongs skipped, pings
        answered); a close frame is returned as (OP_CLOSE, payload)."""
        parts, op, compressed = [], None, False
        while True:
            fin, rsv, opcode, payload = self.recv_frame(timeout)
            if opcode == OP_PONG:
                continue
            if opcode == OP_PING:
                self.send(OP_PONG, payload)
                continue
            if opcode == OP_CLOSE:
                return OP_CLOSE, payload
            if op is None:
                if opcode not in (OP_TEXT, OP_BINARY):
                    raise WsError("unexpected opcode %d" % opcode)
                op, compressed = opcode, bool(rsv & 4)
                if compressed and self.deflate is None:
                    raise WsError("RSV1 without negotiated deflate")
            elif opcode != OP_CONT:
                raise WsError("expected a continuation, got %d" % opcode)
            parts.append(payload)
            if fin:
                data = b"".join(parts)
                if compressed:
                    data = self.deflate.decompress(data)
                return op, data

    def read_nothing(self, wait=0.2):
        """Asserts nothing arrives within `wait` seconds (the connection may stay open)."""
        data = self.conn.read_available(wait)
        if data:
            raise WsError("unexpected bytes: %r" % data[:100])

    def expect_close(self, testcase, code, timeout=None, echo=True):
        """The server sends a close frame with `code` (None: empty), then
        closes the TCP connection (after our close reply when echo)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            fin, rsv, opcode, payload = self.recv_frame(max(deadline - time.monotonic(), 0.01))
            if opcode == OP_CLOSE:
                break
            if opcode in (OP_PING, OP_PONG):
                continue
            testcase.fail("expected close %s, got opcode %d %r" % (code, opcode, payload[:80]))
        if code is None:
            testcase.assertEqual(payload, b"", "close payload")
        else:
            testcase.assertGreaterEqual(len(payload), 2, "close without a code")
            testcase.assertEqual(struct.unpack("!H", payload[:2])[0], code, payload)
        if echo:
            try:
                self.send(OP_CLOSE, payload[:2])
            except OSError:
                pass
        self.expect_eof(testcase, timeout)
        return payload

    def expect_eof(self, testcase, timeout=None):
        try:
            rest = self.conn.wait_closed(timeout or self.timeout)
        except socket.timeout:
            testcase.fail("server did not close the TCP connection")
        testcase.assertEqual(rest, b"", "bytes after the close frame: %r" % rest[:100])

    def close_handshake(self, testcase, code=1000, reason=b""):
        """We close; the server echoes the code and closes TCP."""
        self.send_close(code, reason)
        self.expect_close(testcase, code, echo=False)


class WsTestCase(flaretest.ServerTestCase):
    def setUp(self):
        super().setUp()
        self._ws = []

    def tearDown(self):
        for c in self._ws:
            c.close()
        super().tearDown()

    def ws(self, extensions=None, **kw):
        return WsClient.open(self, self.addr, extensions=extensions, **kw)

    def echo(self, c, opcode, payload, compress=False):
        if isinstance(payload, str):
            payload = payload.encode()
        c.send_message(opcode, payload, compress)
        op, data = c.recv_message()
        self.assertEqual(op, opcode)
        self.assertEqual(len(data), len(payload))
        self.assertEqual(data, payload)

    def assertFails(self, c, code, raw=None):
        """Sends raw (if given); the server fails the connection with code."""
        if raw is not None:
            c.send_raw(raw)
        c.expect_close(self, code, echo=False)
