"""examples/hello with --config FILE (flare/settings.h, docs/config.md): it
serves where the file says; --check-config prints the effective settings and
exits 0, or names file:line: key and exits 1; a flag and an environment
variable override the file; SIGHUP re-reads the file: a renewed TLS
certificate is what new handshakes see while serving goes on, and a broken
file changes nothing and says why."""
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import unittest

import flaretest

HOST = flaretest.HOST


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def get(port, path="/plaintext", sock=None, tls_ctx=None):
    """One GET; returns (status line, body). Keeps sock open when given."""
    own = sock is None
    if own:
        sock = socket.create_connection((HOST, port), timeout=5)
        if tls_ctx is not None:
            sock = tls_ctx.wrap_socket(sock, server_hostname="localhost")
    sock.sendall(("GET %s HTTP/1.1\r\nHost: localhost\r\n%s\r\n" %
                  (path, "Connection: close\r\n" if own else "")).encode())
    try:
        return read_response(sock)
    finally:
        if own:
            sock.close()


def read_response(sock):
    """(status line, body) of one response with a Content-Length (or none) from sock."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head.split(b"\r\n")[0].decode(), body


def peer_der(port, cafile):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cafile)
    with socket.create_connection((HOST, port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            return s.getpeercert(binary_form=True)


def der(pem_file):
    with open(pem_file) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


class Hello:
    """hello started with the given arguments and environment (no --listen
    of its own: the file says where)."""

    def __init__(self, args, port, env=None):
        self.log = tempfile.TemporaryFile()
        e = dict(os.environ)
        e.update(env or {})
        self.port = port
        self.proc = subprocess.Popen([flaretest.HELLO] + args, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=self.log, env=e)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("hello exited: %s" % self.output())
            try:
                with socket.create_connection((HOST, port), timeout=1):
                    return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError("hello did not start: %s" % self.output())

    def output(self):
        return flaretest.read_log(self.log)

    def wait_output(self, text, timeout=5):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output():
                return True
            time.sleep(0.05)
        return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


class Config(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="flare-config-")
        self.file = os.path.join(self.dir, "hello.yaml")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def check(self, *args, env=None):
        e = dict(os.environ)
        e.update(env or {})
        p = subprocess.run([flaretest.HELLO, "--config", self.file, "--check-config"] + list(args),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20, env=e)
        return p.returncode, p.stdout.decode(), p.stderr.decode()

    def test_serves_on_the_configured_port(self):
        port = flaretest.free_port()
        write(self.file, "listen: %s:%d\nworkers: 1\n" % (HOST, port))
        h = Hello(["--config", self.file], port)
        try:
            status, body = get(port)
            self.assertEqual(status, "HTTP/1.1 200 OK")
            self.assertEqual(body, b"Hello, World!")
        finally:
            self.assertEqual(h.stop(), 0, h.output())

    def test_check_config(self):
        port = flaretest.free_port()
        write(self.file, "listen:\n  - %s:%d\nworkers: 3\nidle-timeout: 1500ms\nmax-body: 64k\n"
                         "log-level: debug\naccess-log: \"-\"\n" % (HOST, port))
        rc, out, err = self.check()
        self.assertEqual(rc, 0, err)
        for line in ('  - listen: "%s:%d"' % (HOST, port), "workers: 3", "idle-timeout: 1500ms",
                     "max-body: 64k", 'log-level: "debug"', 'access-log: "-"'):
            self.assertIn(line, out.splitlines())
        # nothing was bound: the port is still free
        with socket.socket() as s:
            s.bind((HOST, port))
        # the printout is a configuration that checks the same
        write(self.file, out)
        rc, out2, err = self.check()
        self.assertEqual(rc, 0, err)
        self.assertEqual(out2.splitlines()[1:], out.splitlines()[1:])

    def test_check_config_errors(self):
        write(self.file, "workers: 2\n\nworkers: 3\n")
        rc, out, err = self.check()
        self.assertEqual(rc, 1, err)
        self.assertEqual(out, "")
        self.assertIn("%s:3: workers: duplicated key (first at line 1)" % self.file, err)
        write(self.file, "listen: 127.0.0.1:1\nworkers: many\n")
        rc, _, err = self.check()
        self.assertEqual(rc, 1, err)
        self.assertIn('%s:2: workers: expected an integer 0..1024, got "many"' % self.file, err)
        write(self.file, "listen: 127.0.0.1:1\nlog-level: loud\n")
        rc, _, err = self.check()
        self.assertEqual(rc, 1, err)
        self.assertIn('%s:2: log-level: expected error|warn|info|debug, got "loud"' % self.file,
                      err)
        # a certificate that does not load: named (the files are read, as nginx -t does)
        missing = os.path.join(self.dir, "missing.pem")
        write(self.file, "listen:\n  - listen: 127.0.0.1:1\n    tls-cert: %s\n    tls-key: %s\n"
              % (missing, missing))
        rc, _, err = self.check()
        self.assertEqual(rc, 1, err)
        self.assertIn("%s:2: listen 127.0.0.1:1" % self.file, err)
        self.assertIn("missing.pem", err)
        os.unlink(self.file)
        rc, _, err = self.check()
        self.assertEqual(rc, 1, err)
        self.assertIn("%s: cannot open: No such file or directory" % self.file, err)

    def test_flag_and_env_override_the_file(self):
        write(self.file, "listen: 127.0.0.1:1\nworkers: 2\nidle-timeout: 5s\n")
        rc, out, err = self.check("--workers", "4")
        self.assertEqual(rc, 0, err)
        self.assertIn("workers: 4", out.splitlines())
        rc, out, err = self.check(env={"FLARE_WORKERS": "3", "FLARE_IDLE_TIMEOUT": "2m"})
        self.assertEqual(rc, 0, err)
        self.assertIn("workers: 3", out.splitlines())
        self.assertIn("idle-timeout: 120s", out.splitlines())
        rc, out, err = self.check("--workers", "5", env={"FLARE_WORKERS": "3"})
        self.assertEqual(rc, 0, err)
        self.assertIn("workers: 5", out.splitlines())
        # and for real: the flag's port is where it serves
        port = flaretest.free_port()
        h = Hello(["--config", self.file, "--listen", "%s:%d" % (HOST, port)], port)
        try:
            self.assertEqual(get(port)[0], "HTTP/1.1 200 OK")
        finally:
            self.assertEqual(h.stop(), 0, h.output())
        port = flaretest.free_port()
        h = Hello(["--config", self.file], port, env={"FLARE_LISTEN": "%s:%d" % (HOST, port)})
        try:
            self.assertEqual(get(port)[0], "HTTP/1.1 200 OK")
        finally:
            self.assertEqual(h.stop(), 0, h.output())

    def test_sighup_tls_certificate_and_broken_file(self):
        first = flaretest.make_cert(self.dir, "first", "DNS:localhost,IP:127.0.0.1")
        second = flaretest.make_cert(self.dir, "second", "DNS:localhost,IP:127.0.0.1")
        live_cert = os.path.join(self.dir, "live.pem")
        live_key = os.path.join(self.dir, "live.key")
        shutil.copy(first[0], live_cert)
        shutil.copy(first[1], live_key)
        port = flaretest.free_port()
        text = ("listen:\n  - listen: %s:%d\n    tls-cert: %s\n    tls-key: %s\n"
                "workers: 2\nlog-level: info\n" % (HOST, port, live_cert, live_key))
        write(self.file, text)
        h = Hello(["--config", self.file], port)
        try:
            self.assertEqual(peer_der(port, first[0]), der(first[0]))
            # a keep-alive connection made before the reload
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.load_verify_locations(first[0])
            kept = ctx.wrap_socket(socket.create_connection((HOST, port), timeout=5),
                                   server_hostname="localhost")
            self.assertEqual(get(port, sock=kept)[0], "HTTP/1.1 200 OK")

            # renewed in place, and the level changed: SIGHUP
            shutil.copy(second[0], live_cert)
            shutil.copy(second[1], live_key)
            write(self.file, text.replace("log-level: info", "log-level: debug"))
            h.proc.send_signal(signal.SIGHUP)
            self.assertTrue(h.wait_output("flare: reload: "), h.output())
            self.assertIn("applied: log-level, TLS certificates re-read", h.output())
            self.assertEqual(peer_der(port, second[0]), der(second[0]))
            self.assertEqual(get(port, sock=kept)[0], "HTTP/1.1 200 OK")  # still served

            # a change that needs an upgrade is logged as such
            write(self.file, text.replace("workers: 2", "workers: 3"))
            h.proc.send_signal(signal.SIGHUP)
            self.assertTrue(h.wait_output("kept as they were: workers"), h.output())

            # a broken file: nothing changes, the line says why
            write(self.file, text + "workers: 9\n")
            shutil.copy(first[0], live_cert)  # would be re-read if the reload went on
            shutil.copy(first[1], live_key)
            h.proc.send_signal(signal.SIGHUP)
            want = ("flare: reload: nothing changed: %s:7: workers: duplicated key "
                    "(first at line 5)" % self.file)
            self.assertTrue(h.wait_output(want), h.output())
            self.assertEqual(peer_der(port, second[0]), der(second[0]))
            self.assertEqual(get(port, sock=kept)[0], "HTTP/1.1 200 OK")
            # and a new connection after it is served too
            ctx2 = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx2.load_verify_locations(second[0])
            status, body = get(port, tls_ctx=ctx2)
            self.assertEqual((status, body), ("HTTP/1.1 200 OK", b"Hello, World!"))
            kept.close()
            self.assertTrue(h.proc.poll() is None, h.output())
        finally:
            self.assertEqual(h.stop(), 0, h.output())

    def test_sighup_moves_the_logs(self):
        """log and access-log changed to other files in the file: after SIGHUP
        the new files are created (0640) and get every later line, the old
        ones get no more; the reload line says so. Back to the first access
        log: it is appended to."""
        port = flaretest.free_port()
        p = {n: os.path.join(self.dir, n) for n in ("e1.log", "e2.log", "a1.log", "a2.log")}
        text = ("listen: %s:%d\nworkers: 2\nlog-level: info\nlog: %%s\naccess-log: %%s\n"
                % (HOST, port))
        write(self.file, text % (p["e1.log"], p["a1.log"]))

        def lines(name):
            try:
                with open(p[name]) as f:
                    return f.read().splitlines()
            except FileNotFoundError:
                return []

        def requests(tag, n, name):
            for i in range(n):
                self.assertEqual(get(port, "/log?%s%d" % (tag, i))[0], "HTTP/1.1 200 OK")
            deadline = time.monotonic() + 5  # the writer drains every 10 ms
            while time.monotonic() < deadline and \
                    sum(("/log?%s" % tag) in l for l in lines(name)) < n:
                time.sleep(0.02)

        def reload(count):
            h.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and h.output().count("flare: reload: ") < count:
                time.sleep(0.05)
            return [l for l in h.output().splitlines() if l.startswith("flare: reload: ")][-1]

        old_umask = os.umask(0o022)
        try:
            h = Hello(["--config", self.file], port)
        finally:
            os.umask(old_umask)
        try:
            requests("before", 4, "a1.log")
            write(self.file, text % (p["e2.log"], p["a2.log"]))
            line = reload(1)
            self.assertIn("applied: log, access-log", line)
            requests("after", 6, "a2.log")
            time.sleep(0.1)  # a line that went astray would be written by now
            a1, a2 = lines("a1.log"), lines("a2.log")
            self.assertEqual(sum("/log?before" in l for l in a1), 4, a1)
            self.assertEqual(sum("/log?after" in l for l in a1), 0, a1)
            self.assertEqual(sum("/log?after" in l for l in a2), 6, a2)
            self.assertEqual(sum("/log?before" in l for l in a2), 0, a2)
            e1, e2 = lines("e1.log"), lines("e2.log")
            self.assertEqual(sum("hello /log before" in l for l in e1), 4, e1)
            self.assertEqual(sum("hello /log after" in l for l in e1), 0, e1)
            self.assertEqual(sum("hello /log after" in l for l in e2), 6, e2)
            for n in ("e2.log", "a2.log"):
                self.assertEqual(oct(os.stat(p[n]).st_mode & 0o777), oct(0o640), n)

            # back to the first access log (the error log stays): appended to
            write(self.file, text % (p["e2.log"], p["a1.log"]))
            line = reload(2)
            self.assertIn("applied: access-log", line)
            requests("again", 3, "a1.log")
            self.assertEqual(sum("/log?again" in l for l in lines("a1.log")), 3)
            self.assertEqual(sum("/log?before" in l for l in lines("a1.log")), 4)
            self.assertEqual(sum("/log?again" in l for l in lines("a2.log")), 0)
            self.assertEqual(sum("hello /log again" in l for l in lines("e2.log")), 3)
        finally:
            self.assertEqual(h.stop(), 0, h.output())

    def test_sighup_limits_and_timeouts_in_place(self):
        """max-body and idle-timeout changed in the file take effect on SIGHUP,
        on every worker and on connections already open; max-headers (it sizes
        what the workers hold) is logged as needing an upgrade."""
        port = flaretest.free_port()
        text = ("listen: %s:%d\nworkers: 2\nmax-body: 100\nidle-timeout: 60s\n"
                "max-headers: 100\n" % (HOST, port))
        write(self.file, text)
        body = b"b" * 200

        def post(sock=None):
            own = sock is None
            if own:
                sock = socket.create_connection((HOST, port), timeout=5)
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n"
                         % (len(body), b"Connection: close\r\n" if own else b"") + body)
            try:
                return read_response(sock)
            finally:
                if own:
                    sock.close()

        def reload(new_text, count):
            write(self.file, new_text)
            h.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and h.output().count("flare: reload: ") < count:
                time.sleep(0.05)
            lines = [l for l in h.output().splitlines() if l.startswith("flare: reload: ")]
            self.assertEqual(len(lines), count, h.output())
            return lines[-1]

        h = Hello(["--config", self.file], port)
        try:
            # several connections, so both workers answer
            for _ in range(6):
                self.assertEqual(post()[0], "HTTP/1.1 413 Content Too Large")
            kept = socket.create_connection((HOST, port), timeout=5)
            self.assertEqual(get(port, sock=kept)[0], "HTTP/1.1 200 OK")

            line = reload(text.replace("max-body: 100", "max-body: 1000")
                          .replace("idle-timeout: 60s", "idle-timeout: 1s")
                          .replace("max-headers: 100", "max-headers: 50"), 1)
            self.assertIn("applied: idle-timeout, max-body", line)
            self.assertIn("needs an upgrade (SIGUSR2), kept as they were: max-headers", line)
            for _ in range(6):
                self.assertEqual(post(), ("HTTP/1.1 200 OK", body))
            # the connection made before the reload: the new limit too
            self.assertEqual(post(sock=kept), ("HTTP/1.1 200 OK", body))
            kept.close()
            # the new idle timeout: a keep-alive connection is closed after ~1 s
            idle = socket.create_connection((HOST, port), timeout=10)
            self.assertEqual(get(port, sock=idle)[0], "HTTP/1.1 200 OK")
            t0 = time.monotonic()
            self.assertEqual(idle.recv(1), b"")
            waited = time.monotonic() - t0
            self.assertGreaterEqual(waited, 0.9)
            self.assertLess(waited, 5)
            idle.close()

            # smaller again: refused again; a value out of range changes nothing
            line = reload(text.replace("max-body: 100", "max-body: 150"), 2)
            self.assertIn("max-body", line.split("applied: ")[1].split(";")[0])
            for _ in range(6):
                self.assertEqual(post()[0], "HTTP/1.1 413 Content Too Large")
            line = reload(text.replace("max-body: 100", "max-body: 2t"), 3)
            self.assertTrue(line.startswith("flare: reload: nothing changed: %s:3: max-body"
                                            % self.file), line)
            self.assertEqual(post()[0], "HTTP/1.1 413 Content Too Large")
            self.assertTrue(h.proc.poll() is None, h.output())
        finally:
            self.assertEqual(h.stop(), 0, h.output())


if __name__ == "__main__":
    flaretest.main()
