/* flare_app_run: the main thread's part of the lifecycle.
 *
 * It binds the listeners (errors are reported before any thread starts),
 * blocks SIGINT/SIGTERM/SIGUSR2/SIGHUP and waits on a signalfd + stop
 * eventfd (running an upgrade on SIGUSR2, upgrade.c, the reload hooks on
 * SIGHUP, and systemd's watchdog meanwhile), then asks every worker to
 * drain and joins them. The gate (gate.c), which says when other threads
 * may reach the workers, opens and closes here. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "app.h"
#include "app_svc.h"
#include "worker.h"
#include "http/svc.h"
#include "net/listen.h"
#include "run_int.h"
#include "loop/loop.h"
#include "sd.h"
#include "upgrade.h"

/* ---- signals ----
 *
 * SIGINT and SIGTERM stop the app. They are blocked in the thread that runs
 * the app before any thread starts, so every worker and job thread inherits
 * the mask and only the signalfd sees them. A thread the user started
 * earlier may not block them; the kernel may deliver the signal there, so a
 * handler is installed too, for the whole process: it wakes the same stop
 * eventfd. One running app owns the handler at a time. */

static _Atomic int signal_stop_fd = -1;

/* SIGUSR2 caught by the handler (a thread that does not block it): the
 * stop eventfd gets this instead of 1, and the waiting loop tells the two
 * apart by the counter's high half. */
#define STOP_FD_UPGRADE ((uint64_t)1 << 32)

static void on_stop_signal(int sig)
{
    int saved = errno;
    int fd = atomic_load(&signal_stop_fd);
    if (fd >= 0) {
        uint64_t one = sig == SIGUSR2 ? STOP_FD_UPGRADE : 1;
        ssize_t r = write(fd, &one, sizeof(one));
        (void)r;
    }
    errno = saved;
}

/* SIGHUP delivered to a thread that does not block it: the same path as
 * one read from the signalfd (the run loop reads this eventfd too). */
static _Atomic int signal_hup_fd = -1;

static void on_hup_signal(int sig)
{
    (void)sig;
    int saved = errno;
    int fd = atomic_load(&signal_hup_fd);
    if (fd >= 0) {
        uint64_t one = 1;
        ssize_t r = write(fd, &one, sizeof(one));
        (void)r;
    }
    errno = saved;
}

typedef struct run_signals {
    sigset_t old_mask;
    struct sigaction old_hup; /* reload */
    int hup_fd;               /* reload: eventfd woken by on_hup_signal */
    struct sigaction old_int, old_term, old_pipe;
    struct sigaction old_usr2; /* upgrade */
    bool masked, handlers, pipe;
    int sfd;
} run_signals_t;

static int signals_take(flare_app_t *app, run_signals_t *rs)
{
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);  /* reload: see wait_for_stop */
    sigaddset(&mask, SIGUSR2); /* upgrade (upgrade.c) */
    /* writes to a closed socket return EPIPE instead of killing the process */
    struct sigaction ign = { .sa_handler = SIG_IGN };
    sigemptyset(&ign.sa_mask);
    if (sigaction(SIGPIPE, &ign, &rs->old_pipe) != 0)
        return flare__fail(FLARE_ESYS, errno, "sigaction(SIGPIPE)");
    rs->pipe = true;
    int rc = pthread_sigmask(SIG_BLOCK, &mask, &rs->old_mask);
    if (rc != 0)
        return flare__fail(FLARE_ESYS, rc, "pthread_sigmask");
    rs->masked = true;
    rs->sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (rs->sfd < 0)
        return flare__fail(FLARE_ESYS, errno, "signalfd");
    int expected = -1;
    if (atomic_compare_exchange_strong(&signal_stop_fd, &expected, app->stop_fd)) {
        struct sigaction sa = { .sa_handler = on_stop_signal, .sa_flags = SA_RESTART };
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGINT, &sa, &rs->old_int) != 0) {
            atomic_store(&signal_stop_fd, -1);
            return flare__fail(FLARE_ESYS, errno, "sigaction(SIGINT)");
        }
        if (sigaction(SIGTERM, &sa, &rs->old_term) != 0) {
            int e = errno;
            sigaction(SIGINT, &rs->old_int, NULL);
            atomic_store(&signal_stop_fd, -1);
            return flare__fail(FLARE_ESYS, e, "sigaction(SIGTERM)");
        }
        if (sigaction(SIGUSR2, &sa, &rs->old_usr2) != 0) {
            int e = errno;
            sigaction(SIGINT, &rs->old_int, NULL);
            sigaction(SIGTERM, &rs->old_term, NULL);
            atomic_store(&signal_stop_fd, -1);
            return flare__fail(FLARE_ESYS, e, "sigaction(SIGUSR2)");
        }
        /* reload: a SIGHUP reaching a thread that does not block it would
         * otherwise end the process */
        rs->hup_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        struct sigaction hup = { .sa_handler = on_hup_signal, .sa_flags = SA_RESTART };
        sigemptyset(&hup.sa_mask);
        if (rs->hup_fd < 0 || sigaction(SIGHUP, &hup, &rs->old_hup) != 0) {
            int e = errno;
            sigaction(SIGINT, &rs->old_int, NULL);
            sigaction(SIGTERM, &rs->old_term, NULL);
            sigaction(SIGUSR2, &rs->old_usr2, NULL);
            atomic_store(&signal_stop_fd, -1);
            return flare__fail(FLARE_ESYS, e, "sigaction(SIGHUP)");
        }
        atomic_store(&signal_hup_fd, rs->hup_fd);
        rs->handlers = true;
    }
    return 0;
}

