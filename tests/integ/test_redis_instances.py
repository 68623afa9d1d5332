"""Several instances, one Redis (issue 25): three build/examples/showcase
processes on their own loopback ports, one private redis-server
(tests/services_redis.py) and one SQLite file.

- The rate limit of --rate-limit-redis (instance 0) or of --cluster's Redis
  (the others: no --rate-limit-redis) is one limit across the instances:
  requests spread round-robin over the three get exactly the burst before
  429s, per client address (the clients bind 127.0.0.x: each address is a
  client with its own budget).
- A session made on one instance works on the others (--sessions redis://),
  and a logout on one ends it everywhere.
- Redis down: the limiter fails open at once (requests are served), and
  limits again once Redis is back.
"""
import http.client
import json
import os
import re
import socket
import sys
import time
import unittest

import flaretest

sys.path.insert(0, os.path.join(flaretest.REPO_ROOT, "tests"))
import services_redis  # noqa: E402  (tests/services_redis.py: a private redis-server)

SHOWCASE = os.path.join(os.path.abspath(flaretest.BUILD_DIR), "examples", "showcase")
DB_DIR = flaretest.temp_dir(prefix="flare-instances-")
BURST = 20
INSTANCES = 3


def redis_cmd(port, *args):
    """One command over RESP, its reply's first line (str)."""
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(out)
        return s.recv(4096).split(b"\r\n")[0].decode()


