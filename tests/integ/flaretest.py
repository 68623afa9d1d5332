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

TLS mode: with FLARE_TEST_TLS=1 in the environment, every Server running
examples/hello gets --tls-cert/--tls-key (an ECDSA P-256 certificate for
localhost and 127.0.0.1, made once per process with openssl in a temporary
directory), and every client (Conn, client_socket()) speaks TLS through
TLSSocket, which trusts that certificate only. The same tests then run over
TLS: what they send and expect is the HTTP inside the records.
"""

import atexit
import email.utils
import os
import re
import select
import shutil
import signal
import signal as _signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD_DIR = os.environ.get("FLARE_BUILD_DIR") or os.path.join(REPO_ROOT, "build")
HELLO = os.path.join(os.path.abspath(BUILD_DIR), "examples", "hello")
TODO_API = os.path.join(os.path.abspath(BUILD_DIR), "examples", "todo_api")

HOST = "127.0.0.1"
READ_TIMEOUT = 5.0     # generous: the machine may be loaded (2 cores, ASan builds)
STOP_TIMEOUT = 5.0     # SIGTERM -> exit, for an idle server
TLS = os.environ.get("FLARE_TEST_TLS") == "1"   # run the suite over TLS (see above)
TLS_HOSTNAME = "localhost"   # the name clients ask for (SNI) and verify

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
    quarantine keeps freed memory resident) or ThreadSanitizer (its shadow
    memory and per-thread allocator caches grow with use): RSS checks mean
    nothing then."""
    try:
        with open(HELLO, "rb") as f:
            data = f.read()
        return b"__asan_init" in data or b"__tsan_init" in data
    except OSError:
        return False


def read_log(f):
    """All of a server's output file so far. The server's stdout and stderr
    share this file's offset with us: seek(0) then read() would let a line
    the server writes in between land at offset 0, over earlier ones. pread
    leaves the offset alone."""
    fd = f.fileno()
    return os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", "replace")


