/* The error log and the access log (flare/log.h, docs/logging.md).
 *
 * Threads: each worker formats its lines on its own thread into its own
 * rings (obs/ring.h: one for each log; single producer, single consumer,
 * no lock); other threads go through one shared ring under the state's
 * mutex. The writer thread, started with the first worker of a run and
 * stopped with the last, drains every ring to the files in one writev per
 * ring every 10 ms, or sooner when a producer finds its ring half full
 * (one eventfd write per drain at most: the writer is never woken per
 * line). The mutex is never taken on a worker's request path: only by the
 * writer, off-worker callers, the run's start and end, reopen and
 * flare_log_dropped.
 *
 * Reopen: flare_log_reopen (and flare_log_reopen_as, with new names)
 * opens the new descriptors on the caller's thread and leaves them for the
 * writer, which swaps them in between two drains: every line reaches the
 * old file or the new one, whole.
 *
 * Files are created 0640: the lines hold client addresses and request
 * targets. "-" is stderr for the error log, stdout for the access log (the
 * container convention: the access log is the program's output). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "flare/log.h"
#include "http/exchange.h"
#include "worker.h"
#include "module.h"
#include "obs/logfmt.h"
#include "obs/ring.h"
#include "core/random.h"

enum { LOG_ERR, LOG_ACC, NLOGS };

#define DEFAULT_RING   (1u << 20)
#define MIN_RING       4096u
#define MAX_RING       (1u << 30)
#define WRITER_TICK_MS 10

struct log_state;

/* One worker's part, for one run (the module's per-worker state). */
typedef struct log_worker {
    flare_ring_t ring[NLOGS]; /* ring[LOG_ACC] only with an access log */
    struct log_state *st;
    flare_worker_t *w;
    struct log_worker *next; /* st->live */
    flare_logclock_t clk;
    uint64_t id_base, id_seq; /* made request ids: base + seq, 16 hex digits */
    uint64_t id_last;         /* the last id turned into text, and its text */
    char id_text[16];
    int peer_fam; /* the last client address and its text */
    uint8_t peer_addr[16];
    size_t peer_len;
    char peer[INET6_ADDRSTRLEN];
    char msg[FLARE__LOG_LINE_MAX];
    char line[FLARE__LOG_LINE_MAX];
} log_worker_t;

typedef struct log_out {
    char *path;  /* NULL: the standard stream (std_fd) */
    int fd;      /* 1 or 2 for a standard stream (not ours to close) */
    int next_fd; /* opened by flare_log_reopen, swapped in by the writer; -1: none */
} log_out_t;

typedef struct log_state {
    flare_app_t *app;
    unsigned slot;
    _Atomic int level;
    int format, access_format;
    bool access_on;
    size_t ring_bytes;
    log_out_t out[NLOGS];
    pthread_mutex_t reopen_mu; /* one reopen at a time; out[].path changes under it and mu */
    pthread_mutex_t mu;        /* everything below, and out[].fd while no writer runs */
    flare_ring_t shared;       /* off-worker lines (error log) while the writer runs */
    flare_logclock_t shared_clk;
    char shared_msg[FLARE__LOG_LINE_MAX];
    char shared_line[FLARE__LOG_LINE_MAX];
    log_worker_t *live; /* workers between init and dispose */
    unsigned nlive;
    bool writer_on;
    pthread_t writer;
    int efd;
    _Atomic bool stop;
    _Atomic bool reopen;
    _Atomic uint64_t dropped_gone; /* from rings already freed (and the shared one) */
    uint64_t dropped_told;         /* writer: the total it last reported */
    uint64_t told_at;              /* writer: when (ms) */
} log_state_t;

static const flare_module_t log_module;

/* ---- outputs ---- */

/* Where "-" (path NULL) goes: the error log to stderr, the access log to
 * stdout. */
static int std_fd(int log)
{
    return log == LOG_ACC ? STDOUT_FILENO : STDERR_FILENO;
}

