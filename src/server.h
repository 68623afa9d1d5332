/* Internal structures shared by app.c, net/ and http1/: the app, workers,
 * connections and exchanges (one request + its response). */
#ifndef FLARE_SERVER_H
#define FLARE_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "core/arena.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/core.h"
#include "flare/flare.h"
#include "http1/parser.h"
#include "loop/loop.h"
#include "module.h"
#include "router/router.h"

typedef struct flare_conn flare_conn_t;

/* Protocol switch (101): the new owner of the socket. Called on the worker
 * once the 101 response is flushed; `pending` holds bytes the client sent
 * after the upgrade request (valid during the call only). The callee owns fd
 * from then on (and must close it). Called with fd -1 instead when the
 * connection closes before the 101 is out. */
typedef void (*flare_upgrade_fn)(flare_worker_t *w, int fd, const char *pending, size_t npending,
                                 void *ud);
typedef struct flare_route flare_route_t;

/* A middleware as the request path sees it: hooks + the slot of its
 * statistics. Chains are flattened per route when the app starts, so the
 * request path walks one array. */
typedef struct flare_mw_rt {
    flare_before_fn before;
    flare_after_fn after;
    void *ud;
    unsigned id;
} flare_mw_rt_t;

typedef struct flare_mw_list {
    flare_mw_rt_t *v;
    size_t n, cap;
} flare_mw_list_t;

/* per worker, per middleware; written by the worker, read by anyone */
typedef struct flare_mw_stat {
    _Atomic uint64_t count, total_ns, max_ns;
} flare_mw_stat_t;

struct flare_route {
    flare_handler_fn fn;
    void *ud;
    flare_method_t method;
    struct flare_group *group;
    flare_mw_list_t own;  /* route-level middlewares */
    flare_mw_rt_t *chain; /* app + groups + own, built at start */
    uint32_t nchain;
    bool has_after;
};

struct flare_group {
    flare_app_t *app;
    char *prefix; /* owned */
    struct flare_group *next;
    struct flare_group *parent;
    flare_mw_list_t mws;
};

typedef struct flare_job_pool flare_job_pool_t;

typedef struct flare_owned {
    struct flare_owned *next;
    void *ptr;
    void (*free_fn)(void *ptr);
} flare_owned_t;

/* Hands ptr to the app: free_fn(ptr) runs in flare_app_free. On failure
 * (out of memory) free_fn(ptr) runs at once and FLARE_ENOMEM is returned. */
int flare__app_own(flare_app_t *app, void *ptr, void (*free_fn)(void *ptr));

struct flare_app {
    flare_config_t cfg;
    flare_http_limits_t limits;
    flare_router_t *router;
    flare_route_t **routes; /* owned route records */
    size_t nroutes, caproutes;
    struct flare_group *groups;
    struct flare_worker *workers; /* made by the first run, freed with the app */
    unsigned nworkers;
    _Atomic int port;     /* 0 until the listeners of the current run are bound */
    _Atomic bool running; /* flare_app_run is between its start and its return */
    /* Other threads reach the workers only through flare__app_enter/leave:
     * the top bit says the workers are up (from the moment every worker has
     * started until all of them have been joined), the rest counts callers
     * inside. Closing it waits for them to leave before anything is freed. */
    _Atomic uint64_t gate;
    int stop_fd; /* eventfd, from flare_app_new to flare_app_free: stop -> run */
    flare_job_pool_t *jobs;
    flare_mw_list_t mws; /* app-level middlewares (also the chain of unmatched requests) */
    bool mws_have_after;
    char **mw_names; /* by middleware id */
    /* the modules (module.h: WebSocket, ...) in registration order, with
     * their app-wide state; written only while the app is not running */
    struct flare_module_reg {
        const flare_module_t *m;
        void *state;
    } modules[FLARE__MODULES_MAX];
    unsigned nmodules;
    struct flare_owned *owned; /* objects freed with the app (middleware state) */
    unsigned nmw;
};

/* Buffer pool entry: a free read/write buffer of `cap` bytes. */
typedef struct flare_pool_buf {
    struct flare_pool_buf *next;
} flare_pool_buf_t;

