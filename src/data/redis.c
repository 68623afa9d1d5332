/* Redis on the worker loops (include/flare/redis.h): hiredis's
 * asynchronous context, bound to a worker's loop by the adapter below
 * (hiredis asks for read/write interest through its ev hooks; the socket
 * is a flare_watch), per-worker connections, command timeouts, reconnects
 * with backoff and pub/sub.
 *
 * Invariants:
 * - A connection record (conn_t) lives as long as its worker state; its
 *   hiredis context (ac) comes and goes. ev.cleanup, which hiredis calls
 *   whenever it frees a context (error, EOF, redisAsyncFree), is the one
 *   place that notices the loss: it frees the watcher and arms the retry.
 * - Commands in flight sit on the connection's FIFO in sending order;
 *   Redis and hiredis answer in that order, so the head has the earliest
 *   deadline and one timer per connection covers them all (no timer per
 *   command: it is re-armed lazily when it fires).
 * - A callback never runs inside the call that issued its command: an
 *   immediate failure goes on the worker's fail queue, emptied by a
 *   0-ms timer. */
#include <arpa/inet.h>
#include <limits.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <hiredis/async.h>

#include "worker.h"
#include "data/redis_int.h"
#include "module.h"

#define DEFAULT_PORT 6379
#define MAX_ARGS     4096
#define FREE_CMDS    1024 /* command records kept for reuse, per worker */

typedef struct wstats {
    _Atomic uint64_t conns_open, in_flight, commands, errors, timeouts, rejected, reconnects,
        messages;
    char pad[64]; /* one writer per worker: keep the workers' counters apart */
} wstats_t;

typedef struct sub {
    struct sub *next;
    unsigned worker;
    bool pattern;
    flare_redis_msg_fn cb;
    void *ud;
    size_t len;
    char chan[];
} sub_t;

typedef struct ws ws_t;
typedef struct conn conn_t;

typedef struct cmd {
    struct cmd *next;
    flare_redis_fn cb;
    void *ud;
    uint64_t deadline; /* loop ms */
    int err;           /* on the fail queue */
} cmd_t;

enum { C_IDLE, C_RESOLVING, C_CONNECTING, C_UP, C_DYING };

typedef struct resolve {
    conn_t *c; /* NULL once the worker state is gone */
    char *host;
    char addr[INET6_ADDRSTRLEN];
    unsigned pick; /* which of the addresses: attempts failed in a row, so each retry tries
                      the next one (localhost may give ::1 first, the server 127.0.0.1 only) */
    int rc;
} resolve_t;

struct conn {
    ws_t *ws;
    redisAsyncContext *ac;
    flare_watch_t *watch;
    flare_timer_t *timer; /* connect deadline, head command's deadline */
    flare_timer_t *retry; /* reconnect backoff */
    resolve_t *job;
    int state;
    bool is_sub, ever_up, was_up;
    bool sub_up;       /* pub/sub: subscribed (confirmed) on this connection */
    int drop_err;      /* what the commands in flight get when ac goes */
    size_t sub_bytes;  /* pub/sub: bytes of the messages handed out by the current read */
    unsigned failures; /* attempts failed in a row */
    uint64_t backoff;
    uint64_t connect_deadline;
    cmd_t *head, **tail;
    unsigned inflight;
};

struct ws {
    flare_redis_t *r;
    flare_worker_t *w;
    wstats_t *st;
    flare__timer_t start; /* embedded: armed before the worker's thread runs */
    conn_t *conns;
    unsigned nconns, rr;
    conn_t *sub; /* NULL: no subscription on this worker */
    cmd_t *failq, **failtail;
    flare_timer_t *failtimer;
    cmd_t *free_cmds;
    unsigned nfree;
    bool started, disposing, in_failq;
};

struct flare_redis {
    flare_app_t *app;
    flare_redis_config_t cfg;
    char *host; /* without brackets */
    int port;
    unsigned db;
    char *user, *pass; /* NULL: none */
    bool numeric;
    sub_t *subs;
    flare__redis_sub_state_fn sub_state; /* flare__redis_sub_state */
    void *sub_state_ud;
    unsigned nworkers;
    ws_t **ws;
    wstats_t *stats;
    struct flare_redis *next;
};

typedef struct redis_app {
    flare_redis_t *list, **tail;
    unsigned slot;
} redis_app_t;

static void conn_start(conn_t *c);
static void conn_timer(void *ud);

/* single writer: relaxed load + store, no locked instruction */
static inline void stat_add(_Atomic uint64_t *v, int64_t d)
{
    atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + (uint64_t)d,
                          memory_order_relaxed);
}

static void stat_done(wstats_t *st, int err, bool error_reply)
{
    stat_add(&st->commands, 1);
    if (err != 0 || error_reply)
        stat_add(&st->errors, 1);
    if (err == FLARE_ETIMEDOUT)
        stat_add(&st->timeouts, 1);
    else if (err == FLARE_EUNAVAIL)
        stat_add(&st->rejected, 1);
}

static uint64_t now_ms(ws_t *ws)
{
    return ws->w->loop.now;
}

/* ---- command records ---- */

