"""The example servers when they cannot start: the message names the call
and the cause (port taken, privileged port, bad address), the exit status is
non-zero, and nothing hangs."""
import os
import shutil
import socket
import subprocess
import tempfile
import unittest

import flaretest

EXAMPLES = [flaretest.HELLO, flaretest.TODO_API,
            os.path.join(os.path.dirname(flaretest.HELLO), "chat")]


def run(binary, listen, timeout=20):
    # In a temporary directory, with todo_api's database there: its default
    # (sqlite:todo.db) would otherwise be left in the test's working directory.
    with tempfile.TemporaryDirectory() as d:
        args = [binary, "--listen", listen, "--workers", "2"]
        if binary == flaretest.TODO_API:
            args += ["--db", "sqlite:" + os.path.join(d, "todo.db")]
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout, cwd=d)
    return p.returncode, p.stderr.decode("utf-8", "replace")


class StartupErrors(unittest.TestCase):
    def test_port_in_use(self):
        s = socket.socket()
        s.bind((flaretest.HOST, 0))
        s.listen(1)
        addr = "%s:%d" % (flaretest.HOST, s.getsockname()[1])
        try:
            for binary in EXAMPLES:
                with self.subTest(binary=os.path.basename(binary)):
                    rc, err = run(binary, addr)
                    self.assertNotEqual(rc, 0, err)
                    self.assertIn("bind " + addr, err)
                    self.assertIn(os.strerror(98), err)  # EADDRINUSE
        finally:
            s.close()

    def test_bad_address(self):
        rc, err = run(flaretest.HELLO, "nonsense")
        self.assertNotEqual(rc, 0, err)
        self.assertIn("expected HOST:PORT", err)

    def test_privileged_port_unprivileged(self):
        # an unprivileged user cannot bind below 1024: EACCES, named as such.
        # As root, the server runs as nobody, from a copy it can reach.
        args = ["--listen", "127.0.0.1:1", "--workers", "1"]
        with tempfile.TemporaryDirectory() as d:
            kw = {}
            binary = flaretest.HELLO
            if os.geteuid() == 0:
                os.chmod(d, 0o755)
                binary = os.path.join(d, "hello")
                shutil.copy(flaretest.HELLO, binary)
                kw = dict(user=65534, group=65534, extra_groups=[])
            p = subprocess.run([binary] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=20, **kw)
        err = p.stderr.decode("utf-8", "replace")
        self.assertNotEqual(p.returncode, 0, err)
        self.assertIn(os.strerror(13), err)  # EACCES


if __name__ == "__main__":
    flaretest.main()
