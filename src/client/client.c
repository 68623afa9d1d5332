/* flare/client.h: HTTP/1.1 requests from a worker's loop.
 *
 * Per worker and per client: origins (scheme, host, port), each with its
 * resolved address, a list of idle keep-alive connections, a count of
 * open ones and a queue of calls waiting for one. A call takes an idle
 * connection, or opens one while the origin is under its limit, or waits.
 * A connection is a socket (TLS through OpenSSL directly on it), a watcher
 * and a receive buffer; it serves one call at a time.
 *
 * A call's life: waiting (for the name, for a connection) -> connecting ->
 * TLS handshake -> sending -> waiting for the first byte -> receiving ->
 * the callback. One timer per call enforces the phase's timeout and the
 * total. The answer's head is read by http1/resp_head.h's strict parser,
 * a chunked body by the server's own decoder.
 *
 * Built on the public loop handles (flare/loop.h: watchers, timers) and
 * the blocking-job pool for name resolution: nothing here reaches into the
 * server's connection code. */
#include "flare/client.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/url.h"
#include "core/buf.h"
#include "core/core.h"
#include "flare/loop.h"
#include "http/hop.h"
#include "http1/parser.h"
#include "http1/resp_head.h"
#include "module.h"
#include "obs/metrics.h"
#include "worker.h"

#define CLIENT_MAX_FIELDS 100
#define DNS_CACHE_MS      30000
#define SWEEP_MS          1000

static const flare_http_limits_t resp_limits = { .max_request_line = 8192,
                                                 .max_head = 65536,
                                                 .max_headers = CLIENT_MAX_FIELDS };

typedef struct origin origin_t;
typedef struct cconn cconn_t;
typedef struct cworker cworker_t;

/* One resolved address. */
typedef struct addr {
    struct sockaddr_storage sa;
    socklen_t len;
} addr_t;

enum { MAX_ADDRS = 4 };

/* ---- per-upstream statistics ----
 *
 * Kept only while the app counts (flare_metrics_*): one entry per upstream
 * (scheme://host:port) the client has called, app-wide, each with one cell
 * per worker that only that worker writes (relaxed stores, no shared write
 * on the call path); the metrics collector sums the cells at scrape time
 * on the scraping thread. Entries are added under a lock (once per worker
 * and upstream) and published through `nups`; never removed before the
 * app is freed. Past UP_MAX upstreams the others share the entry "other". */
enum { E_TIMEOUT, E_CONNECT, E_TLS, E_PROTOCOL, E_CLOSED, E_RESOLVE, E_TOO_BIG, E_OTHER, E_KINDS };
static const char *const err_kind[E_KINDS] = { "timeout", "connect", "tls",     "protocol",
                                               "closed",  "resolve", "too_big", "other" };
enum { UP_MAX = 64 };

typedef struct upcell {
    _Alignas(64) flare__ctr_t answers[5]; /* by status class: 1xx .. 5xx */
    flare__ctr_t errors[E_KINDS];
    flare__ctr_t hist[FLARE__HIST_NB + 1]; /* answered calls' durations, not cumulative */
    flare__ctr_t sum_ns;
} upcell_t;

typedef struct upstat {
    char name[96];   /* "http://host:port"; "other" */
    upcell_t *cells; /* ncells: one per worker */
} upstat_t;

/* A fixed answer for a name (flare_client_config_t.resolve). */
typedef struct pin {
    char *host;
    uint16_t port;
    unsigned naddrs;
    addr_t addrs[MAX_ADDRS];
} pin_t;

struct flare_client {
    flare_client_t *next; /* the app's clients */
    unsigned index;
    flare_client_config_t cfg;
    char *ca_file;
    pin_t *pins; /* cfg.resolve, parsed */
    unsigned npins;
    /* per-upstream statistics (above) */
    pthread_mutex_t up_lock;
    upstat_t *ups[UP_MAX + 1];
    _Atomic unsigned nups;
    unsigned ncells;
    SSL_CTX *ssl_ctx;
};

/* The app's clients (the module's state). */
typedef struct client_set {
    flare_client_t *head;
    unsigned n;
    unsigned slot;
} client_set_t;

struct cworker {
    cworker_t *next;
    flare_client_t *cl;
    flare_worker_t *w;
    origin_t *origins;
    flare_timer_t *sweep; /* closes idle pooled connections */
    flare_timer_t *kick;  /* starts the calls made since the last turn */
    bool disposing;
};

typedef struct rjob rjob_t;

struct origin {
    origin_t *next;
    cworker_t *cw;
    char *host; /* NUL-terminated */
    uint16_t port;
    bool tls, ip6;
    /* the resolved addresses in the resolver's order; a connection tries
     * them from the one that last worked (pref) and moves to the next when
     * one refuses or is unreachable (localhost may be ::1 then 127.0.0.1) */
    addr_t addrs[MAX_ADDRS];
    unsigned naddrs, pref;
    uint64_t addr_until; /* ms; 0: not resolved (a literal address never expires) */
    rjob_t *resolving;
    cconn_t *idle; /* idle keep-alive connections, most recent first */
    cconn_t *all;  /* every open connection (all_next) */
    bool failing;  /* failing the waiting calls: no new resolution */
    unsigned nconns;
    flare_client_call_t *wait_head, *wait_tail;
    SSL_SESSION *session; /* for resumption */
    upcell_t *stats;      /* this worker's cell of its upstream's statistics; NULL: not counting */
};

enum { S_CONNECTING, S_HANDSHAKE, S_SEND, S_RECV, S_IDLE };

struct cconn {
    cconn_t *next; /* idle list */
    cconn_t *all_next;
    origin_t *o;
    int fd;
    flare_watch_t *watch;
    SSL *ssl;
    int state;
    flare_client_call_t *call;
    flare_buf_t in;     /* received, not yet consumed */
    bool reused;        /* it served an answer: a close before the next is a stale connection */
    unsigned ai, tries; /* the address being tried (origin's addrs), how many so far */
    uint64_t idle_since;
};

struct flare_client_call {
    flare_client_call_t *next; /* the origin's wait queue */
    cworker_t *cw;
    origin_t *o;
    cconn_t *conn;
    char *out; /* the request, serialized */
    size_t outlen, sent;
    bool head_req, idempotent, retried, waiting;
    flare_client_fn cb;
    void *ud;
    flare_timer_t *timer;
    uint64_t deadline; /* the total, ms */
    uint64_t t0_ns;    /* when it was made (counted only: o->stats) */
    uint64_t phase_deadline;
    /* the answer */
    bool have_head, got_byte;
    int status;
    bool keep_alive;
    flare_resp_body_t body_kind;
    int64_t content_length;
    flare_header_t *fields; /* copied out of the buffer */
    size_t nfields;
    flare_chunked_t ch;
    flare_buf_t body;  /* NUL-terminated */
    struct redir *rd;  /* following redirects (flare_client_req_t.max_redirects) */
    struct bind *bind; /* the inbound request it serves (flare_client_req_t.req) */
    bool aborted;      /* that request lost its client: the timer fails the call */
};

/* The link between a call and the inbound request it serves, in the
 * request's arena: whichever ends first unlinks the other. */
typedef struct bind {
    flare_client_call_t *call; /* NULL once the call has ended */
} bind_t;

/* What a call that follows redirects keeps to make its next request. */
typedef struct redir {
    unsigned left, max; /* redirects still allowed, and at first */
    char *url;          /* the current URL */
    char *method;
    char **headers; /* NULL-terminated copies */
    char *body;
    size_t body_len;
    char *host; /* the Host override; dropped once the call leaves its origin */
} redir_t;

static _Thread_local char err_text[256];
static _Thread_local bool err_before_send;

static void set_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void set_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_text, sizeof(err_text), fmt, ap);
    va_end(ap);
}

const char *flare_client_error_text(void)
{
    return err_text;
}

bool flare_client_error_before_send(void)
{
    return err_before_send;
}

/* The worker loop's clock (ms, refreshed after each wait): every call of
 * this file runs on the worker's thread (flare_client_request refuses any
 * other), and the call's timer counts from the same clock, so a deadline
 * and the timer that enforces it cannot disagree. No clock_gettime per
 * phase. */
