"""Shared helpers for Flare's integration tests (standard library only).

- Server: starts `examples/hello` on a free loopback port, waits until it
  accepts, stops it with a signal and reports how it exited.
- Conn: a raw client socket with a strict HTTP/1.1 response reader
  (status line, headers, Content-Length / chunked bodies, close detection).
- ServerTestCase: a unittest base class that owns one server per class and
  asserts, when the class is done, that the server is still alive and exits
  0 on SIGTERM within a few seconds.
- main(): unittest.main() semantics plus a closing 'N passed, N failed' line.

The binary is $FLARE_BUILD_DIR/examples/hello (default: build/examples/hello
relative to the repository root).
"""

import email.utils
import os
import re
import signal
import signal as _signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD_DIR = os.environ.get("FLARE_BUILD_DIR") or os.path.join(REPO_ROOT, "build")
HELLO = os.path.join(os.path.abspath(BUILD_DIR), "examples", "hello")
TODO_API = os.path.join(os.path.abspath(BUILD_DIR), "examples", "todo_api")

HOST = "127.0.0.1"
READ_TIMEOUT = 5.0     # generous: the machine may be loaded (2 cores, ASan builds)
STOP_TIMEOUT = 5.0     # SIGTERM -> exit, for an idle server

DATE_RE = re.compile(
    r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
    r"\d{4} \d\d:\d\d:\d\d GMT$")
TOKEN_RE = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


class ProtocolError(AssertionError):
    """The server sent something that is not valid HTTP/1.1."""


class ClosedError(AssertionError):
    """The connection was closed before a complete response arrived."""


def sanitized():
    """True when the server binary is built with AddressSanitizer (whose
    quarantine keeps freed memory resident: RSS checks mean nothing then)."""
    try:
        with open(HELLO, "rb") as f:
            return b"__asan_init" in f.read()
    except OSError:
        return False


def free_port():
    """A port that was free a moment ago (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------
# server process

class Server:
    def __init__(self, *extra_args, workers=2, binary=None):
        self.binary = binary or HELLO
        self.extra_args = [str(a) for a in extra_args]
        self.workers = workers
        self.proc = None
        self.port = None
        self.log = None

    @property
    def addr(self):
        return (HOST, self.port)

    def start(self, timeout=10.0):
        # (a concurrent rebuild may be relinking it: give it a moment)
        deadline = time.monotonic() + 20
        while not os.access(self.binary, os.X_OK) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not os.access(self.binary, os.X_OK):
            raise RuntimeError("server binary not found: %s (set FLARE_BUILD_DIR)" % self.binary)
        last_err = None
        for _attempt in range(5):
            self.port = free_port()
            self.log = tempfile.TemporaryFile()
            args = [self.binary, "--listen", "%s:%d" % (HOST, self.port),
                    "--workers", str(self.workers)] + self.extra_args
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                         stdout=self.log, stderr=self.log)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    with socket.create_connection(self.addr, timeout=1.0):
                        return self
                except OSError as e:
                    last_err = e
                    time.sleep(0.02)
            # exited (port taken by someone else?) or never accepted: retry
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            last_err = RuntimeError("server did not start (rc=%s): %s" %
                                    (self.proc.returncode, self.output()))
        raise RuntimeError("could not start %s: %s" % (self.binary, last_err))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def output(self):
        if self.log is None:
            return ""
        try:
            self.log.seek(0)
            return self.log.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def send_signal(self, sig=_signal.SIGTERM):
        self.proc.send_signal(sig)

    def wait(self, timeout):
        """Exit code, or None if still running after timeout."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout=STOP_TIMEOUT, sig=_signal.SIGTERM):
        """SIGTERM, wait; returns (returncode or None, seconds). Kills on timeout."""
        if self.proc is None:
            return 0, 0.0
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.wait(timeout)
        took = time.monotonic() - t0
        if rc is None:
            self.proc.kill()
            self.proc.wait()
        return rc, took

    def close_log(self):
        if self.log is not None:
            self.log.close()
            self.log = None


def describe_rc(rc):
    if rc is None:
        return "still running (killed)"
    if rc < 0:
        try:
            return "killed by %s" % signal.Signals(-rc).name
        except ValueError:
            return "killed by signal %d" % -rc
    return "exit %d" % rc


# --------------------------------------------------------------------------
# responses

