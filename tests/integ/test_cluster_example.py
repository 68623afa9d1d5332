"""examples/cluster/run.sh, as a newcomer runs it (`make cluster`): a private
Redis, two showcase instances and nginx in front, round-robin. Through nginx
the pages answer from both instances, two chat clients that nginx sends to
different instances hear each other, and the live feed carries a todo made
through the other instance, with an id to resume from. The cluster's own
guarantees (ordering, resume, outages) are tested in test_cluster*.py; this
checks the example and its nginx configuration."""
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.request

import flaretest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "cluster", "run.sh")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"


@unittest.skipUnless(os.path.exists(NGINX) and os.path.exists(REDIS),
                     "nginx or redis-server not installed (tools/deps.sh test installs them)")
class ClusterExample(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="flare-cluster-test-")
        self.port = flaretest.free_port()
        env = dict(os.environ, LISTEN="127.0.0.1:%d" % self.port, INSTANCES="2",
                   CLUSTER_DIR=self.dir)
        self.out = open(os.path.join(self.dir, "run.out"), "w+")
        self.proc = subprocess.Popen(["bash", SCRIPT, os.path.abspath(flaretest.BUILD_DIR)],
                                     env=env, stdout=self.out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            self.out.seek(0)
            text = self.out.read()
            if "open http://127.0.0.1:%d/" % self.port in text:
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.fail("run.sh did not come up (exit %s):\n%s" % (self.proc.poll(), text))
            time.sleep(0.1)
        self.instances = [int(p) for p in re.findall(r"instance \d+ on http://127\.0\.0\.1:(\d+)/", text)]
        self.assertEqual(len(self.instances), 2, text)

    def tearDown(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.out.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def get(self, path, port=None):
        url = "http://127.0.0.1:%d%s" % (port or self.port, path)
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()

    def upstreams(self):
        """The instance ports nginx's access log names, in order ($upstream_addr)."""
        with open(os.path.join(self.dir, "nginx", "access.log")) as f:
            return [int(p) for p in re.findall(r"upstream=127\.0\.0\.1:(\d+)", f.read())]

    def test_pages_from_both_instances(self):
        for _ in range(4):
            status, body = self.get("/")
            self.assertEqual(status, 200)
            self.assertIn(b"<html", body.lower())
        time.sleep(0.2)  # the log line is written as the request ends
        self.assertEqual(set(self.upstreams()), set(self.instances))

    def test_chat_across_instances(self):
        import websockets

        async def recv_json(ws, what, name=None):
            while True:
                m = json.loads(await asyncio.wait_for(ws.recv(), 10))
                if m.get("type") == what and name in (None, m.get("name")):
                    return m

        async def scenario():
            base = "ws://127.0.0.1:%d/ws?room=cluster-test&name=" % self.port
            async with websockets.connect(base + "ann") as ann:
                await recv_json(ann, "join")
                async with websockets.connect(base + "ben") as ben:
                    await recv_json(ben, "join")
                    await ann.send("hello from ann")
                    m = await recv_json(ben, "msg", "ann")
                    self.assertEqual((m["name"], m["text"]), ("ann", "hello from ann"))
                    await ben.send("hello from ben")
                    m = await recv_json(ann, "msg", "ben")
                    self.assertEqual((m["name"], m["text"]), ("ben", "hello from ben"))
        asyncio.run(scenario())
        time.sleep(0.3)
        ups = self.upstreams()
        # round-robin: the two WebSockets (logged when they close) went to both instances
        self.assertEqual(set(ups[-2:]), set(self.instances), ups)

    def test_feed_across_instances(self):
        """A todo made on instance 1 shows on a live feed that instance 2
        serves, and on one through nginx, each event with an id."""
        import http.client
        import socket
        feeds = []
        for port in (self.instances[1], self.port):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
            feeds.append(s)
        try:
            for s in feeds:  # subscribed once the stream's first event came
                buf = b""
                while b"event: clock" not in buf:
                    buf += s.recv(4096)
            c = http.client.HTTPConnection("127.0.0.1", self.instances[0], timeout=10)
            c.request("POST", "/api/session", json.dumps({"user": "cl"}),
                      {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            self.assertEqual(r.status, 200)
            sid = r.getheader("Set-Cookie").split(";")[0]
            c.request("POST", "/api/todos", json.dumps({"title": "across"}),
                      {"Content-Type": "application/json", "Cookie": sid})
            r = c.getresponse()
            r.read()
            self.assertEqual(r.status, 201)
            c.close()
            for s in feeds:
                buf, deadline = b"", time.monotonic() + 10
                while b'"title":"across"' not in buf and time.monotonic() < deadline:
                    buf += s.recv(4096)
                m = re.search(rb"id: *([^\r\n]+)\r?\nevent: todo\r?\ndata: ([^\r\n]*across[^\r\n]*)", buf)
                if m is None:
                    m = re.search(rb"event: todo\r?\nid: *([^\r\n]+)\r?\ndata: ([^\r\n]*across[^\r\n]*)", buf)
                self.assertIsNotNone(m, buf[-2000:])
        finally:
            for s in feeds:
                s.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
