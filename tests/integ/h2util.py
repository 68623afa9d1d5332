"""Helpers of the HTTP/2 integration tests (test_h2_*.py): Debian's
python3-h2 / python3-hpack over raw sockets.

- frame(): the bytes of one frame, built by hand (9-byte header + payload),
  so that the tests can send what no well-behaved client library would.
- RawH2: a client connection (h2c with prior knowledge, or TLS with ALPN h2)
  that sends frames as given and reads the server's frames one by one,
  decoding header blocks with its own HPACK decoder. It acknowledges the
  server's SETTINGS, keeps every frame it received (for the failure
  messages) and knows how to wait for a GOAWAY, an RST_STREAM, a response,
  or the end of the connection.
- Client: h2.connection.H2Connection on a socket, for well-formed exchanges
  (flow-controlled request bodies, many concurrent streams).
- start_server(): examples/hello through flaretest.Server or, with
  FLARE_H2_PEER=h2o in the environment, Debian's h2o configured with the same
  routes where it has them (/plaintext, /echo, /static): a way to check that
  a test's expectation is what an independent implementation does where the
  RFC defines the outcome. Tests that need hello's own routes or flags skip
  in that mode only; the ctest runs always use examples/hello.
"""

import collections
import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402

import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402
import h2.settings  # noqa: E402
import hpack  # noqa: E402

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# frame types (RFC 9113 §6)
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, \
    CONTINUATION = range(10)
TYPE_NAMES = ["DATA", "HEADERS", "PRIORITY", "RST_STREAM", "SETTINGS", "PUSH_PROMISE", "PING",
              "GOAWAY", "WINDOW_UPDATE", "CONTINUATION"]
# flags
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20
# settings (§6.5.2)
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, \
    MAX_HEADER_LIST_SIZE = range(1, 7)
# error codes (§7)
NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
INTERNAL_ERROR = 0x2
FLOW_CONTROL_ERROR = 0x3
SETTINGS_TIMEOUT = 0x4
STREAM_CLOSED = 0x5
FRAME_SIZE_ERROR = 0x6
REFUSED_STREAM = 0x7
CANCEL = 0x8
COMPRESSION_ERROR = 0x9
CONNECT_ERROR = 0xA
ENHANCE_YOUR_CALM = 0xB
INADEQUATE_SECURITY = 0xC
HTTP_1_1_REQUIRED = 0xD
ERROR_NAMES = {v: k for k, v in dict(
    NO_ERROR=0, PROTOCOL_ERROR=1, INTERNAL_ERROR=2, FLOW_CONTROL_ERROR=3, SETTINGS_TIMEOUT=4,
    STREAM_CLOSED=5, FRAME_SIZE_ERROR=6, REFUSED_STREAM=7, CANCEL=8, COMPRESSION_ERROR=9,
    CONNECT_ERROR=10, ENHANCE_YOUR_CALM=11, INADEQUATE_SECURITY=12,
    HTTP_1_1_REQUIRED=13).items()}

PEER = os.environ.get("FLARE_H2_PEER", "flare")   # flare | h2o (harness validation)
READ_TIMEOUT = 5.0


def err_name(code):
    return "%s(%d)" % (ERROR_NAMES.get(code, "UNKNOWN"), code)


def frame(ftype, flags, sid, payload=b""):
    """One frame: 24-bit length, type, flags, reserved bit + 31-bit stream id."""
    n = len(payload)
    return struct.pack(">BHBBI", n >> 16, n & 0xFFFF, ftype, flags, sid & 0x7FFFFFFF) + payload