static cmd_t *cmd_get(ws_t *ws)
{
    cmd_t *c = ws->free_cmds;
    if (c != NULL) {
        ws->free_cmds = c->next;
        ws->nfree--;
        return c;
    }
    return malloc(sizeof(cmd_t));
}

static void cmd_put(ws_t *ws, cmd_t *c)
{
    if (ws->nfree >= FREE_CMDS || ws->disposing) {
        free(c);
        return;
    }
    c->next = ws->free_cmds;
    ws->free_cmds = c;
    ws->nfree++;
}

/* ---- the fail queue: immediate failures, reported from the loop ---- */

static void failq_run(void *ud)
{
    ws_t *ws = ud;
    cmd_t *q = ws->failq;
    ws->failq = NULL;
    ws->failtail = &ws->failq;
    ws->in_failq = true;
    while (q != NULL) {
        cmd_t *c = q;
        q = c->next;
        stat_done(ws->st, c->err, false);
        c->cb(c->err, NULL, c->ud);
        cmd_put(ws, c);
    }
    ws->in_failq = false;
}

static void fail_later(ws_t *ws, cmd_t *c, int err)
{
    c->err = err;
    c->next = NULL;
    *ws->failtail = c;
    ws->failtail = &c->next;
    /* a command issued again from a failure's callback waits for the next
     * loop iteration (1 ms): a 0-ms timer re-armed from its own callback
     * would run again before the loop polls, for ever while Redis is down */
    if (!flare_timer_active(ws->failtimer))
        flare_timer_start(ws->failtimer, ws->in_failq ? 1 : 0);
}

/* ---- the adapter: hiredis's ev hooks on a flare_watch ---- */

static void ev_set(conn_t *c, unsigned add, unsigned del)
{
    if (c->watch == NULL)
        return;
    unsigned e = (flare_watch_events(c->watch) | add) & ~del;
    flare_watch_set(c->watch, e);
}

static void ev_add_read(void *p)
{
    ev_set(p, FLARE_WATCH_READ, 0);
}

static void ev_del_read(void *p)
{
    ev_set(p, 0, FLARE_WATCH_READ);
}

static void ev_add_write(void *p)
{
    ev_set(p, FLARE_WATCH_WRITE, 0);
}

static void ev_del_write(void *p)
{
    ev_set(p, 0, FLARE_WATCH_WRITE);
}

/* A pub/sub connection lost, or an attempt at one failed. */
static void sub_down(conn_t *c)
{
    ws_t *ws = c->ws;
    c->sub_up = false;
    if (c->is_sub && ws->r->sub_state != NULL && !ws->disposing)
        ws->r->sub_state(false, ws->r->sub_state_ud);
}

/* The context is being freed (by us or by hiredis after an error or EOF):
 * every callback still owed has been called with a NULL reply already. */
static void ev_cleanup(void *p)
{
    conn_t *c = p;
    ws_t *ws = c->ws;
    flare_watch_free(c->watch);
    c->watch = NULL;
    c->ac = NULL;
    if (c->was_up)
        stat_add(&ws->st->conns_open, -1);
    c->was_up = false;
    c->state = C_IDLE;
    if (ws->disposing)
        return;
    if (c->is_sub)
        sub_down(c);
    uint64_t delay;
    if (c->drop_err == FLARE_ETIMEDOUT && c->failures == 0) {
        delay = 0; /* the server answers, slowly: reconnect at once */
    } else {
        c->failures++;
        delay = c->backoff;
        uint64_t max = ws->r->cfg.reconnect_max_ms;
        c->backoff = c->backoff * 2 > max ? max : c->backoff * 2;
    }
    c->drop_err = 0;
    flare_timer_start(c->retry, delay);
}

static void on_io(flare_watch_t *wt, unsigned events, void *ud)
{
    (void)wt;
    conn_t *c = ud;
    /* hiredis reads 16 KiB per call. A subscriber connection whose messages
     * came close to that likely has more waiting: it reads again (up to
     * 256 KiB in one loop turn), so that a backlog of messages is fanned out
     * together and leaves in one write per subscriber, not in one loop turn
     * (and one write per subscriber) per 16 KiB. A guess that was wrong
     * costs one read answered EAGAIN. */
    for (int i = 0; i < 16 && c->ac != NULL &&
                    (events & (FLARE_WATCH_READ | FLARE_WATCH_ERROR | FLARE_WATCH_HUP));
         i++) {
        c->sub_bytes = 0;
        redisAsyncHandleRead(c->ac); /* may free the context: c->ac is NULL then */
        if (!c->is_sub || c->sub_bytes < 12 * 1024)
            break;
    }
    if (c->ac != NULL && (events & FLARE_WATCH_WRITE))
        redisAsyncHandleWrite(c->ac);
}

static int attach(conn_t *c, redisAsyncContext *ac)
{
    int rc = flare_watch_new(c->ws->w, ac->c.fd, FLARE_WATCH_WRITE, on_io, c, &c->watch);
    if (rc != 0)
        return rc;
    ac->ev.data = c;
    ac->ev.addRead = ev_add_read;
    ac->ev.delRead = ev_del_read;
    ac->ev.addWrite = ev_add_write;
    ac->ev.delWrite = ev_del_write;
    ac->ev.cleanup = ev_cleanup;
    ac->data = c;
    return 0;
}