static inline uint64_t cw_now(const cworker_t *cw)
{
    return cw->w->loop.now;
}

/* ---- connections ---- */

static void conn_io(flare_watch_t *wt, unsigned events, void *ud);
static void call_fail(flare_client_call_t *call, int rc);
static void origin_dispatch(origin_t *o);
static void call_start_send(flare_client_call_t *call);

static void conn_close(cconn_t *c)
{
    origin_t *o = c->o;
    /* off the idle list */
    for (cconn_t **pp = &o->idle; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    for (cconn_t **pp = &o->all; *pp != NULL; pp = &(*pp)->all_next) {
        if (*pp == c) {
            *pp = c->all_next;
            break;
        }
    }
    flare_watch_free(c->watch);
    if (c->ssl != NULL)
        SSL_free(c->ssl);
    if (c->fd >= 0)
        close(c->fd);
    flare__buf_free(&c->in);
    free(c);
    o->nconns--;
}

static void phase(flare_client_call_t *call, unsigned ms)
{
    uint64_t now = cw_now(call->cw);
    call->phase_deadline = ms ? now + ms : UINT64_MAX;
    uint64_t next = call->phase_deadline < call->deadline ? call->phase_deadline : call->deadline;
    flare_timer_start(call->timer, next > now ? next - now : 0);
}

static int conn_want(cconn_t *c, unsigned events)
{
    return flare_watch_set(c->watch, events);
}

/* The socket as an OpenSSL error says, or errno. */
static void tls_err(const char *what)
{
    unsigned long e = ERR_get_error();
    char buf[160];
    if (e != 0)
        ERR_error_string_n(e, buf, sizeof(buf));
    else
        snprintf(buf, sizeof(buf), "%s", errno ? strerror(errno) : "connection closed");
    ERR_clear_error();
    set_err("%s: %s", what, buf);
}

static void handshake(cconn_t *c)
{
    flare_client_call_t *call = c->call;
    ERR_clear_error();
    int r = SSL_do_handshake(c->ssl);
    if (r == 1) {
        call_start_send(call);
        return;
    }
    int e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_READ) {
        conn_want(c, FLARE_WATCH_READ);
        return;
    }
    if (e == SSL_ERROR_WANT_WRITE) {
        conn_want(c, FLARE_WATCH_WRITE);
        return;
    }
    long v = SSL_get_verify_result(c->ssl);
    if (v != X509_V_OK)
        set_err("TLS handshake with %s:%u: certificate: %s", c->o->host, c->o->port,
                X509_verify_cert_error_string(v));
    else
        tls_err("TLS handshake");
    call_fail(call, FLARE_ETLS);
}

static int tls_setup(cconn_t *c, flare_client_t *cl)
{
    origin_t *o = c->o;
    c->ssl = SSL_new(cl->ssl_ctx);
    if (c->ssl == NULL || SSL_set_fd(c->ssl, c->fd) != 1)
        return FLARE_ENOMEM;
    SSL_set_connect_state(c->ssl);
    static const unsigned char alpn[] = "\x08http/1.1";
    SSL_set_alpn_protos(c->ssl, alpn, sizeof(alpn) - 1);
    struct in6_addr a6;
    struct in_addr a4;
    bool literal = inet_pton(AF_INET, o->host, &a4) == 1 || inet_pton(AF_INET6, o->host, &a6) == 1;
    if (literal) {
        if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), o->host) != 1)
            return FLARE_ETLS;
    } else {
        SSL_set_tlsext_host_name(c->ssl, o->host);
        if (SSL_set1_host(c->ssl, o->host) != 1)
            return FLARE_ETLS;
    }
    if (o->session != NULL)
        SSL_set_session(c->ssl, o->session);
    return 0;
}

/* Whether a failed connect may be retried on the origin's next address. */
static bool connect_next_ok(int err)
{
    return err == ECONNREFUSED || err == ENETUNREACH || err == EHOSTUNREACH ||
           err == EADDRNOTAVAIL || err == EAFNOSUPPORT || err == ECONNRESET;
}

/* Starts connecting c's socket to the origin's address c->ai, moving on to
 * the next addresses while one fails at once with an error another address
 * may not have. Replaces c's socket and watch; 0 or an error (set_err). */
static int conn_connect(cconn_t *c)
{
    origin_t *o = c->o;
    for (;;) {
        const addr_t *a = &o->addrs[c->ai];
        flare_watch_free(c->watch);
        c->watch = NULL;
        if (c->fd >= 0)
            close(c->fd);
        c->tries++;
        c->fd = socket(a->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int err = 0;
        if (c->fd < 0) {
            err = errno;
        } else {
            int one = 1;
            setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            if (connect(c->fd, (const struct sockaddr *)&a->sa, a->len) != 0 &&
                errno != EINPROGRESS)
                err = errno;
        }
        if (err == 0)
            break;
        if (!connect_next_ok(err) || c->tries >= o->naddrs) {
            set_err("connect to %s:%u: %s", o->host, o->port, strerror(err));
            return FLARE_ESYS;
        }
        c->ai = (c->ai + 1) % o->naddrs;
    }
    int rc = flare_watch_new(c->o->cw->w, c->fd, FLARE_WATCH_WRITE, conn_io, c, &c->watch);
    if (rc != 0)
        set_err("connection set-up: %s", flare_strerror(rc));
    else if (c->ssl != NULL && SSL_set_fd(c->ssl, c->fd) != 1)
        rc = FLARE_ENOMEM;
    return rc;
}

/* Opens a new connection to o for call. */
static void conn_open(origin_t *o, flare_client_call_t *call)
{
    cconn_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        call_fail(call, FLARE_ENOMEM);
        return;
    }
    c->o = o;
    c->fd = -1;
    c->ai = o->pref;
    o->nconns++;
    c->all_next = o->all;
    o->all = c;
    call->conn = c;
    c->call = call;
    c->state = S_CONNECTING;
    int rc = conn_connect(c);
    if (rc != 0) {
        call_fail(call, rc);
        return;
    }
    if (o->tls)
        rc = tls_setup(c, call->cw->cl);
    if (rc != 0) {
        set_err("connection set-up: %s", flare_strerror(rc));
        call_fail(call, rc);
        return;
    }
    phase(call, call->cw->cl->cfg.connect_timeout_ms);
}

/* ---- calls ---- */

static void redir_free(redir_t *rd)
{
    if (rd == NULL)
        return;
    free(rd->url);
    free(rd->method);
    for (size_t i = 0; rd->headers != NULL && rd->headers[i] != NULL; i++)
        free(rd->headers[i]);
    free(rd->headers);
    free(rd->body);
    free(rd->host);
    free(rd);
}

static void call_free(flare_client_call_t *call)
{
    if (call->bind != NULL)
        call->bind->call = NULL;
    redir_free(call->rd);
    flare_timer_free(call->timer);
    free(call->out);
    free(call->fields);
    flare__buf_free(&call->body);
    free(call);
}

/* Puts call at the end of its origin's wait queue. */
static void wait_add(flare_client_call_t *call)
{
    origin_t *o = call->o;
    call->waiting = true;
    call->next = NULL;
    if (o->wait_tail != NULL)
        o->wait_tail->next = call;
    else
        o->wait_head = call;
    o->wait_tail = call;
}

