#!/usr/bin/python3
"""Channels across instances (docs/cluster.md), for real on loopback: a
private redis-server (--save ''), two or three examples/showcase instances
with --cluster on their own ports, WebSocket chat clients (positioned:
?since=) and SSE /events clients spread over them, and a TCP proxy written
here that cuts an instance from Redis and restores it.

- cross-instance delivery: clients on every instance, publishers on every
  instance at once (chat messages over WebSocket, todos whose events go to
  the SSE feed): every client gets every message once, in one order, with
  contiguous offsets, each publisher's messages in its order;
- kill -9 one instance under a steady publish load: its clients come back
  on another instance with their last positions and end with every
  message exactly once and in order; its presence entries expire;
- Redis cut from one instance (its proxy cut): its publishes fail at once
  with an error its client sees, its clients are told (flare.down), it
  serves everything else; the other instance goes on publishing; after the
  proxy comes back every subscriber of the cut instance gets what was
  published meanwhile, in order, nothing missing (flare.up first);
- Redis restarted with --save '': the epoch changes and the clients are
  told their state was lost (flare.lost, reason epoch), live ones and ones
  resuming from an old position;
- bad resume tokens: a clear 400.
"""
import asyncio
import http.client
import json
import os
import re
import socket
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import flaretest  # noqa: E402
import services_redis  # noqa: E402

try:
    import websockets
except ImportError:  # the suite says so at configure time; here it fails
    websockets = None

SHOWCASE = os.path.join(os.path.abspath(flaretest.BUILD_DIR), "examples", "showcase")
PRESENCE_TTL_MS = 1500
WAIT = 20.0  # the most any step waits for deliveries


# ---- a TCP proxy the test cuts ----------------------------------------------