static int open_out(const char *path, int log, int *fd)
{
    if (path == NULL) {
        *fd = std_fd(log);
        return 0;
    }
    int f = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (f < 0)
        return flare__fail(FLARE_ESYS, errno, "log: cannot open %s: %s", path, strerror(errno));
    *fd = f;
    return 0;
}

static void close_fd(int fd)
{
    if (fd > STDERR_FILENO)
        close(fd);
}

/* Writes all of iov (the disk, or a pipe for stderr): a failure drops the
 * rest of this batch (nothing else can be done with it; counted nowhere but
 * never retried forever). */
static void write_all(int fd, struct iovec *iov, int n)
{
    int tries = 0;
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN && ++tries < 50) {
                struct pollfd p = { fd, POLLOUT, 0 };
                poll(&p, 1, 100);
                continue;
            }
            return;
        }
        size_t left = (size_t)w;
        while (n > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
}

static void write_line(int fd, const char *p, size_t len)
{
    struct iovec iov = { (void *)p, len };
    write_all(fd, &iov, 1);
}

/* Writes what ring r holds to fd and frees the space. */
static void drain_ring(flare_ring_t *r, int fd)
{
    struct iovec iov[2];
    int n;
    size_t len = flare__ring_peek(r, iov, &n);
    if (len == 0)
        return;
    write_all(fd, iov, n);
    flare__ring_consume(r, len);
}

/* ---- the writer thread ---- */

static uint64_t dropped_total(log_state_t *st) /* under st->mu */
{
    uint64_t n = atomic_load(&st->dropped_gone) + flare__ring_dropped(&st->shared);
    for (log_worker_t *lw = st->live; lw != NULL; lw = lw->next) {
        n += flare__ring_dropped(&lw->ring[LOG_ERR]);
        if (st->access_on)
            n += flare__ring_dropped(&lw->ring[LOG_ACC]);
    }
    return n;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A line written by the writer itself (under st->mu). */
static void writer_say(log_state_t *st, flare_log_level_t lvl, const char *msg)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    size_t n = flare__log_format(st->shared_line, sizeof(st->shared_line), st->format,
                                 &st->shared_clk, &ts, lvl, -1, FLARE_STR_NULL, msg, strlen(msg));
    write_line(st->out[LOG_ERR].fd, st->shared_line, n);
}

/* One pass: reopen if asked, drain every ring, report drops (at most once a
 * second). Under st->mu. */
static void writer_pass(log_state_t *st, bool final)
{
    if (atomic_exchange(&st->reopen, false)) {
        for (int i = 0; i < NLOGS; i++) {
            if (st->out[i].next_fd >= 0) {
                close_fd(st->out[i].fd);
                st->out[i].fd = st->out[i].next_fd;
                st->out[i].next_fd = -1;
            }
        }
    }
    drain_ring(&st->shared, st->out[LOG_ERR].fd);
    for (log_worker_t *lw = st->live; lw != NULL; lw = lw->next) {
        drain_ring(&lw->ring[LOG_ERR], st->out[LOG_ERR].fd);
        if (st->access_on)
            drain_ring(&lw->ring[LOG_ACC], st->out[LOG_ACC].fd);
        atomic_store_explicit(&lw->ring[LOG_ERR].kicked, false, memory_order_relaxed);
        atomic_store_explicit(&lw->ring[LOG_ACC].kicked, false, memory_order_relaxed);
    }
    atomic_store_explicit(&st->shared.kicked, false, memory_order_relaxed);
    uint64_t now = mono_ms();
    if (final || now - st->told_at >= 1000) {
        uint64_t d = dropped_total(st);
        if (d != st->dropped_told) {
            char msg[96];
            snprintf(msg, sizeof(msg), "%llu lines dropped (log rings full; %llu since start)",
                     (unsigned long long)(d - st->dropped_told), (unsigned long long)d);
            writer_say(st, FLARE_LOG_WARN, msg);
            st->dropped_told = d;
        }
        st->told_at = now;
    }
}