static void wait_remove(flare_client_call_t *call)
{
    origin_t *o = call->o;
    flare_client_call_t *prev = NULL;
    for (flare_client_call_t *x = o->wait_head; x != NULL; prev = x, x = x->next) {
        if (x == call) {
            if (prev != NULL)
                prev->next = x->next;
            else
                o->wait_head = x->next;
            if (o->wait_tail == x)
                o->wait_tail = prev;
            break;
        }
    }
    call->next = NULL;
    call->waiting = false;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static unsigned err_kind_of(int rc, bool before_send)
{
    switch (rc) {
    case FLARE_ETIMEDOUT:
        return E_TIMEOUT;
    case FLARE_ETLS:
        return E_TLS;
    case FLARE_EIO:
        return E_PROTOCOL;
    case FLARE_ECLOSED:
        return E_CLOSED;
    case FLARE_ENOTFOUND:
        return E_RESOLVE;
    case FLARE_ETOOBIG:
        return E_TOO_BIG;
    case FLARE_ESYS:
        return before_send ? E_CONNECT : E_OTHER;
    default:
        return E_OTHER;
    }
}

/* Counts an answered call into its upstream's cell. */
static void count_answer(const flare_client_call_t *call)
{
    upcell_t *u = call->o->stats;
    if (u == NULL)
        return;
    if (call->status >= 100 && call->status <= 599)
        flare__ctr_add(&u->answers[call->status / 100 - 1], 1);
    uint64_t d = mono_ns() - call->t0_ns;
    unsigned b = 0;
    while (b < FLARE__HIST_NB && d > flare__hist_bounds_ns[b])
        b++;
    flare__ctr_add(&u->hist[b], 1);
    flare__ctr_add(&u->sum_ns, d);
}

/* Ends call with an error: its connection (whose state is unknown) is
 * closed, the callback runs, the call is freed. */
static void call_fail(flare_client_call_t *call, int rc)
{
    origin_t *o = call->o;
    if (call->waiting)
        wait_remove(call);
    err_before_send =
        call->conn == NULL || call->conn->state == S_CONNECTING || call->conn->state == S_HANDSHAKE;
    if (call->conn != NULL) {
        cconn_t *c = call->conn;
        call->conn = NULL;
        c->call = NULL;
        conn_close(c);
    }
    if (err_text[0] == '\0')
        set_err("%s", flare_strerror(rc));
    if (o->stats != NULL)
        flare__ctr_add(&o->stats->errors[err_kind_of(rc, err_before_send)], 1);
    flare_client_fn cb = call->cb;
    void *ud = call->ud;
    call_free(call);
    cb(rc, NULL, ud);
    err_text[0] = '\0';
    err_before_send = false;
    origin_dispatch(o); /* a slot may have opened */
}

static bool follow(flare_client_call_t *call);

static void call_done(flare_client_call_t *call, bool reusable)
{
    cconn_t *c = call->conn;
    origin_t *o = call->o;
    call->conn = NULL;
    c->call = NULL;
    if (c->ssl != NULL && o->session == NULL)
        o->session = SSL_get1_session(c->ssl);
    if (reusable && call->keep_alive) {
        c->state = S_IDLE;
        c->reused = true;
        c->in.len = 0;
        c->idle_since = cw_now(o->cw);
        c->next = o->idle;
        o->idle = c;
        conn_want(c, FLARE_WATCH_READ); /* a close or stray bytes: closed */
    } else {
        conn_close(c);
    }
    flare_timer_stop(call->timer);
    if (flare__unlikely(call->rd != NULL) && follow(call)) {
        origin_dispatch(o); /* the connection it left may serve another call */
        return;
    }
    count_answer(call);
    flare_client_res_t res = { .status = call->status,
                               .headers = call->fields,
                               .nheaders = call->nfields,
                               .body = { call->body.data ? call->body.data : "", call->body.len } };
    call->cb(0, &res, call->ud);
    call_free(call);
    origin_dispatch(o);
}

static int serialize(flare_client_call_t *call, const char *method, const flare_url_t *u,
                     const flare_client_req_t *req);
static origin_t *origin_get(cworker_t *cw, const flare_url_t *u);

static bool is_method(const char *m, const char *want)
{
    return strcmp(m, want) == 0;
}

/* Drops the copied headers named in names (a NULL-terminated list). */
static void redir_drop(redir_t *rd, const char *const *names)
{
    size_t w = 0;
    for (size_t i = 0; rd->headers[i] != NULL; i++) {
        bool drop = false;
        for (size_t k = 0; names[k] != NULL && !drop; k++) {
            size_t n = strlen(names[k]);
            drop = strncasecmp(rd->headers[i], names[k], n) == 0 && rd->headers[i][n] == ':';
        }
        if (drop)
            free(rd->headers[i]);
        else
            rd->headers[w++] = rd->headers[i];
    }
    rd->headers[w] = NULL;
}

/* The answer in call is a redirect the caller asked to follow: the call
 * starts again on the Location's URL (the same handle, its total timeout
 * still running). true when it was taken over (sent on, or failed); false:
 * it is an answer (no Location). */
static bool follow(flare_client_call_t *call)
{
    int st = call->status;
    if (st != 301 && st != 302 && st != 303 && st != 307 && st != 308)
        return false;
    redir_t *rd = call->rd;
    const char *loc = NULL;
    for (size_t i = 0; i < call->nfields && loc == NULL; i++) {
        if (call->fields[i].name.len == 8 &&
            strncasecmp(call->fields[i].name.ptr, "location", 8) == 0)
            loc = call->fields[i].value.ptr; /* NUL-terminated copy */
    }
    if (loc == NULL)
        return false;
    char url[2048];
    flare_url_t u;
    const char *why;
    if (rd->left == 0) {
        set_err("too many redirects (more than %u), the last to %.200s", rd->max, loc);
        call_fail(call, FLARE_EIO);
        return true;
    }
    if (flare__url_resolve(rd->url, loc, url, sizeof(url)) < 0 ||
        flare__url_parse(url, &u, &why) != 0) {
        set_err("redirect from %s to a Location that is not an http(s) URL: %.200s", rd->url, loc);
        call_fail(call, FLARE_EIO);
        return true;
    }
    char *nurl = strdup(url);
    origin_t *o = nurl != NULL ? origin_get(call->cw, &u) : NULL;
    if (o == NULL) {
        free(nurl);
        call_fail(call, FLARE_ENOMEM);
        return true;
    }
    /* the re-parse points into nurl, which the redir keeps */
    flare__url_parse(nurl, &u, &why);
    free(rd->url);
    rd->url = nurl;
    rd->left--;
    if ((st == 303 && !is_method(rd->method, "HEAD")) ||
        ((st == 301 || st == 302) && is_method(rd->method, "POST"))) {
        static const char *const body_fields[] = { "content-type", "content-encoding",
                                                   "content-language", "content-location", NULL };
        char *get = strdup("GET");
        if (get == NULL) {
            call_fail(call, FLARE_ENOMEM);
            return true;
        }
        free(rd->method);
        rd->method = get;
        free(rd->body);
        rd->body = NULL;
        rd->body_len = 0;
        redir_drop(rd, body_fields);
    }
    if (o != call->o) {
        static const char *const credentials[] = { "authorization", "cookie", "proxy-authorization",
                                                   NULL };
        redir_drop(rd, credentials);
        free(rd->host);
        rd->host = NULL;
    }
    /* the next request, and a clean slate for its answer */
    flare_client_req_t req = { .method = rd->method,
                               .headers = (const char *const *)rd->headers,
                               .body = { rd->body, rd->body_len },
                               .host = rd->host };
    free(call->out);
    call->out = NULL;
    if (serialize(call, rd->method, &u, &req) != 0) {
        call_fail(call, FLARE_ENOMEM);
        return true;
    }
    free(call->fields);
    flare__buf_free(&call->body);
    call->fields = NULL;
    call->nfields = 0;
    call->have_head = call->got_byte = call->keep_alive = false;
    call->status = 0;
    call->content_length = 0;
    memset(&call->ch, 0, sizeof(call->ch));
    call->sent = 0;
    call->retried = false;
    call->head_req = is_method(rd->method, "HEAD");
    call->idempotent = call->head_req || is_method(rd->method, "GET") ||
                       is_method(rd->method, "PUT") || is_method(rd->method, "DELETE") ||
                       is_method(rd->method, "OPTIONS");
    call->o = o;
    if (o->stats != NULL && call->t0_ns == 0)
        call->t0_ns = mono_ns();
    phase(call, 0);
    wait_add(call);
    if (!flare_timer_active(call->cw->kick))
        flare_timer_start(call->cw->kick, 0);
    return true;
}

static void call_start_send(flare_client_call_t *call)
{
    cconn_t *c = call->conn;
    c->state = S_SEND;
    call->sent = 0;
    phase(call, call->cw->cl->cfg.idle_timeout_ms);
    conn_want(c, FLARE_WATCH_WRITE);
}

/* Gives call a connection, or queues it. */
static void call_acquire(flare_client_call_t *call)
{
    origin_t *o = call->o;
    if (o->idle != NULL) {
        cconn_t *c = o->idle;
        o->idle = c->next;
        c->next = NULL;
        c->call = call;
        call->conn = c;
        call_start_send(call);
        return;
    }
    bool resolved = o->addr_until == UINT64_MAX || o->addr_until > cw_now(o->cw);
    if (resolved && o->nconns < call->cw->cl->cfg.max_per_origin) {
        conn_open(o, call);
        return;
    }
    wait_add(call);
    if (!resolved)
        origin_dispatch(o); /* starts the resolution */
}

/* ---- name resolution (the job pool) ---- */

struct rjob {
    origin_t *o; /* NULL once the origin is gone: the result is dropped */
    char *host;
    char port[8];
    int rc;
    addr_t addrs[MAX_ADDRS];
    unsigned naddrs;
    char why[128];
};

static void resolve_work(void *ud)
{
    rjob_t *j = ud;
    struct addrinfo hints = { .ai_family = AF_UNSPEC,
                              .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG };
    struct addrinfo *res = NULL;
    int g = getaddrinfo(j->host, j->port, &hints, &res);
    if (g != 0 || res == NULL) {
        j->rc = FLARE_ENOTFOUND;
        snprintf(j->why, sizeof(j->why), "%s", g != 0 ? gai_strerror(g) : "no address");
    } else {
        for (struct addrinfo *ai = res; ai != NULL && j->naddrs < MAX_ADDRS; ai = ai->ai_next) {
            if (ai->ai_addrlen > sizeof(j->addrs[0].sa))
                continue;
            memcpy(&j->addrs[j->naddrs].sa, ai->ai_addr, ai->ai_addrlen);
            j->addrs[j->naddrs++].len = ai->ai_addrlen;
        }
        if (j->naddrs == 0) {
            j->rc = FLARE_ENOTFOUND;
            snprintf(j->why, sizeof(j->why), "no usable address");
        }
    }
    if (res != NULL)
        freeaddrinfo(res);
}

static void resolve_done(void *ud)
{
    rjob_t *j = ud;
    origin_t *o = j->o;
    if (o != NULL) {
        o->resolving = NULL;
        if (j->rc != 0) {
            /* every call waiting for the name fails */
            o->failing = true;
            while (o->wait_head != NULL) {
                set_err("resolve %s: %s", o->host, j->why);
                call_fail(o->wait_head, j->rc);
            }
            o->failing = false;
        } else {
            /* keep the address that worked if it is still among them */
            unsigned pref = 0;
            for (unsigned i = 0; i < j->naddrs && o->naddrs > 0; i++) {
                const addr_t *a = &j->addrs[i], *p = &o->addrs[o->pref];
                if (a->len == p->len && memcmp(&a->sa, &p->sa, a->len) == 0)
                    pref = i;
            }
            memcpy(o->addrs, j->addrs, sizeof(j->addrs));
            o->naddrs = j->naddrs;
            o->pref = pref;
            o->addr_until = cw_now(o->cw) + DNS_CACHE_MS;
            origin_dispatch(o);
        }
    }
    free(j->host);
    free(j);
}

/* Serves the waiting calls while connections are there to take. */
static void origin_dispatch(origin_t *o)
{
    if (o->failing || o->cw->disposing)
        return;
    while (o->wait_head != NULL) {
        bool resolved = o->addr_until == UINT64_MAX || o->addr_until > cw_now(o->cw);
        if (!resolved) {
            if (o->resolving != NULL)
                return;
            rjob_t *j = calloc(1, sizeof(*j));
            if (j == NULL || (j->host = strdup(o->host)) == NULL) {
                free(j);
                set_err("out of memory resolving %s", o->host);
                call_fail(o->wait_head, FLARE_ENOMEM);
                continue;
            }
            j->o = o;
            snprintf(j->port, sizeof(j->port), "%u", o->port);
            int rc = flare_worker_job(o->cw->w, resolve_work, resolve_done, j);
            if (rc != 0) {
                free(j->host);
                free(j);
                set_err("resolve %s: %s", o->host, flare_strerror(rc));
                call_fail(o->wait_head, rc);
                continue;
            }
            o->resolving = j;
            return;
        }
        if (o->idle == NULL && o->nconns >= o->cw->cl->cfg.max_per_origin)
            return;
        flare_client_call_t *call = o->wait_head;
        wait_remove(call);
        call_acquire(call);
    }
}

/* ---- reading the answer ---- */

static int body_add(flare_client_call_t *call, const char *p, size_t n)
{
    if (call->body.len + n > call->cw->cl->cfg.max_response) {
        set_err("the answer's body is larger than %zu bytes", call->cw->cl->cfg.max_response);
        return FLARE_ETOOBIG;
    }
    return flare__buf_append_cstr(&call->body, p, n);
}

static void consume(cconn_t *c, size_t n)
{
    flare__buf_consume(&c->in, n);
}

/* What the buffer now holds: 1 the answer is whole, 0 more is needed, or
 * a negative code. `eof`: the server closed. */
static int parse(flare_client_call_t *call, bool eof)
{
    cconn_t *c = call->conn;
    while (!call->have_head) {
        static _Thread_local flare_header_t fields[CLIENT_MAX_FIELDS];
        flare_resp_head_t h = { .headers = fields };
        int n = c->in.len > 0 ? flare__http_parse_resp_head(c->in.data, c->in.len, &resp_limits,
                                                            call->head_req, &h)
                              : FLARE_PARSE_PARTIAL;
        if (n == FLARE_PARSE_ERROR) {
            set_err("bad answer from %s:%u: %s", call->o->host, call->o->port, h.error);
            return FLARE_EIO;
        }
        if (n == FLARE_PARSE_PARTIAL)
            return eof ? FLARE_ECLOSED : 0;
        if (h.status < 200 && h.status != 101) {
            consume(c, (size_t)n); /* interim */
            continue;
        }
        if (h.status == 101) {
            set_err("%s:%u switched protocols unasked", call->o->host, call->o->port);
            return FLARE_EIO;
        }
        call->have_head = true;
        call->status = h.status;
        call->keep_alive = h.keep_alive;
        call->body_kind = h.body;
        call->content_length = h.content_length;
        int rc = flare__fields_copy(h.headers, h.nheaders, &call->fields);
        if (rc != 0)
            return rc;
        call->nfields = h.nheaders;
        consume(c, (size_t)n);
        if (h.body == FLARE_RESP_BODY_LENGTH &&
            (uint64_t)h.content_length > call->cw->cl->cfg.max_response) {
            set_err("Content-Length %lld is more than %zu", (long long)h.content_length,
                    call->cw->cl->cfg.max_response);
            return FLARE_ETOOBIG;
        }
        flare__chunked_init(&call->ch);
    }
    int rc;
    switch (call->body_kind) {
    case FLARE_RESP_BODY_NONE:
        return 1;
    case FLARE_RESP_BODY_LENGTH: {
        size_t want = (size_t)call->content_length - call->body.len;
        size_t take = c->in.len < want ? c->in.len : want;
        if ((rc = body_add(call, c->in.data, take)) != 0)
            return rc;
        consume(c, take);
        if ((size_t)call->content_length == call->body.len)
            return 1;
        if (eof) {
            set_err("the body ended after %zu of %lld bytes", call->body.len,
                    (long long)call->content_length);
            return FLARE_EIO;
        }
        return 0;
    }
    case FLARE_RESP_BODY_CHUNKED:
        for (;;) {
            size_t used = 0;
            flare_str_t data;
            int status;
            const char *why;
            int d =
                flare__chunked_decode(&call->ch, c->in.data, c->in.len,
                                      call->cw->cl->cfg.max_response, &used, &data, &status, &why);
            if (d == FLARE_PARSE_ERROR) {
                set_err("bad chunked body: %s", why);
                return status == 413 ? FLARE_ETOOBIG : FLARE_EIO;
            }
            if (d == FLARE_CHUNKED_DATA && (rc = body_add(call, data.ptr, data.len)) != 0)
                return rc;
            consume(c, used);
            if (d == FLARE_CHUNKED_DONE)
                return 1;
            if (d == FLARE_PARSE_PARTIAL) {
                if (eof) {
                    set_err("the chunked body ended early");
                    return FLARE_EIO;
                }
                return 0;
            }
        }
    case FLARE_RESP_BODY_CLOSE:
        if ((rc = body_add(call, c->in.data, c->in.len)) != 0)
            return rc;
        consume(c, c->in.len);
        return eof ? 1 : 0;
    }
    return FLARE_EIO;
}

/* Reads what the socket has: >0 bytes, 0 EOF, -EAGAIN, or -errno. */
static ssize_t conn_read(cconn_t *c)
{
    if (flare__buf_reserve(&c->in, 16384) != 0)
        return -ENOMEM;
    if (c->ssl == NULL) {
        ssize_t n;
        do {
            n = recv(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len, 0);
        } while (n < 0 && errno == EINTR);
        return n < 0 ? -errno : n;
    }
    ERR_clear_error();
    int n = SSL_read(c->ssl, c->in.data + c->in.len, (int)(c->in.cap - c->in.len));
    if (n > 0)
        return n;
    int e = SSL_get_error(c->ssl, n);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return -EAGAIN;
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0;
    if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)
        return errno ? -errno : 0; /* a close without close_notify: EOF */
    tls_err("TLS read");
    return -EPROTO;
}

