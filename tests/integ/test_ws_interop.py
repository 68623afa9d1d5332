#!/usr/bin/python3
"""Interoperability: an independent WebSocket implementation (Debian's
python3-websockets) against examples/hello's GET /ws/echo. Handshake,
permessage-deflate with the parameters that library offers and some it can be
told to offer, fragmented messages, pings, close codes both ways, the size
limit, and fifty concurrent clients."""

import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402

try:
    import websockets
    from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory
except ImportError:  # pragma: no cover
    websockets = None

MIB = 1 << 20


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


class Interop(flaretest.ServerTestCase):

    def setUp(self):
        super().setUp()
        if websockets is None:
            self.skipTest("python3-websockets is not installed (tools/deps.sh test)")
        self.url = "ws://%s:%d/ws/echo" % self.addr

    def test_echo_with_default_compression(self):
        async def go():
            async with websockets.connect(self.url, max_size=2 * MIB) as ws:
                self.assertEqual(len(ws.extensions), 1, "permessage-deflate not negotiated")
                for n in (0, 1, 125, 126, 65535, 65536, 300000, MIB):
                    text = ("flare " * (n // 6 + 1))[:n]
                    await ws.send(text)
                    self.assertEqual(await ws.recv(), text)
                    data = os.urandom(n)  # incompressible
                    await ws.send(data)
                    self.assertEqual(await ws.recv(), data)
        run(go())

    def test_echo_uncompressed(self):
        async def go():
            async with websockets.connect(self.url, compression=None, max_size=2 * MIB) as ws:
                self.assertEqual(ws.extensions, [])
                for n in (0, 10, 70000, MIB):
                    await ws.send(b"\xab" * n)
                    self.assertEqual(await ws.recv(), b"\xab" * n)
                await ws.send("κόσμε – unicode ✓")
                self.assertEqual(await ws.recv(), "κόσμε – unicode ✓")
        run(go())

    def test_deflate_parameters(self):
        offers = [
            dict(server_max_window_bits=10, client_max_window_bits=9),
            dict(client_no_context_takeover=True, server_no_context_takeover=True),
            dict(server_max_window_bits=15, client_max_window_bits=15),
            dict(client_max_window_bits=True),
        ]
        async def go(params):
            ext = ClientPerMessageDeflateFactory(**params)
            async with websockets.connect(self.url, extensions=[ext]) as ws:
                self.assertEqual(len(ws.extensions), 1, params)
                for i in range(50):
                    msg = "message %d: " % i + "lorem ipsum dolor sit amet " * (i * 10 + 1)
                    await ws.send(msg)
                    self.assertEqual(await ws.recv(), msg)
        for params in offers:
            with self.subTest(params=params):
                run(go(params))

    def test_fragmented_send(self):
        async def go():
            async with websockets.connect(self.url) as ws:
                await ws.send(["frag", "men", "ted ", "κόσμε"])
                self.assertEqual(await ws.recv(), "fragmented κόσμε")
                await ws.send([b"\x00" * 1000, b"\x01" * 70000, b"\x02"])
                self.assertEqual(await ws.recv(), b"\x00" * 1000 + b"\x01" * 70000 + b"\x02")
        run(go())

    def test_ping(self):
        async def go():
            async with websockets.connect(self.url) as ws:
                for payload in (b"", b"abc", b"x" * 125):
                    waiter = await ws.ping(payload)
                    await asyncio.wait_for(waiter, 5)
        run(go())

    def test_close_codes(self):
        async def go(code, reason):
            ws = await websockets.connect(self.url)
            await ws.send("before close")
            self.assertEqual(await ws.recv(), "before close")
            await ws.close(code, reason)
            self.assertEqual(ws.close_code, code)  # the server echoed it
            await ws.wait_closed()
        for code, reason in ((1000, ""), (1001, "away"), (4000, "app defined ✓"), (3999, "")):
            with self.subTest(code=code):
                run(go(code, reason))

    def test_too_big(self):
        async def go():
            async with websockets.connect(self.url, compression=None, max_size=4 * MIB) as ws:
                await ws.send(b"z" * (MIB + 1))
                with self.assertRaises(websockets.ConnectionClosed) as cm:
                    await ws.recv()
                self.assertEqual(cm.exception.rcvd.code, 1009)
        run(go())

    def test_many_clients(self):
        async def one(i):
            async with websockets.connect(self.url) as ws:
                for k in range(100):
                    msg = "client %d message %d" % (i, k)
                    await ws.send(msg)
                    self.assertEqual(await ws.recv(), msg)
        async def go():
            await asyncio.gather(*(one(i) for i in range(50)))
        run(go())
        self.assertServerAlive()


if __name__ == "__main__":
    flaretest.main()