/* ---- connecting ---- */

static void on_setup_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    (void)priv;
    redisReply *r = reply;
    if (r != NULL && r->type == REDIS_REPLY_ERROR) {
        /* AUTH or SELECT refused: a configuration error; the retries are
         * spaced by the backoff and every command fails meanwhile */
        conn_t *c = ac->data;
        c->state = C_DYING;
        redisAsyncDisconnect(ac);
    }
}

static void on_message(redisAsyncContext *ac, void *reply, void *priv)
{
    sub_t *s = priv;
    redisReply *r = reply;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 3)
        return;
    conn_t *c = ac->data;
    redisReply **e = r->element;
    flare_str_t pat = FLARE_STR_NULL, chan, msg;
    if (e[0]->type != REDIS_REPLY_STRING)
        return;
    if (strcmp(e[0]->str, "message") == 0) {
        chan = (flare_str_t){ e[1]->str, (size_t)e[1]->len };
        msg = (flare_str_t){ e[2]->str, (size_t)e[2]->len };
    } else if (strcmp(e[0]->str, "pmessage") == 0 && r->elements >= 4) {
        pat = (flare_str_t){ e[1]->str, (size_t)e[1]->len };
        chan = (flare_str_t){ e[2]->str, (size_t)e[2]->len };
        msg = (flare_str_t){ e[3]->str, (size_t)e[3]->len };
    } else {
        /* the (p)subscribe confirmation: the first one says the connection
         * serves again */
        if (!c->sub_up &&
            (strcmp(e[0]->str, "psubscribe") == 0 || strcmp(e[0]->str, "subscribe") == 0)) {
            c->sub_up = true;
            if (c->ws->r->sub_state != NULL)
                c->ws->r->sub_state(true, c->ws->r->sub_state_ud);
        }
        return;
    }
    stat_add(&c->ws->st->messages, 1);
    c->sub_bytes += pat.len + chan.len + msg.len + 40; /* 40: about its framing */
    s->cb(pat, chan, msg, s->ud);
}

static void subscribe_all(conn_t *c)
{
    ws_t *ws = c->ws;
    unsigned id = flare_worker_id(ws->w);
    for (sub_t *s = ws->r->subs; s != NULL; s = s->next) {
        if (s->worker != id)
            continue;
        const char *argv[2] = { s->pattern ? "PSUBSCRIBE" : "SUBSCRIBE", s->chan };
        size_t lens[2] = { strlen(argv[0]), s->len };
        redisAsyncCommandArgv(c->ac, on_message, s, 2, argv, lens);
    }
}

/* Arms c's timer for its earliest deadline: the connect's while
 * connecting, the head command's; stops it when there is none. */
static void conn_arm(conn_t *c)
{
    uint64_t now = now_ms(c->ws), next = UINT64_MAX;
    if (c->state == C_CONNECTING)
        next = c->connect_deadline;
    if (c->head != NULL && c->head->deadline < next)
        next = c->head->deadline;
    if (next == UINT64_MAX)
        flare_timer_stop(c->timer);
    else
        flare_timer_start(c->timer, next > now ? next - now : 0);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    conn_t *c = ac->data;
    if (status != REDIS_OK)
        return; /* hiredis frees the context next: ev_cleanup arms the retry */
    ws_t *ws = c->ws;
    c->state = C_UP;
    c->was_up = true;
    stat_add(&ws->st->conns_open, 1);
    if (c->ever_up)
        stat_add(&ws->st->reconnects, 1);
    c->ever_up = true;
    c->failures = 0;
    c->backoff = ws->r->cfg.reconnect_min_ms;
    /* the connect deadline no longer applies: left armed, it held back the
     * timeout of the commands issued until it passed (a 300 ms command
     * timeout fired at the 2 s connect deadline) */
    conn_arm(c);
}

/* Setup commands go first, queued before the socket is even connected:
 * hiredis writes them once it is. */
static void setup_commands(conn_t *c)
{
    flare_redis_t *r = c->ws->r;
    if (r->pass != NULL) {
        const char *argv[3] = { "AUTH", r->user != NULL ? r->user : r->pass, r->pass };
        redisAsyncCommandArgv(c->ac, on_setup_reply, NULL, r->user != NULL ? 3 : 2, argv, NULL);
    }
    if (r->db != 0 && !c->is_sub) {
        char db[16];
        int n = 0;
        unsigned v = r->db;
        char tmp[16];
        do
            tmp[n++] = (char)('0' + v % 10);
        while ((v /= 10) != 0);
        for (int i = 0; i < n; i++)
            db[i] = tmp[n - 1 - i];
        db[n] = '\0';
        const char *argv[2] = { "SELECT", db };
        redisAsyncCommandArgv(c->ac, on_setup_reply, NULL, 2, argv, NULL);
    }
    if (c->is_sub)
        subscribe_all(c);
}

static void conn_failed_now(conn_t *c)
{
    /* no context was made: the same accounting as losing one */
    sub_down(c);
    c->state = C_IDLE;
    ws_t *ws = c->ws;
    c->failures++;
    uint64_t delay = c->backoff, max = ws->r->cfg.reconnect_max_ms;
    c->backoff = c->backoff * 2 > max ? max : c->backoff * 2;
    flare_timer_start(c->retry, delay);
}