class Proxy:
    """Forwards 127.0.0.1:port to 127.0.0.1:upstream. cut() closes every
    connection and refuses new ones (the listener is closed); restore()
    listens again on the same port."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.port = flaretest.free_port()
        self.lock = threading.Lock()
        self.socks = set()
        self.listener = None
        self.restore()

    @property
    def url(self):
        return "redis://127.0.0.1:%d" % self.port

    def restore(self):
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(64)
        with self.lock:
            self.listener = ls
        threading.Thread(target=self._accept, args=(ls,), daemon=True).start()

    def _accept(self, ls):
        while True:
            try:
                c, _ = ls.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.upstream), timeout=2)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            with self.lock:
                if self.listener is not ls:
                    c.close()
                    u.close()
                    continue
                self.socks |= {c, u}
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        with self.lock:
            ls, self.listener = self.listener, None
            socks, self.socks = self.socks, set()
        if ls is not None:
            try:
                ls.shutdown(socket.SHUT_RDWR)  # wakes the accept
            except OSError:
                pass
            ls.close()
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


# ---- clients ------------------------------------------------------------------

class WsClient:
    """A positioned chat client: every event of its room comes in an
    envelope with its offset and epoch; it keeps its last position and
    resumes from it when reconnected."""

    def __init__(self, name, room):
        self.name, self.room = name, room
        self.msgs = []      # envelopes (type flare.msg), across reconnections
        self.notices = []   # flare.lost / flare.down / flare.up
        self.errors = []    # {"type":"error"}, with the time they came
        self.pos = None     # (offset, epoch)
        self.ws = None
        self.task = None
        self.port = None

    def since(self):
        return "%d:%s" % self.pos if self.pos is not None else ""

    async def connect(self, port, since=None):
        self.port = port
        s = self.since() if since is None else since
        url = "ws://127.0.0.1:%d/ws?name=%s&room=%s&since=%s" % (port, self.name, self.room, s)
        self.ws = await websockets.connect(url, open_timeout=5, ping_interval=None,
                                           max_queue=None)
        self.task = asyncio.ensure_future(self._read(self.ws))

    async def _read(self, ws):
        try:
            async for raw in ws:
                e = json.loads(raw)
                t = e.get("type")
                if t == "flare.msg":
                    self.msgs.append(e)
                    self.pos = (e["offset"], e["epoch"])
                elif t == "flare.lost":
                    self.notices.append(e)
                    if e["epoch"]:
                        self.pos = (e["offset"], e["epoch"])
                elif t in ("flare.down", "flare.up"):
                    self.notices.append(e)
                elif t == "error":
                    self.errors.append((time.monotonic(), e))
        except (websockets.ConnectionClosed, OSError):
            pass

    @property
    def closed(self):
        return self.task is not None and self.task.done()

    async def send(self, text):
        await self.ws.send(text)

    async def close(self):
        if self.ws is not None:
            await self.ws.close()
        if self.task is not None:
            await asyncio.wait([self.task], timeout=5)

    def texts(self):
        return [m["data"]["text"] for m in self.msgs if m["data"].get("type") == "msg"]

    def kinds(self, kind):
        return [n for n in self.notices if n["type"] == kind]


class SseClient:
    """GET /events, read through a chunked decoder; keeps the todo events
    (with their ids) and the flare.* ones, and the last event id."""

    def __init__(self):
        self.todos = []     # (offset, epoch, data)
        self.notices = []   # (type, id, data)
        self.last_id = None
        self.task = None
        self.writer = None
        self.status = None
        self.body = b""

    async def connect(self, port, last_id=None):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        self.writer = writer
        lid = self.last_id if last_id is None else last_id
        req = "GET /events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n"
        if lid:
            req += "Last-Event-ID: %s\r\n" % lid
        writer.write((req + "\r\n").encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        self.status = int(head.split(b" ", 2)[1])
        if self.status != 200:
            m = re.search(rb"Content-Length: (\d+)", head)
            self.body = await reader.readexactly(int(m.group(1))) if m else b""
            writer.close()
            return
        self.task = asyncio.ensure_future(self._read(reader))

    async def _read(self, reader):
        buf = ""
        try:
            while True:
                size = int((await reader.readline()).strip() or b"0", 16)
                if size == 0:
                    return
                chunk = await reader.readexactly(size + 2)
                buf += chunk[:-2].decode()
                while "\n\n" in buf:
                    block, buf = buf.split("\n\n", 1)
                    self._event(block)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass

    def _event(self, block):
        ev = {"event": "message", "id": None, "data": []}
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            k, _, v = line.partition(":")
            v = v[1:] if v.startswith(" ") else v
            if k == "data":
                ev["data"].append(v)
            elif k in ("event", "id"):
                ev[k] = v
        data = "\n".join(ev["data"])
        if ev["id"] is not None:
            self.last_id = ev["id"]
        if ev["event"] == "todo":
            off, _, epoch = ev["id"].partition(":")
            self.todos.append((int(off), epoch, json.loads(data)))
        elif ev["event"].startswith("flare."):
            self.notices.append((ev["event"], ev["id"], json.loads(data)))

    @property
    def closed(self):
        return self.task is not None and self.task.done()

    async def close(self):
        if self.writer is not None:
            self.writer.close()
        if self.task is not None:
            await asyncio.wait([self.task], timeout=5)

    def titles(self):
        return [d["title"] for _, _, d in self.todos]


class TodoUser:
    """A logged-in user of one instance adding todos (their events feed the
    SSE channel), over one keep-alive connection."""

    def __init__(self, port, user):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        self.conn.request("POST", "/api/session", json.dumps({"user": user}),
                          {"Content-Type": "application/json"})
        r = self.conn.getresponse()
        r.read()
        assert r.status == 200, r.status
        self.cookie = r.getheader("Set-Cookie").split(";")[0]

    def add(self, title):
        self.conn.request("POST", "/api/todos", json.dumps({"title": title}),
                          {"Content-Type": "application/json", "Cookie": self.cookie})
        r = self.conn.getresponse()
        r.read()
        return r.status


def http_get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", path)
    r = c.getresponse()
    return r.status, r.read()


async def until(pred, timeout=WAIT, step=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        await asyncio.sleep(step)
    return pred()


# ---- the tests -------------------------------------------------------------------

@unittest.skipIf(websockets is None, "python3-websockets is not installed")
class Cluster(unittest.TestCase):
    instances = 3
    proxies = False  # each instance through its own proxy

    def setUp(self):
        self.db = os.path.join(flaretest.temp_dir(prefix="flare-cluster-"), "todos.db")
        self.redis = services_redis.Redis()
        self.redis.start()
        self.servers, self.prox = [], []
        for i in range(self.instances):
            url = self.redis.url
            if self.proxies:
                p = Proxy(self.redis.port)
                self.prox.append(p)
                url = p.url
            s = flaretest.Server("--cluster", url, "--db", "sqlite:" + self.db,
                                 "--cluster-presence-ttl", "%dms" % PRESENCE_TTL_MS,
                                 binary=SHOWCASE, workers=2, tls=False)
            s.start()
            self.servers.append(s)
        # ready once subscribed to Redis (the cluster's readiness check)
        for s in self.servers:
            deadline = time.monotonic() + 10
            while http_get(s.port, "/readyz")[0] != 200 and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertEqual(http_get(s.port, "/readyz")[0], 200)

    def tearDown(self):
        for s in self.servers:
            rc, _ = s.stop()
            out = s.output()
            s.close_log()
            if rc not in (0, None, -9):
                self.fail("a showcase exited %s: %s" % (flaretest.describe_rc(rc), out[-2000:]))
        for p in self.prox:
            p.cut()
        self.redis.__exit__(None, None, None)

    def port(self, i):
        return self.servers[i].port

    def metric(self, i, name):
        _, body = http_get(self.port(i), "/metrics")
        m = re.search(r"^%s (\S+)$" % name, body.decode(), re.M)
        return float(m.group(1)) if m else None

    # -- checks shared by the tests

    def assert_contiguous(self, offsets, who):
        self.assertTrue(offsets, who)
        self.assertEqual(offsets, list(range(offsets[0], offsets[0] + len(offsets))),
                         "%s: offsets not contiguous: %s" % (who, offsets))

    def assert_ws_client(self, c, expected, who):
        """expected: {sender: [texts in order]}; c got each once, in order."""
        self.assert_contiguous([m["offset"] for m in c.msgs], who)
        self.assertEqual(len({m["epoch"] for m in c.msgs}), 1, who)
        texts = c.texts()
        want = sorted(t for ts in expected.values() for t in ts)
        self.assertEqual(sorted(texts), want, "%s: not every message exactly once" % who)
        for sender, ts in expected.items():
            mine = [t for t in texts if t.startswith(sender + "-")]
            self.assertEqual(mine, ts, "%s: %s's messages out of order" % (who, sender))

    def assert_same_order(self, clients, key):
        """Every client saw each offset carry the same message."""
        seen = {}
        for c in clients:
            for off, val in key(c):
                if off in seen:
                    self.assertEqual(seen[off], val, "offset %d differs between clients" % off)
                seen[off] = val

    def test_cross_instance_delivery(self):
        asyncio.run(self._cross_instance())

    async def _cross_instance(self):
        ws = [WsClient("u%d%d" % (i, k), "lobby") for i in range(self.instances) for k in range(2)]
        for n, c in enumerate(ws):
            await c.connect(self.port(n // 2))
        sse = [SseClient() for _ in range(self.instances)]
        for i, c in enumerate(sse):
            await c.connect(self.port(i))
            self.assertEqual(c.status, 200)
        users = [await asyncio.to_thread(TodoUser, self.port(i), "p%d" % i)
                 for i in range(self.instances)]
        K, T = 25, 12

        async def chat(c):
            for k in range(K):
                await c.send("%s-%03d" % (c.name, k))
                await asyncio.sleep(0.003)

        def todos(i):
            for k in range(T):
                assert users[i].add("p%d-%03d" % (i, k)) == 201

        await asyncio.gather(*(chat(c) for c in ws),
                             *(asyncio.to_thread(todos, i) for i in range(self.instances)))
        expected_ws = {c.name: ["%s-%03d" % (c.name, k) for k in range(K)] for c in ws}
        total = len(ws) * K
        ok = await until(lambda: all(len(c.texts()) >= total for c in ws) and
                         all(len(s.todos) >= self.instances * T for s in sse))
        self.assertTrue(ok, [(len(c.texts()), len(s.todos)) for c in ws for s in sse])
        await asyncio.sleep(0.2)  # anything twice would come now
        for c in ws:
            self.assert_ws_client(c, expected_ws, c.name)
            self.assertEqual(c.notices, [], c.name)
        self.assert_same_order(ws, lambda c: [(m["offset"], json.dumps(m["data"])) for m in c.msgs])
        for i, s in enumerate(sse):
            self.assert_contiguous([o for o, _, _ in s.todos], "sse %d" % i)
            titles = s.titles()
            self.assertEqual(sorted(titles), sorted("p%d-%03d" % (j, k)
                                                    for j in range(self.instances)
                                                    for k in range(T)))
            for j in range(self.instances):
                mine = [t for t in titles if t.startswith("p%d-" % j)]
                self.assertEqual(mine, sorted(mine), "sse %d: p%d out of order" % (i, j))
        self.assert_same_order(sse, lambda s: [(o, d["title"]) for o, _, d in s.todos])
        for i in range(self.instances):
            self.assertGreater(self.metric(i, "flare_cluster_messages_delivered_total"), 0)
            self.assertEqual(self.metric(i, "flare_cluster_messages_lost_total"), 0)
            self.assertEqual(self.metric(i, "flare_cluster_up"), 1)
        for c in ws + sse:
            await c.close()
        for u in users:
            u.conn.close()

    def test_kill9_clients_resume_elsewhere(self):
        asyncio.run(self._kill9())

    async def _kill9(self):
        victim = self.instances - 1
        ws = [WsClient("k%d%d" % (i, k), "crowd") for i in range(self.instances) for k in range(2)]
        for n, c in enumerate(ws):
            await c.connect(self.port(n // 2))
        sse = [SseClient() for _ in range(self.instances)]
        for i, c in enumerate(sse):
            await c.connect(self.port(i))
        # presence: the victim's members are listed everywhere (by their
        # client ids: NAME#CONNECTION, new ones when they come back)
        victim_names = {c.name for c in ws[2 * victim:]}

        def members(i):
            st, body = http_get(self.port(i), "/api/presence?room=crowd")
            self.assertEqual(st, 200, body)
            return {m["client"]: m["info"]["name"] for m in json.loads(body)["members"]}

        self.assertTrue(await until(lambda: victim_names <= set(members(0).values()), 5),
                        members(0))
        victim_ids = {k for k, v in members(0).items() if v in victim_names}
        self.assertEqual(len(victim_ids), 2)
        user = await asyncio.to_thread(TodoUser, self.port(0), "steady")
        N, T = 120, 40
        pubs = [ws[0], ws[2]]  # on instances 0 and 1: they survive
        killed_at = None

        async def chat(c):
            for k in range(N):
                await c.send("%s-%03d" % (c.name, k))
                await asyncio.sleep(0.012)

        def todos():
            for k in range(T):
                assert user.add("t-%03d" % k) == 201
                time.sleep(0.03)

        async def killer():
            nonlocal killed_at
            # mid-stream: once the victim's clients have positions
            await until(lambda: sse[victim].todos and
                        all(c.texts() for c in ws[2 * victim:]), 10)
            await asyncio.sleep(0.2)
            self.servers[victim].proc.kill()  # kill -9, mid-stream
            self.servers[victim].proc.wait()
            killed_at = time.monotonic()

        async def resume():
            # the victim's clients notice and come back on instance 0 with
            # their last positions
            await until(lambda: all(c.closed for c in ws[2 * victim:]) and sse[victim].closed, 10)
            for c in ws[2 * victim:]:
                await c.connect(self.port(0))
            await sse[victim].connect(self.port(0))
            self.assertEqual(sse[victim].status, 200)

        await asyncio.gather(*(chat(c) for c in pubs), asyncio.to_thread(todos), killer(),
                             resume())
        expected = {c.name: ["%s-%03d" % (c.name, k) for k in range(N)] for c in pubs}
        total = sum(len(v) for v in expected.values())
        ok = await until(lambda: all(len(c.texts()) >= total for c in ws) and
                         all(len(s.todos) >= T for s in sse))
        self.assertTrue(ok, [len(c.texts()) for c in ws] + [len(s.todos) for s in sse])
        await asyncio.sleep(0.2)
        for c in ws:
            self.assert_ws_client(c, expected, c.name)
            self.assertEqual(c.kinds("flare.lost"), [], c.name)
        self.assert_same_order(ws, lambda c: [(m["offset"], json.dumps(m["data"])) for m in c.msgs])
        for i, s in enumerate(sse):
            self.assert_contiguous([o for o, _, _ in s.todos], "sse %d" % i)
            self.assertEqual(s.titles(), ["t-%03d" % k for k in range(T)], "sse %d" % i)
            self.assertEqual(s.notices, [], "sse %d" % i)
        # the victim's presence entries expire: within the TTL and a heartbeat
        limit = PRESENCE_TTL_MS / 1000 * 2 + 1
        gone = await until(lambda: not (victim_ids & set(members(1))), limit + 2)
        self.assertTrue(gone, members(1))
        self.assertTrue(victim_names <= set(members(1).values()))  # back, on instance 0
        self.assertLess(time.monotonic() - killed_at, limit + 2)
        for c in ws + sse:
            await c.close()
        user.conn.close()

    def test_bad_resume_tokens(self):
        asyncio.run(self._bad_tokens())

    async def _bad_tokens(self):
        for since in ("garbage", "12", ":abc", "1:a b", "99999999999999999999:x"):
            with self.assertRaises(websockets.InvalidStatusCode) as cm:
                await websockets.connect("ws://127.0.0.1:%d/ws?name=x&room=r&since=%s" %
                                         (self.port(0), since), open_timeout=5)
            self.assertEqual(cm.exception.status_code, 400, since)
        s = SseClient()
        await s.connect(self.port(0), last_id="not-a-position")
        self.assertEqual(s.status, 400)
        self.assertIn(b"Last-Event-ID", s.body)
        st, body = http_get(self.port(0), "/api/presence?room=" + "x" * 40)
        self.assertEqual(st, 400, body)
        # and the instance goes on
        self.assertEqual(http_get(self.port(0), "/healthz")[0], 200)


@unittest.skipIf(websockets is None, "python3-websockets is not installed")
class RedisOutage(Cluster):
    """Two instances, each reaching Redis through its own proxy."""
    instances = 2
    proxies = True

    test_cross_instance_delivery = None
    test_kill9_clients_resume_elsewhere = None
    test_bad_resume_tokens = None

    def test_cut_then_restore(self):
        asyncio.run(self._cut())

    async def _cut(self):
        a, b = WsClient("a1", "cut"), WsClient("b1", "cut")
        await a.connect(self.port(0))
        await b.connect(self.port(1))
        sa, sb = SseClient(), SseClient()
        await sa.connect(self.port(0))
        await sb.connect(self.port(1))
        await b.send("b1-pre")
        self.assertTrue(await until(lambda: "b1-pre" in a.texts() and "b1-pre" in b.texts(), 5))

        self.prox[0].cut()
        # told, quickly
        self.assertTrue(await until(lambda: a.kinds("flare.down"), 5), a.notices)
        self.assertTrue(await until(lambda: any(n[0] == "flare.down" for n in sa.notices), 5))
        self.assertEqual(b.notices, [])
        # publishing on the cut instance fails at once, with an error the client sees
        t0 = time.monotonic()
        await a.send("a1-during")
        self.assertTrue(await until(lambda: a.errors, 5))
        self.assertLess(a.errors[0][0] - t0, 1.0)
        self.assertIn("unavailable", a.errors[0][1]["error"])
        # it serves everything else
        self.assertEqual(http_get(self.port(0), "/")[0], 200)
        user_a = await asyncio.to_thread(TodoUser, self.port(0), "ua")
        self.assertEqual(await asyncio.to_thread(user_a.add, "lost-while-cut"), 201)
        self.assertEqual(self.metric(0, "flare_cluster_up"), 0)
        self.assertGreater(self.metric(0, "flare_cluster_publish_errors_total"), 0)
        # the other instance goes on: what it publishes is acknowledged
        # (its own client gets it back with an offset)
        user_b = await asyncio.to_thread(TodoUser, self.port(1), "ub")
        during = ["b1-d%02d" % k for k in range(10)]
        for t in during:
            await b.send(t)
        for k in range(5):
            self.assertEqual(await asyncio.to_thread(user_b.add, "ub-d%02d" % k), 201)
        self.assertTrue(await until(lambda: set(during) <= set(b.texts()) and
                                    len(sb.todos) >= 5, 5))
        acked = [t for t in b.texts()]
        self.assertNotIn("b1-d00", a.texts())

        self.prox[0].restore()
        self.assertTrue(await until(lambda: a.kinds("flare.up"), 10), a.notices)
        # nothing acknowledged is missing, in order, no loss reported
        self.assertTrue(await until(lambda: a.texts() == acked, 10), (a.texts(), acked))
        self.assertTrue(await until(lambda: [d["title"] for _, _, d in sa.todos] ==
                                    [d["title"] for _, _, d in sb.todos], 10))
        await a.send("a1-after")
        self.assertTrue(await until(lambda: "a1-after" in b.texts() and "a1-after" in a.texts(), 5))
        for c in (a, b):
            self.assertEqual(c.kinds("flare.lost"), [], c.name)
            self.assert_contiguous([m["offset"] for m in c.msgs], c.name)
        self.assertEqual([n for n in sa.notices if n[0] == "flare.lost"], [])
        self.assert_contiguous([o for o, _, _ in sa.todos], "sa")
        self.assertGreater(self.metric(0, "flare_cluster_messages_recovered_total"), 0)
        self.assertEqual(self.metric(0, "flare_cluster_up"), 1)
        for c in (a, b, sa, sb):
            await c.close()
        user_a.conn.close()
        user_b.conn.close()

    def test_redis_restarted_without_data(self):
        asyncio.run(self._restart())

    async def _restart(self):
        a, b = WsClient("a2", "epoch"), WsClient("b2", "epoch")
        await a.connect(self.port(0))
        await b.connect(self.port(1))
        s = SseClient()
        await s.connect(self.port(1))
        user = await asyncio.to_thread(TodoUser, self.port(0), "ue")
        await a.send("a2-one")
        self.assertEqual(await asyncio.to_thread(user.add, "before"), 201)
        self.assertTrue(await until(lambda: "a2-one" in b.texts() and s.todos, 5),
                        (a.msgs, a.notices, b.msgs, b.notices, s.todos, s.notices,
                         [http_get(self.port(i), "/metrics")[1].decode().split("flare_cluster")[1:]
                          for i in range(2)]))
        old_ws, old_sse = b.since(), s.last_id

        self.redis.stop()  # kill -9: nothing saved (--save '')
        self.redis.start()
        # the live clients are told their state was lost (a new epoch)
        for c in (a, b):
            self.assertTrue(await until(lambda c=c: c.kinds("flare.lost"), 10), c.notices)
            lost = c.kinds("flare.lost")[0]
            self.assertEqual(lost["reason"], "epoch", lost)
            self.assertTrue(c.kinds("flare.down") and c.kinds("flare.up"), c.notices)
        self.assertTrue(await until(lambda: any(n[0] == "flare.lost" for n in s.notices), 10))
        # publishing works again, in a new epoch
        await a.send("a2-two")
        self.assertTrue(await until(lambda: "a2-two" in b.texts(), 5))
        self.assertNotEqual(b.msgs[-1]["epoch"], b.msgs[0]["epoch"])
        # a client resuming from a position of the old epoch is told too
        c = WsClient("c2", "epoch")
        await c.connect(self.port(0), since=old_ws)
        self.assertTrue(await until(lambda: c.kinds("flare.lost"), 5), c.notices)
        self.assertEqual(c.kinds("flare.lost")[0]["reason"], "epoch")
        s2 = SseClient()
        await s2.connect(self.port(0), last_id=old_sse)
        self.assertEqual(s2.status, 200)
        self.assertTrue(await until(lambda: s2.notices, 5))
        kind, ident, data = s2.notices[0]
        self.assertEqual(kind, "flare.lost")
        self.assertEqual(data["reason"], "epoch")
        self.assertGreaterEqual(self.metric(0, "flare_cluster_epoch_changes_total"), 1)
        for x in (a, b, c, s, s2):
            await x.close()
        user.conn.close()


if __name__ == "__main__":
    flaretest.main()
