#!/usr/bin/python3
"""Starts a server, waits for its port, checks a few GETs, stops it.

serve.py PORT [--get PATH STATUS NEEDLE]... -- COMMAND...

Each --get asks http://127.0.0.1:PORT/PATH and wants STATUS and a body that
contains NEEDLE (empty: anything). Exits 0 when all answered as wanted, else
prints what differed and the server's output and exits 1."""
import http.client
import signal
import socket
import subprocess
import sys
import tempfile
import time


def main(argv):
    if "--" not in argv or len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    cut = argv.index("--")
    port, opts, cmd = int(argv[1]), argv[2:cut], argv[cut + 1:]
    gets = []
    while opts:
        if opts[0] != "--get" or len(opts) < 4:
            print("bad option near %r" % opts[:4], file=sys.stderr)
            return 2
        gets.append((opts[1], int(opts[2]), opts[3].encode()))
        opts = opts[4:]
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    failures = []
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                failures.append("exited with %d before listening" % proc.returncode)
                break
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    failures.append("nothing listening on port %d after 20 s" % port)
                    break
                time.sleep(0.05)
        for path, status, needle in gets if not failures else ():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                conn.request("GET", path)
                r = conn.getresponse()
                body = r.read()
            except OSError as e:
                failures.append("GET %s: %s" % (path, e))
                continue
            finally:
                conn.close()
            if r.status != status or needle not in body:
                failures.append("GET %s: %d, %d bytes (wanted %d and %r): %r" %
                                (path, r.status, len(body), status, needle, body[:300]))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                failures.append("did not stop within 10 s of SIGTERM")
    if failures:
        log.seek(0)
        print("%s:\n  %s\nits output:\n%s" % (
            " ".join(cmd), "\n  ".join(failures), log.read().decode("utf-8", "replace")))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
