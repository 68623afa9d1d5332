#!/usr/bin/python3
"""A private redis-server for the tests, on a free loopback port.

As a module:

    with services_redis.Redis() as r:
        r.url      # redis://127.0.0.1:PORT
        r.stop()   # kill it (the test's outage)
        r.start()  # again, on the same port

As a wrapper around a test command (what CTest runs):

    /usr/bin/python3 tests/services_redis.py -- CMD ARGS...

starts Redis, runs CMD with FLARE_TEST_REDIS_URL (redis://127.0.0.1:PORT),
FLARE_TEST_REDIS_PORT and FLARE_TEST_REDIS_CMD (the command line that starts
the server again on the same port, for a test that kills and restarts it:
kill it by its port with `redis-cli -p PORT shutdown nosave`, or by the pid
in FLARE_TEST_REDIS_PIDFILE), then stops Redis and exits with CMD's status.
No persistence (--save '' --appendonly no), no files left behind. A missing
redis-server is a failure that names the Debian package, never a skip.
"""
import ctypes
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

PACKAGE = "redis-server"


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    """In the child before exec: SIGKILL when the test process dies, so a
    test killed at its ctest timeout leaves no redis-server behind."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _ping(port, timeout=0.2):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class Redis:
    def __init__(self, port=None):
        self.exe = shutil.which("redis-server")
        if self.exe is None:
            raise RuntimeError(
                "redis-server not found: install the Debian package %s "
                "(tools/deps.sh test)" % PACKAGE)
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="flare-redis-")
        self.pidfile = os.path.join(self.dir, "redis.pid")
        self.proc = None

    @property
    def url(self):
        return "redis://127.0.0.1:%d" % self.port

    def argv(self):
        return [self.exe, "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", self.dir,
                "--pidfile", self.pidfile, "--daemonize", "no",
                "--loglevel", "warning", "--protected-mode", "no"]

    def start(self, wait=10.0):
        self.proc = subprocess.Popen(self.argv(), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("redis-server exited at start (port %d taken?)" % self.port)
            if _ping(self.port):
                return self
            time.sleep(0.05)
        raise RuntimeError("redis-server did not answer on port %d" % self.port)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        # a test may have restarted it itself (FLARE_TEST_REDIS_CMD)
        try:
            with open(self.pidfile) as f:
                pid = int(f.read().strip() or 0)
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                mine = b"redis-server" in f.read() and _ping(self.port)
            if pid > 0 and mine:  # never a stale pid reused by someone else
                os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
        return False


def main(argv):
    if "--" not in argv:
        print("usage: services_redis.py -- CMD [ARGS...]", file=sys.stderr)
        return 2
    cmd = argv[argv.index("--") + 1:]
    if not cmd:
        print("usage: services_redis.py -- CMD [ARGS...]", file=sys.stderr)
        return 2
    try:
        r = Redis()
        r.start()
    except RuntimeError as e:
        print("services_redis: %s" % e, file=sys.stderr)
        return 1
    try:
        env = dict(os.environ)
        env["FLARE_TEST_REDIS_URL"] = r.url
        env["FLARE_TEST_REDIS_PORT"] = str(r.port)
        env["FLARE_TEST_REDIS_CMD"] = " ".join(shlex.quote(a) for a in r.argv())
        env["FLARE_TEST_REDIS_PIDFILE"] = r.pidfile
        return subprocess.call(cmd, env=env)
    finally:
        r.__exit__(None, None, None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