def settings_frame(pairs=(), ack=False):
    return frame(SETTINGS, ACK if ack else 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


def window_update(sid, increment):
    return frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", increment))


def rst_stream(sid, code):
    return frame(RST_STREAM, 0, sid, struct.pack(">I", code))


def ping(data=b"\0" * 8, ack=False):
    return frame(PING, ACK if ack else 0, 0, data)


def priority(sid, dep=0, weight=15, exclusive=False):
    return frame(PRIORITY, 0, sid, struct.pack(">IB", (dep & 0x7FFFFFFF) | (exclusive << 31), weight))


Frame = collections.namedtuple("Frame", "type flags sid payload headers")


def describe(f):
    name = TYPE_NAMES[f.type] if f.type < len(TYPE_NAMES) else "type%d" % f.type
    extra = ""
    if f.type in (RST_STREAM, GOAWAY) and len(f.payload) >= 4:
        code = struct.unpack(">I", f.payload[-4:] if f.type == RST_STREAM else f.payload[4:8])[0]
        extra = " " + err_name(code)
        if f.type == GOAWAY:
            extra += " last=%d" % (struct.unpack(">I", f.payload[:4])[0] & 0x7FFFFFFF)
    elif f.headers is not None:
        status = [v for k, v in f.headers if k == ":status"]
        extra = " :status %s" % status[0] if status else " %r" % (f.headers[:4],)
    elif f.type == DATA:
        extra = " %d bytes" % len(f.payload)
    return "%s(sid=%d flags=%#x%s)" % (name, f.sid, f.flags, extra)


class Closed(Exception):
    """The server closed the connection."""


class RawH2:
    """One client connection, frame by frame. addr: (host, port). tls: a
    cafile to verify against (ALPN h2 offered), or None for h2c."""

    def __init__(self, addr, tls=None, settings=(), preface=True, timeout=READ_TIMEOUT):
        sock = socket.create_connection(addr, timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.load_verify_locations(tls)
            ctx.set_alpn_protocols(["h2"])
            sock = ctx.wrap_socket(sock, server_hostname="localhost")
            if sock.selected_alpn_protocol() != "h2":
                raise AssertionError("ALPN chose %r, not h2" % sock.selected_alpn_protocol())
        self.sock = sock
        self.timeout = timeout
        self.buf = b""
        self.enc = hpack.Encoder()
        self.dec = hpack.Decoder()
        self.dec.max_header_list_size = 1 << 24   # the test decides what is too big
        self.log = []              # every frame received, in order
        self.server_settings = {}
        self.settings_acked = 0
        self.goaway = None         # (last_sid, code, debug) once received
        # what each stream received so far: sid -> {"head", "body", "trailers", "ended", "rst"}
        self.streams = {}
        self.auto_window = True    # give back every DATA byte at once (WINDOW_UPDATE)
        self.eof = False
        self.reset = False         # the connection ended with a TCP RST
        if preface:
            self.send(PREFACE + settings_frame(settings))

    # -- sending ---------------------------------------------------------------
    def send(self, data):
        self.sock.sendall(data)

    def send_frame(self, ftype, flags, sid, payload=b""):
        self.send(frame(ftype, flags, sid, payload))

    def encode(self, headers):
        return self.enc.encode([(k.encode() if isinstance(k, str) else k,
                                 v.encode() if isinstance(v, str) else v) for k, v in headers])

    def headers(self, sid, headers, end_stream=True, end_headers=True, block=None):
        """A HEADERS frame (block: an already encoded header block)."""
        flags = (END_STREAM if end_stream else 0) | (END_HEADERS if end_headers else 0)
        self.send_frame(HEADERS, flags, sid, self.encode(headers) if block is None else block)

    def data(self, sid, payload, end_stream=False):
        self.send_frame(DATA, END_STREAM if end_stream else 0, sid, payload)

    def request(self, sid, path="/plaintext", method="GET", extra=(), body=None, authority="localhost",
                scheme="http"):
        hdrs = [(":method", method), (":scheme", scheme), (":authority", authority), (":path", path)]
        hdrs += list(extra)
        if body is None:
            self.headers(sid, hdrs, end_stream=True)
        else:
            self.headers(sid, hdrs, end_stream=False)
            self.data(sid, body, end_stream=True)

    # -- receiving -------------------------------------------------------------
    def _fill(self, deadline):
        if self.eof:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("no frame from the server (received so far: %s)" % self.history())
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise socket.timeout("no frame from the server within the time (received: %s)" %
                                 self.history()) from None
        except ConnectionResetError:
            self.reset = True
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def _read_exact(self, n, deadline):
        while len(self.buf) < n:
            if not self._fill(deadline):
                if self.buf:
                    raise AssertionError("connection closed in the middle of a frame (%d bytes)" %
                                         len(self.buf))
                raise Closed("connection closed (received: %s)" % self.history())
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _raw_frame(self, deadline):
        h = self._read_exact(9, deadline)
        if not self.log and h.startswith(b"HTTP/1."):
            raise AssertionError("the server answered the HTTP/2 preface with HTTP/1.1: %r" %
                                 (h + self.buf)[:200])
        hi, lo, ftype, flags, sid = struct.unpack(">BHBBI", h)
        payload = self._read_exact((hi << 16) | lo, deadline)
        return ftype, flags, sid & 0x7FFFFFFF, payload

    def recv_frame(self, timeout=None):
        """The next frame (header blocks decoded, CONTINUATIONs folded into
        their HEADERS). Raises Closed at EOF, socket.timeout."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        ftype, flags, sid, payload = self._raw_frame(deadline)
        headers = None
        if ftype in (HEADERS, PUSH_PROMISE):
            block = payload
            if flags & PADDED:
                pad = block[0]
                block = block[1:len(block) - pad]
            if ftype == HEADERS and flags & PRIORITY_FLAG:
                block = block[5:]
            if ftype == PUSH_PROMISE:
                block = block[4:]
            while not flags & END_HEADERS:
                t2, f2, s2, p2 = self._raw_frame(deadline)
                if t2 != CONTINUATION or s2 != sid:
                    raise AssertionError("server sent %s in the middle of a header block" %
                                         TYPE_NAMES[t2] if t2 < 10 else t2)
                block += p2
                flags |= f2 & END_HEADERS
            headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in self.dec.decode(block, raw=True)]
        f = Frame(ftype, flags, sid, payload, headers)
        self.log.append(f)
        if sid:
            self._track(f)
        if ftype == SETTINGS and sid == 0:
            if flags & ACK:
                self.settings_acked += 1
            else:
                for i in range(0, len(payload) - 5, 6):
                    k, v = struct.unpack(">HI", payload[i:i + 6])
                    self.server_settings[k] = v
                try:
                    self.send(settings_frame(ack=True))
                except OSError:
                    pass
        elif ftype == GOAWAY and len(payload) >= 8:
            last, code = struct.unpack(">II", payload[:8])
            self.goaway = (last & 0x7FFFFFFF, code, payload[8:])
        return f

    def _track(self, f):
        st = self.streams.setdefault(f.sid, dict(head=None, body=[], trailers=None, ended=False, rst=None))
        if f.type == HEADERS:
            status = dict(f.headers).get(":status", "")
            if st["head"] is None and status.startswith("1"):
                pass   # interim response
            elif st["head"] is None:
                st["head"] = f.headers
            else:
                st["trailers"] = f.headers
        elif f.type == DATA:
            data = f.payload
            if f.flags & PADDED:
                data = data[1:len(data) - data[0]]
            st["body"].append(data)
            if self.auto_window and f.payload:
                try:
                    self.send(window_update(0, len(f.payload)) +
                              (window_update(f.sid, len(f.payload)) if not f.flags & END_STREAM else b""))
                except OSError:
                    pass
        elif f.type == RST_STREAM and len(f.payload) == 4:
            st["rst"] = struct.unpack(">I", f.payload)[0]
            st["ended"] = True
        if f.type in (HEADERS, DATA) and f.flags & END_STREAM:
            st["ended"] = True

    def history(self, n=12):
        frames = self.log[-n:]
        s = ", ".join(describe(f) for f in frames) or "nothing"
        if self.eof:
            s += ", then %s" % ("a TCP reset" if self.reset else "EOF")
        return s

    def wait_settings(self, timeout=None):
        """Reads until the server's first SETTINGS arrived (returns them)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self.server_settings and not any(f.type == SETTINGS and not f.flags & ACK
                                                   for f in self.log):
            self.recv_frame(deadline - time.monotonic())
        return self.server_settings

    def until(self, pred, timeout=None, what="the frame expected"):
        """Reads frames until pred(frame); returns it. AssertionError at EOF."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            try:
                f = self.recv_frame(max(deadline - time.monotonic(), 0.001))
            except Closed:
                raise AssertionError("connection closed before %s; received: %s" %
                                     (what, self.history())) from None
            except socket.timeout:
                raise AssertionError("no %s within %.1f s; received: %s" %
                                     (what, timeout or self.timeout, self.history())) from None
            if pred(f):
                return f

    def drain(self, timeout=None):
        """Reads until EOF (returns True) or until timeout (False)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        try:
            while True:
                self.recv_frame(max(deadline - time.monotonic(), 0.001))
        except Closed:
            return True
        except socket.timeout:
            return False

    def response(self, sid, timeout=None):
        """(status, headers, body, trailers) of stream sid, from the frames
        received so far and those that follow (frames of other streams are
        kept for their own response() call). DATA is given back at once
        unless auto_window is False."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            st = self.streams.get(sid)
            if st is not None and st["rst"] is not None:
                raise AssertionError("RST_STREAM %s on stream %d before its response ended (%s)" % (
                    err_name(st["rst"]), sid, self.history()))
            if st is not None and st["ended"]:
                break
            if self.goaway is not None and sid > self.goaway[0]:
                raise AssertionError("GOAWAY (last stream %d) before the response on stream %d: %s" % (
                    self.goaway[0], sid, self.history()))
            self.until(lambda x: x.sid == sid or x.type == GOAWAY, max(deadline - time.monotonic(), 0.001),
                       "the response on stream %d" % sid)
        if st["head"] is None:
            raise AssertionError("stream %d ended without a HEADERS frame" % sid)
        return int(dict(st["head"])[":status"]), st["head"], b"".join(st["body"]), st["trailers"]

    def expect_goaway(self, code, timeout=None, closed=True):
        """Reads until a GOAWAY: asserts its code, then (closed=True) that the
        server closes the connection. Returns the last stream id."""
        self.until(lambda x: x.type == GOAWAY, timeout, "a GOAWAY %s" % err_name(code))
        last, got, debug = self.goaway
        if got != code:
            raise AssertionError("GOAWAY %s, expected %s (debug %r; received: %s)" % (
                err_name(got), err_name(code), debug[:200], self.history()))
        if closed and not self.drain(timeout):
            raise AssertionError("connection still open %.1f s after GOAWAY %s" % (
                timeout or self.timeout, err_name(code)))
        return last

    def expect_rst(self, sid, code, timeout=None):
        """Reads until the RST_STREAM of sid: asserts its code (a GOAWAY
        instead fails). A HEADERS response on sid before it fails too."""
        def pred(f):
            if f.type == GOAWAY:
                raise AssertionError("GOAWAY %s instead of RST_STREAM %s on stream %d (%s)" % (
                    err_name(self.goaway[1]), err_name(code), sid, self.history()))
            if f.sid == sid and f.type == HEADERS:
                raise AssertionError("a response %r on stream %d instead of RST_STREAM %s" % (
                    f.headers, sid, err_name(code)))
            return f.type == RST_STREAM and f.sid == sid
        f = self.until(pred, timeout, "RST_STREAM %s on stream %d" % (err_name(code), sid))
        got = struct.unpack(">I", f.payload)[0]
        if got != code:
            raise AssertionError("RST_STREAM %s on stream %d, expected %s" % (err_name(got), sid, err_name(code)))

    def alive_check(self, sid, path="/plaintext", body=b"Hello, World!"):
        """The connection still serves a request on a new stream sid."""
        self.request(sid, path)
        status, _, got, _ = self.response(sid)
        if (status, got) != (200, body):
            raise AssertionError("GET %s on stream %d: %d %r" % (path, sid, status, got[:100]))

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


# ------------------------------------------------------------------------------
# H2Connection-based client for well-formed exchanges

class Client:
    """h2.connection.H2Connection (client side) over a socket."""

    def __init__(self, addr, tls=None, timeout=READ_TIMEOUT, local_settings=None):
        sock = socket.create_connection(addr, timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.load_verify_locations(tls)
            ctx.set_alpn_protocols(["h2"])
            sock = ctx.wrap_socket(sock, server_hostname="localhost")
        self.sock = sock
        self.timeout = timeout
        cfg = h2.config.H2Configuration(client_side=True, header_encoding="utf-8",
                                        validate_inbound_headers=True)
        self.conn = h2.connection.H2Connection(config=cfg)
        if local_settings:
            self.conn.local_settings = h2.settings.Settings(client=True, initial_values=local_settings)
        self.conn.initiate_connection()
        self.flush()
        self.streams = {}       # sid -> dict(status, headers, body, trailers, done, reset, t_done)
        self.order = []         # sids in completion order
        self.goaway = None
        self.closed = False
        self.pending = {}       # sid -> bytes of request body still to send
        self.auto_window = True

    def flush(self):
        out = self.conn.data_to_send()
        if out:
            self.sock.sendall(out)

    def get(self, path, method="GET", extra=(), end_stream=True):
        sid = self.conn.get_next_available_stream_id()
        hdrs = [(":method", method), (":scheme", "http"), (":authority", "localhost"),
                (":path", path)] + list(extra)
        self.conn.send_headers(sid, hdrs, end_stream=end_stream)
        self.streams[sid] = dict(status=None, headers=None, body=[], trailers=None, done=False,
                                 reset=None)
        self.flush()
        return sid

    def post(self, path, body, extra=(), trailers=None):
        sid = self.get(path, "POST", list(extra), end_stream=False)
        self.pending[sid] = [memoryview(body), trailers]
        self._push_bodies()
        return sid

    def _push_bodies(self):
        for sid in list(self.pending):
            data, trailers = self.pending[sid]
            while len(data):
                n = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size,
                        len(data))
                if n <= 0:
                    break
                self.conn.send_data(sid, bytes(data[:n]))
                data = data[n:]
            self.pending[sid][0] = data
            if not len(data):
                if trailers:
                    self.conn.send_headers(sid, trailers, end_stream=True)
                else:
                    self.conn.end_stream(sid)
                del self.pending[sid]
        self.flush()

    def pump(self, timeout=None):
        """One read; handles the events. False at EOF."""
        self.sock.settimeout(self.timeout if timeout is None else timeout)
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            return False
        for ev in self.conn.receive_data(data):
            self._event(ev)
        self._push_bodies()
        self.flush()
        return True

    def _event(self, ev):
        st = self.streams.get(getattr(ev, "stream_id", 0))
        if isinstance(ev, h2.events.ResponseReceived):
            st["headers"] = ev.headers
            st["status"] = int(dict(ev.headers)[":status"])
        elif isinstance(ev, h2.events.TrailersReceived):
            st["trailers"] = ev.headers
        elif isinstance(ev, h2.events.DataReceived):
            st["body"].append(ev.data)
            if self.auto_window and ev.flow_controlled_length:
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            st["done"] = True
            st["t_done"] = time.monotonic()
            self.order.append(ev.stream_id)
        elif isinstance(ev, h2.events.StreamReset):
            if st is not None:
                st["reset"] = ev.error_code
                st["done"] = True
                self.order.append(ev.stream_id)
            self.pending.pop(ev.stream_id, None)
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.goaway = (ev.last_stream_id, ev.error_code)

    def wait(self, sids, timeout=None):
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not all(self.streams[s]["done"] for s in sids):
            left = deadline - time.monotonic()
            if left <= 0:
                missing = [s for s in sids if not self.streams[s]["done"]]
                raise AssertionError("streams %r not complete in time" % missing[:20])
            try:
                if not self.pump(left):
                    missing = [s for s in sids if not self.streams[s]["done"]]
                    raise AssertionError("connection closed (GOAWAY %r) with streams %r open" % (
                        self.goaway, missing[:20]))
            except socket.timeout:
                continue
        return [self.result(s) for s in sids]

    def result(self, sid):
        st = self.streams[sid]
        return st["status"], st["headers"], b"".join(st["body"]), st["trailers"], st["reset"]

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


# ------------------------------------------------------------------------------
# servers

def proc_stat(pid):
    """(utime+stime in seconds, rss in KiB) of process pid."""
    with open("/proc/%d/stat" % pid) as f:
        rest = f.read().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    cpu = (int(rest[11]) + int(rest[12])) / tck
    rss = int(rest[21]) * os.sysconf("SC_PAGE_SIZE") // 1024
    return cpu, rss


class H2oServer:
    """Debian's h2o with a plaintext listener (h2c prior knowledge) or a TLS
    one, serving /plaintext, /static/ and POST /echo like hello does."""

    def __init__(self, tls=False, static=None):
        self.tls = tls
        self.static = static
        self.proc = None
        self.port = None
        self.dir = flaretest.temp_dir("flare-h2o-")

    @property
    def addr(self):
        return (flaretest.HOST, self.port)

    def start(self):
        if not shutil.which("h2o"):
            raise unittest.SkipTest("h2o not installed (FLARE_H2_PEER=h2o)")
        self.port = flaretest.free_port()
        www = os.path.join(self.dir, "www")
        os.makedirs(www, exist_ok=True)
        with open(os.path.join(www, "plaintext"), "w") as f:
            f.write("Hello, World!")
        listen = "listen:\n  host: 127.0.0.1\n  port: %d\n" % self.port
        if self.tls:
            cert, key = flaretest.tls_files()
            listen += "  ssl:\n    certificate-file: %s\n    key-file: %s\n" % (cert, key)
        static = ""
        if self.static:
            static = "      /static:\n        file.dir: %s\n" % self.static
        conf = """num-threads: 1
error-log: %s/error.log
pid-file: %s/h2o.pid
file.mime.setdefaulttype: text/plain
limit-request-body: 1048576
%shosts:
  default:
    paths:
      /plaintext:
        file.file: %s/plaintext
      /echo:
        mruby.handler: |
          Proc.new do |env|
            [200, {"content-type" => env["CONTENT_TYPE"] || "application/octet-stream"},
             [env["rack.input"].read]]
          end
%s""" % (self.dir, self.dir, listen, www, static)
        if os.getuid() == 0:
            conf = "user: root\n" + conf
        path = os.path.join(self.dir, "h2o.conf")
        with open(path, "w") as f:
            f.write(conf)
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(["h2o", "-m", "worker", "-c", path], stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("h2o exited: %s" % self.output())
            try:
                with socket.create_connection(self.addr, timeout=1):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("h2o did not start")

    def alive(self):
        return self.proc.poll() is None

    def output(self):
        out = flaretest.read_log(self.log)
        try:
            with open(os.path.join(self.dir, "error.log")) as f:
                out += f.read()
        except OSError:
            pass
        return out

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout=5):
        if self.proc.poll() is None:
            self.proc.terminate()
        rc = self.wait(timeout)
        if rc is None:
            self.proc.kill()
            self.proc.wait()
        return 0, 0.0

    def close_log(self):
        self.log.close()


def scrape(addr):
    """examples/hello's /metrics over HTTP/1.1 (a plaintext listener):
    {'name{label="v",...}': value} as the exposition writes the series."""
    sock = socket.create_connection(addr, timeout=READ_TIMEOUT)
    try:
        sock.sendall(flaretest.get("/metrics", extra="Connection: close\r\n"))
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise AssertionError("GET /metrics: %r" % head[:200])
    out = {}
    for line in body.decode("utf-8").splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def counted(before, after, name):
    """How much series name (as scrape() keys it) moved between two scrapes."""
    if name not in after:
        raise AssertionError("no series %s in /metrics (%d series)" % (name, len(after)))
    return after[name] - before.get(name, 0.0)


def flare_only(what="this needs examples/hello's routes or flags"):
    """Skip in the h2o validation mode only."""
    if PEER != "flare":
        raise unittest.SkipTest("FLARE_H2_PEER=%s: %s" % (PEER, what))


def start_server(*args, tls=False, static=None, workers=1):
    """examples/hello with args (h2c on its plaintext port, or TLS with the
    suite's certificate), or h2o in the validation mode."""
    if PEER == "h2o":
        return H2oServer(tls=tls, static=static).start()
    extra = list(args)
    if static:
        extra += ["--static", static]
    return flaretest.Server(*extra, workers=workers, tls=tls).start()


class H2TestCase(unittest.TestCase):
    """One server per class (server_args, server_static); raw connections
    made through self.raw() are closed after each test; the server must be
    alive after every test and exit cleanly at the end."""
    server_args = ()
    server_static = None
    server_tls = flaretest.TLS   # FLARE_TEST_TLS=1: the same cases over TLS (ALPN h2)
    maxDiff = 4000

    @classmethod
    def setUpClass(cls):
        cls.server = start_server(*cls.server_args, tls=cls.server_tls, static=cls.server_static)
        cls.addr = cls.server.addr
        cls.cafile = flaretest.tls_files()[0] if cls.server_tls else None

    @classmethod
    def tearDownClass(cls):
        srv = cls.server
        try:
            if not srv.alive():
                raise AssertionError("server died during %s: %s\n%s" % (
                    cls.__name__, flaretest.describe_rc(srv.proc.returncode), srv.output()))
            rc, _ = srv.stop(10)
            if rc != 0:
                raise AssertionError("server did not exit 0 on SIGTERM (%s)\n%s" % (
                    flaretest.describe_rc(rc), srv.output()))
        finally:
            srv.close_log()

    def setUp(self):
        self._conns = []

    def tearDown(self):
        for c in self._conns:
            c.close()
        if not self.server.alive():
            self.fail("server died: %s\n%s" % (flaretest.describe_rc(self.server.proc.returncode),
                                               self.server.output()[-3000:]))

    def raw(self, settings=(), **kw):
        c = RawH2(self.addr, tls=self.cafile, settings=settings, **kw)
        self._conns.append(c)
        return c

    def client(self, **kw):
        c = Client(self.addr, tls=self.cafile, **kw)
        self._conns.append(c)
        return c

    def pid(self):
        return self.server.proc.pid