class Response:
    def __init__(self, version, status, reason, headers, body, raw_head):
        self.version = version
        self.status = status
        self.reason = reason
        self.headers = headers      # list of (name, value) as str, in order
        self.body = body            # bytes (de-chunked)
        self.raw_head = raw_head    # bytes
        self.chunked = False
        self.trailers = []

    def all(self, name):
        n = name.lower()
        return [v for (k, v) in self.headers if k.lower() == n]

    def get(self, name, default=None):
        vals = self.all(name)
        if not vals:
            return default
        if len(vals) > 1:
            raise ProtocolError("header %s repeated: %r" % (name, vals))
        return vals[0]

    def has(self, name):
        return bool(self.all(name))

    def connection_tokens(self):
        toks = set()
        for v in self.all("Connection"):
            for t in v.split(","):
                t = t.strip().lower()
                if t:
                    toks.add(t)
        return toks

    def __repr__(self):
        return "<Response %d %r headers=%r body=%r>" % (
            self.status, self.reason, self.headers, self.body[:200])


def _parse_head(raw):
    """raw: bytes of the head without the final CRLFCRLF."""
    lines = raw.split(b"\r\n")
    m = re.match(rb"^(HTTP/\d\.\d) (\d{3}) ([\t !-~\x80-\xff]*)$", lines[0])
    if m is None:
        raise ProtocolError("bad status line: %r" % lines[0])
    headers = []
    for line in lines[1:]:
        if b"\n" in line or b"\r" in line:
            raise ProtocolError("bare CR/LF in response head: %r" % raw)
        name, sep, value = line.partition(b":")
        if not sep or not TOKEN_RE.match(name):
            raise ProtocolError("bad response header line: %r" % line)
        headers.append((name.decode("latin-1"), value.strip(b" \t").decode("latin-1")))
    return (m.group(1).decode(), int(m.group(2)), m.group(3).decode("latin-1"), headers)


# --------------------------------------------------------------------------
# client connection