#define FLARE_CONN_BUF 16384

struct flare_worker {
    /* set once, when the app first runs, and kept until flare_app_free: a
     * worker pointer held by another thread stays readable (its calls
     * then fail with FLARE_ESTATE instead of touching freed memory) */
    flare_app_t *app;
    unsigned id;
    flare_mw_stat_t *mw_stats; /* app->nmw entries, counted since the app was made */
    /* everything from here on is reset for each run */
    flare_loop_t loop;
    pthread_t thread;
    flare__timer_t sweep_timer;  /* timeouts, Date line, drain progress */
    flare__timer_t resume_timer; /* listener paused by the EMFILE guard */
    flare_post_node_t stop_node; /* the drain request: posting it cannot fail */
    flare_io_t listen_io;
    int reserve_fd; /* EMFILE guard */
    unsigned nconns;
    bool draining;
    uint64_t drain_deadline;
    flare_conn_t *conns;    /* all live connections (sweep list) */
    flare_conn_t *dead;     /* closed this iteration, freed after the batch */
    flare_pool_buf_t *bufs; /* free FLARE_CONN_BUF-byte buffers */
    unsigned nbufs;
    struct flare_req *free_ex; /* recycled exchanges */
    /* exchanges whose connection closed while a handler still owed the
     * response (linked by next/oprev): the handler's late send frees one;
     * those never completed are freed at worker shutdown, since the timers
     * that would have completed them are cancelled then, not fired */
    struct flare_req *orphans;
    unsigned nfree_ex;
    time_t date_sec;
    char date_line[FLARE_DATE_LINE_LEN];
    /* connections a module holds (flare__worker_conn_hold: an upgraded
     * WebSocket...): draining waits for them too */
    unsigned nmodule_conns;
    unsigned nmodules_up; /* modules whose init_worker ran this run (dispose is owed) */
    void *module_state[FLARE__MODULES_MAX]; /* by module slot */
    /* public handles (src/watch.c): every live one, for shutdown to free */
    struct flare_timer *utimers;
    struct flare_watch *watches;
    struct flare_watch *dead_watches; /* freed after the event batch */
    bool handles_open;                /* the loop runs: handles can be made */
};

/* An exchange: one request and its response. Recycled through the worker. */
enum {
    EX_SENT = 1u << 0, /* response complete (all bytes queued somewhere) */
    EX_IN_HANDLER = 1u << 1,
    EX_HEAD_ONLY = 1u << 2,     /* HEAD: headers only */
    EX_CLOSE = 1u << 3,         /* close the connection after this response */
    EX_STREAM = 1u << 4,        /* chunked streaming begun */
    EX_DETACHED = 1u << 5,      /* views point into ex-owned memory */
    EX_ERROR = 1u << 6,         /* framing error response: stop parsing */
    EX_ORPHAN = 1u << 7,        /* connection gone: sends are no-ops */
    EX_NEED_CONTINUE = 1u << 8, /* owes "100 Continue" once it is the queue head */
    EX_AFTER_DONE = 1u << 9,    /* after hooks have run */
    EX_HAS_AFTER = 1u << 10,    /* the chain has after hooks */
};

typedef struct flare_res_hdr {
    struct flare_res_hdr *next;
    flare_str_t name, value;
} flare_res_hdr_t;

typedef struct flare_attr {
    struct flare_attr *next;
    const char *key;
    const char *type; /* NULL: string, FLARE__ATTR_INT: integer, else pointer tag */
    flare_str_t str;
    int64_t num;
    void *ptr;
} flare_attr_t;

typedef struct flare_cleanup {
    struct flare_cleanup *next;
    flare_task_fn fn;
    void *ud;
} flare_cleanup_t;

/* The response half of an exchange: what flare_res_t points to. Embedded
 * first in struct flare_req, so the two handles are distinct types for the
 * compiler while converting one into the other costs nothing at run time
 * (flare__res_ex: an offset of 0). */
struct flare_res {
    int status; /* status being produced (after hooks), 0 before */
    flare_res_hdr_t *hdrs, **hdrs_tail;
};

