/* sd.c and upgrade.c: the systemd variables parsed (LISTEN_FDS/PID/FDNAMES,
 * WATCHDOG_USEC/PID), the notify address and messages, the environment an
 * upgrade gives the new binary; then a run that adopts an inherited
 * listening socket (fd 3, as systemd passes it) with more workers than
 * sockets, and reports READY=1 / STOPPING=1 to a notify socket of ours. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include <cmocka.h>

#include "harness.h"
#include "sd.h"
#include "upgrade.h"

static int notify_fd = -1;
static int inherited_port;

static void test_sd_addr(void **state)
{
    (void)state;
    struct sockaddr_un sa;
    socklen_t sl;
    assert_int_equal(flare__sd_addr("/run/systemd/notify", &sa, &sl), 0);
    assert_int_equal(sa.sun_family, AF_UNIX);
    assert_string_equal(sa.sun_path, "/run/systemd/notify");
    assert_int_equal(sl,
                     offsetof(struct sockaddr_un, sun_path) + strlen("/run/systemd/notify") + 1);
    assert_int_equal(flare__sd_addr("@abc", &sa, &sl), 0);
    assert_int_equal(sa.sun_path[0], '\0');
    assert_memory_equal(sa.sun_path + 1, "abc", 3);
    assert_int_equal(sl, offsetof(struct sockaddr_un, sun_path) + 4);
    assert_int_equal(flare__sd_addr(NULL, &sa, &sl), FLARE_EINVAL);
    assert_int_equal(flare__sd_addr("", &sa, &sl), FLARE_EINVAL);
    assert_int_equal(flare__sd_addr("@", &sa, &sl), FLARE_EINVAL);
    assert_int_equal(flare__sd_addr("run/notify", &sa, &sl), FLARE_EINVAL);
    char longp[200];
    memset(longp, 'a', sizeof(longp) - 1);
    longp[0] = '/';
    longp[sizeof(longp) - 1] = '\0';
    assert_int_equal(flare__sd_addr(longp, &sa, &sl), FLARE_EINVAL);
    longp[0] = '@';
    longp[sizeof(sa.sun_path)] = '\0'; /* exactly fills sun_path: fine when abstract */
    assert_int_equal(flare__sd_addr(longp, &sa, &sl), 0);
    longp[0] = '/';
    assert_int_equal(flare__sd_addr(longp, &sa, &sl), FLARE_EINVAL); /* no room for the NUL */
}

static void test_listen_parse(void **state)
{
    (void)state;
    char buf[64];
    const char *names[8];
    unsigned n = 99;
    assert_int_equal(flare__sd_listen_parse(NULL, NULL, NULL, 42, &n, buf, sizeof(buf), names, 8),
                     0);
    assert_int_equal(n, 0);
    /* for another process: not ours, whatever else it says */
    assert_int_equal(flare__sd_listen_parse("x", "41", NULL, 42, &n, buf, sizeof(buf), names, 8),
                     0);
    assert_int_equal(n, 0);
    assert_int_equal(flare__sd_listen_parse("3", "42", NULL, 42, &n, buf, sizeof(buf), names, 8),
                     0);
    assert_int_equal(n, 3);
    assert_null(names[0]);
    assert_int_equal(
        flare__sd_listen_parse("3", "42", "web:api:", 42, &n, buf, sizeof(buf), names, 8), 0);
    assert_int_equal(n, 3);
    assert_string_equal(names[0], "web");
    assert_string_equal(names[1], "api");
    assert_string_equal(names[2], "");

    assert_int_equal(
        flare__sd_listen_parse("3", "42", "web:api", 42, &n, buf, sizeof(buf), names, 8),
        FLARE_EINVAL);
    assert_string_equal(flare_last_error(),
                        "LISTEN_FDNAMES has 2 names for LISTEN_FDS=3 descriptors");
    assert_int_equal(flare__sd_listen_parse("0", "42", NULL, 42, &n, buf, sizeof(buf), names, 8),
                     FLARE_EINVAL);
    assert_string_equal(flare_last_error(),
                        "LISTEN_FDS=\"0\": expected a number of descriptors, 1 to 4096");
    assert_int_equal(flare__sd_listen_parse("3x", "42", NULL, 42, &n, buf, sizeof(buf), names, 8),
                     FLARE_EINVAL);
    assert_int_equal(flare__sd_listen_parse("4097", "42", NULL, 42, &n, buf, sizeof(buf), names, 8),
                     FLARE_EINVAL);
    assert_int_equal(flare__sd_listen_parse("-1", "42", NULL, 42, &n, buf, sizeof(buf), names, 8),
                     FLARE_EINVAL);
    assert_int_equal(flare__sd_listen_parse("1", "4x", NULL, 42, &n, buf, sizeof(buf), names, 8),
                     FLARE_EINVAL);
    assert_string_equal(flare_last_error(), "LISTEN_PID=\"4x\": expected a process id");
    char big[80];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(flare__sd_listen_parse("1", "42", big, 42, &n, buf, sizeof(buf), names, 8),
                     FLARE_EINVAL);
    assert_int_equal(n, 0);
}