class Instances(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.redis = services_redis.Redis().start()
        args = ("--db", "sqlite:" + os.path.join(DB_DIR, "shared.db"),
                "--sessions", cls.redis.url,
                "--rate-limit", "1/h", "--rate-limit-burst", str(BURST),
                "--rate-limit-timeout", "500ms", "--log-level", "warn")
        cls.servers = []
        try:
            for i in range(INSTANCES):
                # the first names the limit's Redis; the others are in a
                # cluster on it, whose Redis the limit then uses
                where = ("--rate-limit-redis" if i == 0 else "--cluster", cls.redis.url)
                cls.servers.append(flaretest.Server(*args, *where, binary=SHOWCASE,
                                                    tls=False).start())
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            for s in cls.servers:
                alive = s.alive()
                rc, _ = s.stop()
                out = s.output()
                s.close_log()
                assert alive, "an instance died: %s" % out
                assert rc == 0, "an instance exited %s on SIGTERM: %s" % (rc, out)
        finally:
            cls.redis.stop()

    def call(self, inst, method, path, client, body=None, sid=None):
        """A request to instance `inst` from address 127.0.0.`client`:
        (status, headers dict, body bytes)."""
        host, port = self.servers[inst].addr
        c = http.client.HTTPConnection(host, port, timeout=10,
                                       source_address=("127.0.0.%d" % client, 0))
        hdrs = {}
        data = None
        if sid:
            hdrs["Cookie"] = "showcase_sid=" + sid
        if body is not None:
            data = json.dumps(body)
            hdrs["Content-Type"] = "application/json"
        try:
            c.request(method, path, body=data, headers=hdrs)
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            c.close()

    def decisions(self, inst, client):
        """flare_ratelimit_decisions_total by result, from instance inst's
        /metrics (asked from address 127.0.0.client)."""
        status, _, body = self.call(inst, "GET", "/metrics", client)
        self.assertEqual(status, 200, body)
        out = {}
        for m in re.finditer(rb'^flare_ratelimit_decisions_total\{prefix="flare:rl:",'
                             rb'result="(\w+)"\} (\d+)$', body, re.M):
            out[m.group(1).decode()] = int(m.group(2))
        self.assertEqual(set(out), {"allowed", "limited", "error"}, body)
        return out

    # -- one limit across the instances ---------------------------------------
    def test_shared_limit(self):
        before = [self.decisions(i, 200) for i in range(INSTANCES)]
        statuses, retry = [], []
        for n in range(3 * BURST):
            status, hdrs, _ = self.call(n % INSTANCES, "GET", "/healthz", 2)
            statuses.append(status)
            if status == 429:
                retry.append(int(hdrs["Retry-After"]))
        # exactly the burst, then nothing: one bucket, not one per instance
        # (three buckets would have let all 60 through)
        self.assertEqual(statuses, [200] * BURST + [429] * (2 * BURST))
        # 1 request an hour: a token in about 3600 s
        self.assertTrue(all(3500 <= r <= 3600 for r in retry), retry)
        after = [self.decisions(i, 200) for i in range(INSTANCES)]
        # each instance made the decisions of its share (and of its own
        # second scrape, from 127.0.0.200)
        for i in range(INSTANCES):
            mine = [statuses[n] for n in range(3 * BURST) if n % INSTANCES == i]
            self.assertEqual(after[i]["allowed"] - before[i]["allowed"], mine.count(200) + 1)
            self.assertEqual(after[i]["limited"] - before[i]["limited"], mine.count(429))
            self.assertEqual(after[i]["error"], before[i]["error"])
        # the bucket is a key that expires when it would be full again
        pttl = int(redis_cmd(self.redis.port, "PTTL", "flare:rl:127.0.0.2")[1:])
        self.assertGreater(pttl, 0)
        self.assertLessEqual(pttl, BURST * 3600 * 1000)
        # another address is another client, with its own budget, on any instance
        self.assertEqual([self.call(n % INSTANCES, "GET", "/healthz", 3)[0] for n in range(BURST)],
                         [200] * BURST)
        self.assertEqual(self.call(2, "GET", "/healthz", 3)[0], 429)

    # -- sessions made on one instance work on the others -----------------------
    def test_sessions_across_instances(self):
        status, hdrs, body = self.call(0, "POST", "/api/session", 5, {"user": "alice"})
        self.assertEqual(status, 200, body)
        sid = re.match(r"showcase_sid=([0-9a-f]{32});", hdrs["Set-Cookie"]).group(1)
        for i in (1, 2):
            status, _, body = self.call(i, "GET", "/api/session", 5, sid=sid)
            self.assertEqual((status, json.loads(body)), (200, {"user": "alice"}), body)
        # a todo made through instance 1 is seen through instance 2 (one database)
        status, _, body = self.call(1, "POST", "/api/todos", 5, {"title": "shared"}, sid=sid)
        self.assertEqual(status, 201, body)
        todo = json.loads(body)
        status, _, body = self.call(2, "GET", "/api/todos", 5, sid=sid)
        self.assertIn(todo, json.loads(body))
        # logged out on instance 2: logged out on instance 0
        self.assertEqual(self.call(2, "DELETE", "/api/session", 5, sid=sid)[0], 204)
        self.assertEqual(self.call(0, "GET", "/api/session", 5, sid=sid)[0], 401)

    # -- Redis down: fail open, at once; back: limited again ----------------------
    def test_z_redis_down(self):  # last: it stops Redis
        for n in range(BURST):
            self.assertEqual(self.call(n % INSTANCES, "GET", "/healthz", 7)[0], 200)
        self.assertEqual(self.call(0, "GET", "/healthz", 7)[0], 429)
        before = sum(self.decisions(i, 201)["error"] for i in range(INSTANCES))
        self.redis.stop()
        try:
            t0 = time.monotonic()
            for n in range(3 * INSTANCES):
                self.assertEqual(self.call(n % INSTANCES, "GET", "/healthz", 7)[0], 200)
            # refused at once by the client while Redis is down (not 9 x the 500 ms timeout)
            self.assertLess(time.monotonic() - t0, 3.0)
        finally:
            self.redis.start()
        errors = sum(self.decisions(i, 201)["error"] for i in range(INSTANCES))
        self.assertGreaterEqual(errors - before, 3 * INSTANCES)
        # each worker that met the outage said so once, not once per request
        for s in self.servers:
            out = s.output()
            n = out.count("ratelimit: the Redis store (keys flare:rl:*) cannot decide: ")
            self.assertTrue(1 <= n <= 2, out)  # 2 workers
            self.assertIn("failing open (requests let through) until it answers", out)
        # Redis came back empty (no persistence): a full bucket, then limited
        # again once each instance's workers have reconnected
        deadline = time.monotonic() + 20
        limited = False
        while not limited and time.monotonic() < deadline:
            limited = self.call(0, "GET", "/healthz", 8)[0] == 429
            time.sleep(0.05 if not limited else 0)
        self.assertTrue(limited, "not limited again after Redis came back")
        self.assertIn("ratelimit: the Redis store (keys flare:rl:*) decides again",
                      self.servers[0].output())


if __name__ == "__main__":
    flaretest.main()