struct flare_req {
    struct flare_res res; /* handlers get &ex->res */
    flare_conn_t *conn;
    flare_worker_t *worker;
    struct flare_req *next;  /* connection queue / free list / w->orphans */
    struct flare_req *oprev; /* w->orphans only */
    const flare_route_t *route;
    uint32_t flags;
    flare_http_head_t head;
    flare_str_t body;
    const char *raw; /* start of the head in the read buffer */
    size_t raw_len;
    flare_route_match_t match;  /* route, params, allowed */
    const flare_mw_rt_t *chain; /* middlewares of this request */
    uint32_t nchain, mw_pos;    /* next before hook to run */
    flare_chunked_t chunked;
    uint64_t body_need;  /* Content-Length still to receive */
    flare_buf_t bodybuf; /* body that spans reads; kept for reuse */
    flare_buf_t out;     /* serialized response when not at the queue head */
    size_t out_head_end; /* offset in out where the head's blank line starts */
    flare_cleanup_t *cleanups;
    struct flare_attr *attrs;
    flare_arena_t arena;
    flare_header_t *headers; /* capacity app->limits.max_headers */
    /* a file body waiting for this exchange to reach the queue head (owned;
     * -1 when none: a cleanup hook closes it if it never goes out) */
    int file_fd;
    uint64_t file_off, file_len;
};

/* The exchange a response belongs to (container_of). */
static inline struct flare_req *flare__res_ex(flare_res_t *res)
{
    return (struct flare_req *)((char *)res - offsetof(struct flare_req, res));
}
_Static_assert(offsetof(struct flare_req, res) == 0, "flare__res_ex should compile to nothing");

/* Connection flags */
enum {
    C_CLOSING = 1u << 0,  /* close once the output is flushed */
    C_RD_EOF = 1u << 1,   /* peer finished sending */
    C_IN_BATCH = 1u << 2, /* inside on_read processing: flush at the end */
    C_LINGER = 1u << 3,   /* write side shut, draining input before close */
    C_DEAD = 1u << 4,
    C_WANT_WRITE = 1u << 5,
    C_READ_PAUSED = 1u << 6,
    C_HAD_REQUEST = 1u << 7,
    C_LINE_SEEN = 1u << 8, /* the partial head has its request line */
    C_UPGRADE = 1u << 9,   /* 101 sent: hand the socket over once flushed */
};

/* Output that is not in wbuf: borrowed memory (fd -1: ptr, len) or a file
 * range (fd >= 0: len bytes from offset off, sent with sendfile). */
typedef struct flare_outseg {
    size_t at; /* offset in wbuf before which this segment goes */
    const char *ptr;
    size_t len;
    flare_task_fn release;
    void *ud;
    int fd;
    uint64_t off;
} flare_outseg_t;

struct flare_conn {
    flare_io_t io;
    uint32_t flags;
    uint32_t nqueue;
    flare_worker_t *w;
    char *rbuf;
    uint32_t rlen, rcap, rpos, scan;
    flare_buf_t wbuf;                /* serialized responses not yet written */
    size_t wsent;                    /* bytes of the whole output (wbuf + segs) already written */
    struct flare_req *qhead, *qtail; /* in-flight exchanges, in request order */
    struct flare_req *recv;          /* exchange whose body is still arriving */
    flare_outseg_t *segs;
    uint32_t nsegs, capsegs;
    flare_upgrade_fn upgrade_fn; /* C_UPGRADE: who takes the socket */
    void *upgrade_ud;
    uint8_t peer[16]; /* client address (IPv4 in the first 4 bytes) */
    uint8_t peer_family;
    /* the connection came through a TLS listener: set by the TLS layer when
     * it accepts the connection, false (calloc) for plain TCP. Read by
     * flare_req_secure. */
    bool secure;
    uint64_t t_active; /* last progress (ms) */
    uint64_t t_head;   /* first byte of the current head (ms) */
    flare_conn_t *prev, *next;
};

/* app.c: the window in which other threads may reach the workers (see
 * flare_app_t.gate). enter: 0, or FLARE_ESTATE when the workers are not up
 * (not started yet, or stopped); every 0 is paired with one leave. */