static void *writer_main(void *arg)
{
    log_state_t *st = arg;
    struct pollfd p = { st->efd, POLLIN, 0 };
    for (;;) {
        if (poll(&p, 1, WRITER_TICK_MS) > 0) {
            uint64_t v;
            ssize_t r = read(st->efd, &v, sizeof(v));
            (void)r;
        }
        bool stopping = atomic_load(&st->stop);
        pthread_mutex_lock(&st->mu);
        writer_pass(st, stopping);
        pthread_mutex_unlock(&st->mu);
        if (stopping)
            return NULL;
    }
}

static void kick(log_state_t *st)
{
    uint64_t one = 1;
    ssize_t r = write(st->efd, &one, sizeof(one));
    (void)r;
}

/* Appends a line to a ring; a ring past half full wakes the writer once. */
static void ring_used(log_state_t *st, flare_ring_t *r, size_t used)
{
    if (used > r->cap / 2 && !atomic_load_explicit(&r->kicked, memory_order_relaxed)) {
        atomic_store_explicit(&r->kicked, true, memory_order_relaxed);
        kick(st);
    }
}

static void ring_line(log_state_t *st, flare_ring_t *r, const char *p, size_t len)
{
    size_t used;
    if (flare__ring_put(r, p, len, &used))
        ring_used(st, r, used);
}

static int writer_start(log_state_t *st) /* under st->mu */
{
    atomic_store(&st->stop, false);
    /* the writer takes no signal: they are the run's (its signalfd) */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(&st->writer, NULL, writer_main, st);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0)
        return flare__fail(FLARE_ETHREAD, e, "log: cannot start the writer thread");
    st->writer_on = true;
    return 0;
}

/* ---- the module: per-worker rings, the writer with the run ---- */

static void on_exchange_done(void *ud, struct flare_req *ex, int status, uint64_t bytes);

/* The start of the exchange for the access line's duration: the head is in
 * the buffer and about to be parsed. */
static void on_exchange_start(void *ud, struct flare_req *ex)
{
    (void)ud;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ex->t_log_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The access log as an exchange observer (installed only when it is on). */
static const flare_ex_observer_t access_observer = {
    .start = on_exchange_start,
    .answered = on_exchange_done,
};

static int log_init_worker(flare_worker_t *w, void *state)
{
    log_state_t *st = state;
    log_worker_t *lw = calloc(1, sizeof(*lw));
    if (lw == NULL)
        return FLARE_ENOMEM;
    lw->st = st;
    lw->w = w;
    flare__logclock_init(&lw->clk);
    lw->id_base = flare__rand64();
    int rc = flare__ring_init(&lw->ring[LOG_ERR], st->ring_bytes);
    if (rc == 0 && st->access_on)
        rc = flare__ring_init(&lw->ring[LOG_ACC], st->ring_bytes);
    if (rc == 0 && st->access_on)
        rc = flare__ex_observe(w, &access_observer, lw);
    if (rc != 0)
        goto fail;
    pthread_mutex_lock(&st->mu);
    if (!st->writer_on && (rc = writer_start(st)) != 0) {
        pthread_mutex_unlock(&st->mu);
        goto fail;
    }
    lw->next = st->live;
    st->live = lw;
    st->nlive++;
    pthread_mutex_unlock(&st->mu);
    flare__worker_module_set(w, st->slot, lw);
    return 0;
fail:
    flare__ex_unobserve(w, &access_observer);
    flare__ring_dispose(&lw->ring[LOG_ERR]);
    flare__ring_dispose(&lw->ring[LOG_ACC]);
    free(lw);
    return rc;
}

/* On the worker's thread once its loop has ended (or the run's thread): its
 * lines are written now, the last worker stops the writer, which writes
 * what is left (the shared ring) first. */
static void log_dispose_worker(flare_worker_t *w, void *state)
{
    log_state_t *st = state;
    log_worker_t *lw = flare__worker_module_state(w, st->slot);
    if (lw == NULL)
        return;
    flare__ex_unobserve(w, &access_observer);
    flare__worker_module_set(w, st->slot, NULL);
    pthread_mutex_lock(&st->mu);
    writer_pass(st, false);
    for (log_worker_t **pp = &st->live; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == lw) {
            *pp = lw->next;
            break;
        }
    }
    atomic_fetch_add(&st->dropped_gone, flare__ring_dropped(&lw->ring[LOG_ERR]) +
                                            flare__ring_dropped(&lw->ring[LOG_ACC]));
    bool last = --st->nlive == 0 && st->writer_on;
    if (last)
        st->writer_on = false;
    pthread_mutex_unlock(&st->mu);
    if (last) {
        atomic_store(&st->stop, true);
        kick(st);
        pthread_join(st->writer, NULL);
    }
    flare__ring_dispose(&lw->ring[LOG_ERR]);
    flare__ring_dispose(&lw->ring[LOG_ACC]);
    free(lw);
}