static void test_watchdog_parse(void **state)
{
    (void)state;
    uint64_t us = 7;
    assert_int_equal(flare__sd_watchdog_parse(NULL, NULL, 42, &us), 0);
    assert_int_equal(us, 0);
    assert_int_equal(flare__sd_watchdog_parse("200000", NULL, 42, &us), 0);
    assert_int_equal(us, 200000);
    assert_int_equal(flare__sd_watchdog_parse("200000", "42", 42, &us), 0);
    assert_int_equal(us, 200000);
    assert_int_equal(flare__sd_watchdog_parse("200000", "41", 42, &us), 0);
    assert_int_equal(us, 0); /* another process's watchdog */
    assert_int_equal(flare__sd_watchdog_parse("0", NULL, 42, &us), FLARE_EINVAL);
    assert_string_equal(flare_last_error(), "WATCHDOG_USEC=\"0\": expected microseconds > 0");
    assert_int_equal(flare__sd_watchdog_parse("1s", NULL, 42, &us), FLARE_EINVAL);
    assert_int_equal(flare__sd_watchdog_parse("5", "me", 42, &us), FLARE_EINVAL);
}

static const char *env_get(char **env, const char *name)
{
    size_t l = strlen(name);
    const char *found = NULL;
    for (size_t i = 0; env[i] != NULL; i++) {
        if (strncmp(env[i], name, l) == 0 && env[i][l] == '=') {
            assert_null(found); /* each variable once */
            found = env[i] + l + 1;
        }
    }
    return found;
}

static void test_upgrade_env(void **state)
{
    (void)state;
    char *in[] = { "PATH=/usr/bin",
                   "LISTEN_FDS=9",
                   "LISTEN_PID=1",
                   "LISTEN_FDNAMES=x",
                   "HOME=/root",
                   "NOTIFY_SOCKET=/old",
                   "WATCHDOG_PID=1",
                   "WATCHDOG_USEC=10",
                   "FLARE_NOTIFY_NEXT=/older",
                   NULL };
    char *slots[2];
    char **env =
        flare__upgrade_env(in, 4, "127.0.0.1_80:127.0.0.1_80", "@12ab", "/run/notify", true, slots);
    assert_non_null(env);
    assert_string_equal(env_get(env, "PATH"), "/usr/bin");
    assert_string_equal(env_get(env, "HOME"), "/root");
    assert_string_equal(env_get(env, "WATCHDOG_USEC"), "10");
    assert_string_equal(env_get(env, "LISTEN_FDS"), "4");
    assert_string_equal(env_get(env, "LISTEN_FDNAMES"), "127.0.0.1_80:127.0.0.1_80");
    assert_string_equal(env_get(env, "NOTIFY_SOCKET"), "@12ab");
    assert_string_equal(env_get(env, "FLARE_NOTIFY_NEXT"), "/run/notify");
    assert_string_equal(env_get(env, "LISTEN_PID"), ""); /* until the child writes it */
    flare__upgrade_put_pid(slots[0], 4194304);
    flare__upgrade_put_pid(slots[1], 7);
    assert_string_equal(env_get(env, "LISTEN_PID"), "4194304");
    assert_string_equal(env_get(env, "WATCHDOG_PID"), "7");
    flare__upgrade_env_free(env);

    /* no supervisor, no watchdog: FLARE_NOTIFY_NEXT empty (still set: it
     * tells the new process it was started by an upgrade) */
    env = flare__upgrade_env(in, 1, "a", "@x", "", false, slots);
    assert_non_null(env);
    assert_string_equal(env_get(env, "FLARE_NOTIFY_NEXT"), "");
    assert_null(env_get(env, "WATCHDOG_PID"));
    assert_null(slots[1]);
    flare__upgrade_put_pid(slots[0], 0);
    assert_string_equal(env_get(env, "LISTEN_PID"), "0");
    flare__upgrade_env_free(env);
}

