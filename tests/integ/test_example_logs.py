#!/usr/bin/python3
"""Every example server takes the logging settings and acts on them: with
--access-log FILE each one (hello, chat, showcase, todo_api, tfb) writes
one combined line per request to FILE, with --access-log-format json one
JSON object; --log FILE receives the error log (the file is made at start,
even while empty); --log-format and --access-log-format changed by a SIGHUP
are reported as needing an upgrade, not as applied."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402
from flaretest import Conn, Server  # noqa: E402

BUILD = os.path.abspath(flaretest.BUILD_DIR)
COMBINED_RE = re.compile(
    r'^\S+ - - \[[^\]]+\] "(?P<method>\S+) (?P<target>\S+) HTTP/1\.[01]" (?P<status>\d{3}) '
    r'\d+ "[^"]*" "[^"]*" "[^"]+" \d+$')


def binary(name):
    return os.path.join(BUILD, "examples", name)


class ExampleLogs(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="flare-exlog-")
        self.server = None

    def tearDown(self):
        if self.server is not None:
            self.server.stop()
            self.server.close_log()
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def tfb_db(self):
        db = self.path("tfb.db")
        subprocess.run(["bash", os.path.join(flaretest.REPO_ROOT, "examples", "tfb", "setup.sh"),
                        "sqlite:" + db], check=True, stdout=subprocess.DEVNULL)
        return "sqlite:" + db

    def examples(self):
        """(name, extra flags, a target that answers 200)"""
        return (("hello", (), "/plaintext"),
                ("chat", (), "/"),
                ("showcase", ("--db", "sqlite:" + self.path("showcase.db")), "/"),
                ("todo_api", ("--db", "sqlite:" + self.path("todo.db")), "/openapi.json"),
                ("tfb", ("--db", self.tfb_db()), "/plaintext"))

    def test_access_log_json(self):
        for name, flags, target in (("chat", (), "/"),
                                    ("showcase", ("--db", "sqlite:" + self.path("s.db")), "/")):
            with self.subTest(example=name):
                alog = self.path(name + ".access.json")
                self.run_one(name, flags, target, "--access-log", alog,
                             "--access-log-format", "json")
                with open(alog) as f:
                    objs = [json.loads(ln) for ln in f.read().splitlines()]
                self.assertEqual(sum(1 for o in objs if o.get("status") == 200
                                     and "n=" in json.dumps(o)), 3, "%s: %r" % (name, objs))

    def run_one(self, name, flags, target, *log_flags):
        self.server = Server(*(tuple(flags) + log_flags), binary=binary(name), tls=False).start()
        c = Conn(self.server.addr)
        for i in range(3):
            r = c.request("GET", "%s%sn=%d" % (target, "&" if "?" in target else "?", i))
            self.assertEqual(r.status, 200, "%s %s" % (name, target))
        c.close()
        rc, _ = self.server.stop()
        self.assertEqual(rc, 0, self.server.output())
        out = self.server.output()
        self.server.close_log()
        self.server = None
        return out

    def test_access_log_file_combined(self):
        for name, flags, target in self.examples():
            with self.subTest(example=name):
                alog, elog = self.path(name + ".access.log"), self.path(name + ".error.log")
                self.run_one(name, flags, target, "--access-log", alog, "--log", elog)
                self.assertTrue(os.path.exists(alog), "%s wrote no access log" % name)
                self.assertTrue(os.path.exists(elog), "%s made no error log" % name)
                with open(alog) as f:
                    lines = [ln for ln in f.read().splitlines()
                             if target in ln and "n=" in ln]
                self.assertEqual(len(lines), 3, "%s: %r" % (name, lines))
                for ln in lines:
                    m = COMBINED_RE.match(ln)
                    self.assertIsNotNone(m, "%s: %r" % (name, ln))
                    self.assertEqual(m.group("status"), "200")

    def test_reload_format_needs_upgrade(self):
        """A SIGHUP that changes log-format / access-log-format does not
        switch the running logger: the summary says so (needs an upgrade),
        and the lines keep their format."""
        cfg, alog = self.path("c.yaml"), self.path("a.log")
        with open(cfg, "w") as f:
            f.write("access-log: %s\nlog-level: info\n" % alog)
        self.server = Server("--config", cfg, binary=binary("chat"), tls=False).start()
        with open(cfg, "w") as f:
            f.write("access-log: %s\nlog-level: debug\nlog-format: json\n"
                    "access-log-format: json\n" % alog)
        self.server.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "reload:" not in self.server.output() and time.monotonic() < deadline:
            time.sleep(0.05)
        line = [ln for ln in self.server.output().splitlines() if "reload:" in ln]
        self.assertTrue(line, self.server.output())
        applied = line[-1].split("applied: ")[1].split(";")[0]
        self.assertIn("log-level", applied)
        self.assertNotIn("log-format", applied)
        later = line[-1].split("needs an upgrade")[1]
        self.assertIn("log-format", later)
        self.assertIn("access-log-format", later)
        c = Conn(self.server.addr)
        self.assertEqual(c.request("GET", "/?after").status, 200)
        c.close()
        self.server.stop()
        with open(alog) as f:
            lines = [ln for ln in f.read().splitlines() if "/?after" in ln]
        self.assertEqual(len(lines), 1)
        self.assertIsNotNone(COMBINED_RE.match(lines[0]), lines[0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