static void state_free(log_state_t *st)
{
    for (int i = 0; i < NLOGS; i++) {
        close_fd(st->out[i].fd);
        if (st->out[i].next_fd >= 0)
            close_fd(st->out[i].next_fd);
        free(st->out[i].path);
    }
    flare__ring_dispose(&st->shared);
    if (st->efd >= 0)
        close(st->efd);
    pthread_mutex_destroy(&st->mu);
    pthread_mutex_destroy(&st->reopen_mu);
    free(st);
}

static void log_free_app(flare_app_t *app, void *state)
{
    (void)app;
    state_free(state);
}

static const flare_module_t log_module = {
    .name = "log",
    .init_worker = log_init_worker,
    .dispose_worker = log_dispose_worker,
    .free_app = log_free_app,
};

/* ---- setup ---- */

static int dup_path(const char *p, char **out)
{
    *out = NULL;
    if (p == NULL || strcmp(p, "-") == 0)
        return 0;
    if (p[0] == '\0')
        return flare__fail(FLARE_EINVAL, 0, "log: empty file name");
    *out = strdup(p);
    return *out != NULL ? 0 : FLARE_ENOMEM;
}

static void reopen_on_reload(void *ud)
{
    flare_app_t *app = ud;
    int rc = flare_log_reopen(app);
    if (rc != 0)
        flare_app_log(app, FLARE_LOG_ERROR, "log: reopen on SIGHUP: %s", flare_last_error());
}

