/* flare_app_run's failure paths (run.c, listeners.c, worker.c): every
 * system call on the way up either works or fails with a code and a
 * message naming it (flare_last_error) and its errno (flare_last_errno);
 * none leaves flare_app_run waiting forever. Signals
 * stop the app from whichever thread the kernel picks. Each case runs in a
 * child process (resource limits, signals, a changed user), watched by an
 * alarm: a hang is a killed child, and a failure. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <flare/flare.h>

#include "loopback.h"

/* Runs fn in a child under a 20 s alarm; returns its exit status, or -1 when
 * it died of a signal (a hang ends in SIGALRM). */
static int in_child(int (*fn)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        _exit(fn(arg));
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFSIGNALED(st))
        fprintf(stderr, "# child killed by signal %d\n", WTERMSIG(st));
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static flare_app_t *one_worker_app(void)
{
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = 2;
    cfg.job_threads = 1;
    return flare_app_new(&cfg);
}

/* ---- the port is taken ---- */

static void test_port_in_use(void **state)
{
    (void)state;
    int port;
    int fd = loopback_listen(1, &port);
    assert_true(fd >= 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);

    flare_app_t *app = one_worker_app();
    assert_non_null(app);
    assert_int_equal(flare_app_run(app, addr), FLARE_EBIND);
    assert_int_equal(flare_last_errno(), EADDRINUSE);
    assert_non_null(strstr(flare_last_error(), addr));
    assert_non_null(strstr(flare_last_error(), strerror(EADDRINUSE)));
    /* the app is still usable: another port works */
    flare_app_stop(app);
    assert_int_equal(flare_app_run(app, "127.0.0.1:0"), 0);
    flare_app_free(app);
    close(fd);

    /* a bad address says what was expected */
    app = one_worker_app();
    assert_int_equal(flare_app_run(app, "no-port-here"), FLARE_EADDR);
    assert_int_equal(flare_last_errno(), 0);
    assert_non_null(strstr(flare_last_error(), "no-port-here"));
    flare_app_free(app);
}

/* ---- a privileged port, as an unprivileged user ---- */

static int privileged_child(void *arg)
{
    (void)arg;
    if (setgid(65534) != 0 || setuid(65534) != 0)
        return 10;
    flare_app_t *app = one_worker_app();
    if (app == NULL)
        return 11;
    int rc = flare_app_run(app, "127.0.0.1:1");
    if (rc != FLARE_EBIND)
        return 12;
    if (flare_last_errno() != EACCES)
        return 13;
    if (strstr(flare_last_error(), strerror(EACCES)) == NULL)
        return 14;
    flare_app_free(app);
    return 0;
}

static void test_privileged_port(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        /* already unprivileged: the same check without changing user */
        flare_app_t *app = one_worker_app();
        assert_int_equal(flare_app_run(app, "127.0.0.1:1"), FLARE_EBIND);
        assert_int_equal(flare_last_errno(), EACCES);
        flare_app_free(app);
        return;
    }
    assert_int_equal(in_child(privileged_child, NULL), 0);
}

/* ---- out of descriptors at every step of the way up ---- */

static int fd_limit_child(void *arg)
{
    rlim_t lim = (rlim_t)(uintptr_t)arg;
    struct rlimit rl = { lim, lim };
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 20;
    flare_app_t *app = one_worker_app();
    if (app == NULL)
        return flare_last_error()[0] != '\0' ? 2 : 21;
    flare_app_stop(app); /* returns as soon as the workers are up */
    int rc = flare_app_run(app, "127.0.0.1:0");
    if (rc == 0)
        return 0;
    if (flare_last_error()[0] == '\0')
        return 22; /* failed without saying why */
    fprintf(stderr, "# limit %lu: %s (%s)\n", (unsigned long)lim, flare_strerror(rc),
            flare_last_error());
    flare_app_free(app);
    return 3;
}

static void test_descriptor_exhaustion(void **state)
{
    (void)state;
    /* the lowest free descriptor now: the child starts with the same table */
    int probe = open("/dev/null", O_RDONLY);
    assert_true(probe >= 0);
    close(probe);
    int failed = 0, ok = 0;
    for (int extra = 0; extra < 40 && ok < 3; extra++) {
        int rc = in_child(fd_limit_child, (void *)(uintptr_t)(probe + extra));
        assert_true(rc == 0 || rc == 2 || rc == 3);
        if (rc == 0)
            ok++;
        else
            failed++;
    }
    assert_true(failed > 3); /* several distinct steps failed cleanly... */
    assert_true(ok > 0);     /* ...and with enough descriptors it starts */
}

/* ---- a signal delivered to a thread that does not block it ---- */

static void *bystander(void *arg)
{
    int sig = (int)(intptr_t)arg;
    struct timespec ts = { 0, 200 * 1000000L };
    nanosleep(&ts, NULL);
    /* process-directed: the kernel picks a thread that does not block it,
     * and only this one does not */
    kill(getpid(), sig);
    for (;;)
        pause();
    return NULL;
}

static int signal_child(void *arg)
{
    int sig = (int)(intptr_t)arg;
    pthread_t t;
    if (pthread_create(&t, NULL, bystander, (void *)(intptr_t)sig) != 0)
        return 30;
    flare_app_t *app = one_worker_app();
    if (app == NULL)
        return 31;
    int rc = flare_app_run(app, "127.0.0.1:0");
    flare_app_free(app);
    return rc == 0 ? 0 : 32;
}

static void test_signal_to_another_thread(void **state)
{
    (void)state;
    assert_int_equal(in_child(signal_child, (void *)(intptr_t)SIGTERM), 0);
    assert_int_equal(in_child(signal_child, (void *)(intptr_t)SIGINT), 0);
}

/* ---- the usual way: a signal while every thread blocks it ---- */

static int plain_signal_child(void *arg)
{
    (void)arg;
    flare_app_t *app = one_worker_app();
    if (app == NULL)
        return 40;
    pid_t self = getpid();
    pid_t killer = fork();
    if (killer == 0) {
        struct timespec ts = { 0, 200 * 1000000L };
        nanosleep(&ts, NULL);
        kill(self, SIGTERM);
        _exit(0);
    }
    int rc = flare_app_run(app, "127.0.0.1:0");
    waitpid(killer, NULL, 0);
    /* the handler and mask are given back: SIGTERM is fatal again */
    struct sigaction now;
    sigaction(SIGTERM, NULL, &now);
    if (now.sa_handler != SIG_DFL)
        return 41;
    flare_app_free(app);
    return rc == 0 ? 0 : 42;
}

static void test_signal_from_outside(void **state)
{
    (void)state;
    assert_int_equal(in_child(plain_signal_child, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_port_in_use),
        cmocka_unit_test(test_privileged_port),
        cmocka_unit_test(test_descriptor_exhaustion),
        cmocka_unit_test(test_signal_to_another_thread),
        cmocka_unit_test(test_signal_from_outside),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
