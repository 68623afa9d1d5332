#!/usr/bin/python3
"""Log rotation under load with Debian's logrotate: hello writes its error
log and its access log while clients keep requesting; logrotate (a private
configuration and state file) renames both files, creates new ones and
sends SIGHUP in postrotate; hello reopens (flare_log_reopen from the app's
SIGHUP hook) and keeps serving. Three rotations; afterwards every response a
client received has exactly one access line and every /log request one
error line, across the current and rotated files: no line lost or split.

Needs the SIGHUP -> flare_log_reopen wiring of the reload hook
(flare_app_on_reload); until it is there hello dies on SIGHUP and this
test fails, so it is not registered in tests/CMakeLists.txt yet."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402,F401
from flaretest import Conn, Server  # noqa: E402

LOGROTATE = shutil.which("logrotate") or "/usr/sbin/logrotate"
CLIENTS = 8
ROTATIONS = 3
ACCESS_RE = re.compile(r'^127\.0\.0\.1 - - \[[^]]+\] "GET (\S+) HTTP/1\.1" 200 \d+ "-" "[^"]*" '
                       r'"[0-9a-f]{16}" \d+$')
ERROR_RE = re.compile(r"^\S+Z INFO w\d+ req=[0-9a-f]{16} hello /log (\S+)$")


class Logrotate(unittest.TestCase):

    def setUp(self):
        self.assertTrue(os.access(LOGROTATE, os.X_OK),
                        "logrotate not installed (tools/deps.sh test)")
        self.dir = tempfile.mkdtemp(prefix="flare-logrotate-")
        self.server = None

    def tearDown(self):
        if self.server is not None:
            self.server.stop()
            self.server.close_log()
        shutil.rmtree(self.dir, ignore_errors=True)

    def lines(self, name):
        """Every line of name and its rotations (name, name.1, ...)."""
        out = []
        for f in sorted(os.listdir(self.dir)):
            if f == name or f.startswith(name + "."):
                with open(os.path.join(self.dir, f), "rb") as fh:
                    data = fh.read()
                self.assertTrue(data == b"" or data.endswith(b"\n"), (f, data[-100:]))
                out += data.decode("utf-8").splitlines()
        return out

    def test_rotation_under_load_loses_nothing(self):
        elog = os.path.join(self.dir, "error.log")
        alog = os.path.join(self.dir, "access.log")
        self.server = Server("--log", elog, "--log-level", "info", "--access-log", alog,
                             tls=False).start()
        conf = os.path.join(self.dir, "logrotate.conf")
        with open(conf, "w") as f:
            f.write("%s %s {\n"
                    "    rotate 10\n"
                    "    missingok\n"
                    "    nocompress\n"
                    "    create 0640\n"
                    "    sharedscripts\n"
                    "    postrotate\n"
                    "        kill -HUP %d\n"
                    "    endscript\n"
                    "}\n" % (alog, elog, self.server.proc.pid))
        state = os.path.join(self.dir, "logrotate.state")

        stop = threading.Event()
        done = {c: [] for c in range(CLIENTS)}
        errors = []

        def client(c):
            try:
                conn = Conn(self.server.addr)
                i = 0
                while not stop.is_set():
                    target = "/log?c%di%d" % (c, i) if i % 2 == 0 else "/plaintext?c%di%d" % (c, i)
                    r = conn.request("GET", target)
                    if r.status != 200:
                        raise AssertionError("%s: %d" % (target, r.status))
                    done[c].append(target)
                    i += 1
                conn.close()
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
        for t in threads:
            t.start()
        for _ in range(ROTATIONS):
            time.sleep(0.5)
            p = subprocess.run([LOGROTATE, "-f", "-s", state, conf], capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertTrue(self.server.alive(), "hello died on SIGHUP: " + self.server.output())
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        rc, _ = self.server.stop()
        self.assertEqual(rc, 0, self.server.output())

        sent = [t for c in range(CLIENTS) for t in done[c]]
        self.assertGreater(len(sent), 100)
        rotated = [f for f in os.listdir(self.dir) if f.startswith("access.log.")]
        self.assertEqual(len(rotated), ROTATIONS)
        access = self.lines("access.log")
        targets = []
        for line in access:
            m = ACCESS_RE.match(line)
            self.assertIsNotNone(m, line)
            targets.append(m.group(1))
        self.assertEqual(sorted(targets), sorted(sent), "one access line per response")
        logged = []
        for line in self.lines("error.log"):
            m = ERROR_RE.match(line)
            if m is not None:
                logged.append(m.group(1))
        self.assertEqual(sorted(logged),
                         sorted(t.split("?", 1)[1] for t in sent if t.startswith("/log")))
        # the newest file got lines too: the reopen took effect
        self.assertTrue(os.path.getsize(alog) > 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