int flare_log_setup(flare_app_t *app, const flare_log_config_t *cfg)
{
    flare_log_config_t zero = { 0 };
    if (app == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_log_setup: app is NULL");
    if (cfg == NULL)
        cfg = &zero;
    if (flare__app_running(app))
        return flare__fail(FLARE_ESTATE, 0, "flare_log_setup: the app is running");
    if ((unsigned)cfg->level > FLARE_LOG_DEBUG)
        return flare__fail(FLARE_EINVAL, 0, "flare_log_config_t.level: %d is not a level",
                           (int)cfg->level);
    if (cfg->format != FLARE_LOG_TEXT && cfg->format != FLARE_LOG_JSON)
        return flare__fail(FLARE_EINVAL, 0, "flare_log_config_t.format: %d (text 0 or json 1)",
                           cfg->format);
    if (cfg->access_format != FLARE_ACCESS_COMBINED && cfg->access_format != FLARE_ACCESS_JSON)
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_log_config_t.access_format: %d (combined 0 or json 1)",
                           cfg->access_format);
    size_t ring = cfg->ring_bytes != 0 ? cfg->ring_bytes : DEFAULT_RING;
    if (ring < MIN_RING || ring > MAX_RING)
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_log_config_t.ring_bytes: %zu is outside 4096 .. 1 GiB", ring);
    log_state_t *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "flare_log_setup: out of memory");
    pthread_mutex_init(&st->mu, NULL);
    pthread_mutex_init(&st->reopen_mu, NULL);
    st->app = app;
    st->efd = -1;
    atomic_store(&st->level, (int)cfg->level);
    st->format = cfg->format;
    st->access_format = cfg->access_format;
    st->access_on = cfg->access_path != NULL;
    st->ring_bytes = ring;
    flare__logclock_init(&st->shared_clk);
    for (int i = 0; i < NLOGS; i++)
        st->out[i] = (log_out_t){ NULL, -1, -1 };
    int rc = dup_path(cfg->path, &st->out[LOG_ERR].path);
    if (rc == 0 && st->access_on)
        rc = dup_path(cfg->access_path, &st->out[LOG_ACC].path);
    if (rc == 0)
        rc = open_out(st->out[LOG_ERR].path, LOG_ERR, &st->out[LOG_ERR].fd);
    if (rc == 0 && st->access_on)
        rc = open_out(st->out[LOG_ACC].path, LOG_ACC, &st->out[LOG_ACC].fd);
    if (rc == 0)
        rc = flare__ring_init(&st->shared, ring);
    if (rc == 0 && (st->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
        rc = flare__fail(FLARE_ESYS, errno, "log: eventfd");
    if (rc != 0) {
        state_free(st);
        return rc == FLARE_ENOMEM ? flare__fail(rc, 0, "flare_log_setup: out of memory") : rc;
    }
    /* a second setup replaces the first (the module keeps its slot) */
    log_state_t *old = flare__app_module_state(app, &log_module);
    if (old != NULL) {
        st->slot = old->slot;
        flare__app_module_replace(app, &log_module, st);
        state_free(old);
        return 0;
    }
    rc = flare__app_module(app, &log_module, st, &st->slot);
    if (rc != 0) {
        state_free(st);
        return flare__fail(rc, 0, "flare_log_setup: %s", flare_strerror(rc));
    }
    /* SIGHUP (logrotate's postrotate): the files are opened again, once per
     * app whatever the number of setups */
    rc = flare_app_on_reload(app, reopen_on_reload, app);
    if (rc != 0)
        return flare__fail(rc, 0, "flare_log_setup: reload hook: %s", flare_strerror(rc));
    return 0;
}

static log_state_t *state_of(const flare_app_t *app)
{
    return app != NULL ? flare__app_module_state(app, &log_module) : NULL;
}

/* ---- lines ---- */

/* Eight hex digits of x in one word: each nibble spread into its own byte,
 * then turned into '0'..'9' or 'a'..'f' all at once (the two-at-a-time
 * table loop cost ~50 instructions per id). */
static uint64_t hex8(uint32_t x)
{
    uint64_t t = x;
    t = (t | t << 16) & 0x0000ffff0000ffffu;
    t = (t | t << 8) & 0x00ff00ff00ff00ffu;
    t = (t | t << 4) & 0x0f0f0f0f0f0f0f0fu; /* the most significant nibble in the top byte */
    uint64_t letter = ((t + 0x0606060606060606u) >> 4) & 0x0101010101010101u;
    t += 0x3030303030303030u + letter * ('a' - '0' - 10);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    t = __builtin_bswap64(t); /* the top byte first in memory */
#endif
    return t;
}

/* 16 hex digits. */
static void fmt_id(char out[16], uint64_t v)
{
    uint64_t hi = hex8((uint32_t)(v >> 32)), lo = hex8((uint32_t)v);
    memcpy(out, &hi, 8);
    memcpy(out + 8, &lo, 8);
}

/* A line from a thread that is not a worker (or a worker outside a run). */
static void shared_vlog(log_state_t *st, flare_log_level_t lvl, const char *fmt, va_list ap)
{
    pthread_mutex_lock(&st->mu);
    int m = vsnprintf(st->shared_msg, sizeof(st->shared_msg), fmt, ap);
    size_t mlen = m < 0                                ? 0
                  : (size_t)m < sizeof(st->shared_msg) ? (size_t)m
                                                       : sizeof(st->shared_msg) - 1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    size_t n =
        flare__log_format(st->shared_line, sizeof(st->shared_line), st->format, &st->shared_clk,
                          &ts, lvl, -1, FLARE_STR_NULL, st->shared_msg, mlen);
    if (st->writer_on)
        ring_line(st, &st->shared, st->shared_line, n);
    else
        write_line(st->out[LOG_ERR].fd, st->shared_line, n);
    pthread_mutex_unlock(&st->mu);
}

static void worker_vlog(log_worker_t *lw, flare_log_level_t lvl, flare_str_t reqid, const char *fmt,
                        va_list ap)
{
    log_state_t *st = lw->st;
    int m = vsnprintf(lw->msg, sizeof(lw->msg), fmt, ap);
    size_t mlen = m < 0 ? 0 : (size_t)m < sizeof(lw->msg) ? (size_t)m : sizeof(lw->msg) - 1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    size_t n = flare__log_format(lw->line, sizeof(lw->line), st->format, &lw->clk, &ts, lvl,
                                 (int)lw->w->id, reqid, lw->msg, mlen);
    ring_line(st, &lw->ring[LOG_ERR], lw->line, n);
}

static inline bool level_on(const log_state_t *st, flare_log_level_t lvl)
{
    return (int)lvl <= atomic_load_explicit(&((log_state_t *)st)->level, memory_order_relaxed);
}

void flare_log(flare_worker_t *w, flare_log_level_t lvl, const char *fmt, ...)
{
    if (w == NULL || fmt == NULL)
        return;
    log_state_t *st = state_of(w->app);
    if (st == NULL || !level_on(st, lvl))
        return;
    va_list ap;
    va_start(ap, fmt);
    log_worker_t *lw = flare__worker_module_state(w, st->slot);
    if (lw != NULL)
        worker_vlog(lw, lvl, FLARE_STR_NULL, fmt, ap);
    else
        shared_vlog(st, lvl, fmt, ap);
    va_end(ap);
}

void flare_app_log(flare_app_t *app, flare_log_level_t lvl, const char *fmt, ...)
{
    log_state_t *st = state_of(app);
    if (st == NULL || fmt == NULL || !level_on(st, lvl))
        return;
    va_list ap;
    va_start(ap, fmt);
    shared_vlog(st, lvl, fmt, ap);
    va_end(ap);
}

/* The 16 hex digits of v + 1, in place. */
static void hex_inc(char t[16])
{
    for (int i = 15; i >= 0; i--) {
        if (t[i] == 'f') {
            t[i] = '0'; /* and carry */
            continue;
        }
        t[i] = t[i] == '9' ? 'a' : (char)(t[i] + 1);
        return;
    }
}

/* The request's id: the request-id middleware's, else one made for it (kept
 * in the exchange, so every line of the exchange shows the same). buf: 16. */
static flare_str_t req_id(log_worker_t *lw, struct flare_req *ex, char *buf, bool *made)
{
    flare_str_t id;
    *made = false;
    if (ex->attrs != NULL && flare_req_get_str(ex, FLARE_REQUEST_ID_ATTR, &id) == 0 && id.len > 0)
        return id;
    if (ex->log_id == 0)
        ex->log_id = lw->id_base + ++lw->id_seq;
    if (ex->log_id != lw->id_last) {
        /* ids are made in sequence: the next one is the last text plus one,
         * counted up in hex (a few instructions, not the 16 digits) */
        if (ex->log_id == lw->id_last + 1 && lw->id_last != 0)
            hex_inc(lw->id_text);
        else
            fmt_id(lw->id_text, ex->log_id);
        lw->id_last = ex->log_id;
    }
    memcpy(buf, lw->id_text, 16);
    *made = true;
    return (flare_str_t){ buf, 16 };
}

void flare_req_log(flare_req_t *req, flare_log_level_t lvl, const char *fmt, ...)
{
    if (req == NULL || fmt == NULL)
        return;
    flare_worker_t *w = req->worker;
    log_state_t *st = state_of(w->app);
    if (st == NULL || !level_on(st, lvl))
        return;
    log_worker_t *lw = flare__worker_module_state(w, st->slot);
    if (lw == NULL)
        return;
    char buf[16];
    bool made;
    flare_str_t id = req_id(lw, req, buf, &made);
    va_list ap;
    va_start(ap, fmt);
    worker_vlog(lw, lvl, id, fmt, ap);
    va_end(ap);
}

static size_t peer_format(int fam, const uint8_t *a, char *out);

/* The client's address as text, cached for the next line from the same
 * address (a keep-alive connection's requests): "a.b.c.d" by hand, IPv6
 * through inet_ntop. */
static flare_str_t peer_text(log_worker_t *lw, struct flare_req *ex)
{
    uint8_t a[16];
    int fam = ex->ops->peer(ex, a);
    if (fam != 0 && fam == lw->peer_fam && memcmp(a, lw->peer_addr, 16) == 0)
        return (flare_str_t){ lw->peer, lw->peer_len };
    lw->peer_fam = fam;
    memcpy(lw->peer_addr, a, 16);
    lw->peer_len = peer_format(fam, a, lw->peer);
    return (flare_str_t){ lw->peer, lw->peer_len };
}

static size_t peer_format(int fam, const uint8_t *a, char *out)
{
    if (fam == AF_INET) {
        char *p = out;
        for (int i = 0; i < 4; i++) {
            if (i > 0)
                *p++ = '.';
            p += flare__u64toa(p, a[i]);
        }
        return (size_t)(p - out);
    }
    if (fam == AF_INET6 && inet_ntop(AF_INET6, a, out, INET6_ADDRSTRLEN) != NULL)
        return strlen(out);
    if (fam == AF_UNIX) { /* a client of a unix socket listener (nginx writes the same) */
        memcpy(out, "unix:", 5);
        return 5;
    }
    out[0] = '-';
    return 1;
}

/* The User-Agent and Referer values (the first of each), in one pass over
 * the headers; a name is compared only when its length matches. */
static void ua_and_referer(const struct flare_req *ex, flare_str_t *ua, flare_str_t *ref)
{
    const flare_http_head_t *h = &ex->head;
    *ua = *ref = FLARE_STR_NULL;
    bool need_ua = true, need_ref = true;
    for (size_t i = 0; i < h->nheaders && (need_ua || need_ref); i++) {
        flare_str_t n = h->headers[i].name;
        if (n.len == 10 && need_ua && flare_str_ieq(n, FLARE_STR("User-Agent"))) {
            *ua = h->headers[i].value;
            need_ua = false;
        } else if (n.len == 7 && need_ref && flare_str_ieq(n, FLARE_STR("Referer"))) {
            *ref = h->headers[i].value;
            need_ref = false;
        }
    }
}

/* The access-log line of an exchange, on its worker, into its ring. */
static void on_exchange_done(void *ud, struct flare_req *ex, int status, uint64_t bytes)
{
    log_worker_t *lw = ud;
    log_state_t *st = lw->st;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    char idbuf[16];
    flare_access_rec_t r;
    r.peer = peer_text(lw, ex);
    if (flare__unlikely(ex->flags & EX_ERROR)) {
        /* a framing error (400, 414, 431...): the head may not have been
         * parsed, its views are not to be read */
        r.method = r.target = r.protocol = r.user_agent = r.referer = FLARE_STR_NULL;
    } else {
        r.method = ex->head.method;
        r.target = ex->head.target;
        r.protocol = ex->head.minor == 0 ? FLARE_STR("HTTP/1.0") : FLARE_STR("HTTP/1.1");
        ua_and_referer(ex, &r.user_agent, &r.referer);
    }
    r.request_id = req_id(lw, ex, idbuf, &r.request_id_plain);
    r.status = status;
    r.bytes =
        (ex->flags & EX_HEAD_ONLY) || status < 200 || status == 204 || status == 304 ? 0 : bytes;
    r.dur_us = ex->t_log_ns != 0 && now > ex->t_log_ns ? (now - ex->t_log_ns) / 1000 : 0;
    /* formatted in place in the ring (no copy), unless the line might not
     * fit before its end: then in lw->line, and put (which wraps or drops) */
    flare_ring_t *ring = &lw->ring[LOG_ACC];
    char *at = flare__ring_reserve(ring, sizeof(lw->line));
    if (flare__likely(at != NULL)) {
        size_t used;
        flare__ring_commit(
            ring, flare__access_format(at, sizeof(lw->line), st->access_format, &lw->clk, &ts, &r),
            &used);
        ring_used(st, ring, used);
        return;
    }
    size_t n =
        flare__access_format(lw->line, sizeof(lw->line), st->access_format, &lw->clk, &ts, &r);
    ring_line(st, ring, lw->line, n);
}

/* ---- control, from any thread ---- */

int flare_log_reopen(flare_app_t *app)
{
    return flare_log_reopen_as(app, NULL, NULL);
}

int flare_log_reopen_as(flare_app_t *app, const char *path, const char *access_path)
{
    log_state_t *st = state_of(app);
    if (st == NULL) {
        if (path == NULL && access_path == NULL)
            return 0;
        return flare__fail(FLARE_ESTATE, 0, "log: not set up (flare_log_setup)");
    }
    if (access_path != NULL && !st->access_on)
        return flare__fail(FLARE_ESTATE, 0,
                           "log: no access log to move (flare_log_setup turns it on)");
    const char *want[NLOGS] = { path, access_path };
    char *names[NLOGS] = { NULL, NULL };
    int fds[NLOGS] = { -1, -1 };
    int rc = 0;
    pthread_mutex_lock(&st->reopen_mu);
    for (int i = 0; i < NLOGS && rc == 0; i++) {
        if (want[i] != NULL) {
            rc = dup_path(want[i], &names[i]);
            if (rc == 0)
                rc = open_out(names[i], i, &fds[i]); /* "-" too: to the standard stream */
        } else if (st->out[i].path != NULL) {
            rc = open_out(st->out[i].path, i, &fds[i]); /* the same name again */
        }
    }
    if (rc != 0) {
        for (int i = 0; i < NLOGS; i++) {
            if (fds[i] >= 0)
                close_fd(fds[i]);
            free(names[i]);
        }
        pthread_mutex_unlock(&st->reopen_mu);
        return rc == FLARE_ENOMEM ? flare__fail(rc, 0, "log: out of memory") : rc;
    }
    pthread_mutex_lock(&st->mu);
    for (int i = 0; i < NLOGS; i++) {
        if (want[i] != NULL) {
            free(st->out[i].path);
            st->out[i].path = names[i];
        }
        if (fds[i] < 0)
            continue;
        if (st->out[i].next_fd >= 0)
            close_fd(st->out[i].next_fd); /* two reopens before a drain: the newer wins */
        st->out[i].next_fd = fds[i];
    }
    atomic_store(&st->reopen, true);
    bool writer = st->writer_on;
    if (!writer)
        writer_pass(st, false); /* no writer: swap now */
    pthread_mutex_unlock(&st->mu);
    pthread_mutex_unlock(&st->reopen_mu);
    if (writer)
        kick(st);
    return 0;
}

void flare_log_set_level(flare_app_t *app, flare_log_level_t lvl)
{
    log_state_t *st = state_of(app);
    if (st != NULL && (unsigned)lvl <= FLARE_LOG_DEBUG)
        atomic_store_explicit(&st->level, (int)lvl, memory_order_relaxed);
}

flare_log_level_t flare_log_get_level(const flare_app_t *app)
{
    log_state_t *st = state_of(app);
    return st != NULL ? (flare_log_level_t)atomic_load_explicit(&st->level, memory_order_relaxed)
                      : FLARE_LOG_ERROR;
}

uint64_t flare_log_dropped(const flare_app_t *app)
{
    log_state_t *st = state_of(app);
    if (st == NULL)
        return 0;
    pthread_mutex_lock(&st->mu);
    uint64_t n = dropped_total(st);
    pthread_mutex_unlock(&st->mu);
    return n;
}