static void on_recv(cconn_t *c)
{
    flare_client_call_t *call = c->call;
    for (;;) {
        ssize_t n = conn_read(c);
        if (n == -EAGAIN)
            return;
        if (n > 0) {
            c->in.len += (size_t)n;
            if (!call->got_byte) {
                call->got_byte = true;
            }
            phase(call, call->cw->cl->cfg.idle_timeout_ms);
        }
        bool eof = n <= 0;
        if (eof && !call->got_byte && c->reused && call->idempotent && !call->retried) {
            /* the server had closed this pooled connection: once more on a
             * new one */
            call->retried = true;
            call->conn = NULL;
            c->call = NULL;
            conn_close(c);
            call_acquire(call);
            return;
        }
        if (n < 0 && n != -EPROTO)
            set_err("%s:%u: %s", call->o->host, call->o->port, strerror((int)-n));
        int rc = parse(call, eof);
        if (rc == 1) {
            call_done(call, !eof && c->in.len == 0);
            return;
        }
        if (rc < 0 || eof) {
            if (rc == 0 || rc == FLARE_ECLOSED) {
                if (err_text[0] == '\0')
                    set_err("%s:%u closed the connection before the answer was whole",
                            call->o->host, call->o->port);
                rc = n == -EPROTO ? FLARE_ETLS : FLARE_ECLOSED;
            }
            call_fail(call, rc);
            return;
        }
    }
}