static void signals_give_back(run_signals_t *rs)
{
    if (rs->sfd >= 0) {
        /* consume the signal so it does not fire when unblocked */
        struct signalfd_siginfo si;
        while (read(rs->sfd, &si, sizeof(si)) > 0) {
        }
        close(rs->sfd);
    }
    if (rs->handlers) {
        sigaction(SIGINT, &rs->old_int, NULL);
        sigaction(SIGTERM, &rs->old_term, NULL);
        sigaction(SIGUSR2, &rs->old_usr2, NULL);
        atomic_store(&signal_stop_fd, -1);
        /* reload */
        sigaction(SIGHUP, &rs->old_hup, NULL);
        atomic_store(&signal_hup_fd, -1);
    }
    if (rs->hup_fd >= 0)
        close(rs->hup_fd);
    if (rs->masked)
        pthread_sigmask(SIG_SETMASK, &rs->old_mask, NULL);
    if (rs->pipe)
        sigaction(SIGPIPE, &rs->old_pipe, NULL);
}

/* Waits for a stop: SIGINT/SIGTERM, flare_app_stop, or the hand-over of
 * an upgrade (SIGUSR2, then the new process's READY=1: *handover is set).
 * Meanwhile it runs the upgrade and systemd's watchdog (upgrade.c), and a
 * SIGHUP (from the signalfd, or through hup_fd when another thread took it)
 * runs the reload hooks here and goes on waiting. 0, or FLARE_ESYS when
 * poll itself fails (the app then stops too: it cannot be stopped later). */
