#!/usr/bin/python3
"""RFC 9113 cases where the outcome used to depend on timing or on how the
connection was opened, each repeated ITERATIONS times so that an outcome
that depends on how the frames fall into reads shows up: DATA on a stream
that is closed or half-closed (remote) (§5.1), an empty :path (§8.3.1),
malformed trailers (§8.1), what follows ALPN "h2" when it is not the
connection preface (§3.4).
Plaintext (h2c with prior knowledge) and, under FLARE_TEST_TLS=1, TLS with
ALPN h2 (the §3.4 cases need TLS: without ALPN nothing says the client
meant HTTP/2)."""

import contextlib
import os
import struct
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
import h2util  # noqa: E402
from h2util import (DATA, END_STREAM, GOAWAY, HEADERS, PROTOCOL_ERROR, RST_STREAM,  # noqa: E402
                    STREAM_CLOSED, err_name)

ITERATIONS = int(os.environ.get("FLARE_H2_ITERATIONS", "30"))
HELLO = b"Hello, World!"
GET = [(":method", "GET"), (":scheme", "http"), (":authority", "localhost"), (":path", "/plaintext")]
POST = [(":method", "POST"), (":scheme", "http"), (":authority", "localhost"), (":path", "/echo")]


def rst_code(f):
    return struct.unpack(">I", f.payload)[0]


class Iterations(h2util.H2TestCase):
    @contextlib.contextmanager
    def iteration(self, i, what=None, n=ITERATIONS):
        """The first failure ends the test, naming its iteration (what
        follows a failure would only report its consequences)."""
        try:
            yield
        except AssertionError as e:
            raise AssertionError("iteration %d of %d%s: %s" % (
                i + 1, n, "" if what is None else " (%r)" % (what,), e)) from None