static void conn_connect(conn_t *c, const char *addr)
{
    ws_t *ws = c->ws;
    redisAsyncContext *ac = redisAsyncConnect(addr, ws->r->port);
    if (ac == NULL) {
        conn_failed_now(c);
        return;
    }
    if (ac->err != 0 || attach(c, ac) != 0) {
        redisAsyncFree(ac); /* no hooks attached: nothing calls back */
        conn_failed_now(c);
        return;
    }
    c->ac = ac;
    c->state = C_CONNECTING;
    redisAsyncSetConnectCallback(ac, on_connect);
    c->connect_deadline = now_ms(ws) + ws->r->cfg.connect_timeout_ms;
    if (!flare_timer_active(c->timer))
        flare_timer_start(c->timer, ws->r->cfg.connect_timeout_ms);
    setup_commands(c);
}

static void resolve_work(void *ud)
{
    resolve_t *j = ud;
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
    j->rc = getaddrinfo(j->host, NULL, &hints, &res);
    if (j->rc != 0 || res == NULL) {
        j->rc = -1;
        return;
    }
    unsigned n = 0;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next)
        n++;
    struct addrinfo *ai = res;
    for (unsigned i = j->pick % n; i > 0; i--)
        ai = ai->ai_next;
    const void *a = ai->ai_family == AF_INET6
                        ? (const void *)&((struct sockaddr_in6 *)(void *)ai->ai_addr)->sin6_addr
                        : (const void *)&((struct sockaddr_in *)(void *)ai->ai_addr)->sin_addr;
    if (inet_ntop(ai->ai_family, a, j->addr, sizeof(j->addr)) == NULL)
        j->rc = -1;
    freeaddrinfo(res);
}

static void resolve_done(void *ud)
{
    resolve_t *j = ud;
    conn_t *c = j->c;
    if (c != NULL) {
        c->job = NULL;
        if (j->rc == 0)
            conn_connect(c, j->addr);
        else
            conn_failed_now(c);
    }
    free(j->host);
    free(j);
}

static void conn_start(conn_t *c)
{
    ws_t *ws = c->ws;
    if (ws->disposing || c->state != C_IDLE)
        return;
    if (ws->r->numeric) {
        conn_connect(c, ws->r->host);
        return;
    }
    resolve_t *j = calloc(1, sizeof(*j));
    if (j != NULL) {
        j->host = strdup(ws->r->host);
        j->pick = c->failures;
    }
    if (j == NULL || j->host == NULL ||
        flare_worker_job(ws->w, resolve_work, resolve_done, j) != 0) {
        if (j != NULL)
            free(j->host);
        free(j);
        conn_failed_now(c);
        return;
    }
    j->c = c;
    c->job = j;
    c->state = C_RESOLVING;
}

static void conn_retry(void *ud)
{
    conn_start(ud);
}

/* Drops the connection now (not from inside a hiredis callback): the
 * commands in flight get err. */
static void conn_drop(conn_t *c, int err)
{
    c->drop_err = err;
    c->state = C_DYING;
    redisAsyncFree(c->ac); /* calls them back, then ev_cleanup */
}

static void conn_timer(void *ud)
{
    conn_t *c = ud;
    uint64_t now = now_ms(c->ws), next = UINT64_MAX;
    if (c->state == C_CONNECTING) {
        if (now >= c->connect_deadline) {
            conn_drop(c, FLARE_EUNAVAIL);
            return;
        }
        next = c->connect_deadline;
    }
    if (c->head != NULL && c->ac != NULL) {
        if (now >= c->head->deadline) {
            conn_drop(c, FLARE_ETIMEDOUT);
            return;
        }
        if (c->head->deadline < next)
            next = c->head->deadline;
    }
    if (next != UINT64_MAX)
        flare_timer_start(c->timer, next - now);
}

/* ---- commands ---- */

static void on_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    conn_t *c = ac->data;
    ws_t *ws = c->ws;
    cmd_t *cmd = priv;
    /* replies come in sending order: cmd is the head */
    c->head = cmd->next;
    if (c->head == NULL)
        c->tail = &c->head;
    c->inflight--;
    stat_add(&ws->st->in_flight, -1);
    int err = 0;
    flare_redis_reply_t root, *heap = NULL;
    if (reply == NULL) {
        /* the context is going: no command may be added to it */
        c->state = C_DYING;
        err = c->drop_err != 0 ? c->drop_err : FLARE_EUNAVAIL;
    } else if (flare__redis_reply_build(reply, &root, &heap) != 0) {
        err = FLARE_EUNAVAIL; /* out of memory converting it: the reply is lost */
    }
    stat_done(ws->st, err, err == 0 && root.type == FLARE_REDIS_ERROR);
    cmd->cb(err, err == 0 ? &root : NULL, cmd->ud);
    free(heap);
    cmd_put(ws, cmd);
}

