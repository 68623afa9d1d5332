"""Unix-domain socket listeners (--listen unix:PATH, unix:@NAME): curl
--unix-socket and Python clients, the YAML `listen` key, the file's mode, a
stale file replaced and a live server's refused, the file removed at exit,
TLS over the socket, /status and /metrics naming the listener, the access
log's "unix:" peer, a real nginx proxying HTTP/1.1 (keep-alive to the
upstream) and a WebSocket to Flare over the socket, and a SIGUSR2 upgrade
that keeps the socket path serving throughout."""

import base64
import ctypes
import http.client
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import flaretest  # noqa: E402

HELLO = flaretest.HELLO
UPGRADE_SERVER = os.path.join(os.path.abspath(flaretest.BUILD_DIR), "tests", "upgrade_server")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

libc = ctypes.CDLL(None, use_errno=True)
PR_SET_CHILD_SUBREAPER = 36
libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # the upgraded process is reaped here


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=5.0):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.unix_path)
        except OSError:
            s.close()
            raise
        self.sock = s


def get(path, target="/plaintext"):
    c = UnixHTTPConnection(path)
    try:
        c.request("GET", target)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def wait_for(pred, timeout=10.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


def wait_exit(pid, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got, st = os.waitpid(pid, os.WNOHANG)
        if got == pid:
            return os.waitstatus_to_exitcode(st)
        time.sleep(0.02)
    raise AssertionError("pid %d still running after %.1f s" % (pid, timeout))


def connected_server_sockets(path):
    """Inodes of the accepted (server side) sockets of PATH: /proc/net/unix
    names them with the listener's path; state 03 is connected."""
    out = []
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            parts = line.split()
            if len(parts) >= 8 and parts[7] == path and parts[5] == "03":
                out.append(parts[6])
    return out


class Hello:
    def __init__(self, *args, workers=2):
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([HELLO, "--workers", str(workers)] + [str(a) for a in args],
                                     stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)

    def output(self):
        return flaretest.read_log(self.log)

    def stop(self, timeout=10.0):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


class UnixSocketTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="flare-unix-")
        os.chmod(self.dir, 0o755)  # nginx's workers (nobody) reach the socket
        self.sock = os.path.join(self.dir, "app.sock")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            if s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
            s.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def hello(self, *args, **kw):
        s = Hello(*args, **kw)
        self.servers.append(s)
        return s

    def wait_up(self, path, server=None):
        def up():
            if server is not None and server.proc.poll() is not None:
                raise AssertionError("server exited: %s" % server.output())
            return get(path)[0] == 200
        wait_for(up, what="a server on " + path)

    def test_curl_python_status_metrics_access_log(self):
        access = os.path.join(self.dir, "access.log")
        s = self.hello("--listen", "unix:%s?mode=0660" % self.sock, "--access-log", access)
        self.wait_up(self.sock, s)
        st = os.stat(self.sock)
        self.assertTrue(stat.S_ISSOCK(st.st_mode))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o660)
        # curl
        p = subprocess.run(["curl", "-sS", "--unix-socket", self.sock, "http://x/plaintext"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, b"Hello, World!")
        # Python, one keep-alive connection
        c = UnixHTTPConnection(self.sock)
        for _ in range(50):
            c.request("GET", "/plaintext")
            r = c.getresponse()
            self.assertEqual((r.status, r.read()), (200, b"Hello, World!"))
        # a forwarded-for header from a proxy in front: no IP peer to trust, no crash
        c.request("GET", "/plaintext", headers={"X-Forwarded-For": "203.0.113.7, ::1",
                                                "X-Real-IP": "203.0.113.7"})
        r = c.getresponse()
        self.assertEqual((r.status, r.read()), (200, b"Hello, World!"))
        c.close()
        # the listener in /status and /metrics
        status, body = get(self.sock, "/status?json")
        self.assertEqual(status, 200)
        ls = json.loads(body)["listeners"]
        self.assertEqual(ls, [{"address": "unix:%s?mode=0660" % self.sock, "port": 0,
                               "tls": False, "admin": False}])
        status, body = get(self.sock, "/metrics")
        self.assertEqual(status, 200)
        self.assertIn(('flare_listener_info{address="unix:%s?mode=0660",kind="unix",tls="false",'
                       'admin="false"} 1' % self.sock).encode(), body)
        self.assertEqual(s.stop(), 0)
        self.assertFalse(os.path.exists(self.sock), "socket file left after a clean exit")
        with open(access) as f:
            lines = f.read().splitlines()
        self.assertGreaterEqual(len(lines), 52)
        for line in lines:
            self.assertTrue(line.startswith("unix: - - ["), line)

    def test_yaml_config_and_abstract(self):
        cfg = os.path.join(self.dir, "app.yaml")
        name = "flare-test-%d" % os.getpid()
        with open(cfg, "w") as f:
            f.write('listen:\n  - "unix:%s"\n  - "unix:@%s"\n' % (self.sock, name))
        s = self.hello("--config", cfg)
        self.wait_up(self.sock, s)
        self.wait_up("\0" + name, s)
        self.assertEqual(get("\0" + name), (200, b"Hello, World!"))
        self.assertEqual(s.stop(), 0)
        self.assertFalse(os.path.exists(self.sock))

    def test_stale_file_replaced_live_refused(self):
        stale = socket.socket(socket.AF_UNIX)
        stale.bind(self.sock)
        stale.close()  # the file stays: a process that died without cleaning up
        s = self.hello("--listen", "unix:" + self.sock)
        self.wait_up(self.sock, s)
        two = self.hello("--listen", "unix:" + self.sock, workers=1)
        self.assertEqual(two.proc.wait(10), 1)
        self.assertIn("a server answers on %s already" % self.sock, two.output())
        self.assertEqual(get(self.sock), (200, b"Hello, World!"))  # the first goes on
        self.assertEqual(s.stop(), 0)
        # not a socket: never removed
        with open(self.sock, "w") as f:
            f.write("data")
        three = self.hello("--listen", "unix:" + self.sock, workers=1)
        self.assertEqual(three.proc.wait(10), 1)
        self.assertIn("exists and is not a socket", three.output())
        with open(self.sock) as f:
            self.assertEqual(f.read(), "data")

    def test_bad_addresses(self):
        long_path = "/tmp/" + "x" * 120
        cases = [("unix:", "expected a socket path"),
                 ("unix:" + long_path, "the limit (sun_path) is 107"),
                 ("unix:%s?mode=0800" % self.sock, 'mode "0800": expected octal'),
                 ("unix:%s?owner=no-such-user-flare" % self.sock, "no such user"),
                 ("unix:%s?perm=0600" % self.sock, 'unknown option "perm=0600"')]
        for addr, says in cases:
            with self.subTest(addr=addr):
                h = self.hello("--listen", addr, workers=1)
                self.assertNotEqual(h.proc.wait(10), 0)
                out = h.output()
                self.assertIn('listen address "%s"' % addr, out)
                self.assertIn(says, out)

    def test_tls_over_unix(self):
        cert, key = flaretest.tls_files()
        s = self.hello("--listen", "unix:" + self.sock, "--tls-cert", cert, "--tls-key", key)
        def up():
            p = subprocess.run(["curl", "-sS", "--cacert", cert, "--unix-socket", self.sock,
                                "https://localhost/plaintext"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
            return p.returncode == 0 and p.stdout == b"Hello, World!"
        wait_for(up, what="TLS over the unix socket")
        # plain HTTP to the TLS socket is not served as HTTP
        self.assertNotEqual(get(self.sock)[0], 200)
        self.assertEqual(s.stop(), 0)
        self.assertFalse(os.path.exists(self.sock))


@unittest.skipUnless(os.path.exists(NGINX), "nginx not installed (tools/deps.sh test installs it)")
class NginxTest(unittest.TestCase):
    """A private nginx (its own prefix, pid, logs and temp paths) on a free
    loopback port, proxying to Flare over the unix socket."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="flare-nginx-")
        os.chmod(self.dir, 0o755)
        self.sock = os.path.join(self.dir, "app.sock")
        self.port = flaretest.free_port()
        self.flare = Hello("--listen", "unix:%s?mode=0666" % self.sock, "--access-log",
                           os.path.join(self.dir, "access.log"))
        wait_for(lambda: get(self.sock)[0] == 200, what="flare")
        d = self.dir
        conf = f"""
{'user root;' if os.getuid() == 0 else ''}
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 128; }}
http {{
    access_log {d}/nginx-access.log;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    upstream flare {{
        server unix:{self.sock};
        keepalive 4;
    }}
    map $http_upgrade $connection_upgrade {{
        default upgrade;
        '' '';
    }}
    server {{
        listen 127.0.0.1:{self.port};
        location / {{
            proxy_pass http://flare;
            proxy_http_version 1.1;
            proxy_set_header Host $host;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_read_timeout 10s;
        }}
    }}
}}
"""
        with open(os.path.join(d, "nginx.conf"), "w") as f:
            f.write(conf)
        self.nlog = open(os.path.join(d, "nginx.out"), "w+")
        self.nginx = subprocess.Popen([NGINX, "-p", d, "-c", os.path.join(d, "nginx.conf"),
                                       "-g", "daemon off;"],
                                      stdout=self.nlog, stderr=self.nlog,
                                      stdin=subprocess.DEVNULL)

        def up():
            if self.nginx.poll() is not None:
                raise AssertionError("nginx exited: %s" % flaretest.read_log(self.nlog))
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            try:
                c.request("GET", "/plaintext")
                return c.getresponse().status == 200
            finally:
                c.close()
        wait_for(up, what="nginx")

    def tearDown(self):
        self.nginx.send_signal(signal.SIGQUIT)
        try:
            self.nginx.wait(10)
        except subprocess.TimeoutExpired:
            self.nginx.kill()
            self.nginx.wait()
        self.flare.stop()
        self.flare.log.close()
        self.nlog.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_proxy_keepalive_upstream(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        seen = set()
        for i in range(40):
            # a fresh client connection now and then: the upstream one stays
            if i % 10 == 0:
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            c.request("GET", "/users/%d" % i)
            r = c.getresponse()
            body = r.read()
            self.assertEqual(r.status, 200, body)
            self.assertIn(str(i).encode(), body)
            seen.update(connected_server_sockets(self.sock))
            c.request("POST", "/echo", body=b"x" * 1000, headers={"Content-Type": "text/plain"})
            r = c.getresponse()
            self.assertEqual((r.status, r.read()), (200, b"x" * 1000))
        c.close()
        # nginx (one worker, one request at a time) reused one upstream connection
        self.assertEqual(len(seen), 1, seen)
        self.assertEqual(len(connected_server_sockets(self.sock)), 1)
        with open(os.path.join(self.dir, "error.log")) as f:
            self.assertNotIn("[error]", f.read())

    def test_websocket_through_nginx(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall(("GET /ws/echo HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                   "Sec-WebSocket-Version: 13\r\n\r\n" % key).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            self.assertTrue(chunk, "closed during the handshake: %r" % head)
            head += chunk
        self.assertTrue(head.startswith(b"HTTP/1.1 101"), head)
        rest = head.split(b"\r\n\r\n", 1)[1]
        payload = b"hello over a unix socket"
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        s.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + masked)
        data = rest
        while len(data) < 2 + len(payload):
            chunk = s.recv(4096)
            self.assertTrue(chunk)
            data += chunk
        self.assertEqual(data[0], 0x81)
        self.assertEqual(data[1], len(payload))
        self.assertEqual(data[2:2 + len(payload)], payload)
        s.sendall(bytes([0x88, 0x82]) + mask + bytes(b ^ mask[i] for i, b in
                                                      enumerate(b"\x03\xe8")))
        s.close()


class UpgradeKeepsSocketTest(unittest.TestCase):
    """SIGUSR2: the new process inherits the unix socket; the path answers
    throughout, the old process does not remove the file, the new one does
    at its end."""

    def test_upgrade(self):
        d = tempfile.mkdtemp(prefix="flare-unix-upg-")
        try:
            self._run(d)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def _run(self, d):
        exe = os.path.join(d, "server")
        shutil.copy2(UPGRADE_SERVER, exe)
        sock = os.path.join(d, "u.sock")
        log = tempfile.TemporaryFile()
        old = subprocess.Popen([exe, "--listen", "unix:" + sock, "--workers", "2",
                                "--drain-ms", "3000"],
                               stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        new_pid = None
        try:
            wait_for(lambda: get(sock, "/")[0] == 200, what="upgrade_server")
            self.assertEqual(int(get(sock, "/")[1]), old.pid)
            stop = threading.Event()
            failures, pids = [], set()

            def load():
                while not stop.is_set():
                    try:
                        st, body = get(sock, "/")
                        if st != 200:
                            failures.append(st)
                        else:
                            pids.add(int(body))
                    except OSError as e:
                        failures.append(repr(e))
            threads = [threading.Thread(target=load, daemon=True) for _ in range(3)]
            for t in threads:
                t.start()
            tmp = exe + ".new"
            shutil.copy2(UPGRADE_SERVER, tmp)
            os.rename(tmp, exe)
            old.send_signal(signal.SIGUSR2)
            self.assertEqual(old.wait(20), 0, flaretest.read_log(log))
            self.assertTrue(os.path.exists(sock), "the old process removed the socket file")
            new_pid = int(get(sock, "/")[1])
            self.assertNotEqual(new_pid, old.pid)
            time.sleep(0.3)
            stop.set()
            for t in threads:
                t.join(10)
            self.assertEqual(failures, [], flaretest.read_log(log))
            self.assertIn(new_pid, pids)
            os.kill(new_pid, signal.SIGTERM)
            self.assertEqual(wait_exit(new_pid, 15), 0)
            new_pid = None
            self.assertFalse(os.path.exists(sock), "the new process left the socket file")
        finally:
            log.close()
            if old.poll() is None:
                old.kill()
                old.wait()
            if new_pid is not None:
                try:
                    os.kill(new_pid, signal.SIGKILL)
                    wait_exit(new_pid, 5)
                except (ProcessLookupError, ChildProcessError):
                    pass


if __name__ == "__main__":
    unittest.main(verbosity=2)
