#!/usr/bin/python3
"""Malformed requests, table-driven: each raw request must get the precise
status, a short text/plain body naming the problem, `Connection: close`, and
then the connection is closed by the server. Also the limits at their exact
boundaries (request line 8 KiB -> 414, head 32 KiB and 100 fields -> 431,
body 1 MiB -> 413), and the server still serving afterwards."""

import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
from flaretest import ServerTestCase  # noqa: E402

H = b"Host: x\r\n"
OKREQ = b"GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n"


def req(first=b"GET /plaintext HTTP/1.1", fields=H, body=b""):
    return first + b"\r\n" + fields + b"\r\n" + body


# (name, raw request, expected status or tuple of acceptable statuses)
CASES = [
    # ---- request line ----
    ("double SP after method", req(b"GET  /plaintext HTTP/1.1"), 400),
    ("double SP before version", req(b"GET /plaintext  HTTP/1.1"), 400),
    ("trailing SP after version", req(b"GET /plaintext HTTP/1.1 "), 400),
    ("HTAB as separator", req(b"GET\t/plaintext HTTP/1.1"), 400),
    ("leading SP before method", req(b" GET /plaintext HTTP/1.1"), 400),
    ("method with non-tchar", req(b"GE(T /plaintext HTTP/1.1"), 400),
    ("method with '@'", req(b"G@T /plaintext HTTP/1.1"), 400),
    ("method with NUL", req(b"GE\x00T /plaintext HTTP/1.1"), 400),
    ("method with 8-bit byte", req(b"G\xc9T /plaintext HTTP/1.1"), 400),
    ("missing request-target", req(b"GET HTTP/1.1"), 400),
    ("missing version", req(b"GET /plaintext"), 400),
    ("target with NUL", req(b"GET /plain\x00text HTTP/1.1"), 400),
    ("target with control char", req(b"GET /plain\x01text HTTP/1.1"), 400),
    ("target with DEL", req(b"GET /plain\x7ftext HTTP/1.1"), 400),
    ("target with 8-bit byte", req(b"GET /caf\xe9 HTTP/1.1"), 400),
    ("target with fragment", req(b"GET /plaintext#frag HTTP/1.1"), 400),
    ("target without leading slash", req(b"GET plaintext HTTP/1.1"), 400),
    ("asterisk target for GET", req(b"GET * HTTP/1.1"), 400),
    ("lower-case version", req(b"GET /plaintext http/1.1"), 400),
    ("version without minor", req(b"GET /plaintext HTTP/1"), 400),
    ("version two-digit major", req(b"GET /plaintext HTTP/11.1"), 400),
    ("version with junk after", req(b"GET /plaintext HTTP/1.1x"), 400),
    ("version 2.0", req(b"GET /plaintext HTTP/2.0"), 505),
    ("version 3.0", req(b"GET /plaintext HTTP/3.0"), 505),
    ("version 0.9", req(b"GET /plaintext HTTP/0.9"), 505),
    ("bare LF ends request line", b"GET /plaintext HTTP/1.1\nHost: x\r\n\r\n", 400),
    ("bare LF everywhere", b"GET /plaintext HTTP/1.1\nHost: x\n\n", 400),
    ("bare CR in request line", b"GET /plaintext HTTP/1.1\rHost: x\r\n\r\n", 400),
    ("bare CR inside target", req(b"GET /plain\rtext HTTP/1.1"), 400),
    ("lone '%' in path", req(b"GET /plain% HTTP/1.1"), 400),
    ("'%' and one hex digit in path", req(b"GET /plain%4 HTTP/1.1"), 400),
    ("'%' and non-hex in path", req(b"GET /pl%zzaintext HTTP/1.1"), 400),
    ("'%%' in path", req(b"GET /%%41 HTTP/1.1"), 400),
    ("bad escape in absolute-form path", req(b"GET http://x/a%g0 HTTP/1.1"), 400),
    # ---- header fields ----
    ("obs-fold (SP)", req(fields=H + b"X-A: a\r\n b\r\n"), 400),
    ("obs-fold (HTAB)", req(fields=H + b"X-A: a\r\n\tb\r\n"), 400),
    ("SP before colon", req(fields=b"Host : x\r\n"), 400),
    ("HTAB before colon", req(fields=H + b"X-A\t: b\r\n"), 400),
    ("SP inside name", req(fields=H + b"X A: b\r\n"), 400),
    ("non-tchar in name", req(fields=H + b"X(A): b\r\n"), 400),
    ("8-bit byte in name", req(fields=H + b"X-\xe9: b\r\n"), 400),
    ("NUL in name", req(fields=H + b"X-\x00A: b\r\n"), 400),
    ("empty name", req(fields=H + b": b\r\n"), 400),
    ("line without colon", req(fields=H + b"NoColonHere\r\n"), 400),
    ("NUL in value", req(fields=H + b"X-A: a\x00b\r\n"), 400),
    ("control char in value", req(fields=H + b"X-A: a\x01b\r\n"), 400),
    ("DEL in value", req(fields=H + b"X-A: a\x7fb\r\n"), 400),
    ("bare CR in value", req(fields=H + b"X-A: a\rb\r\n"), 400),
    ("bare LF in value", req(fields=H + b"X-A: a\nb\r\n"), 400),
    ("bare LF ends field line", req(fields=H + b"X-A: b\n"), 400),
    ("bare CR starts a field line", b"GET /plaintext HTTP/1.1\r\nHost: x\r\n\rX: y\r\n\r\n", 400),
    ("leading field line fold", b"GET /plaintext HTTP/1.1\r\n Host: x\r\n\r\n", 400),
    # ---- Host ----
    ("missing Host in 1.1", req(fields=b"X-A: b\r\n"), 400),
    ("duplicate Host", req(fields=b"Host: x\r\nHost: x\r\n"), 400),
    ("duplicate Host, other case", req(fields=b"Host: x\r\nhost: y\r\n"), 400),
    ("invalid Host value", req(fields=b"Host: a b\r\n"), 400),
    ("Host with slash", req(fields=b"Host: a/b\r\n"), 400),
    # ---- framing ----
    ("TE + CL", req(b"POST /echo HTTP/1.1",
                    H + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n", b"0\r\n\r\n"), 400),
    ("CL + TE", req(b"POST /echo HTTP/1.1",
                    H + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n"), 400),
    ("CL letters", req(b"POST /echo HTTP/1.1", H + b"Content-Length: 1a\r\n", b"1a"), 400),
    ("CL plus sign", req(b"POST /echo HTTP/1.1", H + b"Content-Length: +3\r\n", b"abc"), 400),
    ("CL negative", req(b"POST /echo HTTP/1.1", H + b"Content-Length: -1\r\n"), 400),
    ("CL hex", req(b"POST /echo HTTP/1.1", H + b"Content-Length: 0x3\r\n", b"abc"), 400),
    ("CL empty", req(b"POST /echo HTTP/1.1", H + b"Content-Length: \r\n"), 400),
    ("CL list", req(b"POST /echo HTTP/1.1", H + b"Content-Length: 3, 3\r\n", b"abc"), 400),
    ("CL inner space", req(b"POST /echo HTTP/1.1", H + b"Content-Length: 1 2\r\n", b"a" * 12), 400),
    ("CL duplicated, same value",
     req(b"POST /echo HTTP/1.1", H + b"Content-Length: 3\r\nContent-Length: 3\r\n", b"abc"), 400),
    ("CL duplicated, different values",
     req(b"POST /echo HTTP/1.1", H + b"Content-Length: 3\r\nContent-Length: 4\r\n", b"abcd"), 400),
    ("CL overflows 64 bits",
     req(b"POST /echo HTTP/1.1", H + b"Content-Length: 99999999999999999999999\r\n"), (400, 413)),
    ("TE gzip", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: gzip\r\n", b"x"), 501),
    ("TE identity", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: identity\r\n"), 501),
    ("TE gzip, chunked",
     req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n"), 501),
    ("TE chunked, chunked",
     req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked, chunked\r\n", b"0\r\n\r\n"), 501),
    ("TE repeated field",
     req(b"POST /echo HTTP/1.1",
         H + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n"), 501),
    ("TE in HTTP/1.0",
     req(b"POST /echo HTTP/1.0", b"Transfer-Encoding: chunked\r\n", b"0\r\n\r\n"), 400),
    ("Expect other than 100-continue", req(fields=H + b"Expect: 200-ok\r\n"), 417),
    ("Expect 100-continue with suffix", req(b"POST /echo HTTP/1.1",
                                            H + b"Expect: 100-continue-x\r\nContent-Length: 1\r\n"),
     417),
    ("CL above max body", req(b"POST /echo HTTP/1.1", H + b"Content-Length: 1048577\r\n"), 413),
    # ---- chunked body ----
    ("chunk size not hex", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked\r\n",
                               b"zz\r\nabc\r\n0\r\n\r\n"), 400),
    ("chunk size empty", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked\r\n",
                             b"\r\nabc\r\n0\r\n\r\n"), 400),
    ("chunk data too long", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked\r\n",
                                b"3\r\nabcd\r\n0\r\n\r\n"), 400),
    ("chunk size with bare LF", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked\r\n",
                                    b"3\nabc\r\n0\r\n\r\n"), 400),
    ("chunk size with SP", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked\r\n",
                               b"3 \r\nabc\r\n0\r\n\r\n"), 400),
    ("chunk size negative", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked\r\n",
                                b"-3\r\nabc\r\n0\r\n\r\n"), 400),
    ("chunk size overflows", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked\r\n",
                                 b"fffffffffffffffffffff\r\nabc\r\n0\r\n\r\n"), (400, 413)),
    ("chunk above max body", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked\r\n",
                                 b"100001\r\n"), 413),
    ("bad trailer field", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked\r\n",
                              b"3\r\nabc\r\n0\r\nBad Trailer\r\n\r\n"), 400),
    # chunk extensions: RFC 9112 7.1.1's grammar, nothing looser
    ("chunk ext empty name", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked\r\n",
                                 b"3;\r\nabc\r\n0\r\n\r\n"), 400),
    ("chunk ext BWS before CRLF", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked\r\n",
                                      b"3;a \r\nabc\r\n0\r\n\r\n"), 400),
    ("chunk ext value missing", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked\r\n",
                                    b"3;a=\r\nabc\r\n0\r\n\r\n"), 400),
    ("chunk ext non-token name", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked\r\n",
                                     b"3;a,b\r\nabc\r\n0\r\n\r\n"), 400),
    ("chunk ext 8-bit token", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked\r\n",
                                  b"3;a=\xe9\r\nabc\r\n0\r\n\r\n"), 400),
    ("chunk ext text after quote", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked\r\n",
                                       b"3;a=\"x\"y\r\nabc\r\n0\r\n\r\n"), 400),
    # a quoted LF or an unclosed quote must not end the size line somewhere
    # else than a proxy would
    ("chunk ext LF in quotes", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked\r\n",
                                   b"3;a=\"x\ny\"\r\nabc\r\n0\r\n\r\n"), 400),
    ("chunk ext unclosed quote", req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked\r\n",
                                     b"3;a=\"x\\\"\r\nabc\r\n0\r\n\r\n"), 400),
    ("last chunk ext BWS before CRLF",
     req(b"POST /echo HTTP/1.1", H + b"Transfer-Encoding: chunked\r\n", b"3\r\nabc\r\n0;x \r\n\r\n"),
     400),
    # ---- garbage ----
    ("binary garbage line", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n", 400),
    ("NUL bytes only, then CRLFs", b"\x00" * 64 + b"\r\n\r\n", 400),
]