static void on_send(cconn_t *c)
{
    flare_client_call_t *call = c->call;
    while (call->sent < call->outlen) {
        ssize_t n;
        if (c->ssl == NULL) {
            n = send(c->fd, call->out + call->sent, call->outlen - call->sent, MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && errno == EAGAIN)
                return;
            if (n < 0) {
                int e = errno;
                if (c->reused && call->idempotent && !call->retried && call->sent == 0) {
                    call->retried = true;
                    call->conn = NULL;
                    c->call = NULL;
                    conn_close(c);
                    call_acquire(call);
                    return;
                }
                set_err("send to %s:%u: %s", call->o->host, call->o->port, strerror(e));
                call_fail(call, FLARE_ECLOSED);
                return;
            }
        } else {
            ERR_clear_error();
            int r = SSL_write(c->ssl, call->out + call->sent, (int)(call->outlen - call->sent));
            if (r <= 0) {
                int e = SSL_get_error(c->ssl, r);
                if (e == SSL_ERROR_WANT_WRITE)
                    return;
                if (e == SSL_ERROR_WANT_READ) {
                    conn_want(c, FLARE_WATCH_READ);
                    return;
                }
                tls_err("TLS write");
                call_fail(call, FLARE_ECLOSED);
                return;
            }
            n = r;
        }
        call->sent += (size_t)n;
        phase(call, call->cw->cl->cfg.idle_timeout_ms);
    }
    c->state = S_RECV;
    c->in.len = 0;
    phase(call, call->cw->cl->cfg.first_byte_timeout_ms);
    conn_want(c, FLARE_WATCH_READ);
}

static void conn_io(flare_watch_t *wt, unsigned events, void *ud)
{
    (void)wt;
    cconn_t *c = ud;
    switch (c->state) {
    case S_CONNECTING: {
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            soerr = errno;
        if (soerr != 0) {
            if (connect_next_ok(soerr) && c->tries < c->o->naddrs) {
                c->ai = (c->ai + 1) % c->o->naddrs;
                int rc = conn_connect(c);
                if (rc != 0)
                    call_fail(c->call, rc);
                return;
            }
            set_err("connect to %s:%u: %s", c->o->host, c->o->port, strerror(soerr));
            call_fail(c->call, FLARE_ESYS);
            return;
        }
        if (c->ai < c->o->naddrs)
            c->o->pref = c->ai; /* the next connection starts here */
        if (c->ssl != NULL) {
            c->state = S_HANDSHAKE;
            handshake(c);
        } else {
            call_start_send(c->call);
            on_send(c);
        }
        return;
    }
    case S_HANDSHAKE:
        handshake(c);
        return;
    case S_SEND:
        on_send(c);
        return;
    case S_RECV:
        on_recv(c);
        return;
    case S_IDLE:
        /* an idle connection has nothing to say: a close, or junk */
        (void)events;
        conn_close(c);
        return;
    }
}

/* ---- timeouts ---- */

static void call_timeout(void *ud)
{
    flare_client_call_t *call = ud;
    if (call->aborted) {
        set_err("%s:%u: cancelled: the request it serves lost its client", call->o->host,
                call->o->port);
        call_fail(call, FLARE_ECANCELED);
        return;
    }
    uint64_t now = cw_now(call->cw);
    const char *what = now >= call->deadline ? "the call's total time"
                       : call->conn == NULL  ? "waiting for a connection"
                       : call->conn->state == S_CONNECTING || call->conn->state == S_HANDSHAKE
                           ? "connecting"
                       : call->conn->state == S_SEND ? "sending the request"
                       : call->got_byte              ? "reading the answer"
                                                     : "waiting for the first byte";
    if (now < call->deadline && now < call->phase_deadline) {
        /* moved meanwhile */
        phase(call, (unsigned)(call->phase_deadline - now));
        return;
    }
    set_err("%s:%u: timed out %s", call->o->host, call->o->port, what);
    call_fail(call, FLARE_ETIMEDOUT);
}

static void kick(void *ud)
{
    cworker_t *cw = ud;
    for (origin_t *o = cw->origins; o != NULL; o = o->next)
        origin_dispatch(o);
}

static void sweep(void *ud)
{
    cworker_t *cw = ud;
    uint64_t now = cw_now(cw);
    for (origin_t *o = cw->origins; o != NULL; o = o->next) {
        for (cconn_t *c = o->idle, *next; c != NULL; c = next) {
            next = c->next;
            if (now - c->idle_since >= cw->cl->cfg.pool_idle_ms)
                conn_close(c);
        }
    }
    flare_timer_start(cw->sweep, SWEEP_MS);
}

/* ---- the module: per-worker state ---- */

static int init_worker(flare_worker_t *w, void *state);
static void dispose_worker(flare_worker_t *w, void *state);
static void free_app(flare_app_t *app, void *state);

static const flare_module_t client_module = {
    .name = "client",
    .init_worker = init_worker,
    .dispose_worker = dispose_worker,
    .free_app = free_app,
};

static int init_worker(flare_worker_t *w, void *state)
{
    client_set_t *set = state;
    cworker_t *list = NULL;
    for (flare_client_t *cl = set->head; cl != NULL; cl = cl->next) {
        cworker_t *cw = calloc(1, sizeof(*cw));
        if (cw == NULL)
            goto fail;
        cw->cl = cl;
        cw->w = w;
        cw->next = list;
        list = cw;
    }
    flare__worker_module_set(w, set->slot, list);
    return 0;
fail:
    while (list != NULL) {
        cworker_t *n = list->next;
        free(list);
        list = n;
    }
    return FLARE_ENOMEM;
}

