#!/usr/bin/python3
"""Every route of examples/hello and the automatic statuses: 200s, 404,
405 + Allow, HEAD, OPTIONS, percent-decoding and JSON escaping of /users/{id},
/slow's query parsing, and the headers every response carries."""

import email.utils
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
from flaretest import ServerTestCase, build_request, chunk_body  # noqa: E402

HELLO = b"Hello, World!"
JSON_HELLO = b'{"message":"Hello, World!"}'
ALLOW_GET = "GET, HEAD, OPTIONS"
ALLOW_POST = "POST, OPTIONS"


class Routes(ServerTestCase):

    # ---- the 200 routes --------------------------------------------------

    def test_plaintext(self):
        c = self.connect()
        r = c.request("GET", "/plaintext")
        self.assertOk(r, HELLO, "text/plain")
        self.assertEqual(r.reason, "OK")
        self.assertNotIn("close", r.connection_tokens())

    def test_json(self):
        c = self.connect()
        r = c.request("GET", "/json")
        self.assertOk(r, JSON_HELLO, "application/json")
        self.assertEqual(json.loads(r.body), {"message": "Hello, World!"})

    def test_query_string_ignored_by_routing(self):
        c = self.connect()
        self.assertOk(c.request("GET", "/plaintext?a=1&b=2"), HELLO, "text/plain")
        self.assertOk(c.request("GET", "/json?"), JSON_HELLO, "application/json")

    def test_absolute_form_target(self):
        # RFC 9112 3.2.2: a server MUST accept the absolute-form
        c = self.connect()
        r = c.request("GET", "http://localhost/plaintext")
        self.assertOk(r, HELLO, "text/plain")

    def test_users_plain(self):
        c = self.connect()
        for ident in ["42", "abc", "a-b_c.d~e", "x" * 200]:
            r = c.request("GET", "/users/" + ident)
            self.assertOk(r, ('{"id":"%s"}' % ident).encode(), "application/json")

    def test_users_query_not_part_of_id(self):
        c = self.connect()
        r = c.request("GET", "/users/7?x=1")
        self.assertOk(r, b'{"id":"7"}', "application/json")

    def test_users_percent_decoding_and_json_escaping(self):
        cases = [
            ("a%22b", b'{"id":"a\\"b"}'),
            ("a%5Cb", b'{"id":"a\\\\b"}'),
            ("a%5cb", b'{"id":"a\\\\b"}'),
            ("a%20b", b'{"id":"a b"}'),
            ("%41%42C", b'{"id":"ABC"}'),
            ("a+b", b'{"id":"a+b"}'),           # '+' is not a space in a path
            ("%0A", b'{"id":"\\u000a"}'),
            ("%01x%1F", b'{"id":"\\u0001x\\u001f"}'),
            ("caf%C3%A9", b'{"id":"caf\xc3\xa9"}'),
            ("%2F", b'{"id":"/"}'),               # an encoded slash stays in the segment
            ("%25", b'{"id":"%"}'),
            ("%22%22%22", b'{"id":"\\"\\"\\""}'),
        ]
        c = self.connect()
        for raw, want in cases:
            with self.subTest(id=raw):
                r = c.request("GET", "/users/" + raw)
                self.assertOk(r, want, "application/json")
                json.loads(r.body.decode("utf-8"))  # valid JSON

    def test_unreserved_escapes_reach_the_route(self):
        # RFC 3986 6.2.2.2: an escaped unreserved character is that character
        c = self.connect()
        for path in ["/pl%61intext", "/%70%6C%61%69%6e%74%65%78%74", "/plaintex%74",
                     "/plaintext?x=%zz"]:
            with self.subTest(path=path):
                self.assertOk(c.request("GET", path), HELLO, "text/plain")
        r = c.request("HEAD", "/pl%61intext")
        self.assertEqual((r.status, r.body), (200, b""), r)
        for raw, want in [("%41lice", b'{"id":"Alice"}'), ("%7e%2D%2e%5F", b'{"id":"~-._"}'),
                          ("caf%c3%a9", b'{"id":"caf\xc3\xa9"}'), ("a%2fb", b'{"id":"a/b"}'),
                          ("%2525", b'{"id":"%25"}')]:
            with self.subTest(id=raw):
                self.assertOk(c.request("GET", "/users/" + raw), want, "application/json")
        # the normal form is what 405 and Allow are computed on, too
        r = c.request("POST", "/pl%61intext", body=b"")
        self.assertEqual(r.status, 405, r)
        self.assertEqual(r.all("Allow"), [ALLOW_GET])

    def test_reserved_escapes_stay_data(self):
        # %2F is not a '/' for routing, %3F not a '?'
        c = self.connect()
        for path in ["/users%2F42", "/users%2f42", "/plaintext%3F", "/plaintext%2F",
                     "/users/42%2F", "/json%23"]:
            with self.subTest(path=path):
                r = c.request("GET", path)
                if path.startswith("/users/"):
                    self.assertOk(r, b'{"id":"42/"}', "application/json")
                else:
                    self.assertEqual(r.status, 404, r)

    def test_malformed_escape_in_path_is_400(self):
        # a '%' in the path must start %XX: anything else could be decoded
        # differently by whoever looks next
        for path in ["/pl%6intext", "/users/%", "/users/%zz", "/%", "/users/a%g1?x=1"]:
            with self.subTest(path=path):
                c = self.connect()
                c.send(flaretest.get(path))
                r = c.read_response()
                self.assertErrorClose(c, r, 400)
                self.assertIn(b"percent-encoding", r.body)
        # the query keeps bad escapes literally (form rules)
        self.assertOk(self.connect().request("GET", "/slow?ms=0&x=%zz%"), b"slow")

    def test_users_nul_byte_escaped(self):
        c = self.connect()
        r = c.request("GET", "/users/a%00b")
        self.assertOk(r, b'{"id":"a\\u0000b"}', "application/json")

    def test_users_long_id_needing_escapes(self):
        c = self.connect(timeout=10)
        ident = "%01" * 2500 + "%22" * 100   # 7,800 bytes of target, every byte escaped
        r = c.request("GET", "/users/" + ident)
        want = b'{"id":"' + b"\\u0001" * 2500 + b'\\"' * 100 + b'"}'
        self.assertOk(r, want, "application/json")

    def test_users_malformed_percent_encoding(self):
        # refused by the parser (400, connection closed), never half-decoded
        c = self.connect()
        for raw in ["%", "%4", "%zz", "a%g1", "%%", "x%"]:
            with self.subTest(id=raw):
                r = c.request("GET", "/users/" + raw)
                self.assertEqual(r.status, 400, r)
                self.assertCommon(r)
                if "close" in r.connection_tokens():
                    c = self.connect()
        self.assertServerAlive()

    def test_date_is_current_and_advances(self):
        c = self.connect()
        r1 = c.request("GET", "/plaintext")
        d1 = email.utils.parsedate_to_datetime(r1.get("Date")).timestamp()
        self.assertLess(abs(d1 - time.time()), 3, r1.get("Date"))
        time.sleep(2.1)
        r2 = c.request("GET", "/plaintext")
        d2 = email.utils.parsedate_to_datetime(r2.get("Date")).timestamp()
        self.assertGreaterEqual(d2 - d1, 1, "Date did not advance: %s then %s" % (
            r1.get("Date"), r2.get("Date")))
        self.assertLess(abs(d2 - time.time()), 3, r2.get("Date"))

    def test_users_extra_segment_is_404(self):
        c = self.connect()
        r = c.request("GET", "/users/1/2")
        self.assertEqual(r.status, 404, r)
        self.assertCommon(r)

    def test_echo_content_length(self):
        c = self.connect()
        body = b"some body \x00\x01\xff with bytes"
        r = c.request("POST", "/echo", [("Content-Type", "application/x-test")], body)
        self.assertOk(r, body, "application/x-test")

    def test_echo_content_type_with_params(self):
        c = self.connect()
        r = c.request("POST", "/echo", [("Content-Type", "text/plain; charset=utf-8")], b"hi")
        self.assertOk(r, b"hi", "text/plain; charset=utf-8")

    def test_echo_content_type_with_htab_and_obs_text(self):
        # HTAB and obs-text are valid in a field value (RFC 9110 5.5): echoed as sent
        for ct in ["text/plain;\tcharset=utf-8", "a/b; q=\x80\xff", 'a/b; q="x y"']:
            with self.subTest(ctype=ct):
                c = self.connect()
                r = c.request("POST", "/echo", [("Content-Type", ct)], b"abc")
                self.assertOk(r, b"abc", ct)

    def test_echo_long_content_type(self):
        c = self.connect()
        ct = "x/" + "y" * 30000
        self.assertOk(c.request("POST", "/echo", [("Content-Type", ct)], b"abc"), b"abc", ct)

    def test_echo_chunked(self):
        c = self.connect()
        req = (b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: text/x-chunks\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n" + chunk_body([b"Hello", b", ", b"chunked!"]))
        c.send(req)
        r = c.read_response()
        self.assertOk(r, b"Hello, chunked!", "text/x-chunks")

    def test_echo_chunk_extensions(self):
        # RFC 9112 7.1.1: BWS around ';' and '=', token and quoted-string
        # values with quoted-pairs, several per chunk, on the last chunk too
        c = self.connect()
        body = (b"5 ; a = 1 ;b=\"x \\\" y\"\t;c\r\nHello\r\n"
                b"2;q=\"\\\\;\xff\"\r\n, \r\n"
                b"8;!#$%&'*+-.^_`|~=!#$%&'*+-.^_`|~\r\nchunked!\r\n"
                b"0;last=\"\";done\r\nX-Trailer: v\r\n\r\n")
        c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: text/x-chunks\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n" + body)
        self.assertOk(c.read_response(), b"Hello, chunked!", "text/x-chunks")
        # byte by byte: the decoder resumes anywhere inside an extension
        c.send_slowly(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: text/x-chunks\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n" + body, step=1)
        self.assertOk(c.read_response(), b"Hello, chunked!", "text/x-chunks")

    def test_echo_empty_body(self):
        c = self.connect()
        r = c.request("POST", "/echo", [("Content-Type", "text/plain")], b"")
        self.assertOk(r, b"", "text/plain")
        self.assertEqual(r.get("Content-Length"), "0")
        # no Content-Length and no Transfer-Encoding: a request without a body
        c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: a/b\r\n\r\n")
        self.assertOk(c.read_response(), b"", "a/b")
        # chunked with only the last chunk
        c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: a/b\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        self.assertOk(c.read_response(), b"", "a/b")

    def test_echo_binary_all_bytes(self):
        c = self.connect()
        body = bytes(range(256)) * 4
        r = c.request("POST", "/echo", [("Content-Type", "application/octet-stream")], body)
        self.assertOk(r, body, "application/octet-stream")

    def test_echo_max_body_boundary(self):
        c = self.connect(timeout=15)
        body = bytes((i * 7) & 0xFF for i in range(1024 * 1024))
        r = c.request("POST", "/echo", [("Content-Type", "application/x-big")], body)
        self.assertOk(r, body, "application/x-big")
        c2 = self.connect(timeout=15)
        c2.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1048577\r\n\r\n")
        r = c2.read_response()
        self.assertErrorClose(c2, r, 413)

    def test_echo_chunked_max_body_boundary(self):
        c = self.connect(timeout=15)
        body = b"z" * (1024 * 1024)
        chunks = [body[i:i + 65536] for i in range(0, len(body), 65536)]
        c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
               b"Content-Type: a/b\r\n\r\n" + chunk_body(chunks))
        self.assertOk(c.read_response(), body, "a/b")
        c2 = self.connect(timeout=15)
        c2.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
                chunk_body(chunks + [b"!"]))
        self.assertErrorClose(c2, c2.read_response(), 413)

    def test_slow(self):
        c = self.connect()
        t0 = time.monotonic()
        r = c.request("GET", "/slow?ms=300")
        took = time.monotonic() - t0
        self.assertOk(r, b"slow", "text/plain")
        self.assertGreaterEqual(took, 0.28)
        self.assertLess(took, 4.0)
        # zero delay, and the connection is reusable after an async response
        self.assertOk(c.request("GET", "/slow?ms=0"), b"slow", "text/plain")
        self.assertOk(c.request("GET", "/plaintext"), HELLO)

    def test_slow_query_parsing_errors(self):
        c = self.connect()
        for q in ["ms=abc", "ms=-1", "ms=1.5", "ms=12x", "ms=%31a", "ms=600001",
                  "ms=99999999999999999999999999"]:
            with self.subTest(query=q):
                c.send(flaretest.get("/slow?" + q))
                r = c.read_response()
                self.assertEqual(r.status, 400, r)
                self.assertCommon(r)
                self.assertTrue(r.body.strip(), "400 without a body")
                self.assertTrue((r.get("Content-Type") or "").startswith("text/plain"))
                if "close" in r.connection_tokens():
                    c = self.connect()

    def test_slow_query_percent_decoded(self):
        c = self.connect()
        self.assertOk(c.request("GET", "/slow?x=1&ms=%31%30"), b"slow")

    def test_slow_query_form_rules(self):
        # flare_req_query_param is the form parser: empty pieces and empty keys
        # are skipped over, the first of repeated keys wins, keys are decoded
        c = self.connect()
        for q in ["=abc&ms=0", "&&ms=0&&", "ms=0&ms=abc", "%6Ds=0", "m%73=1%30", "ms+=abc",
                  "ms", "ms=", "=&ms=0"]:
            with self.subTest(query=q):
                self.assertOk(c.request("GET", "/slow?" + q), b"slow")
        for q in ["ms=abc&ms=0", "=0&ms=x", "%6D%73=%2B1"]:
            with self.subTest(query=q):
                r = c.request("GET", "/slow?" + q)
                self.assertEqual(r.status, 400, r)
                if "close" in r.connection_tokens():
                    c = self.connect()

    # ---- automatic statuses ----------------------------------------------

    def test_not_found(self):
        c = self.connect()
        for path in ["/", "/nope", "/plaintextx", "/PLAINTEXT", "/users", "/json/x"]:
            with self.subTest(path=path):
                r = c.request("GET", path)
                self.assertEqual(r.status, 404, r)
                self.assertCommon(r)
                self.assertTrue(r.body.strip())
                self.assertTrue((r.get("Content-Type") or "").startswith("text/plain"))
                self.assertFalse(r.has("Allow"))
        # an unknown path is not a protocol error: the connection stays usable
        self.assertOk(c.request("GET", "/plaintext"), HELLO)

    def test_method_not_allowed(self):
        cases = [
            ("POST", "/plaintext", ALLOW_GET),
            ("PUT", "/json", ALLOW_GET),
            ("DELETE", "/users/1", ALLOW_GET),
            ("PATCH", "/slow", ALLOW_GET),
            ("GET", "/echo", ALLOW_POST),
            ("PUT", "/echo", ALLOW_POST),
            ("DELETE", "/echo", ALLOW_POST),
        ]
        c = self.connect()
        for method, path, allow in cases:
            with self.subTest(method=method, path=path):
                body = b"" if method in ("POST", "PUT", "PATCH") else None
                r = c.request(method, path, body=body)
                self.assertEqual(r.status, 405, r)
                self.assertCommon(r)
                self.assertEqual(r.all("Allow"), [allow])
                self.assertTrue(r.body.strip())
        self.assertOk(c.request("GET", "/plaintext"), HELLO)

    def test_unknown_method_token(self):
        c = self.connect()
        r = c.request("FROB", "/plaintext")
        self.assertIn(r.status, (405, 501), r)
        self.assertCommon(r)
        if r.status == 405:
            self.assertEqual(r.all("Allow"), [ALLOW_GET])

    def test_head(self):
        c = self.connect()
        for path in ["/plaintext", "/json", "/users/a%22b", "/slow?ms=20"]:
            with self.subTest(path=path):
                g = c.request("GET", path)
                h = c.request("HEAD", path)
                self.assertEqual(h.status, 200, h)
                self.assertCommon(h)
                self.assertEqual(h.get("Content-Length"), str(len(g.body)))
                self.assertEqual(h.get("Content-Type"), g.get("Content-Type"))
                self.assertEqual(sorted(k.lower() for k, _ in h.headers),
                                 sorted(k.lower() for k, _ in g.headers))
                # no body bytes: the next response starts right after the head
                nxt = c.request("GET", "/json")
                self.assertOk(nxt, JSON_HELLO)

    def test_head_on_non_get_route_and_unknown(self):
        c = self.connect()
        r = c.request("HEAD", "/echo")
        self.assertEqual(r.status, 405, r)
        self.assertCommon(r)
        self.assertEqual(r.all("Allow"), [ALLOW_POST])
        r = c.request("HEAD", "/nope")
        self.assertEqual(r.status, 404, r)
        self.assertCommon(r)
        self.assertOk(c.request("GET", "/plaintext"), HELLO)
        self.assertEqual(c.read_available(0.2), b"", "HEAD response carried a body")

    def test_options(self):
        c = self.connect()
        for path, allow in [("/plaintext", ALLOW_GET), ("/json", ALLOW_GET),
                            ("/users/9", ALLOW_GET), ("/slow", ALLOW_GET),
                            ("/echo", ALLOW_POST)]:
            with self.subTest(path=path):
                r = c.request("OPTIONS", path)
                self.assertEqual(r.status, 204, r)
                self.assertCommon(r)
                self.assertEqual(r.all("Allow"), [allow])
                self.assertEqual(r.body, b"")
        r = c.request("OPTIONS", "/nope")
        self.assertEqual(r.status, 404, r)
        self.assertCommon(r)
        self.assertOk(c.request("GET", "/plaintext"), HELLO)
        self.assertEqual(c.read_available(0.2), b"", "204 carried a body")

    def test_options_asterisk(self):
        c = self.connect()
        r = c.request("OPTIONS", "*")
        self.assertEqual(r.status, 204, r)
        self.assertCommon(r)
        self.assertEqual(r.body, b"")
        self.assertOk(c.request("GET", "/plaintext"), HELLO)

    # ---- headers every response carries ----------------------------------

    def test_common_headers_everywhere(self):
        reqs = [("GET", "/plaintext", None), ("GET", "/json", None),
                ("GET", "/users/x", None), ("POST", "/echo", b"x"),
                ("GET", "/slow?ms=1", None), ("GET", "/nope", None),
                ("POST", "/plaintext", b""), ("OPTIONS", "/json", None),
                ("HEAD", "/json", None), ("GET", "/slow?ms=x", None)]
        c = self.connect()
        for method, path, body in reqs:
            with self.subTest(method=method, path=path):
                r = c.request(method, path, body=body)
                self.assertCommon(r)
                if r.status not in (204, 304) and method != "HEAD":
                    self.assertEqual(len(r.body), int(r.get("Content-Length")))

    def test_all_routes_on_one_connection(self):
        c = self.connect()
        for i in range(5):
            self.assertOk(c.request("GET", "/plaintext"), HELLO)
            self.assertOk(c.request("GET", "/json"), JSON_HELLO)
            self.assertOk(c.request("GET", "/users/u%d" % i), b'{"id":"u%d"}' % i)
            self.assertOk(c.request("POST", "/echo", [("Content-Type", "a/b")], b"n%d" % i),
                          b"n%d" % i)
            self.assertEqual(c.request("GET", "/nope").status, 404)
            self.assertEqual(c.request("POST", "/json", body=b"").status, 405)
        self.assertFalse(c.eof)

    def test_valid_header_edge_cases(self):
        cases = [
            ("empty values", "X-Empty:\r\nX-Ows: \t \r\n"),
            ("8000-byte name", "X-" + "n" * 8000 + ": v\r\n"),
            ("every tchar in a name", "!#$%&'*+-.^_`|~: v\r\n"),
            ("Content-Length 0 on GET", "Content-Length: 0\r\n"),
            ("Expect on a bodiless GET", "Expect: 100-continue\r\n"),
            ("TE: trailers", "Connection: TE\r\nTE: trailers\r\n"),
            ("obs-text in a value", "X-Latin: caf\xe9\r\n"),
            ("HTAB inside a value", "X-Tab: a\tb\r\n"),
        ]
        c = self.connect()
        for name, extra in cases:
            with self.subTest(case=name):
                c.send(flaretest.get("/plaintext", extra=extra))
                self.assertOk(c.read_response(), HELLO)
        c.send(b"GET /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        self.assertOk(c.read_response(), JSON_HELLO)

    def test_upgrade_request_answered_normally(self):
        # RFC 9110 7.8: a server may ignore Upgrade; then it answers in HTTP/1.1
        c = self.connect()
        c.send(b"GET /plaintext HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
        r = c.read_response()
        self.assertOk(r, HELLO, "text/plain")
        self.assertOk(c.request("GET", "/json"), JSON_HELLO)

    def test_http10_request(self):
        c = self.connect()
        c.send(b"GET /plaintext HTTP/1.0\r\n\r\n")   # Host is optional in 1.0
        r = c.read_response()
        self.assertOk(r, HELLO, "text/plain")
        self.assertNotIn("keep-alive", r.connection_tokens())
        self.assertClosed(c)

    def test_host_with_port_and_case_insensitive_names(self):
        c = self.connect()
        c.send(b"GET /json HTTP/1.1\r\nhOsT: example.com:8080\r\nACCEPT: */*\r\n"
               b"user-agent: t\r\n\r\n")
        self.assertOk(c.read_response(), JSON_HELLO)

    def test_ows_around_values_and_leading_empty_line(self):
        c = self.connect()
        c.send(b"\r\nPOST /echo HTTP/1.1\r\nHost:x\r\nContent-Type: \t a/b \t \r\n"
               b"Content-Length:   3  \r\n\r\nabc")
        self.assertOk(c.read_response(), b"abc", "a/b")


if __name__ == "__main__":
    flaretest.main()