class H2Rfc(Iterations):

    def stream_closed_after(self, c, sid, probe):
        """sid is closed or half-closed (remote) and the client has just
        sent DATA on it, then a request on stream probe: the server must
        answer the DATA with STREAM_CLOSED, as RST_STREAM on sid (a stream
        error) or as GOAWAY (a connection error, which RFC 9113 §5.1 allows
        after END_STREAM). Everything sid gets is queued before probe's
        response, so a missing error shows up without a timeout. True when
        the connection goes on."""
        def pred(f):
            if f.type == GOAWAY:
                return True
            if f.sid == sid and f.type == RST_STREAM:
                return True
            return f.sid == probe and f.type in (HEADERS, DATA) and f.flags & END_STREAM
        f = c.until(pred, what="STREAM_CLOSED for DATA on stream %d" % sid)
        if f.type == GOAWAY:
            self.assertEqual(c.goaway[1], STREAM_CLOSED, "GOAWAY %s for DATA on stream %d: %s" % (
                err_name(c.goaway[1]), sid, c.history()))
            return False
        if f.type == RST_STREAM:
            self.assertEqual(rst_code(f), STREAM_CLOSED, "RST_STREAM %s on stream %d: %s" % (
                err_name(rst_code(f)), sid, c.history()))
            status, _, body, _ = c.response(probe)
            self.assertEqual((status, body), (200, HELLO))
            return True
        self.fail("DATA on stream %d dropped without STREAM_CLOSED (probe stream %d answered "
                  "first): %s" % (sid, probe, c.history()))

    def test_data_after_stream_closed_both_ways(self):
        # §5.1 "closed", reached by END_STREAM both ways: the request, then
        # its whole response; nghttp2 forgets the stream at that point
        c, sid = self.raw(), 1
        for i in range(ITERATIONS):
            with self.iteration(i):
                c.request(sid, "/plaintext")
                status, _, body, _ = c.response(sid)
                self.assertEqual((status, body), (200, HELLO))
                c.send(h2util.frame(DATA, END_STREAM, sid, b"late") +
                       h2util.frame(HEADERS, h2util.END_HEADERS | END_STREAM, sid + 2,
                                    c.encode(GET)))
                if self.stream_closed_after(c, sid, sid + 2):
                    sid += 4
                else:
                    c.close()
                    c, sid = self.raw(), 1

    def test_data_after_client_rst_stream(self):
        # §5.1 "closed" after the client's RST_STREAM: any frame but
        # PRIORITY is a stream error STREAM_CLOSED
        c, sid = self.raw(), 1
        for i in range(ITERATIONS):
            with self.iteration(i):
                c.headers(sid, POST + [("content-length", "10")], end_stream=False)
                c.send(h2util.rst_stream(sid, h2util.CANCEL))
                c.send(h2util.frame(DATA, 0, sid, b"late") +
                       h2util.frame(HEADERS, h2util.END_HEADERS | END_STREAM, sid + 2,
                                    c.encode(GET)))
                if self.stream_closed_after(c, sid, sid + 2):
                    sid += 4
                else:
                    c.close()
                    c, sid = self.raw(), 1
            if i % 20 == 19:
                time.sleep(1.1)  # stay under the rapid-reset defence (100 a second)

    def test_data_on_half_closed_remote(self):
        # §5.1 "half-closed (remote)": DATA after the request's END_STREAM
        # on a route that answers at once. Whether the response has closed
        # the stream when the DATA arrives depends on how the two writes
        # fall into the server's reads: the verdict must not.
        c, sid = self.raw(), 1
        for i in range(ITERATIONS):
            with self.iteration(i):
                c.headers(sid, GET, end_stream=True)
                if i % 3 == 1:
                    time.sleep(0.002)
                c.send(h2util.frame(DATA, END_STREAM, sid, b"late") +
                       h2util.frame(HEADERS, h2util.END_HEADERS | END_STREAM, sid + 2,
                                    c.encode(GET)))
                if self.stream_closed_after(c, sid, sid + 2):
                    sid += 4
                else:
                    c.close()
                    c, sid = self.raw(), 1

    def test_empty_path(self):
        # §8.3.1: :path must not be empty for http/https: a malformed
        # request, a stream error PROTOCOL_ERROR (not an HTTP 400)
        c = self.raw()
        empty = [h if h[0] != ":path" else (":path", "") for h in GET]
        for i in range(ITERATIONS):
            with self.iteration(i):
                sid = 1 + 4 * i
                c.headers(sid, empty, end_stream=True)
                c.expect_rst(sid, PROTOCOL_ERROR)
                c.alive_check(sid + 2)

    def test_trailers_with_pseudo_header(self):
        # §8.1: pseudo-headers in trailers make the request malformed
        c = self.raw()
        for i in range(ITERATIONS):
            with self.iteration(i):
                sid = 1 + 4 * i
                c.headers(sid, POST, end_stream=False)
                c.data(sid, b"body")
                c.headers(sid, [(":path", "/plaintext"), ("x-t", "1")], end_stream=True)
                c.expect_rst(sid, PROTOCOL_ERROR)
                c.alive_check(sid + 2)

    def test_trailers_without_end_stream(self):
        # §8.1: a trailer section must end the stream (a HEADERS after the
        # head without END_STREAM is malformed)
        c = self.raw()
        for i in range(ITERATIONS):
            with self.iteration(i):
                sid = 1 + 4 * i
                c.headers(sid, POST, end_stream=False)
                c.data(sid, b"body")
                c.headers(sid, [("x-t", "1")], end_stream=False)
                c.expect_rst(sid, PROTOCOL_ERROR)
                c.alive_check(sid + 2)


class AlpnPreface(Iterations):
    """§3.4: once ALPN chose "h2" the client must begin with the connection
    preface; anything else is a connection error PROTOCOL_ERROR (GOAWAY),
    never an HTTP/1.1 answer. Over TLS in both runs of this file (ALPN
    needs it): a skip in the plain run would read as a missing dependency."""

    server_tls = True

    def expect_preface_error(self, data):
        c = self.raw(preface=False)
        c.send(data)
        c.expect_goaway(PROTOCOL_ERROR)
        c.close()

    def test_http1_request_after_alpn_h2(self):
        for i in range(ITERATIONS):
            with self.iteration(i):
                self.expect_preface_error(b"GET /plaintext HTTP/1.1\r\nHost: localhost\r\n\r\n")

    def test_broken_preface_after_alpn_h2(self):
        for i, bad in enumerate((b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", b"INVALID CONNECTION PREFACE\r\n\r\n",
                                 b"PRI * HTTP/1.1\r\n\r\nSM\r\n\r\n") * (ITERATIONS // 3)):
            with self.iteration(i, bad):
                self.expect_preface_error(bad + h2util.settings_frame())

    def test_preface_in_pieces_after_alpn_h2(self):
        # the real preface, split: still HTTP/2
        for i in range(5):
            with self.iteration(i, n=5):
                c = self.raw(preface=False)
                c.send(h2util.PREFACE[:7])
                time.sleep(0.02)
                c.send(h2util.PREFACE[7:] + h2util.settings_frame())
                c.alive_check(1)
                c.close()


if __name__ == "__main__":
    flaretest.main()
