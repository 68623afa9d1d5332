"""The loop's I/O backend chosen at run time (--io auto|uring|epoll, FLARE_IO):
one log line says which and why; where io_uring is refused (a seccomp profile
that blocks io_uring_setup, as containers have: tests/deny_uring) `auto`
serves on epoll and an explicit `uring` fails to start with the reason; every
choice serves HTTP/1.1 (keep-alive, pipelining, a large body) and shuts down
cleanly."""
import os
import re
import subprocess
import unittest

import flaretest

DENY = os.path.join(os.path.abspath(flaretest.BUILD_DIR), "tests", "deny_uring")
IO_LINE = re.compile(r"io: (io_uring|epoll) \(([^\n]*)\)")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "FLARE_IO"}
    env.update(extra)
    return env


def io_lines(text):
    return IO_LINE.findall(text)


def uring_allowed():
    """Whether this process may set up io_uring at all (not the backend's own
    probe: that is what the server reports)."""
    srv = flaretest.Server("--log-level", "info", "--io", "auto", env=clean_env(), tls=False)
    srv.start()
    try:
        return io_lines(srv.output())[0][0] == "io_uring"
    finally:
        srv.stop()
        srv.close_log()


def exercise(test, srv):
    """Keep-alive, pipelining and a body larger than one read buffer."""
    with flaretest.Conn(srv.addr) as c:
        for _ in range(3):
            r = c.request("GET", "/plaintext")
            test.assertEqual(r.status, 200)
        c.send(flaretest.get("/plaintext") * 8)
        for _ in range(8):
            test.assertEqual(c.read_response().status, 200)
        body = b"x" * 300000
        r = c.request("POST", "/echo", body=body,
                      headers={"Content-Type": "application/octet-stream"})
        test.assertEqual(r.status, 200)
        test.assertEqual(r.body, body)


class IoBackend(unittest.TestCase):
    def run_server(self, *args, prefix=(), env=None):
        srv = flaretest.Server("--log-level", "info", *args, prefix=prefix,
                               env=env if env is not None else clean_env(), tls=False)
        srv.start()
        self.addCleanup(srv.close_log)
        self.addCleanup(srv.stop)
        return srv

    def stop_clean(self, srv):
        rc, _ = srv.stop()
        self.assertEqual(rc, 0, srv.output())

    def test_auto_says_which_and_why(self):
        srv = self.run_server("--io", "auto")
        exercise(self, srv)
        self.stop_clean(srv)
        lines = io_lines(srv.output())
        self.assertEqual(len(lines), 1, srv.output())
        backend, why = lines[0]
        if backend == "io_uring":
            self.assertTrue(why.startswith("auto: "), why)
        else:
            self.assertTrue(why.startswith("auto: io_uring cannot be used: "), why)

    def test_auto_falls_back_when_io_uring_is_refused(self):
        srv = self.run_server("--io", "auto", prefix=[DENY])
        exercise(self, srv)
        self.stop_clean(srv)
        self.assertEqual(io_lines(srv.output()),
                         [("epoll", "auto: io_uring cannot be used: "
                                    "io_uring_setup: Operation not permitted")],
                         srv.output())

    def test_default_is_auto(self):
        srv = self.run_server(prefix=[DENY])
        exercise(self, srv)
        self.stop_clean(srv)
        self.assertEqual(io_lines(srv.output())[0][0], "epoll")
        self.assertIn("auto: io_uring cannot be used", srv.output())

    def test_uring_asked_for_but_refused_does_not_start(self):
        port = flaretest.free_port()
        p = subprocess.run([DENY, flaretest.HELLO, "--listen", "127.0.0.1:%d" % port,
                            "--workers", "2", "--io", "uring"],
                           env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=30)
        err = p.stderr.decode("utf-8", "replace")
        self.assertNotEqual(p.returncode, 0, err)
        self.assertIn("io_uring was asked for (configured) but cannot be used: "
                      "io_uring_setup: Operation not permitted", err)

    def test_env_decides_under_auto(self):
        srv = self.run_server(env=clean_env(FLARE_IO="epoll"))
        exercise(self, srv)
        self.stop_clean(srv)
        self.assertEqual(io_lines(srv.output())[0][0], "epoll")

    def test_flag_wins_over_env(self):
        srv = self.run_server("--io", "epoll", env=clean_env(FLARE_IO="uring"))
        exercise(self, srv)
        self.stop_clean(srv)
        self.assertEqual(io_lines(srv.output()), [("epoll", "configured")])

    def test_bad_value_is_an_error(self):
        for env, args in ((clean_env(FLARE_IO="kqueue"), []),
                          (clean_env(), ["--io", "kqueue"])):
            p = subprocess.run([flaretest.HELLO, "--listen", "127.0.0.1:0"] + args, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
            err = p.stderr.decode("utf-8", "replace")
            self.assertEqual(p.returncode, 2, err)
            self.assertIn("kqueue", err)
            self.assertIn("auto|uring|epoll", err)

    def test_uring_serves(self):
        if not uring_allowed():
            self.skipTest("io_uring is not available to this process")
        srv = self.run_server("--io", "uring")
        exercise(self, srv)
        self.stop_clean(srv)
        lines = io_lines(srv.output())
        self.assertEqual(len(lines), 1, srv.output())
        self.assertEqual(lines[0][0], "io_uring")
        self.assertTrue(lines[0][1].startswith("configured: "), lines[0][1])


if __name__ == "__main__":
    flaretest.main()
