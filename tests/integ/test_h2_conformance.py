#!/usr/bin/python3
"""The HTTP/2 conformance cases (the behaviours h2spec 2.6.0 checks, as RFC
9113 and RFC 7541 state them) that the other test_h2_*.py files do not
cover; tests/integ/H2_CONFORMANCE.md maps every case to its test. Written
from the RFCs with hand-built frames and header blocks (h2util, Debian's
python3-hpack), each asserting the exact answer: GOAWAY with its code (and
the connection closed), RST_STREAM with its code (and the connection going
on), or the response.

Each case runs ITERATIONS times (FLARE_H2_ITERATIONS, default 20), each
time on a new connection, so that an outcome that depends on how the frames
fall into the server's reads shows up; BUDGET seconds
(FLARE_H2_CONFORMANCE_SECONDS, default 45) bound the whole file: each case
gets its share, and stops early (after at least MIN_ITERATIONS) once it is
spent. The iterations each case ran are printed at the end.

Where RFC 9113 allows either a stream error or a connection error, the
test pins the one examples/hello gives (named in the case), so a change
of behaviour is seen.
Plaintext (h2c with prior knowledge) and, under FLARE_TEST_TLS=1, TLS with
ALPN h2."""

import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
import h2util  # noqa: E402
from h2util import (ACK, COMPRESSION_ERROR, CONTINUATION, DATA, END_HEADERS,  # noqa: E402
                    END_STREAM, FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR, GOAWAY, HEADERS,
                    INITIAL_WINDOW_SIZE, NO_ERROR, PADDED, PING, PRIORITY, PRIORITY_FLAG,
                    PROTOCOL_ERROR, PUSH_PROMISE, RST_STREAM, SETTINGS, STREAM_CLOSED, frame, ping,
                    priority, rst_stream, settings_frame, window_update)
import hpack.huffman  # noqa: E402
import hpack.huffman_constants  # noqa: E402

ITERATIONS = int(os.environ.get("FLARE_H2_ITERATIONS", "20"))
BUDGET = float(os.environ.get("FLARE_H2_CONFORMANCE_SECONDS", "45"))
MIN_ITERATIONS = min(3, ITERATIONS)
HELLO = b"Hello, World!"
GET = [(":method", "GET"), (":scheme", "http"), (":authority", "localhost"), (":path", "/plaintext")]
POST = [(":method", "POST"), (":scheme", "http"), (":authority", "localhost"), (":path", "/echo"),
        ("content-type", "text/plain")]
HUFFMAN = hpack.huffman.HuffmanEncoder(hpack.huffman_constants.REQUEST_CODES,
                                       hpack.huffman_constants.REQUEST_CODES_LENGTH)


def raw_frame(ftype, flags, sid_field, payload=b""):
    """A frame whose 32-bit stream id field is sent as given (reserved bit
    included)."""
    n = len(payload)
    return struct.pack(">BHBBI", n >> 16, n & 0xFFFF, ftype, flags, sid_field) + payload


def goaway(last, code, debug=b""):
    return frame(GOAWAY, 0, 0, struct.pack(">II", last, code) + debug)


# ---- HPACK by hand (RFC 7541 §5, §6) ----------------------------------------