static conn_t *pick(ws_t *ws)
{
    unsigned max = ws->r->cfg.max_in_flight;
    for (unsigned k = 0; k < ws->nconns; k++) {
        conn_t *c = &ws->conns[(ws->rr + k) % ws->nconns];
        /* a first attempt (or one after a timeout) takes commands: hiredis
         * buffers them until connected; after failures, fail fast */
        bool ok = c->state == C_UP || (c->state == C_CONNECTING && c->failures == 0);
        if (ok && c->inflight < max) {
            ws->rr = (ws->rr + k + 1) % ws->nconns;
            return c;
        }
    }
    return NULL;
}

static bool refused_command(const char *name, size_t len)
{
    static const char *const names[] = { "subscribe", "psubscribe", "ssubscribe", "monitor" };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (len == strlen(names[i]) && strncasecmp(name, names[i], len) == 0)
            return true;
    return false;
}

static void ws_start(void *ud);

static ws_t *ws_for(flare_redis_t *r, flare_worker_t *w)
{
    unsigned id = flare_worker_id(w);
    ws_t *ws = id < r->nworkers ? r->ws[id] : NULL;
    if (ws == NULL || ws->disposing)
        return NULL;
    if (!ws->started) {
        /* a request served before the start timer fired */
        flare__timer_stop(&w->loop, &ws->start);
        ws_start(ws);
    }
    return ws->started ? ws : NULL;
}

/* The command in RESP (*argc, then $len and the bytes of each argument),
 * into buf when it fits in cap bytes, else into a malloc'd buffer: returned
 * (NULL: out of memory), its length in *len. hiredis's own formatting
 * (redisFormatSdsCommandArgv: sdscatfmt per argument, reallocations) took
 * 4,200 of the 11,300 instructions of a rate-limit decision's EVALSHA with
 * 6 arguments; this takes about 300. */
static char *format_cmd(int argc, const char *const *argv, const size_t *argvlen, char *buf,
                        size_t cap, size_t *len)
{
    size_t need = 1 + 20 + 2;
    for (int i = 0; i < argc; i++) {
        size_t n = argvlen != NULL ? argvlen[i] : strlen(argv[i]);
        need += 1 + 20 + 2 + n + 2;
    }
    char *out = need <= cap ? buf : malloc(need);
    if (out == NULL)
        return NULL;
    char *p = out;
    *p++ = '*';
    p += flare__u64toa(p, (uint64_t)argc);
    *p++ = '\r';
    *p++ = '\n';
    for (int i = 0; i < argc; i++) {
        size_t n = argvlen != NULL ? argvlen[i] : strlen(argv[i]);
        *p++ = '$';
        p += flare__u64toa(p, n);
        *p++ = '\r';
        *p++ = '\n';
        if (n > 0)
            memcpy(p, argv[i], n);
        p += n;
        *p++ = '\r';
        *p++ = '\n';
    }
    *len = (size_t)(p - out);
    return out;
}

int flare_redis_cmd(flare_redis_t *r, flare_worker_t *w, int argc, const char *const *argv,
                    const size_t *argvlen, flare_redis_fn cb, void *ud)
{
    if (r == NULL || w == NULL || cb == NULL || argv == NULL || argc < 1 || argc > MAX_ARGS)
        return FLARE_EINVAL;
    for (int i = 0; i < argc; i++)
        if (argv[i] == NULL && (argvlen == NULL || argvlen[i] > 0))
            return FLARE_EINVAL;
    if (refused_command(argv[0], argvlen != NULL ? argvlen[0] : strlen(argv[0])))
        return FLARE_EINVAL;
    /* w's state (its connections, command records, start) is w's thread's
     * alone: a call from another thread would use it unsynchronised */
    if (w != flare__worker_self)
        return FLARE_EINVAL;
    ws_t *ws = ws_for(r, w);
    if (ws == NULL)
        return FLARE_ESTATE;
    cmd_t *cmd = cmd_get(ws);
    if (cmd == NULL)
        return FLARE_ENOMEM;
    cmd->cb = cb;
    cmd->ud = ud;
    conn_t *c = pick(ws);
    if (c == NULL) {
        fail_later(ws, cmd, FLARE_EUNAVAIL);
        return 0;
    }
    /* hiredis copies the formatted bytes into its output buffer */
    char stack[512];
    size_t len;
    char *fmt = format_cmd(argc, argv, argvlen, stack, sizeof(stack), &len);
    if (fmt == NULL) {
        cmd_put(ws, cmd);
        return FLARE_ENOMEM;
    }
    int ok = redisAsyncFormattedCommand(c->ac, on_reply, cmd, fmt, len);
    if (fmt != stack)
        free(fmt);
    if (ok != REDIS_OK) {
        fail_later(ws, cmd, FLARE_EUNAVAIL);
        return 0;
    }
    cmd->next = NULL;
    cmd->deadline = now_ms(ws) + r->cfg.command_timeout_ms;
    *c->tail = cmd;
    c->tail = &cmd->next;
    c->inflight++;
    stat_add(&ws->st->in_flight, 1);
    if (!flare_timer_active(c->timer))
        flare_timer_start(c->timer, r->cfg.command_timeout_ms);
    else if (c->state == C_CONNECTING && c->head == cmd)
        conn_arm(c); /* armed for the connect: the sooner of the two */
    return 0;
}

