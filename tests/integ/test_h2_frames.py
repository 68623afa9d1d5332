#!/usr/bin/python3
"""HTTP/2 frame-level conformance of examples/hello's plaintext port (h2c with
prior knowledge), with hand-built frames and Debian's python3-hpack: stream
states (RFC 9113 §5.1), bad frames and settings (§4.2, §6), field validity
and pseudo-headers (§8.2, §8.3), each with the error RFC 9113 names; the
connection or the server must go on serving afterwards wherever the error is
a stream error."""

import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
import h2util  # noqa: E402
from h2util import (DATA, ENABLE_PUSH, END_HEADERS, END_STREAM, FLOW_CONTROL_ERROR,  # noqa: E402
                    FRAME_SIZE_ERROR, GOAWAY, HEADERS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, PING,
                    PROTOCOL_ERROR, RST_STREAM, SETTINGS, STREAM_CLOSED, WINDOW_UPDATE, err_name,
                    frame, settings_frame, window_update)

HELLO = b"Hello, World!"
BASE = [(":method", "GET"), (":scheme", "http"), (":authority", "localhost"), (":path", "/plaintext")]


class StreamStates(h2util.H2TestCase):
    """§5.1 and §5.1.1."""

    def test_preface_and_settings(self):
        c = self.raw()
        s = c.wait_settings()
        # §6.5.2 / the issue: at least 100 concurrent streams advertised
        self.assertGreaterEqual(s.get(h2util.MAX_CONCURRENT_STREAMS, 0), 100, s)
        c.alive_check(1)
        self.assertGreaterEqual(c.settings_acked, 1, "our SETTINGS never acknowledged: %s" % c.history())

    def test_data_on_idle_stream(self):
        # idle: anything but HEADERS/PRIORITY is a connection error PROTOCOL_ERROR
        c = self.raw()
        c.data(1, b"hello", end_stream=True)
        c.expect_goaway(PROTOCOL_ERROR)

    def test_headers_on_closed_stream(self):
        # stream 1 done both ways: a HEADERS on it is a frame on a closed
        # stream (§5.1 "closed": a connection error STREAM_CLOSED), not a
        # new stream going backwards (§5.1.1's PROTOCOL_ERROR, for ids never
        # opened: test_h2_conformance.py)
        c = self.raw()
        c.alive_check(1)
        c.request(1, "/plaintext")
        c.expect_goaway(STREAM_CLOSED)

    def test_data_after_end_stream(self):
        # half-closed (remote): DATA is a STREAM_CLOSED error (stream error;
        # a connection error with the same code is accepted)
        h2util.flare_only("needs /slow to keep the stream half-closed")
        c = self.raw()
        c.request(1, "/slow?ms=1500")
        c.data(1, b"late", end_stream=True)
        f = c.until(lambda x: x.type == GOAWAY or (x.sid == 1 and x.type in (RST_STREAM, HEADERS)),
                    what="STREAM_CLOSED for DATA after END_STREAM")
        if f.type == HEADERS:
            self.fail("response %r instead of STREAM_CLOSED" % (f.headers,))
        code = struct.unpack(">I", f.payload[-4:] if f.type == RST_STREAM else f.payload[4:8])[0]
        self.assertEqual(code, STREAM_CLOSED, "%s: %s" % (err_name(code), c.history()))
        if f.type == RST_STREAM:
            c.alive_check(3)

    def test_even_stream_id(self):
        c = self.raw()
        c.request(2, "/plaintext")
        c.expect_goaway(PROTOCOL_ERROR)

    def test_stream_id_backwards(self):
        c = self.raw()
        c.request(5, "/plaintext")
        c.request(3, "/plaintext")
        c.expect_goaway(PROTOCOL_ERROR)

    def test_rst_stream_on_idle_stream(self):
        c = self.raw()
        c.send(h2util.rst_stream(1, h2util.CANCEL))
        c.expect_goaway(PROTOCOL_ERROR)

    def test_client_rst_then_new_stream(self):
        # a stream the client cancels is gone; the connection goes on
        c = self.raw()
        c.headers(1, BASE[:3] + [(":path", "/plaintext")], end_stream=False)
        c.send(h2util.rst_stream(1, h2util.CANCEL))
        c.alive_check(3)