static void dispose_worker(flare_worker_t *w, void *state)
{
    client_set_t *set = state;
    cworker_t *cw = flare__worker_module_state(w, set->slot);
    while (cw != NULL) {
        cworker_t *next = cw->next;
        cw->disposing = true;
        for (origin_t *o = cw->origins, *on; o != NULL; o = on) {
            on = o->next;
            /* calls in flight or waiting: their callbacks run with EUNAVAIL */
            while (o->wait_head != NULL) {
                set_err("the worker is shutting down");
                call_fail(o->wait_head, FLARE_EUNAVAIL);
            }
            while (o->all != NULL) {
                if (o->all->call != NULL) {
                    set_err("the worker is shutting down");
                    call_fail(o->all->call, FLARE_EUNAVAIL); /* closes it */
                } else {
                    conn_close(o->all);
                }
            }
            if (o->resolving != NULL)
                o->resolving->o = NULL;
            if (o->session != NULL)
                SSL_SESSION_free(o->session);
            free(o->host);
            free(o);
        }
        flare_timer_free(cw->sweep);
        flare_timer_free(cw->kick);
        free(cw);
        cw = next;
    }
    flare__worker_module_set(w, set->slot, NULL);
}

static void client_free(flare_client_t *cl)
{
    unsigned n = atomic_load_explicit(&cl->nups, memory_order_relaxed);
    for (unsigned i = 0; i < n; i++) {
        free(cl->ups[i]->cells);
        free(cl->ups[i]);
    }
    pthread_mutex_destroy(&cl->up_lock);
    SSL_CTX_free(cl->ssl_ctx);
    free(cl->ca_file);
    for (unsigned i = 0; i < cl->npins; i++)
        free(cl->pins[i].host);
    free(cl->pins);
    free(cl);
}