class BadRequests(ServerTestCase):

    def check_bad(self, name, raw, status, split=False):
        statuses = status if isinstance(status, tuple) else (status,)
        c = self.connect()
        try:
            if split:
                c.send_slowly(raw, step=max(1, len(raw) // 3), delay=0.01)
            else:
                c.send(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before reading everything
        try:
            r = c.read_response()
        except socket.timeout:
            self.fail("%s: no response within %.0f s" % (name, c.timeout))
        except flaretest.ClosedError as e:
            self.fail("%s: connection closed without a response (%s)" % (name, e))
        self.assertIn(r.status, statuses, "%s: %r" % (name, r))
        self.assertErrorClose(c, r, r.status)

    def test_table(self):
        self.assertGreaterEqual(len(CASES), 40)
        for name, raw, status in CASES:
            with self.subTest(case=name):
                self.check_bad(name, raw, status)
        self.assertServerAlive()

    def test_table_split_into_pieces(self):
        # the same inputs arriving in three pieces must give the same status
        for name, raw, status in CASES:
            with self.subTest(case=name):
                self.check_bad(name, raw, status, split=True)

    def test_error_after_good_pipelined_request(self):
        # the good request is answered first, then the error closes
        c = self.connect()
        c.send(OKREQ + req(b"GET  /plaintext HTTP/1.1") + OKREQ)
        r = c.read_response()
        self.assertOk(r, b"Hello, World!")
        r = c.read_response()
        self.assertErrorClose(c, r, 400)

    def test_data_after_error_is_discarded(self):
        # lingering close: the error arrives intact even though we keep sending
        c = self.connect()
        c.send(req(b"GET /plaintext HTTP/9.9"))
        try:
            for _ in range(20):
                c.send(OKREQ * 50)
        except (BrokenPipeError, ConnectionResetError):
            pass
        r = c.read_response()
        self.assertEqual(r.status, 505, r)
        self.assertIn("close", r.connection_tokens())
        rest = self.assertClosed(c, allow_data=True)
        self.assertNotIn(b"HTTP/1.1 200", rest)

    # ---- limits at the boundary ----

    def line_of(self, n):
        """A GET request line of exactly n bytes (without CRLF)."""
        base = b"GET /plaintext?q= HTTP/1.1"
        pad = n - len(base)
        self.assertGreaterEqual(pad, 0)
        return b"GET /plaintext?q=" + b"a" * pad + b" HTTP/1.1"

    def test_request_line_limit(self):
        line = self.line_of(8192)
        self.assertEqual(len(line), 8192)
        c = self.connect()
        c.send(line + b"\r\nHost: x\r\n\r\n")
        self.assertOk(c.read_response(), b"Hello, World!")
        c = self.connect()
        c.send(self.line_of(8193) + b"\r\nHost: x\r\n\r\n")
        self.assertErrorClose(c, c.read_response(), 414)

    def test_request_line_far_too_long(self):
        # 64 KiB of request line (larger than the head limit too): still 414
        c = self.connect()
        try:
            c.send(self.line_of(65536) + b"\r\nHost: x\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            r = c.read_response()
        except flaretest.ClosedError as e:
            self.fail("64 KiB request line: connection closed without a 414 (%s)" % e)
        self.assertErrorClose(c, r, 414)

    def test_request_line_too_long_without_newline(self):
        # the line is too long long before its end arrives: answer 414 then
        c = self.connect()
        try:
            c.send(b"GET /" + b"a" * 20000)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            r = c.read_response()
        except flaretest.ClosedError as e:
            self.fail("20 KiB request line without LF: closed without a 414 (%s)" % e)
        except socket.timeout:
            self.fail("20 KiB request line without LF: no 414 within %.0f s" % c.timeout)
        self.assertErrorClose(c, r, 414)

    def head_of(self, total, nfields=4):
        """A complete GET head of exactly `total` bytes (final CRLFCRLF included)."""
        start = b"GET /plaintext HTTP/1.1\r\nHost: x\r\n"
        fixed = len(start) + 2 + nfields * len(b"X-Pad-00: \r\n")
        room = total - fixed
        sizes = [room // nfields] * nfields
        sizes[-1] += room - sum(sizes)
        out = start + b"".join(b"X-Pad-%02d: " % i + b"v" * s + b"\r\n" for i, s in enumerate(sizes))
        out += b"\r\n"
        self.assertEqual(len(out), total)
        return out

    def test_header_section_limit(self):
        # a whole head of exactly 32 KiB is within any reading of the limit
        c = self.connect()
        c.send(self.head_of(32768))
        self.assertOk(c.read_response(), b"Hello, World!")
        # field lines alone larger than 32 KiB: 431
        c = self.connect()
        c.send(self.head_of(32768 + 60 + 1))
        self.assertErrorClose(c, c.read_response(), 431)

    def test_max_size_heads_pipelined(self):
        # two 32 KiB heads back to back with small requests between them
        h = self.head_of(32768)
        c = self.connect()
        c.send(h + flaretest.get("/json") + h + flaretest.get("/users/1"))
        self.assertOk(c.read_response(), b"Hello, World!")
        self.assertOk(c.read_response(), b'{"message":"Hello, World!"}')
        self.assertOk(c.read_response(), b"Hello, World!")
        self.assertOk(c.read_response(), b'{"id":"1"}')

    def test_header_section_far_too_large(self):
        # 64 KiB of field lines: must be 431, not a silent close
        c = self.connect()
        try:
            c.send(self.head_of(65536, nfields=8))
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            r = c.read_response()
        except flaretest.ClosedError as e:
            self.fail("64 KiB head: connection closed without a 431 (%s)" % e)
        self.assertErrorClose(c, r, 431)

    def test_single_huge_header_value(self):
        c = self.connect()
        try:
            c.send(b"GET /plaintext HTTP/1.1\r\nHost: x\r\nX-Big: " + b"v" * 40000 + b"\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            r = c.read_response()
        except flaretest.ClosedError as e:
            self.fail("40 KB header value: connection closed without a 431 (%s)" % e)
        self.assertErrorClose(c, r, 431)

    def fields(self, n):
        """Host plus n-1 other fields: n field lines in all."""
        return b"GET /plaintext HTTP/1.1\r\nHost: x\r\n" + b"".join(
            b"X-F%d: %d\r\n" % (i, i) for i in range(n - 1)) + b"\r\n"

    def test_header_count_limit(self):
        c = self.connect()
        c.send(self.fields(100))
        self.assertOk(c.read_response(), b"Hello, World!")
        c = self.connect()
        c.send(self.fields(101))
        self.assertErrorClose(c, c.read_response(), 431)

    def test_huge_header_count(self):
        c = self.connect()
        try:
            c.send(self.fields(2000))   # about 26 KB of tiny fields
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.assertErrorClose(c, c.read_response(), 431)

    def test_garbage_without_newline(self):
        # a TLS ClientHello sent to the plain-HTTP port: no LF ever comes.
        # The first byte is not a tchar, so the method is already invalid.
        c = self.connect()
        c.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(32, 128)))
        try:
            r = c.read_response(timeout=5)
        except socket.timeout:
            self.fail("invalid method bytes without a LF: no 400 within 5 s "
                      "(the server waits for a line end or the header timeout)")
        except flaretest.ClosedError as e:
            self.fail("closed without a 400 (%s)" % e)
        self.assertErrorClose(c, r, 400)

    def test_body_limit_boundary(self):
        c = self.connect(timeout=15)
        body = b"b" * (1024 * 1024)
        c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        self.assertOk(c.read_response(), body)
        c = self.connect()
        # 413 must come from the declared length, before the body is sent
        c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (len(body) + 1))
        self.assertErrorClose(c, c.read_response(), 413)

    def test_server_still_healthy_afterwards(self):
        for name, raw, status in CASES[:10]:
            self.check_bad(name, raw, status)
        self.assertServerAlive()
        c = self.connect()
        for _ in range(3):
            self.assertOk(c.request("GET", "/plaintext"), b"Hello, World!")
        self.assertOk(c.request("POST", "/echo", [("Content-Type", "a/b")], b"ok"), b"ok")

    def test_zz_final_health_check(self):
        # runs last (alphabetical): after every bad input above
        self.assertServerAlive()
        c = self.connect()
        self.assertOk(c.request("GET", "/json"), b'{"message":"Hello, World!"}')


if __name__ == "__main__":
    flaretest.main()