static int wait_for_stop(flare_app_t *app, int sfd, int hup_fd, flare_upgrade_t *up, bool *handover)
{
    for (;;) {
        struct pollfd pfd[4] = { { app->stop_fd, POLLIN, 0 },
                                 { sfd, POLLIN, 0 },
                                 { flare__upgrade_fd(up), POLLIN, 0 },
                                 { hup_fd, POLLIN, 0 } };
        int pr = poll(pfd, 4, flare__upgrade_timeout(up));
        if (pr < 0 && errno != EINTR)
            return flare__fail(FLARE_ESYS, errno, "poll (waiting for a stop)");
        bool reload = false;
        if (pr > 0 && (pfd[0].revents & POLLIN)) {
            uint64_t v = 0;
            if (read(app->stop_fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
                v = 1;
            if (v >= STOP_FD_UPGRADE)
                flare__upgrade_start(up, app);
            if ((v & (STOP_FD_UPGRADE - 1)) != 0)
                return 0;
        }
        if (pr > 0 && (pfd[3].revents & POLLIN)) {
            uint64_t v;
            while (read(hup_fd, &v, sizeof(v)) > 0) {
            }
            reload = true;
        }
        if (pr > 0 && (pfd[1].revents & POLLIN)) {
            struct signalfd_siginfo si;
            ssize_t n = read(sfd, &si, sizeof(si));
            if (n == (ssize_t)sizeof(si) && si.ssi_signo == SIGUSR2)
                flare__upgrade_start(up, app);
            else if (n == (ssize_t)sizeof(si) && si.ssi_signo == SIGHUP)
                reload = true;
            else if (n == (ssize_t)sizeof(si))
                return 0; /* SIGINT, SIGTERM */
        }
        if (reload) {
            flare__sd_reloading();
            flare__app_reload_hooks_run(app);
            flare__sd_ready();
        }
        if (flare__upgrade_poll(up, app)) {
            *handover = true;
            return 0;
        }
    }
}

/* The loop backend of this run: the configured one, or with FLARE_IO_AUTO
 * the FLARE_IO variable, else io_uring when its probe passes. One log line
 * says which and why; an explicit io_uring that cannot work fails the run. */
static int choose_io(flare_app_t *app)
{
    flare_io_backend_t want = app->cfg.io;
    const char *from = "configured";
    const char *env = getenv("FLARE_IO");
    if (want == FLARE_IO_AUTO && env != NULL && *env != '\0') {
        from = "FLARE_IO";
        if (strcmp(env, "uring") == 0)
            want = FLARE_IO_URING;
        else if (strcmp(env, "epoll") == 0)
            want = FLARE_IO_EPOLL;
        else if (strcmp(env, "auto") != 0)
            return flare__fail(FLARE_EINVAL, 0, "FLARE_IO=%s: expected auto, uring or epoll", env);
    }
    if (want == FLARE_IO_EPOLL) {
        app->io_backend = FLARE__LOOP_EPOLL;
        flare_app_log(app, FLARE_LOG_INFO, "io: epoll (%s)", from);
        return 0;
    }
    char why[160];
    int e = flare__uring_probe(why, sizeof(why));
    if (e == 0) {
        app->io_backend = FLARE__LOOP_URING;
        flare_app_log(app, FLARE_LOG_INFO, "io: io_uring (%s: %s)",
                      want == FLARE_IO_URING ? from : "auto", why);
        return 0;
    }
    if (want == FLARE_IO_URING)
        return flare__fail(FLARE_ESYS, -e, "io_uring was asked for (%s) but cannot be used: %s",
                           from, why);
    app->io_backend = FLARE__LOOP_EPOLL;
    flare_app_log(app, FLARE_LOG_INFO, "io: epoll (auto: io_uring cannot be used: %s)", why);
    return 0;
}

int flare_app_run(flare_app_t *app, const char *listen_addr)
{
    if (app == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_app_run: app is NULL");
    bool expected = false;
    if (!atomic_compare_exchange_strong(&app->running, &expected, true))
        return flare__fail(FLARE_ESTATE, 0, "flare_app_run: the app is already running");
    unsigned started = 0, inited = 0;
    bool handover = false, served = false;
    run_signals_t rs = { .sfd = -1, .hup_fd = -1 };
    atomic_store(&app->port, 0);
    atomic_store_explicit(&app->stopping, false, memory_order_relaxed);
    flare__upgrade_capture(); /* the path and argv an upgrade starts again */

    int rc = flare__sd_init(); /* NOTIFY_SOCKET, WATCHDOG_*, LISTEN_* */
    if (rc != 0)
        goto out;
    rc = flare__chains_build(app, flare__res_auto);
    if (rc != 0)
        goto out;
    rc = choose_io(app);
    if (rc != 0)
        goto out;
    rc = flare__workers_alloc(app);
    if (rc != 0)
        goto out;
    /* signals before listeners: once the port accepts, a SIGTERM must stop
     * the app cleanly, and the module threads flare__worker_setup may start
     * inherit the blocked mask */
    rc = signals_take(app, &rs);
    if (rc != 0)
        goto out;
    /* listeners first: a bad address or a taken port fails before threads */
    rc = flare__listeners_begin(app, listen_addr);
    if (rc != 0)
        goto out;
    for (unsigned i = 0; i < app->nworkers; i++) {
        bool ok = false;
        rc = flare__worker_setup(&app->workers[i], &ok);
        inited += ok;
        if (rc != 0)
            goto out;
    }
    atomic_store(&app->port, atomic_load(&app->active[0]->port));
    rc = flare__jobs_start(app);
    if (rc != 0)
        goto out;
    for (unsigned i = 0; i < app->nworkers; i++) {
        int e = pthread_create(&app->workers[i].thread, NULL, flare__worker_main, &app->workers[i]);
        if (e != 0) {
            rc =
                flare__fail(FLARE_ETHREAD, e, "pthread_create (worker %u of %u)", i, app->nworkers);
            break;
        }
        started++;
    }
    flare_upgrade_t up;
    flare__upgrade_init(&up);
    if (rc == 0) {
        flare__app_gate_open(app);
        flare__sd_ready(); /* every worker runs: systemd (or the old process) may go on */
        served = true;
        rc = wait_for_stop(app, rs.sfd, rs.hup_fd, &up, &handover);
        if (!handover)
            flare__sd_notify("STOPPING=1"); /* not after a hand-over: the new one is main */
    }
    flare__upgrade_dispose(&up);
    /* /readyz answers 503 from here on, before any worker has seen the drain */
    atomic_store_explicit(&app->stopping, true, memory_order_relaxed);
    /* the stop nodes are embedded: asking a worker to drain cannot fail */
    for (unsigned i = 0; i < started; i++)
        flare__loop_post_node(&app->workers[i].loop, &app->workers[i].stop_node);
    for (unsigned i = 0; i < started; i++)
        pthread_join(app->workers[i].thread, NULL);
    flare__jobs_stop(app);
out:
    /* From here no other thread reaches a worker: what they posted before
     * is run by the loops' dispose. */
    flare__app_gate_close(app);
    signals_give_back(&rs);
    if (app->workers != NULL) {
        for (unsigned i = 0; i < app->nworkers; i++)
            flare__worker_dispose(&app->workers[i], i < inited);
    }
    flare__listeners_end(app, handover, served);
    /* a stop that arrived during this run does not carry to the next */
    uint64_t v;
    while (read(app->stop_fd, &v, sizeof(v)) > 0) {
    }
    atomic_store(&app->running, false);
    return rc;
}

void flare_app_stop(flare_app_t *app)
{
    if (app == NULL)
        return;
    uint64_t one = 1;
    ssize_t r = write(app->stop_fd, &one, sizeof(one));
    (void)r;
}