/* Parses one address of a resolve entry into a. */
static bool pin_addr(const char *s, size_t n, uint16_t port, addr_t *a)
{
    char buf[INET6_ADDRSTRLEN + 2];
    if (n >= 2 && s[0] == '[' && s[n - 1] == ']') {
        s++;
        n -= 2;
    }
    if (n == 0 || n >= sizeof(buf))
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    struct sockaddr_in *s4 = (struct sockaddr_in *)&a->sa;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&a->sa;
    memset(a, 0, sizeof(*a));
    if (inet_pton(AF_INET, buf, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons(port);
        a->len = sizeof(*s4);
    } else if (inet_pton(AF_INET6, buf, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(port);
        a->len = sizeof(*s6);
    } else {
        return false;
    }
    return true;
}

/* Parses "host:port:addr[,addr]..." into p; 0, FLARE_EINVAL or FLARE_ENOMEM. */
static int pin_parse(const char *e, pin_t *p)
{
    const char *c1 = strchr(e, ':');
    const char *c2 = c1 != NULL ? strchr(c1 + 1, ':') : NULL;
    if (c1 == NULL || c2 == NULL || c1 == e)
        return FLARE_EINVAL;
    unsigned long port = 0;
    for (const char *d = c1 + 1; d < c2; d++) {
        if (*d < '0' || *d > '9' || port > 65535)
            return FLARE_EINVAL;
        port = port * 10 + (unsigned long)(*d - '0');
    }
    if (c2 == c1 + 1 || port == 0 || port > 65535)
        return FLARE_EINVAL;
    p->port = (uint16_t)port;
    for (const char *a = c2 + 1;;) {
        const char *end = strchr(a, ',');
        size_t n = end != NULL ? (size_t)(end - a) : strlen(a);
        if (p->naddrs == MAX_ADDRS || !pin_addr(a, n, p->port, &p->addrs[p->naddrs]))
            return FLARE_EINVAL;
        p->naddrs++;
        if (end == NULL)
            break;
        a = end + 1;
    }
    p->host = strndup(e, (size_t)(c1 - e));
    return p->host != NULL ? 0 : FLARE_ENOMEM;
}

/* The sum over the workers of one upstream's cells. */
static void upstat_sum(const flare_client_t *cl, const upstat_t *u, upcell_t *t)
{
    memset(t, 0, sizeof(*t));
    for (unsigned w = 0; w < cl->ncells; w++) {
        upcell_t *c = &u->cells[w];
        for (unsigned k = 0; k < 5; k++)
            t->answers[k] += flare__ctr_get(&c->answers[k]);
        for (unsigned k = 0; k < E_KINDS; k++)
            t->errors[k] += flare__ctr_get(&c->errors[k]);
        for (unsigned b = 0; b <= FLARE__HIST_NB; b++)
            t->hist[b] += flare__ctr_get(&c->hist[b]);
        t->sum_ns += flare__ctr_get(&c->sum_ns);
    }
}

/* The metrics collector: every client's upstreams (docs/client.md). On the
 * scraping thread. */
static void collect(flare_metrics_writer_t *mw, void *ud)
{
    client_set_t *set = ud;
    static const char *const classes[5] = { "1xx", "2xx", "3xx", "4xx", "5xx" };
    for (int fam = 0; fam < 3; fam++) {
        bool started = false;
        for (flare_client_t *cl = set->head; cl != NULL; cl = cl->next) {
            unsigned n = atomic_load_explicit(&cl->nups, memory_order_acquire);
            char idx[16];
            snprintf(idx, sizeof(idx), "%u", cl->index);
            for (unsigned i = 0; i < n; i++) {
                if (!started) {
                    if (fam == 0)
                        flare_metrics_family(mw, "flare_client_requests_total", "counter",
                                             "Answers from upstreams (flare_client), by status "
                                             "class");
                    else if (fam == 1)
                        flare_metrics_family(
                            mw, "flare_client_errors_total", "counter",
                            "Upstream calls that ended without an answer, by kind");
                    else
                        flare_metrics_family(mw, "flare_client_request_duration_seconds",
                                             "histogram",
                                             "Upstream calls answered: from the call to the "
                                             "whole answer");
                    started = true;
                }
                upcell_t t;
                upstat_sum(cl, cl->ups[i], &t);
                const char *up = cl->ups[i]->name;
                if (fam == 0) {
                    for (unsigned k = 0; k < 5; k++)
                        flare_metrics_sample(mw, "flare_client_requests_total",
                                             (const char *[]){ "client", idx, "upstream", up,
                                                               "class", classes[k], NULL },
                                             (double)t.answers[k]);
                } else if (fam == 1) {
                    for (unsigned k = 0; k < E_KINDS; k++)
                        flare_metrics_sample(mw, "flare_client_errors_total",
                                             (const char *[]){ "client", idx, "upstream", up,
                                                               "kind", err_kind[k], NULL },
                                             (double)t.errors[k]);
                } else {
                    uint64_t cum = 0;
                    for (unsigned b = 0; b <= FLARE__HIST_NB; b++) {
                        char le[32];
                        if (b < FLARE__HIST_NB)
                            snprintf(le, sizeof(le), "%g", (double)flare__hist_bounds_ns[b] / 1e9);
                        else
                            snprintf(le, sizeof(le), "+Inf");
                        cum += t.hist[b];
                        flare_metrics_sample(
                            mw, "flare_client_request_duration_seconds_bucket",
                            (const char *[]){ "client", idx, "upstream", up, "le", le, NULL },
                            (double)cum);
                    }
                    const char *lb[] = { "client", idx, "upstream", up, NULL };
                    flare_metrics_sample(mw, "flare_client_request_duration_seconds_sum", lb,
                                         (double)t.sum_ns / 1e9);
                    flare_metrics_sample(mw, "flare_client_request_duration_seconds_count", lb,
                                         (double)cum);
                }
            }
        }
    }
}

static void free_app(flare_app_t *app, void *state)
{
    (void)app;
    client_set_t *set = state;
    for (flare_client_t *cl = set->head, *n; cl != NULL; cl = n) {
        n = cl->next;
        client_free(cl);
    }
    free(set);
}

int flare_client_new(flare_app_t *app, const flare_client_config_t *cfg, flare_client_t **out)
{
    *out = NULL;
    if (app == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_client_new: app is NULL");
    if (flare__app_running(app))
        return flare__fail(FLARE_ESTATE, 0, "flare_client_new: the app is running");
    flare_client_t *cl = calloc(1, sizeof(*cl));
    if (cl == NULL)
        return FLARE_ENOMEM;
    pthread_mutex_init(&cl->up_lock, NULL);
    if (cfg != NULL)
        cl->cfg = *cfg;
    flare_client_config_t *c = &cl->cfg;
    if (c->connect_timeout_ms == 0)
        c->connect_timeout_ms = 5000;
    if (c->first_byte_timeout_ms == 0)
        c->first_byte_timeout_ms = 30000;
    if (c->idle_timeout_ms == 0)
        c->idle_timeout_ms = 30000;
    if (c->total_timeout_ms == 0)
        c->total_timeout_ms = 60000;
    if (c->pool_idle_ms == 0)
        c->pool_idle_ms = 30000;
    if (c->max_per_origin == 0)
        c->max_per_origin = 32;
    if (c->max_response == 0)
        c->max_response = (size_t)64 << 20;
    int rc = FLARE_ENOMEM;
    if (c->ca_file != NULL && (cl->ca_file = strdup(c->ca_file)) == NULL)
        goto fail;
    c->ca_file = cl->ca_file;
    size_t npins = 0;
    while (c->resolve != NULL && c->resolve[npins] != NULL)
        npins++;
    if (npins > 0 && (cl->pins = calloc(npins, sizeof(*cl->pins))) == NULL)
        goto fail;
    while (cl->npins < npins) {
        const char *e = c->resolve[cl->npins];
        rc = pin_parse(e, &cl->pins[cl->npins++]); /* a partial entry is freed with the rest */
        if (rc == FLARE_EINVAL)
            rc = flare__fail(FLARE_EINVAL, 0,
                             "flare_client_new: resolve entry \"%s\": want "
                             "host:port:addr[,addr]... (at most %d addresses)",
                             e, MAX_ADDRS);
        if (rc != 0)
            goto fail;
    }
    c->resolve = NULL; /* the caller's array is not kept */
    rc = FLARE_ENOMEM;
    cl->ssl_ctx = SSL_CTX_new(TLS_client_method());
    if (cl->ssl_ctx == NULL)
        goto fail;
    SSL_CTX_set_min_proto_version(cl->ssl_ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(cl->ssl_ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_session_cache_mode(cl->ssl_ctx, SSL_SESS_CACHE_CLIENT);
    if (cl->ca_file != NULL ? SSL_CTX_load_verify_locations(cl->ssl_ctx, cl->ca_file, NULL) != 1
                            : SSL_CTX_set_default_verify_paths(cl->ssl_ctx) != 1) {
        unsigned long e = ERR_get_error();
        char why[160];
        ERR_error_string_n(e, why, sizeof(why));
        ERR_clear_error();
        rc = flare__fail(FLARE_ETLS, 0, "flare_client_new: CA %s: %s",
                         cl->ca_file ? cl->ca_file : "(system store)", why);
        goto fail;
    }
    client_set_t *set = flare__app_module_state(app, &client_module);
    if (set == NULL) {
        set = calloc(1, sizeof(*set));
        if (set == NULL)
            goto fail;
        rc = flare__app_module(app, &client_module, set, &set->slot);
        if (rc != 0) {
            free(set);
            goto fail;
        }
        /* the app's clients share one collector: each family written once */
        rc = flare_metrics_collector(app, collect, set);
        if (rc != 0)
            goto fail; /* the set stays registered, empty: freed with the app */
    }
    cl->index = set->n++;
    cl->next = set->head;
    set->head = cl;
    *out = cl;
    return 0;
fail:
    client_free(cl);
    return rc;
}

/* ---- starting a call ---- */

static cworker_t *worker_state(flare_client_t *cl, flare_worker_t *w)
{
    client_set_t *set = flare__app_module_state(w->app, &client_module);
    if (set == NULL)
        return NULL;
    for (cworker_t *cw = flare__worker_module_state(w, set->slot); cw != NULL; cw = cw->next) {
        if (cw->cl == cl)
            return cw;
    }
    return NULL;
}

/* This worker's cell of o's upstream entry, made on first use (past
 * UP_MAX upstreams: the entry "other"); NULL when out of memory (the calls
 * are then not counted). On the worker's thread. */
static upcell_t *upstat_cell(cworker_t *cw, const origin_t *o)
{
    flare_client_t *cl = cw->cl;
    char name[sizeof(((upstat_t *)0)->name)];
    snprintf(name, sizeof(name), o->ip6 ? "%s://[%s]:%u" : "%s://%s:%u", o->tls ? "https" : "http",
             o->host, o->port);
    unsigned wid = flare_worker_id(cw->w);
    upcell_t *cell = NULL;
    pthread_mutex_lock(&cl->up_lock);
    unsigned n = atomic_load_explicit(&cl->nups, memory_order_relaxed);
    if (n >= UP_MAX)
        snprintf(name, sizeof(name), "other");
    unsigned i = 0;
    while (i < n && strcmp(cl->ups[i]->name, name) != 0)
        i++;
    if (i == n && n <= UP_MAX) {
        if (cl->ncells == 0)
            cl->ncells = flare__app_nworkers(cw->w->app);
        upstat_t *u = calloc(1, sizeof(*u));
        size_t bytes = cl->ncells * sizeof(upcell_t);
        if (u != NULL && (u->cells = aligned_alloc(_Alignof(upcell_t), bytes)) != NULL) {
            memset(u->cells, 0, bytes);
            memcpy(u->name, name, sizeof(name));
            cl->ups[n] = u;
            atomic_store_explicit(&cl->nups, n + 1, memory_order_release);
        } else {
            free(u);
        }
    }
    if (i < atomic_load_explicit(&cl->nups, memory_order_relaxed) && wid < cl->ncells)
        cell = &cl->ups[i]->cells[wid];
    pthread_mutex_unlock(&cl->up_lock);
    return cell;
}

static origin_t *origin_get(cworker_t *cw, const flare_url_t *u)
{
    for (origin_t *o = cw->origins; o != NULL; o = o->next) {
        if (o->tls == u->tls && o->port == u->port && strlen(o->host) == u->host.len &&
            strncasecmp(o->host, u->host.ptr, u->host.len) == 0)
            return o;
    }
    origin_t *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return NULL;
    o->host = malloc(u->host.len + 1);
    if (o->host == NULL) {
        free(o);
        return NULL;
    }
    memcpy(o->host, u->host.ptr, u->host.len);
    o->host[u->host.len] = '\0';
    o->port = u->port;
    o->tls = u->tls;
    o->ip6 = u->ip6;
    o->cw = cw;
    /* a literal address needs no resolution */
    struct sockaddr_in *s4 = (struct sockaddr_in *)&o->addrs[0].sa;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&o->addrs[0].sa;
    if (inet_pton(AF_INET, o->host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons(o->port);
        o->addrs[0].len = sizeof(*s4);
        o->naddrs = 1;
        o->addr_until = UINT64_MAX;
    } else if (inet_pton(AF_INET6, o->host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(o->port);
        o->addrs[0].len = sizeof(*s6);
        o->naddrs = 1;
        o->addr_until = UINT64_MAX;
    } else {
        for (unsigned i = 0; i < cw->cl->npins; i++) {
            const pin_t *p = &cw->cl->pins[i];
            if (p->port == o->port && strcasecmp(p->host, o->host) == 0) {
                memcpy(o->addrs, p->addrs, sizeof(p->addrs));
                o->naddrs = p->naddrs;
                o->addr_until = UINT64_MAX;
                break;
            }
        }
    }
    if (cw->w->metrics != NULL)
        o->stats = upstat_cell(cw, o);
    o->next = cw->origins;
    cw->origins = o;
    return o;
}

static bool line_ok(const char *s)
{
    for (; *s; s++) {
        if (*s == '\r' || *s == '\n' || *s == '\0')
            return false;
    }
    return true;
}

/* The request's bytes: head and body. */
static int serialize(flare_client_call_t *call, const char *method, const flare_url_t *u,
                     const flare_client_req_t *req)
{
    flare_str_t host =
        req->host != NULL ? (flare_str_t){ req->host, strlen(req->host) } : u->authority;
    size_t need = strlen(method) + u->target.len + host.len + 128 + req->body.len;
    for (size_t i = 0; req->headers != NULL && req->headers[i] != NULL; i++)
        need += strlen(req->headers[i]) + 2;
    char *p = malloc(need);
    if (p == NULL)
        return FLARE_ENOMEM;
    size_t n = (size_t)snprintf(p, need, "%s %s%.*s HTTP/1.1\r\nHost: %.*s\r\n", method,
                                u->target.ptr[0] == '?' ? "/" : "", (int)u->target.len,
                                u->target.ptr, (int)host.len, host.ptr);
    for (size_t i = 0; req->headers != NULL && req->headers[i] != NULL; i++) {
        size_t l = strlen(req->headers[i]);
        memcpy(p + n, req->headers[i], l);
        memcpy(p + n + l, "\r\n", 2);
        n += l + 2;
    }
    bool body = req->body.len > 0 || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
                strcmp(method, "PATCH") == 0;
    if (body)
        n += (size_t)snprintf(p + n, need - n, "Content-Length: %zu\r\n", req->body.len);
    memcpy(p + n, "\r\n", 2);
    n += 2;
    if (req->body.len > 0) {
        memcpy(p + n, req->body.ptr, req->body.len);
        n += req->body.len;
    }
    call->out = p;
    call->outlen = n;
    return 0;
}

/* Headers the client writes itself, or that would change the framing:
 * those of the hop-by-hop fields (http/hop.h) that do, Host and
 * Content-Length. */
static bool reserved_header(flare_str_t name)
{
    enum {
        FRAMING = FLARE_HOP_CONNECTION | FLARE_HOP_TE | FLARE_HOP_TRAILER |
                  FLARE_HOP_TRANSFER_ENCODING | FLARE_HOP_UPGRADE
    };
    return (flare__http_hop_field(name) & FRAMING) != 0 || FLARE__IEQ(name, "host") ||
           FLARE__IEQ(name, "content-length");
}

/* The inbound request lost its client: the call fails from the loop (not
 * inside the connection's close, where the handler's answer must not end
 * the exchange). */
static void bind_abort(void *ud)
{
    bind_t *b = ud;
    if (b->call != NULL) {
        b->call->aborted = true;
        flare_timer_start(b->call->timer, 0);
    }
}

/* The inbound request ended (its arena goes): the call, if still running,
 * forgets it. */
static void bind_end(void *ud)
{
    bind_t *b = ud;
    if (b->call != NULL)
        b->call->bind = NULL;
    b->call = NULL;
}

/* Keeps what the call's next requests need when it follows redirects. */
static int redir_new(flare_client_call_t *call, const char *method, const flare_client_req_t *req)
{
    redir_t *rd = calloc(1, sizeof(*rd));
    if (rd == NULL)
        return FLARE_ENOMEM;
    call->rd = rd;
    rd->left = rd->max = req->max_redirects;
    size_t n = 0;
    while (req->headers != NULL && req->headers[n] != NULL)
        n++;
    rd->url = strdup(req->url);
    rd->method = strdup(method);
    rd->headers = calloc(n + 1, sizeof(char *));
    if (rd->url == NULL || rd->method == NULL || rd->headers == NULL)
        return FLARE_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if ((rd->headers[i] = strdup(req->headers[i])) == NULL)
            return FLARE_ENOMEM;
    }
    if (req->host != NULL && (rd->host = strdup(req->host)) == NULL)
        return FLARE_ENOMEM;
    if (req->body.len > 0) {
        if ((rd->body = malloc(req->body.len)) == NULL)
            return FLARE_ENOMEM;
        memcpy(rd->body, req->body.ptr, req->body.len);
        rd->body_len = req->body.len;
    }
    return 0;
}

int flare_client_request(flare_client_t *c, flare_worker_t *w, const flare_client_req_t *req,
                         flare_client_fn cb, void *ud, flare_client_call_t **out)
{
    if (out != NULL)
        *out = NULL;
    if (c == NULL || w == NULL || req == NULL || cb == NULL || req->url == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_client_request: NULL argument");
    if (!flare__worker_on_thread(w))
        return flare__fail(FLARE_ESTATE, 0, "flare_client_request: not on the worker's thread");
    cworker_t *cw = worker_state(c, w);
    if (cw == NULL)
        return flare__fail(FLARE_ESTATE, 0, "flare_client_request: the worker is not running");
    const char *method = req->method ? req->method : "GET";
    flare_str_t m = { method, strlen(method) };
    if (!flare__is_token(m))
        return flare__fail(FLARE_EINVAL, 0, "flare_client_request: bad method \"%s\"", method);
    flare_url_t u;
    const char *why;
    if (flare__url_parse(req->url, &u, &why) != 0)
        return flare__fail(FLARE_EINVAL, 0, "flare_client_request: %s: %s", req->url, why);
    if (req->host != NULL && (req->host[0] == '\0' || !line_ok(req->host)))
        return flare__fail(FLARE_EINVAL, 0, "flare_client_request: bad host \"%s\"", req->host);
    for (size_t i = 0; req->headers != NULL && req->headers[i] != NULL; i++) {
        const char *h = req->headers[i];
        const char *colon = strchr(h, ':');
        if (colon == NULL || colon == h || !line_ok(h) ||
            !flare__is_token((flare_str_t){ h, (size_t)(colon - h) }))
            return flare__fail(FLARE_EINVAL, 0, "flare_client_request: bad header \"%s\"", h);
        if (reserved_header((flare_str_t){ h, (size_t)(colon - h) }))
            return flare__fail(FLARE_EINVAL, 0,
                               "flare_client_request: \"%s\": the client sets this header", h);
    }
    if (cw->sweep == NULL) {
        int rc = flare_timer_new(w, sweep, cw, &cw->sweep);
        if (rc == 0)
            rc = flare_timer_new(w, kick, cw, &cw->kick);
        if (rc != 0) {
            flare_timer_free(cw->sweep);
            cw->sweep = NULL;
            return rc;
        }
        flare_timer_start(cw->sweep, SWEEP_MS);
    }
    origin_t *o = origin_get(cw, &u);
    if (o == NULL)
        return FLARE_ENOMEM;
    flare_client_call_t *call = calloc(1, sizeof(*call));
    if (call == NULL)
        return FLARE_ENOMEM;
    call->cw = cw;
    call->o = o;
    if (o->stats != NULL)
        call->t0_ns = mono_ns();
    call->cb = cb;
    call->ud = ud;
    call->head_req = strcmp(method, "HEAD") == 0;
    call->idempotent = call->head_req || strcmp(method, "GET") == 0 || strcmp(method, "PUT") == 0 ||
                       strcmp(method, "DELETE") == 0 || strcmp(method, "OPTIONS") == 0;
    int rc = serialize(call, method, &u, req);
    if (rc == 0 && req->max_redirects > 0)
        rc = redir_new(call, method, req);
    if (rc == 0)
        rc = flare_timer_new(w, call_timeout, call, &call->timer);
    if (rc == 0 && req->req != NULL) {
        /* a failed registration leaves b unlinked: its hooks find no call */
        bind_t *b = flare_req_alloc(req->req, sizeof(*b));
        if (b == NULL) {
            rc = FLARE_ENOMEM;
        } else {
            b->call = NULL;
            if ((rc = flare_req_on_cleanup(req->req, bind_end, b)) == 0 &&
                (rc = flare_req_on_abort(req->req, bind_abort, b)) == 0) {
                b->call = call;
                call->bind = b;
            }
        }
    }
    if (rc != 0) {
        call_free(call);
        return rc;
    }
    unsigned total = req->timeout_ms ? req->timeout_ms : c->cfg.total_timeout_ms;
    call->deadline = cw_now(cw) + total;
    phase(call, 0);
    /* started from the loop, never inside this call: the callback may not
     * run before the caller has its handle */
    wait_add(call);
    if (out != NULL)
        *out = call;
    if (!flare_timer_active(cw->kick))
        flare_timer_start(cw->kick, 0);
    return 0;
}

void flare_client_cancel(flare_client_call_t *call)
{
    if (call == NULL)
        return;
    origin_t *o = call->o;
    if (call->waiting)
        wait_remove(call);
    if (call->conn != NULL) {
        cconn_t *c = call->conn;
        call->conn = NULL;
        c->call = NULL;
        conn_close(c);
    }
    call_free(call);
    origin_dispatch(o);
}
