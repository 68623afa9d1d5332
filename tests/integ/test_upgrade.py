"""SIGUSR2 binary upgrade, the drain it relies on, and systemd's protocols
(notify, watchdog, socket activation), driven without systemd: a fake
NOTIFY_SOCKET (a datagram socket of the test's, with SO_PASSCRED so each
message comes with its sender's pid) and descriptors the test passes.

The server is build/tests/upgrade_server, whose "/" answers its pid. It runs
from a copy in a temporary directory; an upgrade renames a second copy over
that path first, so the new process is the one read from disk again. The
test process is a child subreaper (prctl), so the new process, orphaned
when the old one exits, is reaped here with its exit status.
"""

import ctypes
import http.client
import os
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import flaretest  # noqa: E402

SERVER = os.path.join(os.path.abspath(flaretest.BUILD_DIR), "tests", "upgrade_server")
HOST = "127.0.0.1"
DRAIN_MS = 5000

libc = ctypes.CDLL(None, use_errno=True)
PR_SET_CHILD_SUBREAPER = 36
libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def free_port():
    s = socket.socket()
    s.bind((HOST, 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Notify:
    """A fake $NOTIFY_SOCKET: collects (pid, line) for every datagram line."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.settimeout(0.1)
        self.msgs = []
        self.cv = threading.Condition()
        self.done = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.done:
            try:
                data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
            except socket.timeout:
                continue
            except OSError:
                return
            pid = 0
            for level, typ, cdata in anc:
                if level == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("iII", cdata[:12])[0]
            with self.cv:
                for line in data.decode().split("\n"):
                    self.msgs.append((pid, line))
                self.cv.notify_all()

    def wait(self, pred, timeout=10.0):
        end = time.monotonic() + timeout
        with self.cv:
            while True:
                for m in self.msgs:
                    if pred(m):
                        return m
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError("notify: not seen; got %r" % (self.msgs,))
                self.cv.wait(left)

    def count(self, pred):
        with self.cv:
            return sum(1 for m in self.msgs if pred(m))

    def close(self):
        self.done = True
        self.t.join()
        self.sock.close()


def get_pid(port, timeout=5.0):
    c = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        c.request("GET", "/")
        r = c.getresponse()
        body = r.read()
        assert r.status == 200, r.status
        return int(body)
    finally:
        c.close()


def wait_exit(pid, timeout):
    """Reaps pid (our child, or an orphan we are the subreaper of)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got, st = os.waitpid(pid, os.WNOHANG)
        if got == pid:
            return os.waitstatus_to_exitcode(st)
        time.sleep(0.02)
    raise AssertionError("pid %d still running after %.1f s" % (pid, timeout))


class Load:
    """Keep-alive clients sending back to back, and clients opening a new
    connection per request; every failure (error, reset, bad status) counted."""

    def __init__(self, port, keepalive=4, fresh=2):
        self.port = port
        self.stop = False
        self.lock = threading.Lock()
        self.ok = 0
        self.failures = []
        self.pids = []  # (time, pid) in order seen
        self.threads = [threading.Thread(target=self._keepalive, daemon=True)
                        for _ in range(keepalive)]
        self.threads += [threading.Thread(target=self._fresh, daemon=True) for _ in range(fresh)]
        for t in self.threads:
            t.start()

    def _record(self, pid):
        with self.lock:
            self.ok += 1
            if not self.pids or self.pids[-1][1] != pid:
                self.pids.append((time.monotonic(), pid))

    def _fail(self, what):
        with self.lock:
            self.failures.append(what)

    def _one(self, c):
        c.request("GET", "/")
        r = c.getresponse()
        body = r.read()
        if r.status != 200:
            raise AssertionError("status %d" % r.status)
        return int(body)

    def _keepalive(self):
        c = http.client.HTTPConnection(HOST, self.port, timeout=10)
        while not self.stop:
            try:
                self._record(self._one(c))  # reconnects after Connection: close
            except Exception as e:  # noqa: BLE001 - every failure counts
                self._fail("keep-alive: %r" % (e,))
                c.close()
        c.close()

    def _fresh(self):
        while not self.stop:
            c = http.client.HTTPConnection(HOST, self.port, timeout=10)
            try:
                self._record(self._one(c))
            except Exception as e:  # noqa: BLE001
                self._fail("new connection: %r" % (e,))
            finally:
                c.close()

    def finish(self):
        self.stop = True
        for t in self.threads:
            t.join(15)


class UpgradeTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="flare-upg-")
        self.exe = os.path.join(self.dir, "server")
        shutil.copy2(SERVER, self.exe)
        self.notify = Notify(os.path.join(self.dir, "notify"))
        self.port = free_port()
        self.log = open(os.path.join(self.dir, "stderr"), "w+")
        self.procs = []
        self.orphans = []

    def tearDown(self):
        for pid in self.orphans:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.notify.close()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, *args, env=None, workers=None):
        e = dict(os.environ)
        e["NOTIFY_SOCKET"] = self.notify.path
        e.update(env or {})
        w = [] if "--workers-file" in args else ["--workers", str(workers or 2)]
        p = subprocess.Popen([self.exe, "--listen", "%s:%d" % (HOST, self.port)] + w +
                             ["--drain-ms", str(DRAIN_MS)] + list(args),
                             env=e, stdout=subprocess.DEVNULL, stderr=self.log)
        self.procs.append(p)
        self.notify.wait(lambda m: m == (p.pid, "READY=1"))
        return p

    def stderr(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def replace_exe(self, content=None, mode=0o755):
        """A new file renamed over the path (what a package upgrade does)."""
        tmp = self.exe + ".new"
        if content is None:
            shutil.copy2(SERVER, tmp)
        else:
            with open(tmp, "w") as f:
                f.write(content)
        os.chmod(tmp, mode)
        os.rename(tmp, self.exe)

    def wait_log(self, text, timeout=10.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if text in self.stderr():
                return
            time.sleep(0.05)
        self.fail("stderr lacks %r:\n%s" % (text, self.stderr()))

    def test_upgrade_under_load(self):
        old = self.start()
        self.assertEqual(get_pid(self.port), old.pid)
        load = Load(self.port)
        try:
            time.sleep(1.0)
            self.replace_exe()
            old.send_signal(signal.SIGUSR2)
            new_pid = int(self.notify.wait(
                lambda m: m[0] == old.pid and m[1].startswith("MAINPID="))[1].split("=")[1])
            self.orphans.append(new_pid)
            self.assertNotEqual(new_pid, old.pid)
            self.notify.wait(lambda m: m == (new_pid, "READY=1"))
            t0 = time.monotonic()
            self.assertEqual(old.wait(DRAIN_MS / 1000 + 5), 0, self.stderr())
            self.assertLess(time.monotonic() - t0, DRAIN_MS / 1000 + 1)
            time.sleep(1.0)
        finally:
            load.finish()
        print("upgrade under load: %d requests, %d failed, pids %s" %
              (load.ok, len(load.failures), [p for _, p in load.pids]), file=sys.stderr)
        self.assertEqual(load.failures, [], "after %d good requests" % load.ok)
        seen = [p for _, p in load.pids]
        self.assertIn(old.pid, seen)
        self.assertEqual(seen[-1], new_pid, seen)
        self.assertGreater(load.ok, 200)
        self.assertEqual(get_pid(self.port), new_pid)
        self.assertIn("is ready: this one stops accepting and drains", self.stderr())
        # the new process upgrades again, then stops on SIGTERM
        self.replace_exe()
        os.kill(new_pid, signal.SIGUSR2)
        third = int(self.notify.wait(
            lambda m: m[0] == new_pid and m[1].startswith("MAINPID="))[1].split("=")[1])
        self.orphans.append(third)
        self.notify.wait(lambda m: m == (third, "READY=1"))
        self.assertEqual(wait_exit(new_pid, DRAIN_MS / 1000 + 5), 0)
        self.assertEqual(get_pid(self.port), third)
        os.kill(third, signal.SIGTERM)
        self.notify.wait(lambda m: m == (third, "STOPPING=1"))
        self.assertEqual(wait_exit(third, 10), 0)
        # no STOPPING=1 from a process that handed over
        self.assertEqual(self.notify.count(lambda m: m == (old.pid, "STOPPING=1")), 0)

    def test_upgrade_changes_worker_count(self):
        # 3 workers (3 sockets) -> 1 worker serving all 3 -> 4 workers, one sharing a dup
        wf = os.path.join(self.dir, "workers")
        with open(wf, "w") as f:
            f.write("3\n")
        cur = self.start("--workers-file", wf).pid
        load = Load(self.port, keepalive=3, fresh=2)
        try:
            for n in (1, 4):
                time.sleep(0.5)
                with open(wf, "w") as f:
                    f.write("%d\n" % n)
                self.replace_exe()
                os.kill(cur, signal.SIGUSR2)
                new = int(self.notify.wait(
                    lambda m: m[0] == cur and m[1].startswith("MAINPID="))[1].split("=")[1])
                self.orphans.append(new)
                self.notify.wait(lambda m: m == (new, "READY=1"))
                self.assertEqual(wait_exit(cur, DRAIN_MS / 1000 + 5), 0)
                self.assertIn("with 3 listening sockets", self.stderr())
                cur = new
            time.sleep(0.5)
        finally:
            load.finish()
        print("worker count 3 -> 1 -> 4 under load: %d requests, %d failed" %
              (load.ok, len(load.failures)), file=sys.stderr)
        self.assertEqual(load.failures, [], "after %d good requests" % load.ok)
        self.assertEqual(load.pids[-1][1], cur)
        # every one of the 3 sockets is served: many new connections all answered
        for _ in range(60):
            self.assertEqual(get_pid(self.port), cur)
        os.kill(cur, signal.SIGTERM)
        self.assertEqual(wait_exit(cur, 10), 0)

    def test_failed_upgrades_keep_serving(self):
        old = self.start(env={"FLARE_UPGRADE_TIMEOUT_MS": "1500"})
        # the new binary exits at once
        self.replace_exe("#!/bin/sh\nexit 1\n")
        old.send_signal(signal.SIGUSR2)
        self.wait_log("exited with status 1 before it was ready; still serving")
        self.assertEqual(get_pid(self.port), old.pid)
        # it cannot be executed at all
        self.replace_exe("not a program\n", mode=0o644)
        old.send_signal(signal.SIGUSR2)
        self.wait_log("Permission denied; still serving")
        self.assertEqual(get_pid(self.port), old.pid)
        # it starts but never reports ready
        self.replace_exe("#!/bin/sh\nexec sleep 60\n")
        old.send_signal(signal.SIGUSR2)
        self.wait_log("did not report READY=1 within 1500 ms; stopping it, still serving")
        self.assertEqual(get_pid(self.port), old.pid)
        self.assertIsNone(old.poll())
        # and a good one still works after all that
        self.replace_exe()
        old.send_signal(signal.SIGUSR2)
        new_pid = int(self.notify.wait(
            lambda m: m[0] == old.pid and m[1].startswith("MAINPID="))[1].split("=")[1])
        self.orphans.append(new_pid)
        self.assertEqual(old.wait(DRAIN_MS / 1000 + 5), 0)
        self.assertEqual(get_pid(self.port), new_pid)

    def test_watchdog_and_stopping(self):
        p = self.start(env={"WATCHDOG_USEC": "200000"})
        time.sleep(1.0)
        n = self.notify.count(lambda m: m == (p.pid, "WATCHDOG=1"))
        self.assertGreaterEqual(n, 5)  # every 100 ms
        self.assertLessEqual(n, 14)
        p.send_signal(signal.SIGTERM)
        self.notify.wait(lambda m: m == (p.pid, "STOPPING=1"))
        self.assertEqual(p.wait(10), 0)

    def test_watchdog_for_another_pid_is_off(self):
        p = self.start(env={"WATCHDOG_USEC": "200000", "WATCHDOG_PID": "1"})
        time.sleep(0.6)
        self.assertEqual(self.notify.count(lambda m: m[1] == "WATCHDOG=1"), 0)
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(10), 0)

    def activated(self, sock_port, listen_port, workers=3, names=None):
        """Starts the server with a socket of ours as fd 3, LISTEN_PID its pid."""
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((HOST, sock_port))
        ls.listen(64)
        fd = ls.fileno()
        env = dict(os.environ, LISTEN_FDS="1", NOTIFY_SOCKET=self.notify.path)
        if names is not None:
            env["LISTEN_FDNAMES"] = names
        p = subprocess.Popen(
            ["/bin/sh", "-c", 'export LISTEN_PID=$$; exec "$0" "$@"', self.exe, "--listen",
             "%s:%d" % (HOST, listen_port), "--workers", str(workers)],
            env=env, stdout=subprocess.DEVNULL, stderr=self.log, close_fds=False,
            preexec_fn=lambda: os.dup2(fd, 3))
        self.procs.append(p)
        return p, ls

    def test_socket_activation(self):
        p, ls = self.activated(self.port, self.port, names="web")
        self.notify.wait(lambda m: m == (p.pid, "READY=1"))
        ls.close()  # the server's copy is the only one now
        for _ in range(20):  # three workers share the one socket
            self.assertEqual(get_pid(self.port), p.pid)
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(10), 0)

    def test_socket_activation_unmatched_socket(self):
        other = free_port()
        p, ls = self.activated(other, self.port)
        self.assertEqual(p.wait(10), 1)
        ls.close()
        self.assertIn("inherited descriptor 3 (unnamed) listens on 127.0.0.1:%d, which no "
                      "configured listener is" % other, self.stderr())

    def test_socket_activation_bad_variables(self):
        env = dict(os.environ, LISTEN_FDS="two", LISTEN_PID=str(os.getpid()))
        # LISTEN_PID is not the server's: ignored, it binds as usual
        p = subprocess.Popen([self.exe, "--listen", "%s:%d" % (HOST, self.port)], env=env,
                             stdout=subprocess.DEVNULL, stderr=self.log)
        self.procs.append(p)
        for _ in range(100):
            try:
                get_pid(self.port)
                break
            except OSError:
                time.sleep(0.05)
        self.assertEqual(get_pid(self.port), p.pid)
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(10), 0)
        p = subprocess.Popen(["/bin/sh", "-c", 'export LISTEN_PID=$$; exec "$0" "$@"', self.exe,
                              "--listen", "%s:%d" % (HOST, self.port)], env=env,
                             stdout=subprocess.DEVNULL, stderr=self.log)
        self.procs.append(p)
        self.assertEqual(p.wait(10), 1)
        self.assertIn('LISTEN_FDS="two": expected a number of descriptors', self.stderr())
        # a notify socket that cannot be written to is refused, not ignored
        env = dict(os.environ, NOTIFY_SOCKET="relative/path")
        p = subprocess.Popen([self.exe, "--listen", "%s:%d" % (HOST, self.port)], env=env,
                             stdout=subprocess.DEVNULL, stderr=self.log)
        self.procs.append(p)
        self.assertEqual(p.wait(10), 1)
        self.assertIn('NOTIFY_SOCKET="relative/path": expected /path or @name', self.stderr())


if __name__ == "__main__":
    flaretest.main()