class BadFrames(h2util.H2TestCase):
    """§4.2, §6.5, §6.7, §6.9: connection errors with their codes."""

    def test_settings_length_not_multiple_of_6(self):
        c = self.raw()
        c.send_frame(SETTINGS, 0, 0, b"\x00\x04\x00\x00\xff")
        c.expect_goaway(FRAME_SIZE_ERROR)

    def test_settings_ack_with_payload(self):
        c = self.raw()
        c.send_frame(SETTINGS, h2util.ACK, 0, struct.pack(">HI", ENABLE_PUSH, 0))
        c.expect_goaway(FRAME_SIZE_ERROR)

    def test_settings_on_stream(self):
        c = self.raw()
        c.send_frame(SETTINGS, 0, 1, b"")
        c.expect_goaway(PROTOCOL_ERROR)

    def test_enable_push_2(self):
        c = self.raw()
        c.send(settings_frame([(ENABLE_PUSH, 2)]))
        c.expect_goaway(PROTOCOL_ERROR)

    def test_initial_window_size_too_large(self):
        c = self.raw()
        c.send(settings_frame([(INITIAL_WINDOW_SIZE, 1 << 31)]))
        c.expect_goaway(FLOW_CONTROL_ERROR)

    def test_max_frame_size_out_of_range(self):
        for v in (16383, 1 << 24):
            with self.subTest(max_frame_size=v):
                c = self.raw()
                c.send(settings_frame([(MAX_FRAME_SIZE, v)]))
                c.expect_goaway(PROTOCOL_ERROR)
                c.close()

    def test_unknown_setting_ignored(self):
        c = self.raw()
        c.send(settings_frame([(0x4A4A, 12345)]))
        c.alive_check(1)

    def test_ping_length(self):
        for n in (0, 7, 9):
            with self.subTest(length=n):
                c = self.raw()
                c.send_frame(PING, 0, 0, b"x" * n)
                c.expect_goaway(FRAME_SIZE_ERROR)
                c.close()

    def test_ping_on_stream(self):
        c = self.raw()
        c.send_frame(PING, 0, 1, b"12345678")
        c.expect_goaway(PROTOCOL_ERROR)

    def test_ping_answered(self):
        c = self.raw()
        c.send(h2util.ping(b"flare-h2"))
        f = c.until(lambda x: x.type == PING, what="PING ACK")
        self.assertEqual((f.flags & h2util.ACK, f.payload), (h2util.ACK, b"flare-h2"))

    def test_window_update_zero_on_connection(self):
        c = self.raw()
        c.send(window_update(0, 0))
        c.expect_goaway(PROTOCOL_ERROR)

    def test_window_update_zero_on_stream(self):
        # a stream error PROTOCOL_ERROR (a connection error is accepted)
        h2util.flare_only("needs /slow to keep the stream open")
        c = self.raw()
        c.request(1, "/slow?ms=1500")
        c.send(window_update(1, 0))
        f = c.until(lambda x: x.type == GOAWAY or (x.sid == 1 and x.type in (RST_STREAM, HEADERS)),
                    what="PROTOCOL_ERROR for WINDOW_UPDATE 0 on stream 1")
        if f.type == HEADERS:
            self.fail("response %r instead of PROTOCOL_ERROR" % (f.headers,))
        code = struct.unpack(">I", f.payload[-4:] if f.type == RST_STREAM else f.payload[4:8])[0]
        self.assertEqual(code, PROTOCOL_ERROR, "%s: %s" % (err_name(code), c.history()))

    def test_window_update_length(self):
        c = self.raw()
        c.send_frame(WINDOW_UPDATE, 0, 0, b"\x00\x00\x01")
        c.expect_goaway(FRAME_SIZE_ERROR)

    def test_connection_window_overflow(self):
        c = self.raw()
        c.send(window_update(0, (1 << 31) - 1))
        c.expect_goaway(FLOW_CONTROL_ERROR)

    def test_frame_larger_than_max_frame_size(self):
        c = self.raw()
        limit = c.wait_settings().get(MAX_FRAME_SIZE, 16384)
        # a HEADERS frame (it carries a field block: a connection error)
        pad = bytes(33 + (i * 7919) % 90 for i in range(limit + 100))  # Huffman cannot shrink it much
        block = c.enc.encode(BASE + [("x-pad", pad.decode())], huffman=False)
        self.assertGreater(len(block), limit)
        c.send_frame(HEADERS, END_STREAM | END_HEADERS, 1, block)
        c.expect_goaway(FRAME_SIZE_ERROR)

    def test_data_larger_than_max_frame_size(self):
        c = self.raw()
        limit = c.wait_settings().get(MAX_FRAME_SIZE, 16384)
        c.headers(1, [(":method", "POST"), (":scheme", "http"), (":authority", "localhost"),
                      (":path", "/echo")], end_stream=False)
        c.send_frame(DATA, END_STREAM, 1, b"x" * (limit + 1))
        f = c.until(lambda x: x.type == GOAWAY or (x.sid == 1 and x.type in (RST_STREAM, HEADERS)),
                    what="FRAME_SIZE_ERROR")
        if f.type == HEADERS:
            self.fail("response %r to an oversized DATA frame" % (f.headers,))
        code = struct.unpack(">I", f.payload[-4:] if f.type == RST_STREAM else f.payload[4:8])[0]
        self.assertEqual(code, FRAME_SIZE_ERROR, "%s: %s" % (err_name(code), c.history()))

    def test_unknown_frame_type_ignored(self):
        c = self.raw()
        c.send(frame(0xFA, 0xFF, 0, b"ignore me") + frame(0xFB, 0, 1, b"and me"))
        c.send(h2util.ping(b"after-xx"))
        f = c.until(lambda x: x.type in (PING, GOAWAY), what="PING ACK after unknown frames")
        self.assertEqual((f.type, f.payload), (PING, b"after-xx"), c.history())
        c.alive_check(1)

    def test_continuation_without_headers(self):
        c = self.raw()
        c.send_frame(h2util.CONTINUATION, END_HEADERS, 1, c.encode(BASE))
        c.expect_goaway(PROTOCOL_ERROR)

    def test_frame_interleaved_in_header_block(self):
        # §6.10: a header block is contiguous; anything else is PROTOCOL_ERROR
        c = self.raw()
        block = c.encode(BASE)
        c.send_frame(HEADERS, END_STREAM, 1, block[:3])
        c.send(h2util.ping())
        c.expect_goaway(PROTOCOL_ERROR)

    def test_priority_depending_on_itself(self):
        # §5.3.1: a stream depending on itself: stream error PROTOCOL_ERROR
        c = self.raw()
        c.send(h2util.priority(1, dep=1))
        f = c.until(lambda x: x.type in (GOAWAY, RST_STREAM), what="PROTOCOL_ERROR for self-dependency")
        code = struct.unpack(">I", f.payload[-4:] if f.type == RST_STREAM else f.payload[4:8])[0]
        self.assertEqual(code, PROTOCOL_ERROR, c.history())

    def test_priority_depending_on_itself_in_pieces(self):
        # the same with the frame cut where a read may end: in its header,
        # before, inside and after the stream dependency (RFC 7540's
        # priorities are off, SETTINGS_NO_RFC7540_PRIORITIES: Flare checks
        # the dependency itself, as the bytes come)
        for cut in (4, 9, 11, 13):
            c = self.raw()
            c.alive_check(1)
            f = h2util.priority(3, dep=3)
            c.send(f[:cut])
            time.sleep(0.05)
            c.send(f[cut:])
            c.expect_goaway(PROTOCOL_ERROR)
            c.close()

    def test_priority_in_pieces(self):
        # a PRIORITY frame on another stream, cut the same ways, then a
        # request: nothing but the response happens
        c = self.raw()
        sid = 1
        for cut in (4, 9, 11, 13):
            f = h2util.priority(sid + 2, dep=sid)
            c.send(f[:cut])
            time.sleep(0.05)
            c.send(f[cut:])
            c.alive_check(sid)
            sid += 2
        self.assertIsNone(c.goaway, c.history())

    def test_padding_longer_than_payload(self):
        c = self.raw()
        block = c.encode(BASE)
        c.send_frame(HEADERS, END_STREAM | END_HEADERS | h2util.PADDED, 1, bytes([len(block) + 5]) + block)
        c.expect_goaway(PROTOCOL_ERROR)