def hint(value, prefix_bits, first):
    """An integer with an N-bit prefix (§5.1); first: the pattern bits."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def hstr(s, huffman=False):
    """A string literal (§5.2), raw or Huffman-coded."""
    s = s.encode() if isinstance(s, str) else s
    if huffman:
        s = HUFFMAN.encode(s)
    return hint(len(s), 7, 0x80 if huffman else 0) + s


def indexed(i):
    return hint(i, 7, 0x80)                       # §6.1


def literal(kind, name, value, huffman=False):
    """§6.2: kind 'incremental' (01), 'without' (0000), 'never' (0001);
    name an index into the table or a new name."""
    prefix, first = {"incremental": (6, 0x40), "without": (4, 0x00), "never": (4, 0x10)}[kind]
    if isinstance(name, int):
        return hint(name, prefix, first) + hstr(value, huffman)
    return bytes([first]) + hstr(name, huffman) + hstr(value, huffman)


def size_update(n):
    return hint(n, 5, 0x20)                       # §6.3


# static table (Appendix A): 1 :authority, 2 :method GET, 3 :method POST,
# 4 :path /, 6 :scheme http
GET_PREFIX = indexed(2) + indexed(6) + literal("without", 1, "localhost")
GET_BLOCK = GET_PREFIX + literal("without", 4, "/plaintext")


def ua_value(string):
    """user-agent (static 58), literal without indexing, with the string
    literal given as bytes (length prefix and H bit included)."""
    return hint(58, 4, 0x00) + string


class Conformance(h2util.H2TestCase):
    ran = {}        # test name -> iterations run
    ncases = None

    @classmethod
    def setUpClass(cls):
        cls.ncases = len([n for n in dir(cls) if n.startswith("test_")])
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        if cls.ran:
            its = sorted(cls.ran.values())
            sys.stdout.write("%s: %d cases, %d to %d iterations each (median %d)\n" % (
                cls.__name__, len(its), its[0], its[-1], its[len(its) // 2]))
            for name, n in sorted(cls.ran.items()):
                if n < ITERATIONS:
                    sys.stdout.write("  %s: %d of %d iterations (time share spent)\n" % (name, n, ITERATIONS))
        super().tearDownClass()

    def repeat(self, fn, n=ITERATIONS):
        """fn(i) ITERATIONS times, each on connections of its own (closed
        after it), within this case's share of BUDGET. The first failure
        ends the case, naming its iteration."""
        share = BUDGET / self.ncases
        t0 = time.monotonic()
        done = 0
        for i in range(n):
            try:
                fn(i)
            except AssertionError as e:
                raise AssertionError("iteration %d of %d: %s" % (i + 1, n, e)) from None
            finally:
                for c in self._conns:
                    c.close()
                self._conns = []
            done = i + 1
            if done >= MIN_ITERATIONS and time.monotonic() - t0 > share:
                break
        self.ran[self._testMethodName] = done

    # ---- verdicts --------------------------------------------------------

    def goaway_after(self, data, code, settings=(), c=None):
        """data on a new connection (after the preface): GOAWAY code, then
        the connection closed."""
        c = c or self.raw(settings=settings)
        c.send(data)
        c.expect_goaway(code)

    def ping_ack(self, c, data=b"h2-conf!"):
        """c still answers a PING (what came before it was ignored)."""
        c.send(ping(data))
        f = c.until(lambda x: (x.type == PING and x.flags & ACK) or x.type in (GOAWAY, RST_STREAM),
                    what="PING ACK %r" % data)
        self.assertEqual((f.type, f.payload), (PING, data), c.history())

    def ping_ack_or_close(self, c, data=b"h2-conf!"):
        """After the client's GOAWAY: the PING answered, or the connection
        closed without an error (with no stream left to serve, the server
        may close at once: whether the PING was read before depends on how
        the frames fell into its reads). Returns True when answered."""
        try:
            c.send(ping(data))
        except OSError:
            return False
        try:
            f = c.until(lambda x: (x.type == PING and x.flags & ACK) or x.type in (GOAWAY, RST_STREAM),
                        what="PING ACK %r" % data)
        except AssertionError:
            self.assertTrue(c.eof, c.history())
            self.assertFalse([f for f in c.log if f.type in (GOAWAY, RST_STREAM) and
                              f.payload[-4:] != b"\0\0\0\0"], c.history())
            return False
        if f.type == GOAWAY:
            self.assertEqual(c.goaway[1], NO_ERROR, c.history())
            return False
        self.assertEqual((f.type, f.payload), (PING, data), c.history())
        return True

    def response(self, c, sid, status=200, body=HELLO):
        got = c.response(sid)
        self.assertEqual((got[0], got[2]), (status, body), c.history())
        return got

    def stream_error(self, c, sid, code, probe):
        """RST_STREAM code on sid (not a GOAWAY); stream probe still served."""
        c.expect_rst(sid, code)
        c.alive_check(probe)

    def half_closed_remote(self, path="/plaintext", window=1):
        """A connection whose stream 1 is half-closed (remote): the request
        ended (END_STREAM), the response began (HEADERS and `window` bytes
        of DATA) and waits for the client's window."""
        c = self.raw(settings=[(INITIAL_WINDOW_SIZE, window)])
        c.auto_window = False
        c.request(1, path)
        f = c.until(lambda x: x.sid == 1 and x.type in (DATA, RST_STREAM) or x.type == GOAWAY,
                    what="the first DATA on stream 1")
        self.assertEqual((f.type, len(f.payload), f.flags & END_STREAM), (DATA, window, 0), c.history())
        return c

    def data_bytes(self, c, sid, n, end):
        """Reads stream sid's next DATA: exactly n bytes, END_STREAM as end."""
        f = c.until(lambda x: x.sid == sid and x.type in (DATA, RST_STREAM) or x.type == GOAWAY,
                    what="DATA on stream %d" % sid)
        self.assertEqual((f.type, len(f.payload), bool(f.flags & END_STREAM)), (DATA, n, end), c.history())
        return f.payload

    # =====================================================================
    # generic/2: streams and multiplexing (RFC 9113 §5.1, §5.3.2, §6.3)

    def test_generic_2_1_priority_on_idle_stream(self):
        # §5.1 idle / §6.3: PRIORITY may be sent on an idle stream; it opens nothing
        def case(i):
            c = self.raw()
            c.send(priority(3, dep=0, weight=200))
            self.ping_ack(c)
            c.alive_check(3)
        self.repeat(case)

    def test_generic_2_2_window_update_on_half_closed_remote(self):
        # §5.1 half-closed (remote): WINDOW_UPDATE is allowed; the rest follows
        def case(i):
            c = self.half_closed_remote()
            c.send(window_update(1, 100))
            self.assertEqual(self.data_bytes(c, 1, len(HELLO) - 1, True), HELLO[1:])
        self.repeat(case)

    def test_generic_2_3_priority_on_half_closed_remote(self):
        def case(i):
            c = self.half_closed_remote()
            c.send(priority(1, dep=0, weight=7) + window_update(1, 100))
            self.assertEqual(self.data_bytes(c, 1, len(HELLO) - 1, True), HELLO[1:])
        self.repeat(case)

    def test_generic_2_4_rst_stream_on_half_closed_remote(self):
        def case(i):
            c = self.half_closed_remote()
            c.send(rst_stream(1, h2util.CANCEL))
            self.ping_ack(c)
            c.auto_window = True
            c.send(window_update(0, 100))
            c.alive_check(3)
            self.assertFalse([f for f in c.log if f.sid == 1 and f.type == RST_STREAM], c.history())
        self.repeat(case)

    def test_generic_2_5_priority_on_closed_stream(self):
        # §5.1 closed: PRIORITY is the one frame allowed on a closed stream
        def case(i):
            c = self.raw()
            c.request(1)
            self.response(c, 1)
            c.send(priority(1, dep=0, weight=100))
            self.ping_ack(c)
            c.alive_check(3)
        self.repeat(case)

    # generic/3: frame definitions (§6)

    def test_generic_3_1_3_data_with_padding(self):
        # §6.1: padding is not part of the body (and counts for flow control)
        def case(i):
            c = self.raw()
            c.headers(1, POST, end_stream=False)
            pad = 1 + i % 20
            c.send_frame(DATA, END_STREAM | PADDED, 1, bytes([pad]) + b"padded body" + b"\0" * pad)
            self.response(c, 1, 200, b"padded body")
        self.repeat(case)

    def test_generic_3_2_2_headers_with_padding(self):
        def case(i):
            c = self.raw()
            pad = i % 30
            c.send_frame(HEADERS, END_STREAM | END_HEADERS | PADDED, 1,
                         bytes([pad]) + c.encode(GET) + b"\0" * pad)
            self.response(c, 1)
        self.repeat(case)

    def test_generic_3_2_3_headers_with_priority(self):
        # the PRIORITY flag's 5 bytes (deprecated in RFC 9113 §5.3.2, still parsed)
        def case(i):
            c = self.raw()
            prio = struct.pack(">IB", 0x80000000 if i % 2 else 0, 255)
            c.send_frame(HEADERS, END_STREAM | END_HEADERS | PRIORITY_FLAG, 1, prio + c.encode(GET))
            self.response(c, 1)
        self.repeat(case)

    def test_generic_3_2_3b_headers_with_priority_and_padding(self):
        # both flags: pad length, then priority, then the block
        def case(i):
            c = self.raw()
            c.send_frame(HEADERS, END_STREAM | END_HEADERS | PRIORITY_FLAG | PADDED, 1,
                         bytes([4]) + struct.pack(">IB", 0, 16) + c.encode(GET) + b"\0" * 4)
            self.response(c, 1)
        self.repeat(case)

    def priority_then_request(self, frames, sid):
        def case(i):
            c = self.raw()
            c.request(1)
            self.response(c, 1)
            c.send(frames)
            c.request(sid)
            self.response(c, sid)
        self.repeat(case)

    def test_generic_3_3_1_priority_weight_1(self):
        self.priority_then_request(priority(3, dep=0, weight=0), 3)

    def test_generic_3_3_2_priority_weight_256(self):
        self.priority_then_request(priority(3, dep=0, weight=255), 3)

    def test_generic_3_3_3_priority_with_dependency(self):
        self.priority_then_request(priority(3, dep=1, weight=10), 3)

    def test_generic_3_3_4_priority_exclusive(self):
        self.priority_then_request(priority(3, dep=1, weight=10, exclusive=True), 3)

    def test_generic_3_3_5_priority_on_idle_then_lower_headers(self):
        # PRIORITY on idle stream 9 does not open it (RFC 9113 §5.1): stream 5
        # may still be opened after it
        self.priority_then_request(priority(9, dep=0, weight=10), 5)

    def test_generic_3_8_1_goaway_from_client(self):
        # §6.8: the client's GOAWAY (last stream 0, NO_ERROR): the stream
        # opened before it completes; then the server may answer the PING or
        # close (no error)
        def case(i):
            c = self.raw()
            c.request(1)
            c.send(goaway(0, NO_ERROR))
            self.ping_ack_or_close(c)
            self.response(c, 1)
        self.repeat(case)

    def test_generic_3_10_2_multiple_continuation(self):
        # also http2/6.10/1: HEADERS + CONTINUATION frames: one header block
        def case(i):
            c = self.raw()
            block = c.encode(GET + [("x-part-%d" % k, "v" * 10) for k in range(6)])
            n = 2 + i % 5                      # 2 to 6 fragments
            cut = [len(block) * k // n for k in range(n + 1)]
            c.send(frame(HEADERS, END_STREAM, 1, block[cut[0]:cut[1]]))
            for k in range(1, n):
                c.send(frame(CONTINUATION, END_HEADERS if k == n - 1 else 0, 1, block[cut[k]:cut[k + 1]]))
            self.response(c, 1)
            c.alive_check(3)
        self.repeat(case)

    # generic/5: every HPACK field representation (RFC 7541 §6)

    def hpack_request(self, block):
        def case(i):
            c = self.raw()
            c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, block))
            self.response(c, 1)
        self.repeat(case)

    def test_generic_5_1_indexed(self):
        # :method GET, :scheme http (indexed), :path and :authority literal
        self.hpack_request(GET_BLOCK)

    def hpack_path(self, kind, indexed_name, huffman):
        name = 4 if indexed_name else ":path"
        self.hpack_request(GET_PREFIX + literal(kind, name, "/plaintext", huffman))

    def test_generic_5_2_incremental_indexed_name(self):
        self.hpack_path("incremental", True, False)

    def test_generic_5_3_incremental_indexed_name_huffman(self):
        self.hpack_path("incremental", True, True)

    def test_generic_5_4_incremental_new_name(self):
        self.hpack_path("incremental", False, False)

    def test_generic_5_5_incremental_new_name_huffman(self):
        self.hpack_path("incremental", False, True)

    def test_generic_5_6_without_indexing_indexed_name(self):
        self.hpack_path("without", True, False)

    def test_generic_5_7_without_indexing_indexed_name_huffman(self):
        self.hpack_path("without", True, True)

    def test_generic_5_8_without_indexing_new_name(self):
        self.hpack_path("without", False, False)

    def test_generic_5_9_without_indexing_new_name_huffman(self):
        self.hpack_path("without", False, True)

    def test_generic_5_10_never_indexed_indexed_name(self):
        self.hpack_path("never", True, False)

    def test_generic_5_11_never_indexed_indexed_name_huffman(self):
        self.hpack_path("never", True, True)

    def test_generic_5_12_never_indexed_new_name(self):
        self.hpack_path("never", False, False)

    def test_generic_5_13_never_indexed_new_name_huffman(self):
        self.hpack_path("never", False, True)

    def test_generic_5_14_dynamic_table_size_update(self):
        self.hpack_request(size_update(100) + GET_BLOCK)

    def test_generic_5_15_multiple_dynamic_table_size_updates(self):
        # §4.2: several at the start of a block (the smallest, then the last, apply)
        self.hpack_request(size_update(0) + size_update(4096) + GET_BLOCK)

    def test_generic_5_16_indexed_from_dynamic_table(self):
        # a field added with incremental indexing (index 62) used on the next stream
        def case(i):
            c = self.raw()
            c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1,
                         GET_PREFIX + literal("incremental", 4, "/plaintext")))
            self.response(c, 1)
            c.send(frame(HEADERS, END_STREAM | END_HEADERS, 3, indexed(2) + indexed(6) +
                         literal("without", 1, "localhost") + indexed(62)))
            self.response(c, 3)
        self.repeat(case)

    # =====================================================================
    # hpack (RFC 7541): decoding errors are connection errors COMPRESSION_ERROR (RFC 9113 §4.3)

    def compression_error(self, block):
        self.repeat(lambda i: self.goaway_after(frame(HEADERS, END_STREAM | END_HEADERS, 1, block),
                                                COMPRESSION_ERROR))

    def test_hpack_2_3_3_1_indexed_invalid_index(self):
        # §2.3.3: index 70 with an empty dynamic table (61 static entries)
        self.compression_error(GET_BLOCK + indexed(70))

    def test_hpack_2_3_3_2_literal_invalid_index(self):
        self.compression_error(GET_PREFIX + literal("incremental", 70, "/plaintext"))

    def test_hpack_4_2_1_size_update_at_end_of_block(self):
        # §4.2: a dynamic table size update must come first in a block
        self.compression_error(GET_BLOCK + size_update(0))

    def test_hpack_5_2_1_huffman_padding_over_7_bits(self):
        # §5.2: "a" is 5 bits (00011) + 3 bits of EOS; a whole byte more of padding
        self.compression_error(GET_BLOCK + ua_value(bytes([0x82, 0x1F, 0xFF])))

    def test_hpack_5_2_2_huffman_padded_by_zero(self):
        # "a" (00011) padded with 000: padding must be the EOS prefix (ones)
        self.compression_error(GET_BLOCK + ua_value(bytes([0x81, 0x18])))

    def test_hpack_5_2_3_huffman_eos(self):
        # 32 one bits: the 30-bit EOS symbol inside the string
        self.compression_error(GET_BLOCK + ua_value(bytes([0x84]) + b"\xff" * 4))

    def test_hpack_6_1_1_index_0(self):
        self.compression_error(GET_BLOCK + indexed(0))

    def test_hpack_6_3_1_size_update_over_settings(self):
        # our SETTINGS_HEADER_TABLE_SIZE is the default 4096 (§4.2, §6.3)
        self.compression_error(size_update(4097) + GET_BLOCK)

    # =====================================================================
    # http2 (RFC 9113)

    def test_http2_3_5_1_server_preface_first(self):
        # §3.4: the server's first frame is SETTINGS (not an ACK)
        def case(i):
            c = self.raw()
            f = c.recv_frame()
            self.assertEqual((f.type, f.sid, f.flags & ACK), (SETTINGS, 0, 0), c.history())
            c.until(lambda x: x.type == SETTINGS and x.flags & ACK, what="SETTINGS ACK")
        self.repeat(case)

    def test_http2_3_5_2_invalid_preface(self):
        # §3.4: an invalid preface is a connection error PROTOCOL_ERROR. Over
        # TLS (ALPN h2) it is GOAWAY; on a plaintext port nothing says the
        # client meant HTTP/2: the bytes are an HTTP/1.1 request, answered
        # 400 (or 505) and the connection closed (no HTTP/2 frame)
        bad = [b"INVALID CONNECTION PREFACE\r\n\r\n", b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"]

        def case(i):
            c = self.raw(preface=False)
            c.send(bad[i % 2] + settings_frame())
            if self.cafile:
                c.expect_goaway(PROTOCOL_ERROR)
                return
            data = b""
            c.sock.settimeout(h2util.READ_TIMEOUT)
            while True:
                try:
                    chunk = c.sock.recv(65536)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                data += chunk
            self.assertRegex(data[:12], rb"^HTTP/1\.1 (400|505)", data[:200])
        self.repeat(case)

    def test_http2_4_1_2_undefined_flags_ignored(self):
        # §4.1: flags without meaning for the type are ignored
        def case(i):
            c = self.raw()
            c.send(frame(PING, 0xFE, 0, b"flags-on"))
            f = c.until(lambda x: x.type in (PING, GOAWAY), what="PING ACK")
            self.assertEqual((f.type, f.flags, f.payload), (PING, ACK, b"flags-on"), c.history())
            # and on HEADERS: 0x2, 0x10, 0x40, 0x80 mean nothing there
            c.send_frame(HEADERS, END_STREAM | END_HEADERS | 0xD2, 1, c.encode(GET))
            self.response(c, 1)
        self.repeat(case)

    def test_http2_4_1_3_reserved_bit_ignored(self):
        # §4.1: the reserved bit of the stream id is ignored on receipt
        def case(i):
            c = self.raw()
            c.send(raw_frame(PING, 0, 0x80000000, b"reserved"))
            f = c.until(lambda x: x.type in (PING, GOAWAY), what="PING ACK")
            self.assertEqual((f.type, f.payload), (PING, b"reserved"), c.history())
            c.send(raw_frame(HEADERS, END_STREAM | END_HEADERS, 0x80000001, c.encode(GET)))
            self.response(c, 1)
        self.repeat(case)

    def test_http2_4_2_1_data_of_16384_octets(self):
        # §4.2: every endpoint takes frames up to 2^14 octets
        body = bytes(range(256)) * 64

        def case(i):
            c = self.raw()
            c.headers(1, POST + [("content-length", str(len(body)))], end_stream=False)
            c.send_frame(DATA, END_STREAM, 1, body)
            self.response(c, 1, 200, body)
        self.repeat(case)

    def test_http2_4_3_1_invalid_header_block(self):
        # §4.3: a block that does not decode (a string cut short) is COMPRESSION_ERROR
        self.compression_error(GET_PREFIX + bytes([0x04, 0x0A]) + b"/plai")

    def test_http2_4_3_2_priority_inside_header_block(self):
        # also http2/6.2/1: §4.3, §6.2, §6.10: nothing but CONTINUATION inside a block
        def case(i):
            c = self.raw()
            block = c.encode(GET)
            c.send(frame(HEADERS, END_STREAM, 1, block[:4]) + priority(1 if i % 2 else 3, dep=0))
            c.expect_goaway(PROTOCOL_ERROR)
        self.repeat(case)

    def test_http2_4_3_3_headers_inside_header_block(self):
        # also http2/6.2/2: a HEADERS on another stream while a block is open
        def case(i):
            c = self.raw()
            block = c.encode(GET)
            c.send(frame(HEADERS, END_STREAM, 1, block[:4]) +
                   frame(HEADERS, END_STREAM | END_HEADERS, 3, block))
            c.expect_goaway(PROTOCOL_ERROR)
        self.repeat(case)

    def test_http2_5_1_3_window_update_on_idle_stream(self):
        # §5.1 idle: anything but HEADERS and PRIORITY is a connection error
        self.repeat(lambda i: self.goaway_after(window_update(1 + 2 * (i % 3), 100), PROTOCOL_ERROR))

    def test_http2_5_1_6_headers_on_half_closed_remote(self):
        # §5.1 half-closed (remote): STREAM_CLOSED. Given as a connection
        # error (GOAWAY STREAM_CLOSED): nghttp2 still knows the stream
        def case(i):
            c = self.half_closed_remote()
            c.headers(1, [("x-late", "1")], end_stream=True)
            c.expect_goaway(STREAM_CLOSED)
        self.repeat(case)

    def test_http2_5_1_7_continuation_on_half_closed_remote(self):
        # a CONTINUATION with no open block: §6.10 PROTOCOL_ERROR (connection)
        def case(i):
            c = self.half_closed_remote()
            c.send(frame(CONTINUATION, END_HEADERS, 1, c.encode([("x-late", "1")])))
            c.expect_goaway(PROTOCOL_ERROR)
        self.repeat(case)

    def test_http2_5_1_9_headers_after_client_rst_stream(self):
        # §5.1 closed (after the client's RST_STREAM): STREAM_CLOSED, not
        # PROTOCOL_ERROR (the id is no new stream going backwards, §5.1.1).
        # RFC 9113 allows a stream error; examples/hello makes it a
        # connection error (GOAWAY STREAM_CLOSED), as for a stream closed both ways
        def case(i):
            c = self.raw()
            c.headers(1, POST, end_stream=False)
            c.send(rst_stream(1, h2util.CANCEL))
            c.headers(1, [("x-late", "1")], end_stream=True)
            c.expect_goaway(STREAM_CLOSED)
        self.repeat(case)

    def test_http2_5_1_10_continuation_after_client_rst_stream(self):
        # a CONTINUATION with no open block: PROTOCOL_ERROR (connection, §6.10)
        def case(i):
            c = self.raw()
            c.headers(1, POST, end_stream=False)
            c.send(rst_stream(1, h2util.CANCEL) +
                   frame(CONTINUATION, END_HEADERS, 1, c.encode([("x-late", "1")])))
            c.expect_goaway(PROTOCOL_ERROR)
        self.repeat(case)

    def test_http2_5_1_12_headers_on_closed_stream(self):
        # §5.1 closed (END_STREAM both ways): a connection error STREAM_CLOSED;
        # a HEADERS on an id that was never opened is PROTOCOL_ERROR (§5.1.1)
        def case(i):
            c = self.raw()
            c.request(1)
            self.response(c, 1)
            if i % 2:
                c.request(3)
                self.response(c, 3)
            c.request(1)
            c.expect_goaway(STREAM_CLOSED)
        self.repeat(case)

    def test_http2_5_1_12b_headers_on_skipped_stream(self):
        # the ids a client skipped were never opened: §5.1.1 PROTOCOL_ERROR
        def case(i):
            c = self.raw()
            c.request(1)
            self.response(c, 1)
            c.request(9)
            self.response(c, 9)
            c.request(3 + 2 * (i % 3))
            c.expect_goaway(PROTOCOL_ERROR)
        self.repeat(case)

    def test_http2_5_1_13_continuation_on_closed_stream(self):
        def case(i):
            c = self.raw()
            c.request(1)
            self.response(c, 1)
            c.send(frame(CONTINUATION, END_HEADERS, 1, c.encode([("x-late", "1")])))
            c.expect_goaway(PROTOCOL_ERROR)
        self.repeat(case)

    def test_http2_5_3_1_1_headers_depending_on_itself(self):
        # §5.3.1: a stream depending on itself is a stream error
        # PROTOCOL_ERROR; nghttp2 makes it a connection error (§5.4: allowed)
        def case(i):
            c = self.raw()
            c.send_frame(HEADERS, END_STREAM | END_HEADERS | PRIORITY_FLAG, 1,
                         struct.pack(">IB", 1, 16) + c.encode(GET))
            c.expect_goaway(PROTOCOL_ERROR)
        self.repeat(case)

    def test_http2_5_5_2_unknown_frame_inside_header_block(self):
        # §5.5: an unknown frame is ignored, but not inside a header block (§6.10)
        def case(i):
            c = self.raw()
            block = c.encode(GET)
            c.send(frame(HEADERS, END_STREAM, 1, block[:4]) + frame(0xFA, 0, 1, b"ext"))
            c.expect_goaway(PROTOCOL_ERROR)
        self.repeat(case)

    def test_http2_6_1_1_data_on_stream_0(self):
        self.repeat(lambda i: self.goaway_after(frame(DATA, END_STREAM if i % 2 else 0, 0, b"zero"),
                                                PROTOCOL_ERROR))

    def test_http2_6_1_3_data_with_bad_padding(self):
        # §6.1: a pad length reaching the payload's end is PROTOCOL_ERROR (connection)
        def case(i):
            c = self.raw()
            c.headers(1, POST, end_stream=False)
            c.send_frame(DATA, END_STREAM | PADDED, 1, bytes([6 + i % 3]) + b"hello")
            c.expect_goaway(PROTOCOL_ERROR)
        self.repeat(case)

    def test_http2_6_2_3_headers_on_stream_0(self):
        def case(i):
            c = self.raw()
            self.goaway_after(frame(HEADERS, END_STREAM | END_HEADERS, 0, c.encode(GET)), PROTOCOL_ERROR, c=c)
        self.repeat(case)

    def test_http2_6_3_1_priority_on_stream_0(self):
        self.repeat(lambda i: self.goaway_after(priority(0, dep=1), PROTOCOL_ERROR))

    def test_http2_6_3_2_priority_wrong_length(self):
        # §6.3 (RFC 9113 too, though it deprecates the signal): a PRIORITY
        # frame of another length than 5 is a stream error FRAME_SIZE_ERROR;
        # nghttp2 makes it a connection error (§5.4: allowed). On an open
        # stream and on an idle one.
        def case(i):
            c = self.half_closed_remote()
            c.send(frame(PRIORITY, 0, 1 if i % 4 < 2 else 3, b"\0\0\0\0\x10\0"[:4 if i % 2 else 6]))
            c.expect_goaway(FRAME_SIZE_ERROR)
        self.repeat(case)

    def test_http2_6_4_1_rst_stream_on_stream_0(self):
        self.repeat(lambda i: self.goaway_after(rst_stream(0, h2util.CANCEL), PROTOCOL_ERROR))

    def test_http2_6_4_3_rst_stream_wrong_length(self):
        # §6.4: FRAME_SIZE_ERROR, a connection error
        def case(i):
            c = self.half_closed_remote()
            c.send(frame(RST_STREAM, 0, 1, b"\0\0\0\x08\0"[:3 if i % 2 else 5]))
            c.expect_goaway(FRAME_SIZE_ERROR)
        self.repeat(case)

    def test_http2_6_5_3_1_settings_applied_in_order(self):
        # §6.5.3: values in the order they appear: INITIAL_WINDOW_SIZE 100, then 1
        def case(i):
            c = self.raw(settings=[(INITIAL_WINDOW_SIZE, 100), (INITIAL_WINDOW_SIZE, 1)])
            c.auto_window = False
            c.request(1)
            self.assertEqual(self.data_bytes(c, 1, 1, False), HELLO[:1])
        self.repeat(case)

    def test_http2_6_7_2_ping_ack_not_answered(self):
        # §6.7: a PING with ACK gets no answer
        def case(i):
            c = self.raw()
            c.send(ping(b"unasked!", ack=True))
            self.ping_ack(c, b"asked!!!")
            self.assertEqual([f.payload for f in c.log if f.type == PING], [b"asked!!!"], c.history())
        self.repeat(case)

    def test_http2_6_8_1_goaway_on_stream(self):
        self.repeat(lambda i: self.goaway_after(frame(GOAWAY, 0, 1, struct.pack(">II", 0, 0)), PROTOCOL_ERROR))

    def test_http2_6_9_1_1_window_of_1(self):
        # §6.9.1: never more DATA than the window: 1 byte, then the rest once opened
        def case(i):
            c = self.half_closed_remote()
            c.send(window_update(1, 5))
            self.assertEqual(self.data_bytes(c, 1, 5, False), HELLO[1:6])
        self.repeat(case)

    def test_http2_6_9_1_3_stream_window_overflow(self):
        # §6.9.1: a stream window past 2^31-1 is a stream error FLOW_CONTROL_ERROR
        # (/text's 200 KiB cannot complete inside the 64 KiB connection window)
        h2util.flare_only("hello's /text")

        def case(i):
            c = self.half_closed_remote("/text?kb=200")
            c.send(window_update(1, (1 << 31) - 1) + window_update(1, (1 << 31) - 1))
            c.expect_rst(1, FLOW_CONTROL_ERROR)
            c.send(window_update(0, 1 << 20))
            c.auto_window = True
            c.alive_check(3)
        self.repeat(case)

    def test_http2_6_9_2_1_initial_window_changed_after_headers(self):
        # §6.9.2: a new SETTINGS_INITIAL_WINDOW_SIZE adjusts open streams
        def case(i):
            c = self.raw(settings=[(INITIAL_WINDOW_SIZE, 0)])
            c.auto_window = False
            c.request(1)
            f = c.until(lambda x: x.sid == 1 or x.type == GOAWAY, what="the response HEADERS")
            self.assertEqual(f.type, HEADERS, c.history())
            c.send(settings_frame([(INITIAL_WINDOW_SIZE, 1)]))
            self.assertEqual(self.data_bytes(c, 1, 1, False), HELLO[:1])
            c.send(settings_frame([(INITIAL_WINDOW_SIZE, 100)]))
            self.assertEqual(self.data_bytes(c, 1, len(HELLO) - 1, True), HELLO[1:])
        self.repeat(case)

    def test_http2_6_9_2_2_negative_window(self):
        # §6.9.2: lowering INITIAL_WINDOW_SIZE can make a window negative: 3
        # bytes sent of 3, window to 1 (so -2), WINDOW_UPDATE 3: exactly 1 byte
        def case(i):
            c = self.half_closed_remote(window=3)
            acks = c.settings_acked
            c.send(settings_frame([(INITIAL_WINDOW_SIZE, 1)]))
            c.until(lambda x: x.type == SETTINGS and x.flags & ACK and c.settings_acked > acks or
                    x.sid == 1, what="SETTINGS ACK")
            self.assertEqual(c.settings_acked, acks + 1, c.history())
            c.send(window_update(1, 3))
            self.assertEqual(self.data_bytes(c, 1, 1, False), HELLO[3:4])
            c.send(window_update(1, 100))
            self.assertEqual(self.data_bytes(c, 1, len(HELLO) - 4, True), HELLO[4:])
        self.repeat(case)

    def open_block(self, c, sid=1):
        block = c.encode(GET)
        c.send(frame(HEADERS, END_STREAM, sid, block[:3]) + frame(CONTINUATION, 0, sid, block[3:5]))
        return block

    def test_http2_6_10_2_continuation_then_other_frame(self):
        # §6.10: inside a block (HEADERS, CONTINUATION) a DATA frame: PROTOCOL_ERROR
        def case(i):
            c = self.raw()
            self.open_block(c)
            c.send(frame(DATA, END_STREAM, 1, b"x") if i % 2 else ping())
            c.expect_goaway(PROTOCOL_ERROR)
        self.repeat(case)

    def test_http2_6_10_3_continuation_on_stream_0(self):
        def case(i):
            c = self.raw()
            block = self.open_block(c)
            c.send(frame(CONTINUATION, END_HEADERS, 0, block[5:]))
            c.expect_goaway(PROTOCOL_ERROR)
        self.repeat(case)

    def test_http2_6_10_4_continuation_after_end_headers(self):
        def case(i):
            c = self.raw()
            c.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, c.encode(GET)) +
                   frame(CONTINUATION, END_HEADERS, 1, c.encode([("x-more", "1")])))
            c.expect_goaway(PROTOCOL_ERROR)
        self.repeat(case)

    def test_http2_6_10_5_continuation_after_continuation_with_end_headers(self):
        def case(i):
            c = self.raw()
            block = self.open_block(c)
            c.send(frame(CONTINUATION, END_HEADERS, 1, block[5:]) +
                   frame(CONTINUATION, END_HEADERS, 1, c.encode([("x-more", "1")])))
            c.expect_goaway(PROTOCOL_ERROR)
        self.repeat(case)

    def test_http2_6_10_6_continuation_after_data(self):
        def case(i):
            c = self.raw()
            c.headers(1, POST, end_stream=False)
            c.send(frame(DATA, 0, 1, b"body") + frame(CONTINUATION, END_HEADERS, 1, c.encode([("x", "1")])))
            c.expect_goaway(PROTOCOL_ERROR)
        self.repeat(case)

    def test_http2_7_1_goaway_unknown_error_code(self):
        # §7: unknown codes trigger nothing special: the PING is answered
        def case(i):
            c = self.raw()
            c.send(goaway(0, 0xFF + i))
            self.ping_ack_or_close(c)
        self.repeat(case)

    def test_http2_7_2_rst_stream_unknown_error_code(self):
        def case(i):
            c = self.raw()
            c.headers(1, POST, end_stream=False)
            c.send(rst_stream(1, 0xFF + i))
            self.ping_ack(c)
            c.alive_check(3)
        self.repeat(case)

    def test_http2_8_1_2_6_2_content_length_vs_several_data(self):
        # §8.1.1: content-length against the sum of the DATA frames
        def case(i):
            c = self.raw()
            c.headers(1, POST + [("content-length", "8" if i % 2 else "20")], end_stream=False)
            c.data(1, b"12345")
            c.data(1, b"67890", end_stream=True)
            self.stream_error(c, 1, PROTOCOL_ERROR, 3)
        self.repeat(case)

    def test_http2_8_2_1_push_promise_from_client(self):
        # §8.4: a client cannot push: PUSH_PROMISE is a connection error PROTOCOL_ERROR
        def case(i):
            c = self.raw()
            c.request(1)
            self.response(c, 1)
            c.send(frame(PUSH_PROMISE, END_HEADERS, 1 if i % 2 else 3, struct.pack(">I", 2) + c.encode(GET)))
            c.expect_goaway(PROTOCOL_ERROR)
        self.repeat(case)


if __name__ == "__main__":
    flaretest.main()