def free_port():
    """A port that was free a moment ago (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------
# TLS: certificates made at test time, and a client connection

_tmpdirs = []


def _cleanup_tmpdirs():
    for d in _tmpdirs:
        shutil.rmtree(d, ignore_errors=True)


atexit.register(_cleanup_tmpdirs)


def make_cert(directory, name, san, cn=None, days=2):
    """A self-signed ECDSA P-256 certificate and its key in DIRECTORY:
    (NAME.pem, NAME.key). san: the subjectAltName value, e.g.
    "DNS:localhost,IP:127.0.0.1". Never stored in the repository."""
    cert = os.path.join(directory, name + ".pem")
    key = os.path.join(directory, name + ".key")
    subj = "/CN=%s" % (cn or san.split(",")[0].split(":", 1)[1])
    p = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec",
                        "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-sha256",
                        "-days", str(days), "-subj", subj, "-addext", "subjectAltName=" + san,
                        "-keyout", key, "-out", cert],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        raise RuntimeError("openssl req failed: %s" % p.stdout.decode("utf-8", "replace"))
    return cert, key


def temp_dir(prefix="flare-tls-"):
    """A temporary directory removed when the process exits."""
    d = tempfile.mkdtemp(prefix=prefix)
    _tmpdirs.append(d)
    return d


_tls_files = None


def tls_files():
    """(cert, key) of the suite's certificate for localhost and 127.0.0.1,
    made on the first call of the process."""
    global _tls_files
    if _tls_files is None:
        _tls_files = make_cert(temp_dir(), "localhost", "DNS:localhost,IP:127.0.0.1")
    return _tls_files


def tls_args():
    """The server flags of TLS mode ([] when the suite runs in plain mode)."""
    if not TLS:
        return []
    cert, key = tls_files()
    return ["--tls-cert", cert, "--tls-key", key]


def client_context(cafile=None, alpn=("http/1.1",)):
    """A client context like a browser's: certificate and name verified
    (against cafile only: default the suite's certificate), ALPN offered."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cafile or tls_files()[0])
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


_default_context = None


def default_context():
    global _default_context
    if _default_context is None:
        _default_context = client_context()
    return _default_context


def _is_eof(e):
    """Is this SSLError the peer's TCP EOF without close_notify?"""
    return isinstance(e, ssl.SSLEOFError) or getattr(e, "reason", None) == "UNEXPECTED_EOF_WHILE_READING"


class TLSClosedError(ConnectionResetError):
    """The server closed the TCP connection before the handshake completed."""


class TLSSocket:
    """A client TLS connection over a connected plain socket, with the
    socket methods the tests use (send, sendall, recv, shutdown, close,
    settimeout, setsockopt, fileno, ...), so that a test written for a plain
    socket runs unchanged over TLS.

    Records go through ssl.SSLObject and memory BIOs rather than
    ssl.SSLSocket, so that this side controls what reaches the wire:
    shutdown(SHUT_WR) is a real half-close (close_notify, then FIN, and the
    responses can still be read), close() is a TCP close without
    close_notify (like the plain socket's; close_notify() and unwrap() send
    it), and the TLS 1.3 tickets the server sends after its handshake are
    consumed without being mistaken for data.

    One thread may send while another reads (a test that uploads from a
    thread and reads the answers at once): the SSL object is only touched
    under a lock, and the socket is read and written outside it, the writes
    under a second lock so that records leave in the order they were made.

    The handshake runs on the first send or receive (lazily, as TCP data
    would flow): connecting succeeds while the server's backlog holds the
    connection, as for a plain client. Raw reads and writes use the plain
    socket's timeout. After EOF, `eof` says how the server ended:
    "close_notify" (clean), "eof" (TCP FIN without close_notify) or
    "reset"."""

    RECORD = 16384

    def __init__(self, sock, context=None, server_hostname=TLS_HOSTNAME, session=None):
        self.raw = sock
        self.context = context or default_context()
        # an EOF without close_notify must be an error, not b'' (which would
        # look like close_notify): the tests tell the two apart
        self.context.options &= ~ssl.OP_IGNORE_UNEXPECTED_EOF
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.obj = self.context.wrap_bio(self.incoming, self.outgoing, server_side=False,
                                         server_hostname=server_hostname, session=session)
        self.handshake_done = False
        self.eof = None
        self.sent_close_notify = False
        self._rbuf = b""
        self._lock = threading.Lock()        # the SSL object and its BIOs
        self._send_lock = threading.Lock()   # taking records + writing them
        self._hs_lock = threading.Lock()     # one handshake, whoever starts it

    # -- plumbing ----------------------------------------------------------
    def _flush(self):
        with self._lock:
            if self.outgoing.pending == 0:
                return
        with self._send_lock:
            with self._lock:
                data = self.outgoing.read()
            if data:
                self.raw.sendall(data)

    def _read_raw(self):
        """One recv into the incoming BIO; False on EOF (the BIO is told)."""
        if self.incoming.eof:
            return False
        try:
            data = self.raw.recv(65536)
        except ConnectionResetError:
            self.eof = "reset"
            raise
        with self._lock:
            if not data:
                self.incoming.write_eof()
                return False
            self.incoming.write(data)
        return True

    def do_handshake(self):
        """Completes the handshake; ssl.SSLError when the server refuses it
        (an alert), TLSClosedError when it closes the connection instead."""
        if self.handshake_done:
            return
        with self._hs_lock:
            if not self.handshake_done:
                self._handshake()

    def _handshake(self):
        while True:
            try:
                with self._lock:
                    self.obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                if self.incoming.eof:
                    self.eof = "eof"
                    raise TLSClosedError("connection closed during the TLS handshake")
                self._read_raw()
            except ssl.SSLError as e:
                if not _is_eof(e):
                    raise
                self.eof = "eof"
                raise TLSClosedError("connection closed during the TLS handshake")
        self._flush()
        self.handshake_done = True

    def _pull(self):
        """Decrypts what the incoming BIO holds into self._rbuf (records
        without data, such as tickets, leave nothing); notes EOF."""
        while self.eof is None:
            try:
                with self._lock:
                    data = self.obj.read(65536)
            except ssl.SSLWantReadError:
                self._flush()   # e.g. the answer to a KeyUpdate
                return
            except ssl.SSLZeroReturnError:
                self.eof = "close_notify"
                return
            except ssl.SSLError as e:
                if not _is_eof(e):
                    raise
                self.eof = "eof"
                return
            if not data:   # (SSLObject.read's way of saying close_notify)
                self.eof = "close_notify"
                return
            self._rbuf += data

    # -- the socket interface ------------------------------------------------
    def sendall(self, data):
        if isinstance(data, str):
            data = data.encode("latin-1")
        self.do_handshake()
        mv = memoryview(data)
        for i in range(0, len(mv), self.RECORD):
            with self._send_lock:
                with self._lock:
                    self.obj.write(mv[i:i + self.RECORD])
                    out = self.outgoing.read()
                self.raw.sendall(out)

    def send(self, data):
        self.sendall(data)
        return len(data)

    def recv(self, n=65536):
        """Application bytes (at most n); b'' at EOF (see `eof`)."""
        self.do_handshake()
        while not self._rbuf and self.eof is None:
            self._pull()
            if self._rbuf or self.eof is not None:
                break
            self._read_raw()
        out, self._rbuf = self._rbuf[:n], self._rbuf[n:]
        return out

    def pending(self):
        """Decrypted bytes waiting to be read without touching the socket."""
        self._pull()
        return len(self._rbuf)

    def readable(self, timeout):
        """True when application bytes (or EOF) can be read now, waiting up
        to `timeout` seconds. Records without data (tickets) do not count."""
        deadline = time.monotonic() + timeout
        self.do_handshake()
        while True:
            self._pull()
            if self._rbuf or self.eof is not None:
                return True
            r, _, _ = select.select([self.raw], [], [], max(deadline - time.monotonic(), 0))
            if not r:
                return False
            self._read_raw()

    def close_notify(self):
        """Sends close_notify (once) without waiting for the server's."""
        if self.sent_close_notify or not self.handshake_done:
            return
        self.sent_close_notify = True
        try:
            with self._lock:
                self.obj.unwrap()
        except ssl.SSLWantReadError:
            pass
        self._flush()

    def unwrap(self):
        """The clean close both ways: close_notify, then the server's; any
        data still coming before it is returned. Raises ssl.SSLError if the
        server ends without close_notify."""
        self.do_handshake()
        rest = b""
        while self.eof is None:
            rest += self.recv(65536)
        if self.eof != "close_notify":
            raise ssl.SSLEOFError("the server closed without close_notify (%s)" % self.eof)
        self.close_notify()
        return rest

    def shutdown(self, how):
        if how == socket.SHUT_WR:
            # TLS 1.3 half-close: close_notify, then FIN; reading goes on
            self.close_notify()
        self.raw.shutdown(how)

    def close(self):
        self.raw.close()

    def fileno(self):
        return self.raw.fileno()

    def settimeout(self, t):
        self.raw.settimeout(t)

    def gettimeout(self):
        return self.raw.gettimeout()

    def setsockopt(self, *a):
        return self.raw.setsockopt(*a)

    def getsockopt(self, *a):
        return self.raw.getsockopt(*a)

    def getsockname(self):
        return self.raw.getsockname()

    def getpeername(self):
        return self.raw.getpeername()

    # -- what TLS says about the connection ------------------------------------
    def version(self):
        return self.obj.version()

    def cipher(self):
        return self.obj.cipher()

    def selected_alpn_protocol(self):
        return self.obj.selected_alpn_protocol()

    def getpeercert(self, binary_form=False):
        return self.obj.getpeercert(binary_form)

    @property
    def session(self):
        return self.obj.session

    @property
    def session_reused(self):
        return self.obj.session_reused


def client_socket(sock, tls=None, **kw):
    """sock (connected), as the suite's clients use it: wrapped in a
    TLSSocket in TLS mode (or when tls=True), unchanged otherwise."""
    if tls is None:
        tls = TLS
    return TLSSocket(sock, **kw) if tls else sock


# --------------------------------------------------------------------------
# server process

class Server:
    """tls: None follows the suite's mode (TLS only for examples/hello, the
    one example with TLS flags); True adds the suite's certificate; False
    never. With extra TLS flags of its own in extra_args, pass tls=False."""

    def __init__(self, *extra_args, workers=2, binary=None, tls=None, prefix=(), env=None):
        self.binary = binary or HELLO
        self.prefix = [str(a) for a in prefix]   # a wrapper the server runs under
        self.env = env                           # None: this process's environment
        self.extra_args = [str(a) for a in extra_args]
        self.workers = workers
        if tls is None:
            tls = TLS and self.binary == HELLO
        self.tls = tls
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
            args = self.prefix + [self.binary, "--listen", "%s:%d" % (HOST, self.port),
                    "--workers", str(self.workers)] + self.extra_args
            if self.tls:
                cert, key = tls_files()
                args += ["--tls-cert", cert, "--tls-key", key]
                if "--tls-handshake-timeout" not in self.extra_args:
                    # the suites open many connections before their clients
                    # handshake (lazily, one after another): under ASan on a
                    # loaded machine the last ones would pass the 10 s
                    # deadline counted from accept, which test_tls checks
                    args += ["--tls-handshake-timeout", "120"]
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                         stdout=self.log, stderr=self.log, env=self.env)
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
            return read_log(self.log)
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
    """tls: None follows the suite's mode; True/False force it. In TLS mode
    self.sock is a TLSSocket (same interface; the handshake happens with
    the first send or read)."""

    def __init__(self, addr, timeout=READ_TIMEOUT, nodelay=True, tls=None, **tls_kw):
        sock = socket.create_connection(addr, timeout=timeout)
        if nodelay:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = client_socket(sock, tls, **tls_kw)
        self.timeout = timeout
        self.buf = b""
        self.eof = False

    @classmethod
    def from_socket(cls, sock, timeout=READ_TIMEOUT):
        """A Conn reading and writing through sock, already connected (a
        plain socket or a TLSSocket)."""
        c = cls.__new__(cls)
        c.sock, c.timeout, c.buf, c.eof = sock, timeout, b"", False
        return c

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
        except ConnectionResetError:   # (TLS: also a close during the handshake)
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def readable(self, timeout):
        """True when the server has sent something (bytes or EOF) within
        timeout seconds: select() on a plain socket; over TLS, records that
        carry no data (session tickets) do not count."""
        if self.buf or self.eof:
            return True
        if isinstance(self.sock, TLSSocket):
            return self.sock.readable(timeout)
        r, _, _ = select.select([self.sock], [], [], timeout)
        return bool(r)

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
    server_tls = None     # Server(tls=...): None follows the suite's mode
    workers = 2
    stop_timeout = STOP_TIMEOUT
    maxDiff = 4000

    @classmethod
    def setUpClass(cls):
        cls.server = Server(*cls.server_args, workers=cls.workers,
                            binary=cls.server_binary, tls=cls.server_tls).start()
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
        c = Conn(addr or self.addr, timeout=timeout,
                 tls=self.server.tls if addr is None else None)
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