class FieldValidity(h2util.H2TestCase):
    """§8.1.1, §8.2, §8.3: a malformed request is a stream error
    PROTOCOL_ERROR (a 400 response before the stream ends is allowed); the
    connection serves the next stream."""

    def assertMalformed(self, headers, body=None):
        c = self.raw()
        c.headers(1, headers, end_stream=body is None)
        if body is not None:
            c.data(1, body, end_stream=True)
        f = c.until(lambda x: x.type == GOAWAY or (x.sid == 1 and x.type in (RST_STREAM, HEADERS)),
                    what="a stream error for %r" % (headers,))
        if f.type == GOAWAY:
            self.fail("connection error %s for a malformed request (a stream error is due): %s" % (
                err_name(c.goaway[1]), c.history()))
        if f.type == HEADERS:
            status = dict(f.headers).get(":status")
            self.assertEqual(status, "400", "request %r answered %r, not a stream error" % (headers, f.headers))
            if not f.flags & END_STREAM:
                c.until(lambda x: x.sid == 1 and (x.flags & END_STREAM or x.type == RST_STREAM),
                        what="the end of the 400")
        else:
            code = struct.unpack(">I", f.payload)[0]
            self.assertEqual(code, PROTOCOL_ERROR, "RST_STREAM %s for %r" % (err_name(code), headers))
        c.alive_check(3)
        c.close()

    def test_valid_request_for_reference(self):
        c = self.raw()
        c.headers(1, BASE + [("x-ok", "fine"), ("te", "trailers")])
        status, _, body, _ = c.response(1)
        self.assertEqual((status, body), (200, HELLO))

    def test_uppercase_name(self):
        self.assertMalformed(BASE + [("X-Upper", "1")])

    def test_connection_specific_fields(self):
        for name, value in (("connection", "keep-alive"), ("keep-alive", "timeout=5"),
                            ("proxy-connection", "keep-alive"), ("transfer-encoding", "chunked"),
                            ("upgrade", "h2c")):
            with self.subTest(field=name):
                self.assertMalformed(BASE + [(name, value)])

    def test_te_other_than_trailers(self):
        self.assertMalformed(BASE + [("te", "gzip")])

    def test_missing_pseudo_headers(self):
        for missing in (":method", ":scheme", ":path"):
            with self.subTest(missing=missing):
                self.assertMalformed([h for h in BASE if h[0] != missing])

    def test_empty_path(self):
        self.assertMalformed([h if h[0] != ":path" else (":path", "") for h in BASE])

    def test_duplicate_pseudo_header(self):
        for dup in ((":path", "/json"), (":method", "GET"), (":scheme", "http")):
            with self.subTest(duplicate=dup[0]):
                self.assertMalformed(BASE + [dup])

    def test_pseudo_header_after_regular_field(self):
        self.assertMalformed(BASE[:3] + [("x-regular", "1"), (":path", "/plaintext")])

    def test_unknown_pseudo_header(self):
        self.assertMalformed(BASE + [(":foo", "bar")])

    def test_response_pseudo_header_in_request(self):
        self.assertMalformed(BASE + [(":status", "200")])

    def test_empty_name(self):
        self.assertMalformed(BASE + [("", "value")])

    def test_whitespace_around_value(self):
        for v in (" leading", "trailing ", "\ttab"):
            with self.subTest(value=v):
                self.assertMalformed(BASE + [("x-ws", v)])

    def test_forbidden_characters(self):
        for name, value in (("x-nl", "a\nb"), ("x-cr", "a\rb"), ("x-nul", "a\0b"), ("x:colon", "v"),
                            ("x sp", "v")):
            with self.subTest(name=name):
                self.assertMalformed(BASE + [(name, value)])

    def test_content_length_mismatch(self):
        post = [(":method", "POST"), (":scheme", "http"), (":authority", "localhost"), (":path", "/echo")]
        for declared, sent in ((10, b"12345"), (3, b"12345")):
            with self.subTest(content_length=declared, data=len(sent)):
                self.assertMalformed(post + [("content-length", str(declared))], body=sent)

    def test_content_length_on_end_stream_headers(self):
        # content-length 5 but END_STREAM on HEADERS: no DATA at all
        post = [(":method", "POST"), (":scheme", "http"), (":authority", "localhost"), (":path", "/echo"),
                ("content-length", "5")]
        self.assertMalformed(post)


if __name__ == "__main__":
    flaretest.main()