int flare_redis_cmd_str(flare_redis_t *r, flare_worker_t *w, const flare_str_t *args, size_t nargs,
                        flare_redis_fn cb, void *ud)
{
    if (args == NULL || nargs < 1 || nargs > MAX_ARGS)
        return FLARE_EINVAL;
    const char *sv[16];
    size_t sl[16];
    const char **v = sv;
    size_t *l = sl;
    if (nargs > 16) {
        v = malloc(nargs * sizeof(*v));
        l = malloc(nargs * sizeof(*l));
        if (v == NULL || l == NULL) {
            free(v);
            free(l);
            return FLARE_ENOMEM;
        }
    }
    for (size_t i = 0; i < nargs; i++) {
        v[i] = args[i].ptr != NULL ? args[i].ptr : "";
        l[i] = args[i].len;
    }
    int rc = flare_redis_cmd(r, w, (int)nargs, v, l, cb, ud);
    if (v != sv) {
        free(v);
        free(l);
    }
    return rc;
}

/* ---- per-worker state: the module hooks ---- */

static void conn_init(ws_t *ws, conn_t *c, bool is_sub)
{
    c->ws = ws;
    c->is_sub = is_sub;
    c->tail = &c->head;
    c->backoff = ws->r->cfg.reconnect_min_ms;
}

static void ws_start(void *ud)
{
    ws_t *ws = ud;
    if (ws->started || ws->failtimer != NULL)
        return; /* started, or failed to (out of memory) */
    int rc = flare_timer_new(ws->w, failq_run, ws, &ws->failtimer);
    for (unsigned i = 0; rc == 0 && i < ws->nconns + (ws->sub != NULL); i++) {
        conn_t *c = i < ws->nconns ? &ws->conns[i] : ws->sub;
        rc = flare_timer_new(ws->w, conn_timer, c, &c->timer);
        if (rc == 0)
            rc = flare_timer_new(ws->w, conn_retry, c, &c->retry);
    }
    if (rc != 0)
        return; /* out of memory at start: this worker has no Redis (FLARE_ESTATE) */
    ws->started = true;
    for (unsigned i = 0; i < ws->nconns; i++)
        conn_start(&ws->conns[i]);
    if (ws->sub != NULL)
        conn_start(ws->sub);
}

static void ws_free(ws_t *ws)
{
    while (ws->free_cmds != NULL) {
        cmd_t *c = ws->free_cmds;
        ws->free_cmds = c->next;
        free(c);
    }
    free(ws->conns);
    free(ws->sub);
    free(ws);
}

static int ws_new(flare_redis_t *r, flare_worker_t *w, ws_t **out)
{
    ws_t *ws = calloc(1, sizeof(*ws));
    if (ws == NULL)
        return FLARE_ENOMEM;
    unsigned id = flare_worker_id(w);
    ws->r = r;
    ws->w = w;
    ws->st = &r->stats[id];
    ws->failtail = &ws->failq;
    ws->nconns = r->cfg.conns;
    ws->conns = calloc(ws->nconns, sizeof(conn_t));
    bool subs = false;
    for (sub_t *s = r->subs; s != NULL; s = s->next)
        subs |= s->worker == id;
    if (subs)
        ws->sub = calloc(1, sizeof(conn_t));
    if (ws->conns == NULL || (subs && ws->sub == NULL)) {
        ws_free(ws);
        return FLARE_ENOMEM;
    }
    for (unsigned i = 0; i < ws->nconns; i++)
        conn_init(ws, &ws->conns[i], false);
    if (ws->sub != NULL)
        conn_init(ws, ws->sub, true);
    /* handles cannot be made before the worker's thread runs: a loop timer
     * (embedded, cancelled if the worker never runs) starts the rest */
    flare__timer_init(&ws->start, ws_start, ws);
    flare__timer_start(&w->loop, &ws->start, 0);
    *out = ws;
    return 0;
}

/* On the worker's thread (or the run's, if it never ran): every command
 * still owed completes with FLARE_EUNAVAIL, then everything is freed. */
static void ws_dispose(ws_t *ws)
{
    flare__timer_stop(&ws->w->loop, &ws->start);
    ws->disposing = true; /* from here on commands are refused (FLARE_ESTATE) */
    for (unsigned i = 0; i < ws->nconns + (ws->sub != NULL); i++) {
        conn_t *c = i < ws->nconns ? &ws->conns[i] : ws->sub;
        if (c->job != NULL)
            c->job->c = NULL;
        if (c->ac != NULL) {
            c->drop_err = FLARE_EUNAVAIL;
            c->state = C_DYING;
            redisAsyncFree(c->ac);
        }
        flare_timer_free(c->timer);
        flare_timer_free(c->retry);
    }
    if (ws->started)
        failq_run(ws);
    flare_timer_free(ws->failtimer);
    ws_free(ws);
}