int flare__app_enter(flare_app_t *app);
void flare__app_leave(flare_app_t *app);

/* config.c: *out = *in (NULL: the defaults) with every zero field set to
 * its default, then checked. 0, or FLARE_EINVAL with flare_last_error()
 * naming the field and its bound. */
int flare__config_resolve(flare_config_t *out, const flare_config_t *in);

/* net/ */
void flare__listener_resume(void *ud); /* the resume_timer callback */
int flare__listen_probe(const char *addr, int *port_out);
int flare__listen_socket(const char *addr, int port_override, int backlog, int *port_out);
void flare__worker_accept_cb(flare_loop_t *l, flare_io_t *io, uint32_t events);

/* http1/conn.c */
void flare__conn_open(flare_worker_t *w, int fd, const struct sockaddr *sa);
void flare__conn_close(flare_conn_t *c);
void flare__conn_flush(flare_conn_t *c);
void flare__conn_sweep(flare_worker_t *w);
void flare__conn_free_dead(flare_worker_t *w);
void flare__conn_drain(flare_worker_t *w);
void flare__ex_complete(struct flare_req *ex);
/* Appends an output segment at the end of c->wbuf (fd -1: memory, else a
 * file range). On failure (out of memory) release(ud) runs, the fd is
 * closed, and FLARE_ENOMEM is returned. */
int flare__conn_add_seg(flare_conn_t *c, const flare_outseg_t *seg);
/* A file range as the next output (takes fd: closed once sent or dropped). */
int flare__conn_push_file(flare_conn_t *c, int fd, uint64_t off, uint64_t len);

/* mw/chain.c */
int flare__chain_run(struct flare_req *ex);
void flare__chain_after(struct flare_req *ex);
int flare__mw_list_add(flare_app_t *app, flare_mw_list_t *l, const flare_middleware_t *mw);
int flare__chains_build(flare_app_t *app);
void flare__chains_free(flare_app_t *app);

/* http1/request.c: a path parameter as sent (not percent-decoded), for
 * callers that decode and check it themselves (static files) */
flare_str_t flare__req_param_raw(const flare_req_t *req, const char *name);

/* http1/response.c */
int flare__res_error(struct flare_req *ex, int status, const char *msg);
int flare__res_auto(struct flare_req *ex); /* 404, 405 + Allow, automatic OPTIONS */
/* Answers 101 Switching Protocols (Upgrade: <token>, Connection: Upgrade,
 * plus headers added with flare_res_header), stops reading requests, and
 * once everything before it is flushed hands the socket to fn. */
int flare__res_upgrade(flare_res_t *res, flare_str_t token, flare_upgrade_fn fn, void *ud);
/* Adds ready-made header lines ("Name: value\r\n"..., trusted: not
 * checked, not copied; valid until the response head is serialized, which
 * the flare_res_send* call does). For the web layer's precomputed headers. */
int flare__res_header_block(flare_res_t *res, flare_str_t block);
int flare__serialize_head(struct flare_req *ex, flare_buf_t *out, int status, flare_str_t ctype,
                          uint64_t clen, bool chunked);

/* worker buffers/exchanges */
char *flare__worker_buf_get(flare_worker_t *w);
void flare__worker_buf_put(flare_worker_t *w, char *buf);
struct flare_req *flare__ex_get(flare_worker_t *w);
void flare__ex_put(flare_worker_t *w, struct flare_req *ex);

/* src/watch.c: frees the watchers freed during this batch; at shutdown,
 * stops and frees every timer and watcher their owner left (no callback)
 * and refuses new ones. */
void flare__watch_free_dead(flare_worker_t *w);
void flare__handles_dispose(flare_worker_t *w);

static inline void flare__worker_update_date(flare_worker_t *w, time_t now)
{
    if (now != w->date_sec) {
        w->date_sec = now;
        flare__format_date_line(w->date_line, now);
    }
}

/* job pool */
int flare__jobs_start(flare_app_t *app);
void flare__jobs_stop(flare_app_t *app);

#endif
