#!/usr/bin/python3
"""The chat example driven in headless Chromium, as a person would use it:
three pages (alice and bob in #lobby, carol in #other) load the page from
the example server, connect their WebSocket, type messages and read what the
others wrote. Rooms keep #other quiet; carol switching rooms and bob leaving
show up as events. Chromium is driven over the DevTools protocol (its own
WebSocket) with python3-websockets, through cdp.py; no driver binary, no
downloads.

    /usr/bin/python3 tests/browser/chat_browser.py [BUILD_DIR]

Exits 0 when every check passes, 77 when Chromium or python3-websockets is
missing (skipped), 1 otherwise. FLARE_SCREENSHOT_DIR=<dir> keeps a PNG of
each page at the end.
"""

import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cdp  # noqa: E402


class Page(cdp.Page):
    """A chat page: its message lines, and a person typing into it."""

    async def describe(self):
        return await self.lines()

    async def lines(self):
        return await self.js("Array.from(document.querySelectorAll('#messages li'))"
                             ".map(li => li.textContent)") or []

    async def wait_line(self, text, timeout=15):
        await self.wait("Array.from(document.querySelectorAll('#messages li'))"
                        ".some(li => li.textContent === %s)" % json.dumps(text),
                        "the line %r" % text, timeout)

    async def say(self, text):
        # type like a person: focus the box, insert the text, press Send
        await self.type_into("#text", text)
        await self.click("#form button")


async def scenario(c, base, shots):
    alice = await Page.open(c, base + "/?name=alice&room=lobby", "alice")
    bob = await Page.open(c, base + "/?name=bob&room=lobby", "bob")
    carol = await Page.open(c, base + "/?name=carol&room=other", "carol")
    for p in (alice, bob, carol):
        await p.wait("document.body.dataset.state === 'open'", "the WebSocket to open")
    # the page was served by the example: its title and script ran
    assert await alice.js("document.title") == "Flare chat"
    await alice.wait_line("bob joined #lobby.")

    await alice.say("hello from alice")
    await bob.wait_line("alice: hello from alice")
    await alice.wait_line("alice: hello from alice")  # own message, through the server
    await bob.say("hi alice, bob here ✓ <b>not bold</b>")
    await alice.wait_line("bob: hi alice, bob here ✓ <b>not bold</b>")
    bold = await alice.js("document.querySelectorAll('#messages li b').length")
    assert bold == 2, "markup in a message must stay text (%r)" % bold

    await asyncio.sleep(0.3)
    carol_lines = await carol.lines()
    assert not any("hello from alice" in l for l in carol_lines), carol_lines

    await carol.say("/join lobby")
    await alice.wait_line("carol joined #lobby.")
    await carol.say("carol arrives")
    await bob.wait_line("carol: carol arrives")

    if shots:
        for p in (alice, bob, carol):
            await p.screenshot(os.path.join(shots, "chat-%s.png" % p.name))

    await bob.close()
    await alice.wait_line("bob left #lobby.")


def main():
    build_dir = cdp.build_dir_from(sys.argv)
    shots = os.environ.get("FLARE_SCREENSHOT_DIR")
    return cdp.main_with_server(
        sys.argv, os.path.join(build_dir, "examples", "chat"),
        ["--workers", "2", "--static", os.path.join(cdp.REPO, "examples", "chat", "static")],
        lambda c, base: scenario(c, base, shots), "chat", "chat in chromium: ok")


if __name__ == "__main__":
    sys.exit(main())