static int redis_init_worker(flare_worker_t *w, void *state)
{
    redis_app_t *ra = state;
    unsigned id = flare_worker_id(w);
    for (flare_redis_t *r = ra->list; r != NULL; r = r->next) {
        if (id == 0) {
            unsigned n = flare_app_workers(r->app);
            if (r->nworkers < n) {
                ws_t **v = calloc(n, sizeof(*v));
                wstats_t *st = calloc(n, sizeof(*st));
                if (v == NULL || st == NULL) {
                    free(v);
                    free(st);
                    return FLARE_ENOMEM;
                }
                free(r->ws);
                free(r->stats);
                r->ws = v;
                r->stats = st;
                r->nworkers = n;
            } else {
                memset(r->stats, 0, r->nworkers * sizeof(*r->stats));
            }
        }
        int rc = ws_new(r, w, &r->ws[id]);
        if (rc != 0) {
            for (flare_redis_t *q = ra->list; q != r; q = q->next) {
                ws_dispose(q->ws[id]);
                q->ws[id] = NULL;
            }
            return rc;
        }
    }
    return 0;
}

static void redis_dispose_worker(flare_worker_t *w, void *state)
{
    redis_app_t *ra = state;
    unsigned id = flare_worker_id(w);
    for (flare_redis_t *r = ra->list; r != NULL; r = r->next) {
        if (id < r->nworkers && r->ws[id] != NULL) {
            ws_dispose(r->ws[id]);
            r->ws[id] = NULL;
        }
    }
}

static void redis_free(flare_redis_t *r)
{
    while (r->subs != NULL) {
        sub_t *s = r->subs;
        r->subs = s->next;
        free(s);
    }
    free(r->host);
    free(r->user);
    free(r->pass);
    free(r->ws);
    free(r->stats);
    free(r);
}

static void redis_free_app(flare_app_t *app, void *state)
{
    (void)app;
    redis_app_t *ra = state;
    while (ra->list != NULL) {
        flare_redis_t *r = ra->list;
        ra->list = r->next;
        redis_free(r);
    }
    free(ra);
}

static const flare_module_t redis_module = {
    .name = "redis",
    .init_worker = redis_init_worker,
    .dispose_worker = redis_dispose_worker,
    .free_app = redis_free_app,
};

/* ---- opening ---- */

static int config(flare_redis_config_t *c)
{
#define R_FIELD(f, def, max)                                                                     \
    do {                                                                                         \
        if (c->f == 0)                                                                           \
            c->f = (def);                                                                        \
        else if (c->f > (max))                                                                   \
            return flare__fail(FLARE_EINVAL, 0, "flare_redis_config_t." #f " is %u, at most %u", \
                               c->f, (unsigned)(max));                                           \
    } while (0)
    R_FIELD(conns, 1, 64);
    R_FIELD(max_in_flight, 65536, 1u << 20);
    R_FIELD(command_timeout_ms, 5000, INT_MAX);
    R_FIELD(connect_timeout_ms, 2000, INT_MAX);
    R_FIELD(reconnect_min_ms, 100, INT_MAX);
    R_FIELD(reconnect_max_ms, 5000, INT_MAX);
#undef R_FIELD
    if (c->reconnect_max_ms < c->reconnect_min_ms)
        c->reconnect_max_ms = c->reconnect_min_ms;
    return 0;
}

static char *dup_n(const char *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s != NULL) {
        memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

/* Percent-decodes in place (a password may hold '@' or ':'); false on a
 * bad escape or an encoded NUL. */
static bool pct_decode(char *s)
{
    char *o = s;
    for (char *p = s; *p != '\0'; p++) {
        if (*p != '%') {
            *o++ = *p;
            continue;
        }
        int v = 0;
        for (int k = 1; k <= 2; k++) {
            char h = p[k];
            int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
            if (d < 0)
                return false;
            v = v * 16 + d;
        }
        if (v == 0)
            return false;
        *o++ = (char)v;
        p += 2;
    }
    *o = '\0';
    return true;
}

static bool parse_uint(const char *p, const char *end, unsigned max, unsigned *out)
{
    unsigned long v = 0;
    if (p == end)
        return false;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return false;
        v = v * 10 + (unsigned long)(*p - '0');
        if (v > max)
            return false;
    }
    *out = (unsigned)v;
    return true;
}