/* The next datagram on our notify socket (waits up to 10 s: sanitizer builds are slow). */
static bool notify_next(char *out, size_t cap)
{
    struct pollfd p = { notify_fd, POLLIN, 0 };
    if (poll(&p, 1, 10000) != 1)
        return false;
    ssize_t r = recv(notify_fd, out, cap - 1, 0);
    if (r < 0)
        return false;
    out[r] = '\0';
    return true;
}

static void test_adopt_and_notify(void **state)
{
    (void)state;
    flare_config_t cfg = { .workers = 3 }; /* more workers than inherited sockets */
    harness_t h = { .app = flare_app_new(&cfg) };
    assert_non_null(h.app);
    assert_int_equal(harness_start(&h), 0);
    assert_int_equal(h.port, inherited_port); /* port 0 in the address: the inherited one */
    char msg[256];
    assert_true(notify_next(msg, sizeof(msg)));
    assert_string_equal(msg, "READY=1");
    for (int i = 0; i < 12; i++) {
        char *r =
            harness_roundtrip(&h, "GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert_non_null(strstr(r, "HTTP/1.1 404"));
        free(r);
    }
    assert_null(getenv("LISTEN_FDS")); /* consumed: a child does not see them */
    assert_null(getenv("LISTEN_PID"));
    assert_null(getenv("LISTEN_FDNAMES"));
    assert_int_equal(harness_stop(&h), 0);
    assert_true(notify_next(msg, sizeof(msg)));
    assert_string_equal(msg, "STOPPING=1");

    /* the socket went with that run (closed by the worker that owned it):
     * the next one binds its own */
    assert_int_equal(fcntl(3, F_GETFD), -1);
    assert_int_equal(errno, EBADF);
    assert_int_equal(harness_start(&h), 0);
    assert_true(notify_next(msg, sizeof(msg)));
    assert_string_equal(msg, "READY=1");
    h.port = flare_app_port(h.app); /* harness_start may have seen the last run's */
    char *r = harness_roundtrip(&h, "GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_non_null(strstr(r, "HTTP/1.1 404"));
    free(r);
    assert_int_equal(harness_stop(&h), 0);
    assert_true(notify_next(msg, sizeof(msg)));
    assert_string_equal(msg, "STOPPING=1");
    flare_app_free(h.app);

    /* RELOADING=1 carries the monotonic clock in microseconds */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned long long before = (unsigned long long)ts.tv_sec * 1000000ull + ts.tv_nsec / 1000;
    assert_int_equal(flare__sd_reloading(), 0);
    assert_true(notify_next(msg, sizeof(msg)));
    unsigned long long us = 0;
    assert_int_equal(sscanf(msg, "RELOADING=1\nMONOTONIC_USEC=%llu", &us), 1);
    assert_true(us >= before && us < before + 1000000);
    assert_int_equal(flare__sd_notify("STATUS=ok\nREADY=1"), 0);
    assert_true(notify_next(msg, sizeof(msg)));
    assert_string_equal(msg, "STATUS=ok\nREADY=1");
}

int main(void)
{
    /* our notify socket (abstract) and an inherited listener at fd 3, set up
     * before anything reads the environment (once per process) */
    int ls = loopback_listen(64, &inherited_port);
    if (ls < 0)
        return 1;
    if (ls != 3) {
        if (dup2(ls, 3) != 3)
            return 1;
        close(ls);
    }
    /* after fd 3 is taken: the notify socket must not be the one dup2 replaces */
    char name[64];
    snprintf(name, sizeof(name), "@flare-test-upgrade-%ld", (long)getpid());
    struct sockaddr_un sa;
    socklen_t sl;
    notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (notify_fd < 0 || flare__sd_addr(name, &sa, &sl) != 0 ||
        bind(notify_fd, (struct sockaddr *)&sa, sl) != 0)
        return 1;
    setenv("NOTIFY_SOCKET", name, 1);
    char pid[24];
    snprintf(pid, sizeof(pid), "%ld", (long)getpid());
    setenv("LISTEN_FDS", "1", 1);
    setenv("LISTEN_PID", pid, 1);
    setenv("LISTEN_FDNAMES", "web", 1);

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sd_addr),          cmocka_unit_test(test_listen_parse),
        cmocka_unit_test(test_watchdog_parse),   cmocka_unit_test(test_upgrade_env),
        cmocka_unit_test(test_adopt_and_notify),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
