"""Real services for the tests, started privately and removed afterwards.

One class per service, each a context manager that starts its server on a
free loopback port in a temporary directory and exports what a test needs
in environment variables (env()). Standard library only; run with Debian's
/usr/bin/python3.

    /usr/bin/python3 tests/services.py --pg -- CMD ARGS...

starts the services asked for, runs CMD with their variables set, stops
them and exits with CMD's status. A missing server is a failure naming the
Debian package, never a skip.

PostgreSQL (--pg) exports:
    FLARE_TEST_PG_URL      postgresql://flare:flarepw@127.0.0.1:PORT/flaretest
    FLARE_TEST_PG_SOCKDIR  the unix socket directory (port PORT)
    FLARE_TEST_PG_PORT     PORT
    FLARE_TEST_PG_CTL      a shell command prefix: append "stop -m fast" or
                           "start -w" to stop or restart the same cluster

To add a service (--redis): write a class with start(), stop() and env()
like PostgresCluster, add it to SERVICES below; main() needs no change.
"""
import glob
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile


class ServiceError(Exception):
    pass


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresCluster:
    """initdb + pg_ctl in a temporary directory, as the postgres user when
    running as root (PostgreSQL refuses to run as root)."""

    USER = "flare"
    PASSWORD = "flarepw"
    DB = "flaretest"

    def __init__(self):
        self.tmp = None
        self.port = None
        self.bindir = self._find_bindir()
        self.prefix = []
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                raise ServiceError("running as root and there is no postgres user: "
                                   "install the Debian package postgresql")
            self.prefix = ["runuser", "-u", "postgres", "--"]

    @staticmethod
    def _find_bindir():
        dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                      key=lambda d: int(d.split("/")[4]) if d.split("/")[4].isdigit() else 0)
        for d in reversed(dirs):
            if os.access(os.path.join(d, "initdb"), os.X_OK):
                return d
        raise ServiceError("PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin/initdb): "
                           "install the Debian package postgresql (tools/deps.sh test)")

    def _run(self, *args, check=True):
        r = subprocess.run(self.prefix + list(args), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if check and r.returncode != 0:
            raise ServiceError("%s failed (%d):\n%s" % (" ".join(args), r.returncode, r.stdout))
        return r

    @property
    def datadir(self):
        return os.path.join(self.tmp, "data")

    @property
    def sockdir(self):
        return os.path.join(self.tmp, "sock")

    @property
    def logfile(self):
        return os.path.join(self.tmp, "server.log")

    def ctl(self):
        return self.prefix + [os.path.join(self.bindir, "pg_ctl"), "-D", self.datadir,
                              "-l", self.logfile]

    def start(self):
        self.tmp = tempfile.mkdtemp(prefix="flare-pg-")
        os.mkdir(self.sockdir)
        if self.prefix:
            pw = pwd.getpwnam("postgres")
            for d in (self.tmp, self.sockdir):
                os.chown(d, pw.pw_uid, pw.pw_gid)
        self._run(os.path.join(self.bindir, "initdb"), "-D", self.datadir, "-U", "postgres",
                  "-E", "UTF8", "--locale=C", "--no-sync", "--auth=trust")
        self.port = free_port()
        with open(os.path.join(self.datadir, "postgresql.conf"), "a") as f:
            f.write("\n# flare tests\nport = %d\nlisten_addresses = '127.0.0.1'\n"
                    "unix_socket_directories = '%s'\nfsync = off\nfull_page_writes = off\n"
                    "synchronous_commit = off\nmax_connections = 200\n"
                    % (self.port, self.sockdir))
        with open(os.path.join(self.datadir, "pg_hba.conf"), "w") as f:
            f.write("local all all trust\nhost all all 127.0.0.1/32 trust\n"
                    "host all all ::1/128 trust\n")
        self._run(*(self.ctl()[len(self.prefix):] + ["-w", "-t", "60", "start"]))
        psql = os.path.join(self.bindir, "psql")
        if not os.access(psql, os.X_OK):
            psql = "psql"
        base = [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", self.sockdir, "-p",
                str(self.port), "-U", "postgres", "-d", "postgres", "-c"]
        self._run(*(base + ["CREATE ROLE %s LOGIN PASSWORD '%s'" % (self.USER, self.PASSWORD)]))
        self._run(*(base + ["CREATE DATABASE %s OWNER %s" % (self.DB, self.USER)]))

    def stop(self):
        if self.tmp is None:
            return
        if os.path.exists(os.path.join(self.datadir, "postmaster.pid")):
            self._run(*(self.ctl()[len(self.prefix):] + ["-m", "immediate", "-w", "stop"]),
                      check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp = None

    def env(self):
        return {
            "FLARE_TEST_PG_URL": "postgresql://%s:%s@127.0.0.1:%d/%s"
                                 % (self.USER, self.PASSWORD, self.port, self.DB),
            "FLARE_TEST_PG_SOCKDIR": self.sockdir,
            "FLARE_TEST_PG_PORT": str(self.port),
            "FLARE_TEST_PG_CTL": " ".join(shlex.quote(a) for a in self.ctl()),
        }

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


# --flag -> class; add --redis here.
SERVICES = {
    "--pg": PostgresCluster,
}


def _on_signal(signum, frame):
    raise SystemExit(128 + signum)


def main(argv):
    if "--" not in argv:
        print("usage: services.py %s... -- CMD ARGS..." % "|".join(SERVICES), file=sys.stderr)
        return 2
    i = argv.index("--")
    flags, cmd = argv[:i], argv[i + 1:]
    unknown = [f for f in flags if f not in SERVICES]
    if unknown or not cmd:
        print("services.py: unknown %s or no command" % unknown, file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    started = []
    env = dict(os.environ)
    try:
        for f in flags:
            svc = SERVICES[f]()
            started.append(svc)
            svc.__enter__()
            env.update(svc.env())
        child = subprocess.Popen(cmd, env=env)
        try:
            return child.wait()
        except BaseException:
            child.terminate()
            child.wait()
            raise
    except ServiceError as e:
        print("services.py: %s" % e, file=sys.stderr)
        return 1
    finally:
        for svc in reversed(started):
            svc.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