static int parse_url(flare_redis_t *r, const char *url)
{
#define BAD(why)                 \
    flare__fail(FLARE_EINVAL, 0, \
                "flare_redis_open: %s (expected redis://[[USER]:PASSWORD@]HOST[:PORT][/DB])", why)
    if (strncmp(url, "redis://", 8) != 0)
        return BAD("not a redis:// URL");
    const char *p = url + 8, *end = p + strlen(p);
    const char *slash = memchr(p, '/', (size_t)(end - p));
    const char *auth_end = slash != NULL ? slash : end;
    const char *at = NULL;
    for (const char *q = p; q < auth_end; q++)
        if (*q == '@')
            at = q; /* the last one: '@' in a password must be encoded, but be lenient */
    if (at != NULL) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon == NULL)
            return BAD("credentials without ':'");
        if (colon > p && (r->user = dup_n(p, (size_t)(colon - p))) == NULL)
            return FLARE_ENOMEM;
        if ((r->pass = dup_n(colon + 1, (size_t)(at - colon - 1))) == NULL)
            return FLARE_ENOMEM;
        if ((r->user != NULL && !pct_decode(r->user)) || !pct_decode(r->pass))
            return BAD("bad %-escape in the credentials");
        p = at + 1;
    }
    const char *host_end, *port_at;
    if (*p == '[') {
        host_end = memchr(p, ']', (size_t)(auth_end - p));
        if (host_end == NULL)
            return BAD("unterminated [IPv6 address]");
        r->host = dup_n(p + 1, (size_t)(host_end - p - 1));
        port_at = host_end + 1;
    } else {
        host_end = memchr(p, ':', (size_t)(auth_end - p));
        if (host_end == NULL)
            host_end = auth_end;
        r->host = dup_n(p, (size_t)(host_end - p));
        port_at = host_end;
    }
    if (r->host == NULL)
        return FLARE_ENOMEM;
    if (r->host[0] == '\0')
        return BAD("no host");
    r->port = DEFAULT_PORT;
    if (port_at < auth_end) {
        unsigned port;
        if (*port_at != ':' || !parse_uint(port_at + 1, auth_end, 65535, &port) || port == 0)
            return BAD("bad port");
        r->port = (int)port;
    }
    if (slash != NULL && slash + 1 < end && !parse_uint(slash + 1, end, 1u << 20, &r->db))
        return BAD("bad database number");
    unsigned char tmp[16];
    r->numeric = inet_pton(AF_INET, r->host, tmp) == 1 || inet_pton(AF_INET6, r->host, tmp) == 1;
    return 0;
#undef BAD
}

int flare_redis_open(flare_app_t *app, const char *url, const flare_redis_config_t *cfg,
                     flare_redis_t **out)
{
    if (app == NULL || url == NULL || out == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_redis_open: NULL argument");
    if (flare__app_running(app))
        return flare__fail(FLARE_ESTATE, 0, "flare_redis_open: the app is running");
    flare_redis_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "flare_redis_open: out of memory");
    r->app = app;
    if (cfg != NULL)
        r->cfg = *cfg;
    int rc = config(&r->cfg);
    if (rc == 0)
        rc = parse_url(r, url);
    if (rc != 0) {
        redis_free(r);
        return rc;
    }
    redis_app_t *ra = flare__app_module_state(app, &redis_module);
    if (ra == NULL) {
        ra = calloc(1, sizeof(*ra));
        if (ra == NULL) {
            redis_free(r);
            return flare__fail(FLARE_ENOMEM, 0, "flare_redis_open: out of memory");
        }
        ra->tail = &ra->list;
        rc = flare__app_module(app, &redis_module, ra, &ra->slot);
        if (rc != 0) {
            free(ra);
            redis_free(r);
            return flare__fail(rc, 0, "flare_redis_open: cannot register the Redis module");
        }
    }
    *ra->tail = r;
    ra->tail = &r->next;
    *out = r;
    return 0;
}

int flare_redis_subscribe(flare_redis_t *r, unsigned worker, flare_str_t channel, bool as_pattern,
                          flare_redis_msg_fn cb, void *ud)
{
    if (r == NULL || cb == NULL || channel.len == 0 || channel.ptr == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_redis_subscribe: NULL or empty argument");
    if (worker >= flare_app_workers(r->app))
        return flare__fail(FLARE_EINVAL, 0, "flare_redis_subscribe: worker %u of %u", worker,
                           flare_app_workers(r->app));
    if (flare__app_running(r->app))
        return flare__fail(FLARE_ESTATE, 0, "flare_redis_subscribe: the app is running");
    sub_t *s = malloc(sizeof(*s) + channel.len + 1);
    if (s == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "flare_redis_subscribe: out of memory");
    s->worker = worker;
    s->pattern = as_pattern;
    s->cb = cb;
    s->ud = ud;
    s->len = channel.len;
    memcpy(s->chan, channel.ptr, channel.len);
    s->chan[channel.len] = '\0';
    s->next = r->subs;
    r->subs = s;
    return 0;
}

int flare__redis_sub_state(flare_redis_t *r, flare__redis_sub_state_fn fn, void *ud)
{
    if (r == NULL || flare__app_running(r->app))
        return FLARE_ESTATE;
    r->sub_state = fn;
    r->sub_state_ud = ud;
    return 0;
}

/* ---- statistics ---- */

static void stats_add(flare_redis_stats_t *o, const wstats_t *s)
{
#define LD(f) o->f += atomic_load_explicit(&s->f, memory_order_relaxed)
    LD(conns_open);
    LD(in_flight);
    LD(commands);
    LD(errors);
    LD(timeouts);
    LD(rejected);
    LD(reconnects);
    LD(messages);
#undef LD
}

int flare_redis_stats(const flare_redis_t *r, unsigned worker, flare_redis_stats_t *out)
{
    if (r == NULL || out == NULL)
        return FLARE_EINVAL;
    *out = (flare_redis_stats_t){ 0 };
    if (worker == UINT32_MAX) {
        for (unsigned i = 0; i < r->nworkers; i++)
            stats_add(out, &r->stats[i]);
        return 0;
    }
    if (worker >= flare_app_workers(r->app))
        return FLARE_EINVAL;
    if (worker < r->nworkers)
        stats_add(out, &r->stats[worker]);
    return 0;
}