class Conn:
    def __init__(self, addr, timeout=READ_TIMEOUT, nodelay=True):
        self.sock = socket.create_connection(addr, timeout=timeout)
        if nodelay:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = b""
        self.eof = False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def abort(self):
        """Close with a RST (SO_LINGER 0)."""
        import struct
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        if isinstance(data, str):
            data = data.encode("latin-1")
        self.sock.sendall(data)

    def send_slowly(self, data, step=1, delay=0.0):
        if isinstance(data, str):
            data = data.encode("latin-1")
        for i in range(0, len(data), step):
            self.sock.sendall(data[i:i + step])
            if delay:
                time.sleep(delay)

    def _fill(self, deadline):
        """Reads more bytes into self.buf; False on EOF."""
        if self.eof:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("timed out waiting for the server (buffered %r)" % self.buf[:300])
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise socket.timeout("timed out waiting for the server (buffered %r)" % self.buf[:300])
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def _read_until(self, marker, deadline, limit=1 << 20):
        while True:
            i = self.buf.find(marker)
            if i >= 0:
                out = self.buf[:i]
                self.buf = self.buf[i + len(marker):]
                return out
            if len(self.buf) > limit:
                raise ProtocolError("no %r within %d bytes" % (marker, limit))
            if not self._fill(deadline):
                raise ClosedError("connection closed (buffered %r)" % self.buf[:300])

    def _read_exact(self, n, deadline):
        while len(self.buf) < n:
            if not self._fill(deadline):
                raise ClosedError("connection closed after %d of %d body bytes" % (len(self.buf), n))
        out = self.buf[:n]
        self.buf = self.buf[n:]
        return out

    def read_response(self, head=False, timeout=None, interim=False):
        """Reads one response. head=True: the request was HEAD (no body).
        1xx responses are skipped unless interim=True (then returned)."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        while True:
            if not self.buf and not self._fill(deadline):
                raise ClosedError("connection closed before a response")
            raw = self._read_until(b"\r\n\r\n", deadline, limit=256 * 1024)
            version, status, reason, headers = _parse_head(raw)
            resp = Response(version, status, reason, headers, b"", raw)
            if 100 <= status < 200:
                if interim:
                    return resp
                continue
            break
        te = resp.all("Transfer-Encoding")
        cl = resp.all("Content-Length")
        if head or status in (204, 304):
            return resp
        if te:
            if cl:
                raise ProtocolError("both Transfer-Encoding and Content-Length: %r" % headers)
            if ",".join(te).strip().lower() != "chunked":
                raise ProtocolError("unexpected Transfer-Encoding %r" % te)
            resp.chunked = True
            body = []
            while True:
                line = self._read_until(b"\r\n", deadline)
                size_s = line.split(b";", 1)[0].strip()
                if not re.match(rb"^[0-9A-Fa-f]+$", size_s):
                    raise ProtocolError("bad chunk size line %r" % line)
                size = int(size_s, 16)
                if size == 0:
                    break
                body.append(self._read_exact(size, deadline))
                if self._read_exact(2, deadline) != b"\r\n":
                    raise ProtocolError("missing CRLF after chunk data")
            while True:
                line = self._read_until(b"\r\n", deadline)
                if line == b"":
                    break
                resp.trailers.append(line)
            resp.body = b"".join(body)
            return resp
        if cl:
            if len(cl) != 1 or not re.match(r"^\d+$", cl[0]):
                raise ProtocolError("bad Content-Length %r" % cl)
            resp.body = self._read_exact(int(cl[0]), deadline)
            return resp
        # no framing: body until close
        while self._fill(deadline):
            pass
        resp.body, self.buf = self.buf, b""
        return resp

    def read_available(self, wait=0.3):
        """Whatever arrives within `wait` seconds (b'' if nothing)."""
        deadline = time.monotonic() + wait
        try:
            while self._fill(deadline):
                pass
        except socket.timeout:
            pass
        out, self.buf = self.buf, b""
        return out

    def wait_closed(self, timeout=READ_TIMEOUT):
        """Waits for EOF (or RST); returns the bytes received before it.
        Raises socket.timeout if the connection stays open."""
        deadline = time.monotonic() + timeout
        while self._fill(deadline):
            pass
        out, self.buf = self.buf, b""
        return out

    def request(self, method, target, headers=None, body=None, version="HTTP/1.1",
                host="localhost", chunked=False, timeout=None):
        """Sends one request and reads its response."""
        self.send(build_request(method, target, headers, body, version, host, chunked))
        return self.read_response(head=(method == "HEAD"), timeout=timeout)


def build_request(method, target, headers=None, body=None, version="HTTP/1.1",
                  host="localhost", chunked=False):
    """Bytes of a request. headers: list of (name, value) or dict. body: bytes or
    None. chunked=True frames the body as one chunk (use chunk_body for more)."""
    lines = ["%s %s %s" % (method, target, version)]
    if host is not None:
        lines.append("Host: %s" % host)
    hdrs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    data = b""
    if body is not None:
        if isinstance(body, str):
            body = body.encode("latin-1")
        if chunked:
            hdrs.append(("Transfer-Encoding", "chunked"))
            data = chunk_body([body] if body else [])
        else:
            hdrs.append(("Content-Length", str(len(body))))
            data = body
    for k, v in hdrs:
        lines.append("%s: %s" % (k, v))
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data


def chunk_body(chunks, trailers=None):
    out = b""
    for c in chunks:
        if isinstance(c, str):
            c = c.encode("latin-1")
        if c:
            out += b"%x\r\n" % len(c) + c + b"\r\n"
    out += b"0\r\n"
    for t in trailers or []:
        out += t.encode("latin-1") if isinstance(t, str) else t
        out += b"\r\n"
    return out + b"\r\n"


def get(path, host="localhost", extra=""):
    return ("GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (path, host, extra)).encode("latin-1")


# --------------------------------------------------------------------------
# unittest glue

class ServerTestCase(unittest.TestCase):
    """One server per class: `server_args` are the extra flags."""
    server_args = ()
    server_binary = None  # default: examples/hello
    workers = 2
    stop_timeout = STOP_TIMEOUT
    maxDiff = 4000

    @classmethod
    def setUpClass(cls):
        cls.server = Server(*cls.server_args, workers=cls.workers,
                            binary=cls.server_binary).start()
        cls.addr = cls.server.addr

    @classmethod
    def tearDownClass(cls):
        srv = cls.server
        try:
            if not srv.alive():
                raise AssertionError("server died during %s: %s\n--- server output ---\n%s" % (
                    cls.__name__, describe_rc(srv.proc.returncode), srv.output()))
            rc, took = srv.stop(cls.stop_timeout)
            if rc != 0:
                raise AssertionError("server did not exit 0 on SIGTERM within %.0f s (%s)\n"
                                     "--- server output ---\n%s" % (
                                         cls.stop_timeout, describe_rc(rc), srv.output()))
        finally:
            srv.close_log()

    def setUp(self):
        self._conns = []

    def tearDown(self):
        for c in self._conns:
            c.close()

    # -- helpers ---------------------------------------------------------
    def connect(self, timeout=READ_TIMEOUT, addr=None):
        c = Conn(addr or self.addr, timeout=timeout)
        self._conns.append(c)
        return c

    def assertServerAlive(self):
        if not self.server.alive():
            self.fail("server died: %s\n%s" % (describe_rc(self.server.proc.returncode),
                                                self.server.output()))

    def assertCommon(self, resp, request_minor=1):
        """What every response must have."""
        self.assertEqual(resp.version, "HTTP/1.1", resp)
        self.assertEqual(resp.all("Server"), ["flare"], resp)
        dates = resp.all("Date")
        self.assertEqual(len(dates), 1, "exactly one Date header: %r" % resp)
        self.assertRegex(dates[0], DATE_RE)
        when = email.utils.parsedate_to_datetime(dates[0]).timestamp()
        self.assertLess(abs(when - time.time()), 30, "Date far from now: %s" % dates[0])
        if resp.status >= 200 and resp.status not in (204, 304):
            framing = resp.all("Content-Length") or resp.all("Transfer-Encoding")
            self.assertTrue(framing, "no Content-Length or Transfer-Encoding: %r" % resp)
        if resp.status == 204 or resp.status < 200:
            self.assertEqual(resp.all("Content-Length"), [], "Content-Length in a %d" % resp.status)
            self.assertEqual(resp.all("Transfer-Encoding"), [], "Transfer-Encoding in a %d" % resp.status)

    def assertOk(self, resp, body=None, ctype=None, status=200):
        self.assertEqual(resp.status, status, resp)
        self.assertCommon(resp)
        if body is not None:
            if isinstance(body, str):
                body = body.encode()
            self.assertEqual(resp.body, body)
            if not resp.chunked:
                self.assertEqual(resp.get("Content-Length"), str(len(body)))
        if ctype is not None:
            self.assertEqual(resp.get("Content-Type"), ctype)
        return resp

    def assertErrorClose(self, conn, resp, status, head=False):
        """A protocol error: precise status, short text/plain body naming the
        problem, Connection: close, and the server closes the connection."""
        self.assertEqual(resp.status, status, resp)
        self.assertCommon(resp)
        self.assertIn("close", resp.connection_tokens(), "no Connection: close: %r" % resp)
        ctype = resp.get("Content-Type") or ""
        self.assertTrue(ctype.startswith("text/plain"), "Content-Type %r" % ctype)
        if not head:
            self.assertTrue(resp.body.strip(), "empty error body: %r" % resp)
            self.assertLess(len(resp.body), 1024, "error body not short: %r" % resp.body)
        self.assertClosed(conn)

    def assertClosed(self, conn, timeout=READ_TIMEOUT, allow_data=False):
        try:
            rest = conn.wait_closed(timeout)
        except socket.timeout:
            self.fail("server did not close the connection within %.1f s" % timeout)
        if not allow_data:
            self.assertEqual(rest, b"", "unexpected bytes before close: %r" % rest[:300])
        return rest


def _test_id(test):
    case = getattr(test, "test_case", None)   # a failed subTest
    return (case or test).id()


def main():
    """unittest.main() semantics, plus a summary line; exit 1 on failure."""
    name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    prog = unittest.main(exit=False, verbosity=2,
                         testRunner=unittest.TextTestRunner(stream=sys.stdout, verbosity=2))
    r = prog.result
    # a test with several failed subtests counts once; errors in
    # setUpClass/tearDownClass count as one failure each
    failed = {_test_id(t) for t, _ in r.failures + r.errors}
    failed |= {_test_id(t) for t in r.unexpectedSuccesses}
    skipped = {_test_id(t) for t, _ in r.skipped}
    in_run = {f for f in failed if not f.startswith(("setUpClass", "tearDownClass", "setUpModule"))}
    passed = max(r.testsRun - len(in_run) - len(skipped), 0)
    print("%s: %d passed, %d failed, %d skipped" % (name, passed, len(failed), len(skipped)))
    sys.stdout.flush()
    sys.exit(0 if r.wasSuccessful() else 1)
