#!/usr/bin/python3
"""Runs tests/browser/showcase_browser.py (examples/showcase clicked through
in headless Chromium: log in, add a todo, chat between two pages, upload a
file, open /docs) as part of the integration suite."""

import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flaretest  # noqa: E402

SCRIPT = os.path.join(flaretest.REPO_ROOT, "tests", "browser", "showcase_browser.py")


class ShowcaseInChromium(unittest.TestCase):
    def test_click_through(self):
        p = subprocess.run([sys.executable, SCRIPT, os.path.abspath(flaretest.BUILD_DIR)],
                           capture_output=True, text=True, timeout=240)
        if p.returncode == 77:
            self.skipTest(p.stdout.strip())
        self.assertEqual(p.returncode, 0, "stdout:\n%s\nstderr:\n%s" % (p.stdout, p.stderr))


if __name__ == "__main__":
    flaretest.main()
