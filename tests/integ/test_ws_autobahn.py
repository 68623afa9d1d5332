#!/usr/bin/python3
"""WebSocket conformance against examples/hello's GET /ws/echo, over raw
sockets: the Autobahn|Testsuite case groups 1-7, 9 (up to 1 MiB), 12 and 13
written as our own tests (the suite itself cannot run here). Case numbers in
the test names follow Autobahn's where one maps to one.

1 framing, 2 pings/pongs, 3 reserved bits, 4 opcodes, 5 fragmentation,
6 UTF-8, 7 close handling, 9 limits and performance, 12/13 permessage-deflate.
"""

import os
import struct
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
from wstest import (OP_BINARY, OP_CLOSE, OP_CONT, OP_PING, OP_PONG, OP_TEXT,  # noqa: E402
                    WsTestCase, close_payload, frame)

PROTOCOL = 1002
INVALID_DATA = 1007
TOO_BIG = 1009


class Framing(WsTestCase):
    """Group 1: text and binary messages of every length encoding."""

    LENGTHS = (0, 125, 126, 127, 128, 65535, 65536)

    def test_1_1_text_lengths(self):
        c = self.ws()
        for n in self.LENGTHS:
            self.echo(c, OP_TEXT, b"*" * n)
        c.close_handshake(self)

    def test_1_1_8_text_65536_chopped(self):
        c = self.ws()
        c.send(OP_TEXT, b"*" * 65536, chop=997)
        op, data = c.recv_message()
        self.assertEqual((op, data), (OP_TEXT, b"*" * 65536))

    def test_1_2_binary_lengths(self):
        c = self.ws()
        for n in self.LENGTHS:
            self.echo(c, OP_BINARY, bytes(range(256)) * (n // 256) + bytes(n % 256))
        c.close_handshake(self)

    def test_1_2_8_binary_65536_chopped(self):
        c = self.ws()
        payload = os.urandom(65536)
        c.send(OP_BINARY, payload, chop=1000)
        self.assertEqual(c.recv_message(), (OP_BINARY, payload))

    def test_server_frames_minimal(self):
        # the reader rejects non-minimal lengths and masked frames
        c = self.ws()
        for n in (125, 126, 65535, 65536):
            self.echo(c, OP_BINARY, b"\x01" * n)

    def test_unmasked_client_frame(self):
        c = self.ws()
        self.assertFails(c, PROTOCOL, frame(OP_TEXT, b"hello", mask=False))

    def test_non_minimal_length(self):
        c = self.ws()
        raw = bytes([0x81, 0x80 | 126, 0, 5]) + b"\0\0\0\0" + b"hello"
        self.assertFails(c, PROTOCOL, raw)
        c = self.ws()
        raw = bytes([0x82, 0x80 | 127]) + struct.pack("!Q", 200) + b"\0\0\0\0" + b"x" * 200
        self.assertFails(c, PROTOCOL, raw)

    def test_64bit_length_msb(self):
        c = self.ws()
        raw = bytes([0x82, 0x80 | 127]) + struct.pack("!Q", 1 << 63 | 1) + b"\0\0\0\0"
        self.assertFails(c, PROTOCOL, raw)


class PingPong(WsTestCase):
    """Group 2."""

    def test_2_1_ping_empty(self):
        c = self.ws()
        c.send(OP_PING)
        self.assertEqual(c.recv_frame(), (True, 0, OP_PONG, b""))

    def test_2_2_2_3_ping_payloads(self):
        c = self.ws()
        for p in (b"Hello, world!", b"\x00\xff\xfe\xfd\xfc\xfb\x00\xff"):
            c.send(OP_PING, p)
            self.assertEqual(c.recv_frame(), (True, 0, OP_PONG, p))

    def test_2_4_ping_125(self):
        c = self.ws()
        c.send(OP_PING, b"\xfe" * 125)
        self.assertEqual(c.recv_frame(), (True, 0, OP_PONG, b"\xfe" * 125))

    def test_2_5_ping_126(self):
        c = self.ws()
        c.send(OP_PING, b"\xfe" * 126)
        c.expect_close(self, PROTOCOL, echo=False)

    def test_2_6_ping_125_chopped(self):
        c = self.ws()
        c.send(OP_PING, b"\xfe" * 125, chop=1)
        self.assertEqual(c.recv_frame(), (True, 0, OP_PONG, b"\xfe" * 125))

    def test_2_7_2_8_unsolicited_pong(self):
        c = self.ws()
        c.send(OP_PONG)
        c.send(OP_PONG, b"unsolicited pong payload")
        c.read_nothing(0.2)
        self.echo(c, OP_TEXT, "still here")

    def test_2_9_pong_then_ping(self):
        c = self.ws()
        c.send(OP_PONG, b"unsolicited")
        c.send(OP_PING, b"solicited")
        self.assertEqual(c.recv_frame(), (True, 0, OP_PONG, b"solicited"))

    def test_2_10_2_11_ten_pings(self):
        for chop in (None, 1):
            c = self.ws()
            raw = b"".join(frame(OP_PING, b"payload-%d" % i) for i in range(10))
            c.send_raw(raw, chop=chop)
            for i in range(10):
                self.assertEqual(c.recv_frame(), (True, 0, OP_PONG, b"payload-%d" % i))


class ReservedBits(WsTestCase):
    """Group 3: no extension negotiated, so any RSV bit fails."""

    def test_3_1_rsv1_text(self):
        c = self.ws()
        self.assertFails(c, PROTOCOL, frame(OP_TEXT, b"Hello, world!", rsv=4))

    def test_3_2_rsv2_after_valid(self):
        c = self.ws()
        c.send_raw(frame(OP_TEXT, b"Hello, world!") + frame(OP_TEXT, b"Hello, world!", rsv=2) +
                   frame(OP_PING, b"Hello, world!"))
        self.assertEqual(c.recv_message(), (OP_TEXT, b"Hello, world!"))
        c.expect_close(self, PROTOCOL, echo=False)

    def test_3_3_rsv3_chopped(self):
        c = self.ws()
        c.send_raw(frame(OP_TEXT, b"Hello, world!") + frame(OP_TEXT, b"Hello, world!", rsv=1),
                   chop=1)
        self.assertEqual(c.recv_message(), (OP_TEXT, b"Hello, world!"))
        c.expect_close(self, PROTOCOL, echo=False)

    def test_3_4_to_3_7(self):
        cases = [(OP_TEXT, 6), (OP_BINARY, 5), (OP_PING, 3), (OP_CLOSE, 7), (OP_BINARY, 4)]
        for op, rsv in cases:
            with self.subTest(op=op, rsv=rsv):
                c = self.ws()
                payload = close_payload(1000) if op == OP_CLOSE else b"\x00\xff"
                self.assertFails(c, PROTOCOL, frame(op, payload, rsv=rsv))


class Opcodes(WsTestCase):
    """Group 4: reserved opcodes."""

    def test_4_1_reserved_non_control(self):
        for op in (3, 4, 5, 6, 7):
            with self.subTest(op=op):
                c = self.ws()
                c.send_raw(frame(OP_TEXT, b"ok") + frame(op, b"reserved") + frame(OP_PING))
                self.assertEqual(c.recv_message(), (OP_TEXT, b"ok"))
                c.expect_close(self, PROTOCOL, echo=False)

    def test_4_2_reserved_control(self):
        for op in (11, 12, 13, 14, 15):
            with self.subTest(op=op):
                c = self.ws()
                c.send_raw(frame(OP_TEXT, b"ok") + frame(op, b"x" * 10) + frame(OP_PING))
                self.assertEqual(c.recv_message(), (OP_TEXT, b"ok"))
                c.expect_close(self, PROTOCOL, echo=False)


class Fragmentation(WsTestCase):
    """Group 5."""

    def test_5_1_5_2_fragmented_control(self):
        for op in (OP_PING, OP_PONG):
            with self.subTest(op=op):
                c = self.ws()
                c.send_raw(frame(op, b"frag", fin=False) + frame(OP_CONT, b"ment"))
                c.expect_close(self, PROTOCOL, echo=False)

    def test_5_3_to_5_5_text_in_two(self):
        for chop in (None, 1):
            c = self.ws()
            c.send_raw(frame(OP_TEXT, b"frag", fin=False) + frame(OP_CONT, b"ment"), chop=chop)
            self.assertEqual(c.recv_message(), (OP_TEXT, b"fragment"))

    def test_5_6_to_5_8_ping_between(self):
        for chop in (None, 1):
            c = self.ws()
            c.send_raw(frame(OP_TEXT, b"frag", fin=False) + frame(OP_PING, b"ping") +
                       frame(OP_CONT, b"ment"), chop=chop)
            self.assertEqual(c.recv_frame(), (True, 0, OP_PONG, b"ping"))
            self.assertEqual(c.recv_message(), (OP_TEXT, b"fragment"))

    def test_5_9_to_5_14_orphan_continuations(self):
        cases = [
            frame(OP_CONT, b"non-continuation payload") + frame(OP_TEXT, b"Hello, world!"),
            frame(OP_CONT, b"non-continuation payload", fin=False) +
            frame(OP_TEXT, b"Hello, world!"),
            frame(OP_CONT, b"frag1", fin=False) + frame(OP_CONT, b"frag2") +
            frame(OP_TEXT, b"Hello, world!"),
        ]
        for i, raw in enumerate(cases):
            for chop in (None, 1):
                with self.subTest(case=i, chop=chop):
                    c = self.ws()
                    c.send_raw(raw, chop=chop)
                    c.expect_close(self, PROTOCOL, echo=False)

    def test_5_15_new_message_inside_one(self):
        c = self.ws()
        c.send_raw(frame(OP_TEXT, b"fragment1", fin=False) + frame(OP_CONT, b"fragment2") +
                   frame(OP_CONT, b"fragment3", fin=False) + frame(OP_TEXT, b"fragment4"))
        self.assertEqual(c.recv_message(), (OP_TEXT, b"fragment1fragment2"))
        c.expect_close(self, PROTOCOL, echo=False)

    def test_5_16_5_17_data_during_fragmentation(self):
        c = self.ws()
        c.send_raw(frame(OP_TEXT, b"a", fin=False) + frame(OP_TEXT, b"b"))
        c.expect_close(self, PROTOCOL, echo=False)

    def test_5_19_5_20_pings_between_slow(self):
        c = self.ws()
        c.send(OP_TEXT, b"fragment1", fin=False)
        c.send(OP_CONT, b"fragment2", fin=False)
        c.send(OP_PING, b"pongme 1!")
        self.assertEqual(c.recv_frame(), (True, 0, OP_PONG, b"pongme 1!"))
        time.sleep(0.2)
        c.send(OP_CONT, b"fragment3", fin=False)
        c.send(OP_PING, b"pongme 2!")
        self.assertEqual(c.recv_frame(), (True, 0, OP_PONG, b"pongme 2!"))
        c.send(OP_CONT, b"fragment4", fin=False)
        time.sleep(0.2)
        c.send(OP_CONT, b"fragment5")
        self.assertEqual(c.recv_message(), (OP_TEXT, b"fragment1fragment2fragment3fragment4fragment5"))

    def test_empty_fragments(self):
        # 6.1.2/6.1.3 too: empty text in fragments, empty in the middle
        c = self.ws()
        c.send_raw(frame(OP_TEXT, b"", fin=False) + frame(OP_CONT, b"", fin=False) +
                   frame(OP_CONT, b""))
        self.assertEqual(c.recv_message(), (OP_TEXT, b""))
        c.send_raw(frame(OP_TEXT, b"middle", fin=False) + frame(OP_CONT, b"", fin=False) +
                   frame(OP_CONT, b"frame"))
        self.assertEqual(c.recv_message(), (OP_TEXT, b"middleframe"))


# Autobahn's 6.x vectors: a representative set of each kind
VALID_UTF8 = [
    "Hello-µ@ßöäüàá-UTF-8!!".encode(),
    "κόσμε".encode(),
    b"\x00", b"\xc2\x80", b"\xe0\xa0\x80", b"\xf0\x90\x80\x80",  # first of each length
    b"\x7f", b"\xdf\xbf", b"\xef\xbf\xbf", b"\xf4\x8f\xbf\xbf",  # last of each length
    b"\xed\x9f\xbf", b"\xee\x80\x80", b"\xef\xbf\xbd", b"\xf4\x8f\xbf\xbf",
    b"\xef\xbf\xbe", b"\xef\xbf\xbf",  # noncharacters are valid UTF-8
]
INVALID_UTF8 = [
    b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80\x65\x64\x69\x74\x65\x64",  # 6.3.1
    b"\x80", b"\xbf", b"\x80\xbf", b"\x80\xbf\x80",            # continuation bytes
    b"\xc0\x20", b"\xe0\x80\x20", b"\xf0\x80\x80\x20",          # lonely start + space
    b"\xc0", b"\xe0\x80", b"\xf0\x80\x80",                       # incomplete at the end
    b"\xfe", b"\xff", b"\xfe\xfe\xff\xff",                       # impossible bytes
    b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf0\x80\x80\xaf",          # overlong '/'
    b"\xc1\xbf", b"\xe0\x9f\xbf", b"\xf0\x8f\xbf\xbf",          # maximum overlongs
    b"\xed\xa0\x80", b"\xed\xad\xbf", b"\xed\xbf\xbf",          # single surrogates
    b"\xed\xa0\x80\xed\xb0\x80",                                 # paired surrogates
    b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80",               # past U+10FFFF, 5 bytes
]


class Utf8(WsTestCase):
    """Group 6."""

    def test_6_valid_whole_and_per_byte_fragments(self):
        c = self.ws()
        for v in VALID_UTF8:
            self.echo(c, OP_TEXT, v)
            # 6.2.3/6.2.4: one byte per fragment
            raw = b"".join(frame(OP_TEXT if i == 0 else OP_CONT, v[i:i + 1], fin=i == len(v) - 1)
                           for i in range(len(v)))
            c.send_raw(raw)
            self.assertEqual(c.recv_message(), (OP_TEXT, v))

    def test_6_invalid_whole(self):
        for v in INVALID_UTF8:
            with self.subTest(v=v):
                c = self.ws()
                self.assertFails(c, INVALID_DATA, frame(OP_TEXT, v))

    def test_6_invalid_fragmented(self):
        for v in INVALID_UTF8[:6]:
            with self.subTest(v=v):
                c = self.ws()
                raw = b"".join(frame(OP_TEXT if i == 0 else OP_CONT, v[i:i + 1],
                                     fin=i == len(v) - 1) for i in range(len(v)))
                self.assertFails(c, INVALID_DATA, raw)

    def test_6_4_1_fail_fast_fragments(self):
        # the invalid first fragment fails the connection before the rest is sent
        c = self.ws()
        c.send(OP_TEXT, "κόσμε".encode() + b"\xf4\x90\x80\x80", fin=False)
        c.expect_close(self, INVALID_DATA, echo=False, timeout=2)

    def test_6_4_3_fail_fast_in_one_frame(self):
        # one frame whose declared payload has not fully arrived: the bad
        # byte fails it at once
        c = self.ws()
        payload = "κόσμε".encode() + b"\xf4\x90\x80\x80" + b"edited"
        raw = frame(OP_TEXT, payload)
        c.send_raw(raw[:6 + 14])  # header (2 + 4 mask) + the bad bytes, not the rest
        c.expect_close(self, INVALID_DATA, echo=False, timeout=2)

    def test_text_valid_split_in_character(self):
        c = self.ws()
        v = "κόσμε".encode()
        c.send_raw(frame(OP_TEXT, v[:1], fin=False) + frame(OP_CONT, v[1:5], fin=False) +
                   frame(OP_CONT, v[5:]))
        self.assertEqual(c.recv_message(), (OP_TEXT, v))

    def test_binary_never_validated(self):
        c = self.ws()
        self.echo(c, OP_BINARY, b"\xff\xfe\xed\xa0\x80")


class CloseHandling(WsTestCase):
    """Group 7."""

    def test_7_1_1_message_then_close(self):
        c = self.ws()
        self.echo(c, OP_TEXT, "Hello World!")
        c.close_handshake(self, 1000)

    def test_7_1_2_close_twice(self):
        c = self.ws()
        c.send_raw(frame(OP_CLOSE, close_payload(1000)) + frame(OP_CLOSE, close_payload(1000)))
        c.expect_close(self, 1000, echo=False)

    def test_7_1_3_4_nothing_after_close(self):
        c = self.ws()
        c.send_raw(frame(OP_CLOSE, close_payload(1000)) + frame(OP_PING, b"late") +
                   frame(OP_TEXT, b"late"))
        c.expect_close(self, 1000, echo=False)  # and no pong, no echo before it

    def test_7_1_5_close_inside_fragmented_message(self):
        c = self.ws()
        c.send_raw(frame(OP_TEXT, b"fragment1", fin=False) + frame(OP_CLOSE, close_payload(1000)) +
                   frame(OP_CONT, b"fragment2"))
        c.expect_close(self, 1000, echo=False)

    def test_7_1_6_large_message_then_close(self):
        c = self.ws()
        big = b"BAsd7&jh23" * 26214  # ~256 KiB
        c.send_raw(frame(OP_TEXT, big) + frame(OP_CLOSE, close_payload(1000)) + frame(OP_PING))
        self.assertEqual(c.recv_message(), (OP_TEXT, big))
        c.expect_close(self, 1000, echo=False)

    def test_7_3_1_empty_close(self):
        c = self.ws()
        c.send(OP_CLOSE, b"")
        c.expect_close(self, None, echo=False)

    def test_7_3_2_one_byte(self):
        c = self.ws()
        self.assertFails(c, PROTOCOL, frame(OP_CLOSE, b"\x03"))

    def test_7_3_3_to_7_3_5_reasons(self):
        for reason in (b"", b"Hello World!", b"*" * 123):
            with self.subTest(n=len(reason)):
                c = self.ws()
                c.send(OP_CLOSE, close_payload(1000, reason))
                c.expect_close(self, 1000, echo=False)

    def test_7_3_6_reason_too_long(self):
        c = self.ws()
        self.assertFails(c, PROTOCOL, frame(OP_CLOSE, close_payload(1000, b"*" * 124)))

    def test_7_5_1_invalid_utf8_reason(self):
        c = self.ws()
        self.assertFails(c, INVALID_DATA,
                         frame(OP_CLOSE, close_payload(1000, b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce"
                                                             b"\xbc\xce\xb5\xed\xa0\x80\x65dited")))

    def test_7_7_valid_codes(self):
        for code in (1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000,
                     4999):
            with self.subTest(code=code):
                c = self.ws()
                c.send_close(code)
                c.expect_close(self, code, echo=False)

    def test_7_9_invalid_codes(self):
        for code in (0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535):
            with self.subTest(code=code):
                c = self.ws()
                self.assertFails(c, PROTOCOL, frame(OP_CLOSE, struct.pack("!H", code)))

    def test_eof_without_close(self):
        c = self.ws()
        self.echo(c, OP_TEXT, "bye")
        c.close()
        self.assertServerAlive()
        c2 = self.ws()
        self.echo(c2, OP_TEXT, "still serving")


MIB = 1 << 20


class Limits(WsTestCase):
    """Group 9, up to the default 1 MiB message limit."""

    def test_9_1_text_single_frame(self):
        c = self.ws()
        for n in (65536, 256 * 1024, MIB):
            self.echo(c, OP_TEXT, b"*" * n)

    def test_9_2_binary_single_frame(self):
        c = self.ws()
        for n in (65536, 256 * 1024, MIB):
            self.echo(c, OP_BINARY, bytes([0xfe]) * n)

    def test_9_3_9_4_fragmented(self):
        c = self.ws()
        payload = os.urandom(MIB)
        for frag in (64, 256, 1024, 4096, 16384, 65536, 262144, MIB):
            raw = b"".join(frame(OP_BINARY if i == 0 else OP_CONT, payload[i:i + frag],
                                 fin=i + frag >= len(payload))
                           for i in range(0, len(payload), frag))
            c.send_raw(raw)
            self.assertEqual(c.recv_message(timeout=20), (OP_BINARY, payload), frag)

    def test_9_5_9_6_chopped_tcp(self):
        c = self.ws()
        payload = b"x" * MIB
        for chop in (64 * 1024, 4096 * 3 + 7):
            c.send(OP_TEXT, payload, chop=chop)
            self.assertEqual(c.recv_message(timeout=20), (OP_TEXT, payload))

    def test_9_7_9_8_many_small(self):
        c = self.ws()
        for op, size in ((OP_TEXT, 16), (OP_BINARY, 64), (OP_TEXT, 4096)):
            msgs = [bytes([0x41 + i % 26]) * size for i in range(1000)]
            c.send_raw(b"".join(frame(op, m) for m in msgs))
            for m in msgs:
                self.assertEqual(c.recv_message(), (op, m))

    def test_over_limit_single_frame(self):
        c = self.ws()
        # the header alone is enough: 1009 before the payload is sent
        c.send_raw(frame(OP_BINARY, b"", length=MIB + 1)[:10 + 4])
        c.expect_close(self, TOO_BIG, echo=False)

    def test_over_limit_fragmented(self):
        c = self.ws()
        part = b"y" * (MIB // 2)
        c.send_raw(frame(OP_TEXT, part, fin=False) + frame(OP_CONT, part, fin=False))
        c.send_raw(frame(OP_CONT, b"z"))
        c.expect_close(self, TOO_BIG, echo=False, timeout=20)


def deflate_raw(data, wbits=15):
    co = zlib.compressobj(9, zlib.DEFLATED, -wbits)
    out = co.compress(data) + co.flush(zlib.Z_SYNC_FLUSH)
    return out[:-4]


class Compression(WsTestCase):
    """Groups 12 and 13: permessage-deflate with each kind of offer."""

    SIZES = (16, 64, 256, 1024, 4096, 8192, 16384, 32768, 65536, 131072)

    def payload(self, n, seed):
        words = [b"alpha", b"bravo", b"charlie", b"delta", b"echo", b"foxtrot", b"golf"]
        out, x, total = [], seed, 0
        while total < n:
            x = (x * 1103515245 + 12345) & 0x7fffffff
            out.append(words[x % 7] + b" ")
            total += len(out[-1])
        return b"".join(out)[:n]

    def run_echo(self, offer, count=20):
        c = self.ws(extensions=offer)
        self.assertIsNotNone(c.deflate, "deflate not negotiated for %r" % offer)
        for n in self.SIZES:
            for i in range(count):
                p = self.payload(n, i * 7 + n)
                self.echo(c, OP_TEXT if i % 2 else OP_BINARY, p, compress=True)
        # uncompressed messages are fine under permessage-deflate too
        self.echo(c, OP_TEXT, "not compressed")
        c.close_handshake(self)
        return c

    def test_12_default_offer(self):
        c = self.run_echo("permessage-deflate")
        # what the server sent back was compressed (RSV1): seen by recv_message
        self.assertIn("server_no_context_takeover", c.deflate.params)

    def test_13_1_client_max_window_bits(self):
        c = self.run_echo("permessage-deflate; client_max_window_bits")
        self.assertEqual(c.deflate.params.get("client_max_window_bits"), "15")

    def test_13_2_no_context_takeover(self):
        self.run_echo("permessage-deflate; client_no_context_takeover; server_no_context_takeover")

    def test_13_3_server_window_9(self):
        c = self.run_echo("permessage-deflate; server_max_window_bits=9")
        self.assertEqual(c.deflate.params.get("server_max_window_bits"), "9")

    def test_13_4_server_window_15(self):
        self.run_echo("permessage-deflate; server_max_window_bits=15", count=5)

    def test_13_5_client_window_9(self):
        c = self.run_echo("permessage-deflate; client_max_window_bits=9", count=5)
        self.assertEqual(c.deflate.params.get("client_max_window_bits"), "9")

    def test_13_6_7_several_offers(self):
        # the first acceptable offer wins: 8 for the server is declined
        c = self.ws(extensions="permessage-deflate; server_max_window_bits=8, "
                               "permessage-deflate; client_max_window_bits=10, "
                               "permessage-deflate")
        self.assertEqual(c.deflate.params.get("client_max_window_bits"), "10")
        self.assertNotIn("server_max_window_bits", c.deflate.params)
        self.echo(c, OP_TEXT, self.payload(5000, 1), compress=True)

    def test_declined_offers(self):
        for offer in ("permessage-deflate; server_max_window_bits=8",
                      "permessage-deflate; bogus=1", "x-webkit-deflate-frame"):
            with self.subTest(offer=offer):
                c = self.ws(extensions=offer)
                self.assertIsNone(c.deflate)
                # and then RSV1 is a protocol error
                self.assertFails(c, PROTOCOL, frame(OP_TEXT, deflate_raw(b"hello"), rsv=4))

    def test_compressed_fragmented(self):
        c = self.ws(extensions="permessage-deflate")
        data = self.payload(100000, 3)
        z = deflate_raw(data)
        raw = b"".join(frame(OP_TEXT if i == 0 else OP_CONT, z[i:i + 1000], fin=i + 1000 >= len(z),
                             rsv=4 if i == 0 else 0) for i in range(0, len(z), 1000))
        c.send_raw(raw, chop=777)
        op, got = c.recv_message()
        self.assertEqual((op, got), (OP_TEXT, data))

    def test_rsv1_on_continuation(self):
        c = self.ws(extensions="permessage-deflate")
        z = deflate_raw(b"hello hello")
        self.assertFails(c, PROTOCOL, frame(OP_TEXT, z[:3], fin=False, rsv=4) +
                         frame(OP_CONT, z[3:], rsv=4))

    def test_invalid_utf8_inside_compressed_text(self):
        c = self.ws(extensions="permessage-deflate")
        self.assertFails(c, INVALID_DATA, frame(OP_TEXT, deflate_raw(b"ok \xed\xa0\x80 no"), rsv=4))

    def test_corrupt_deflate_data(self):
        c = self.ws(extensions="permessage-deflate")
        self.assertFails(c, INVALID_DATA, frame(OP_BINARY, b"\xff\xff\xff\xff\xff", rsv=4))

    def test_zip_bomb(self):
        # 64 MiB of zeros in ~64 KiB: refused at the 1 MiB limit with 1009
        c = self.ws(extensions="permessage-deflate")
        bomb = deflate_raw(bytes(64 * MIB))
        self.assertLess(len(bomb), 100 * 1024)
        self.assertFails(c, TOO_BIG, frame(OP_BINARY, bomb, rsv=4))
        self.assertServerAlive()


class Handshake(flaretest.ServerTestCase):
    """The opening handshake's refusals (RFC 6455 4.2.1)."""

    def upgrade(self, headers, method="GET", version="HTTP/1.1"):
        c = self.connect()
        base = {"Upgrade": "websocket", "Connection": "Upgrade",
                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"}
        for k, v in headers.items():
            if v is None:
                base.pop(k, None)
            else:
                base[k] = v
        c.send(flaretest.build_request(method, "/ws/echo", list(base.items()), version=version))
        return c.read_response(interim=True)

    def test_accept_value(self):
        r = self.upgrade({})
        self.assertEqual(r.status, 101)
        self.assertEqual(r.get("Sec-WebSocket-Accept"), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")

    def test_missing_upgrade(self):
        r = self.upgrade({"Upgrade": None, "Connection": None})
        self.assertEqual(r.status, 426, r)
        self.assertEqual(r.get("Upgrade"), "websocket")
        self.assertEqual(r.get("Sec-WebSocket-Version"), "13")

    def test_wrong_version(self):
        for v in ("8", None, "14"):
            r = self.upgrade({"Sec-WebSocket-Version": v})
            self.assertEqual(r.status, 426, r)
            self.assertEqual(r.get("Sec-WebSocket-Version"), "13")

    def test_bad_key(self):
        for key in (None, "short", "dGhlIHNhbXBsZSBub25jZXg=", "!GhlIHNhbXBsZSBub25jZQ=="):
            r = self.upgrade({"Sec-WebSocket-Key": key})
            self.assertEqual(r.status, 400, (key, r))

    def test_connection_without_upgrade(self):
        r = self.upgrade({"Connection": "keep-alive"})
        self.assertEqual(r.status, 400, r)

    def test_cross_origin_refused(self):
        r = self.upgrade({"Origin": "http://evil.example"})
        self.assertEqual(r.status, 403, r)
        r = self.upgrade({"Origin": "http://localhost"})  # same as Host
        self.assertEqual(r.status, 101, r)

    def test_post_not_allowed(self):
        r = self.upgrade({}, method="POST")
        self.assertEqual(r.status, 405, r)

    def test_http10(self):
        r = self.upgrade({}, version="HTTP/1.0")
        self.assertEqual(r.status, 400, r)

    def test_frames_right_after_the_request(self):
        # frames in the same packet as the upgrade request are not lost
        c = self.connect()
        req = flaretest.build_request("GET", "/ws/echo", [
            ("Upgrade", "websocket"), ("Connection", "Upgrade"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="), ("Sec-WebSocket-Version", "13")])
        c.send(req + frame(OP_TEXT, b"early bird") + frame(OP_PING, b"p"))
        r = c.read_response(interim=True)
        self.assertEqual(r.status, 101)
        self.assertEqual(c._read_exact(12, time.monotonic() + 5), b"\x81\x0aearly bird")
        self.assertEqual(c._read_exact(3, time.monotonic() + 5), b"\x8a\x01p")


if __name__ == "__main__":
    flaretest.main()
