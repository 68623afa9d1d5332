/* Settings meet the app: the logger, the session store, the listeners and
 * static directories they make (flare_settings_setup), --check-config's
 * scratch app, and the SIGHUP hook that re-reads them. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "app_svc.h"
#include "config.h"
#include "worker.h"
#include "flare/log.h"
#include "flare/redis.h"
#include "flare/tls.h"
#include "obs/settings_int.h"

static int ensure_priv(flare_settings_t *s)
{
    if (s->priv != NULL)
        return 0;
    s->priv = calloc(1, sizeof(*s->priv));
    return s->priv != NULL ? 0 : FLARE_ENOMEM;
}

int flare_settings_listen(flare_settings_t *s, flare_app_t *app)
{
    if (ensure_priv(s) != 0)
        return FLARE_ENOMEM;
    for (size_t i = 0; i < s->nlisteners; i++) {
        const flare_settings_listener_t *l = &s->listeners[i];
        flare_tls_config_t tls = { .cert_file = l->tls_cert,
                                   .key_file = l->tls_key,
                                   .handshake_timeout_ms = s->tls_handshake_timeout_ms };
        flare_tls_cert_t *more = NULL;
        if (l->nsni > 0) {
            more = calloc(l->nsni, sizeof(*more));
            if (more == NULL)
                return flare__settings_nomem(s);
            for (size_t j = 0; j < l->nsni; j++)
                more[j] = (flare_tls_cert_t){ l->sni[j].cert, l->sni[j].key };
            tls.more_certs = more;
            tls.nmore_certs = l->nsni;
        }
        int rc = flare_app_listen(app, l->addr, l->tls_cert != NULL ? &tls : NULL);
        free(more); /* flare_app_listen copied what it keeps */
        if (rc != 0) {
            flare__settings_fail(s, NULL, NULL, "%s: listen %s: %s: %s", l->origin, l->addr,
                                 flare_strerror(rc), flare_last_error());
            return rc;
        }
    }
    if (s->admin_listen != NULL) {
        int rc = flare_app_admin_listen(app, s->admin_listen);
        if (rc != 0) {
            flare__settings_fail(s, NULL, NULL, "admin-listen %s: %s: %s", s->admin_listen,
                                 flare_strerror(rc), flare_last_error());
            return rc;
        }
    }
    return 0;
}

void flare_settings_ws_config(const flare_settings_t *s, flare_ws_config_t *cfg)
{
    if (s->nws_origins > 0)
        cfg->origins = (const char *const *)s->ws_origins;
}

void flare_settings_session_config(const flare_settings_t *s, flare_session_config_t *cfg)
{
    const char *v = s->session_secure;
    if (v == NULL)
        return;
    cfg->secure = strcmp(v, "always") == 0  ? FLARE_SESSION_SECURE_ALWAYS
                  : strcmp(v, "never") == 0 ? FLARE_SESSION_SECURE_NEVER
                                            : FLARE_SESSION_SECURE_AUTO;
}

int flare_settings_static(flare_settings_t *s, flare_app_t *app, const flare_static_opts_t *opts)
{
    if (ensure_priv(s) != 0)
        return FLARE_ENOMEM;
    for (size_t i = 0; i < s->nstatics; i++) {
        const char *v = s->statics[i], *eq = v[0] == '/' ? strchr(v, '=') : NULL;
        char prefix[256] = "/static";
        const char *dir = v;
        if (eq != NULL) {
            snprintf(prefix, sizeof(prefix), "%.*s", (int)(eq - v), v);
            dir = eq + 1;
        }
        int rc = flare_static(app, prefix, dir, opts);
        if (rc != 0) {
            /* named as it was given: "--static DIR", "FLARE_STATIC DIR",
             * "hello.yaml: static DIR" */
            int idx = flare__settings_find(s, "static", 6);
            int layer = s->priv->layer != NULL ? s->priv->layer[idx] : LAYER_DEFAULT;
            flare__settings_fail(s, NULL, NULL, "%s%s%s %s: %s%s%s",
                                 layer == LAYER_FILE && s->config_file ? s->config_file : "",
                                 layer == LAYER_FILE && s->config_file ? ": " : "",
                                 layer == LAYER_FLAGS ? "--static"
                                 : layer == LAYER_ENV ? "FLARE_STATIC"
                                                      : "static",
                                 v, flare_strerror(rc), rc == FLARE_EINVAL ? ": " : "",
                                 rc == FLARE_EINVAL ? flare_last_error() : "");
            return rc;
        }
    }
    return 0;
}

int flare_settings_apply(flare_settings_t *s, flare_app_t *app, const flare_static_opts_t *opts)
{
    int rc = flare_settings_listen(s, app);
    return rc != 0 ? rc : flare_settings_static(s, app, opts);
}

/* ---- flare_settings_setup ---- */

/* A logger only when a logging key is set: its writer thread wakes every
 * 10 ms (src/obs/log.c), which a program that logs nothing need not pay
 * (bench/guard.sh counted it as 15 instructions a request in hello); with
 * none, the library's own errors go to stderr as they did. */
static bool log_wanted(const flare_settings_t *s)
{
    return s->log != NULL || s->log_level != NULL || s->log_format != NULL ||
           s->access_log != NULL || s->access_log_format != NULL;
}

static int log_setup(flare_settings_t *s, flare_app_t *app)
{
    if (!log_wanted(s))
        return 0;
    /* the enums were checked by the parser */
    flare_log_config_t lc = { .path = s->log, .access_path = s->access_log };
    if (s->log_level != NULL)
        flare_log_level_parse(s->log_level, &lc.level);
    if (s->log_format != NULL && strcmp(s->log_format, "json") == 0)
        lc.format = FLARE_LOG_JSON;
    if (s->access_log_format != NULL && strcmp(s->access_log_format, "json") == 0)
        lc.access_format = FLARE_ACCESS_JSON;
    int rc = flare_log_setup(app, &lc);
    if (rc != 0) {
        flare__settings_fail(s, NULL, NULL, "%s", flare_last_error());
        return rc;
    }
    s->priv->logger = true;
    return 0;
}

/* The Redis the rate limiter's buckets live in, NULL: in this process.
 * The one place that says where that URL comes from (a cluster-wide
 * Redis setting would be its default here). */
/* rate-limit-redis, else the cluster's Redis: instances that share channels
 * share the limit too */
static const char *rate_limit_redis_url(const flare_settings_t *s)
{
    return s->rate_limit_redis != NULL ? s->rate_limit_redis : s->cluster;
}

/* rate-limit: flare_ratelimit on every request of app (flare_use), its
 * buckets in Redis when rate-limit-redis says so. That Redis gets a handle
 * of its own, not the sessions' one, for its own command timeout: the
 * longest a request waits for a decision. */
static int rate_limit_setup(flare_settings_t *s, flare_app_t *app)
{
    if (s->rate_limit == NULL)
        return 0;
    flare_ratelimit_config_t rl = { .burst = s->rate_limit_burst };
    if (flare__settings_rate(s->rate_limit, &rl.rate) != 0)
        return flare__settings_fail(s, NULL, "rate-limit", "expected a rate, got \"%s\"",
                                    s->rate_limit);
    const char *url = rate_limit_redis_url(s);
    int rc;
    if (url != NULL) {
        flare_redis_config_t rc_cfg = {
            .command_timeout_ms = s->rate_limit_timeout_ms != 0 ? s->rate_limit_timeout_ms
                                                                : FLARE__RATE_LIMIT_TIMEOUT_MS,
        };
        flare_redis_t *r;
        if ((rc = flare_redis_open(app, url, &rc_cfg, &r)) != 0)
            return flare__settings_fail(s, NULL, "rate-limit-redis", "%s: %s: %s", url,
                                        flare_strerror(rc), flare_last_error());
        rl.redis = r;
        rl.fail_closed = s->rate_limit_fail != NULL && strcmp(s->rate_limit_fail, "closed") == 0;
    }
    flare_middleware_t m;
    if ((rc = flare_ratelimit(app, &rl, &m)) != 0 || (rc = flare_use(app, &m)) != 0)
        return flare__settings_fail(s, NULL, "rate-limit", "%s: %s: %s", s->rate_limit,
                                    flare_strerror(rc), flare_last_error());
    return 0;
}

static bool redis_sessions(const flare_settings_t *s)
{
    return s->sessions != NULL && strncmp(s->sessions, "redis://", 8) == 0;
}

/* The `sessions` Redis, opened once per app (the app owns it). */
static int open_redis(flare_settings_t *s, flare_app_t *app)
{
    if (s->priv->redis != NULL && s->priv->redis_app == app)
        return 0;
    flare_redis_t *r;
    int rc = flare_redis_open(app, s->sessions, NULL, &r);
    if (rc != 0) {
        flare__settings_fail(s, NULL, "sessions", "%s: %s: %s", s->sessions, flare_strerror(rc),
                             flare_last_error());
        return rc;
    }
    s->priv->redis = r;
    s->priv->redis_app = app;
    return 0;
}

/* `cluster`: the app's channels through that Redis (flare_app_cluster). */
static int cluster_setup(flare_settings_t *s, flare_app_t *app)
{
    flare_cluster_config_t cc = {
        .history_size = s->cluster_history,
        .history_age_ms = s->cluster_history_age_ms,
        .presence_ttl_ms = s->cluster_presence_ttl_ms,
    };
    int rc = flare_app_cluster(app, s->cluster, &cc);
    if (rc != 0)
        flare__settings_fail(s, NULL, "cluster", "%s: %s: %s", s->cluster, flare_strerror(rc),
                             flare_last_error());
    return rc;
}

int flare_settings_setup(flare_settings_t *s, flare_app_t *app,
                         const flare_settings_setup_opts_t *opts)
{
    if (s == NULL || app == NULL)
        return FLARE_EINVAL;
    if (ensure_priv(s) != 0)
        return FLARE_ENOMEM;
    int rc = log_setup(s, app);
    if (rc == 0 && redis_sessions(s))
        rc = open_redis(s, app);
    if (rc == 0 && s->cluster != NULL)
        rc = cluster_setup(s, app);
    if (rc == 0)
        rc = flare_settings_listen(s, app);
    if (rc == 0)
        rc = rate_limit_setup(s, app);
    if (rc == 0 && (opts == NULL || !opts->no_static))
        rc = flare_settings_static(s, app, opts != NULL ? opts->static_opts : NULL);
    if (rc == 0 && (rc = flare_settings_watch(s, app)) != 0)
        flare__settings_fail(s, NULL, NULL, "SIGHUP hook: %s", flare_strerror(rc));
    return rc;
}

int flare_settings_app_new(flare_settings_t *s, const flare_settings_setup_opts_t *opts,
                           flare_app_t **out)
{
    if (s == NULL || out == NULL)
        return FLARE_EINVAL;
    *out = NULL;
    if (ensure_priv(s) != 0)
        return FLARE_ENOMEM;
    flare_config_t cfg;
    flare_settings_app_config(s, &cfg);
    flare_app_t *app = flare_app_new(&cfg);
    if (app == NULL) {
        flare__settings_fail(s, NULL, NULL, "%s", flare_last_error());
        return FLARE_EINVAL;
    }
    int rc = flare_settings_setup(s, app, opts);
    if (rc != 0) {
        flare_app_free(app);
        s->priv->app = NULL;
        s->priv->watching = false;
        s->priv->logger = false;
        s->priv->redis = NULL;
        s->priv->redis_app = NULL;
        return rc;
    }
    *out = app;
    return 0;
}

int flare_settings_sessions(flare_settings_t *s, flare_app_t *app,
                            const flare_session_config_t *cfg, const char *redis_prefix,
                            flare_middleware_t *out)
{
    if (s == NULL || app == NULL || out == NULL)
        return FLARE_EINVAL;
    if (ensure_priv(s) != 0)
        return FLARE_ENOMEM;
    flare_session_config_t sc = { 0 };
    if (cfg != NULL)
        sc = *cfg;
    flare_settings_session_config(s, &sc);
    int rc = 0;
    if (redis_sessions(s)) {
        if ((rc = open_redis(s, app)) != 0)
            return rc;
        rc = flare_session_redis_store(s->priv->redis, redis_prefix, &sc.store);
    }
    if (rc == 0)
        rc = flare_sessions(app, &sc, out);
    if (rc != 0)
        flare__settings_fail(s, NULL, "sessions", "%s%s%s: %s", s->sessions ? s->sessions : "",
                             s->sessions ? ": " : "", flare_strerror(rc), flare_last_error());
    return rc;
}

/* What --check-config checks beyond the text: the certificates load, the
 * static directories open, the app accepts the limits. Nothing is bound
 * (flare_app_listen only reads the files). */
int flare__settings_check_app(flare_settings_t *s)
{
    flare_config_t cfg;
    flare_settings_app_config(s, &cfg);
    flare_app_t *app = flare_app_new(&cfg);
    if (app == NULL)
        return flare__settings_fail(s, NULL, NULL, "%s", flare_last_error());
    int rc = flare_settings_apply(s, app, NULL);
    flare_app_free(app);
    return rc;
}

/* ---- SIGHUP ---- */

static void take_str(char **dst, char **src)
{
    free(*dst);
    *dst = *src;
    *src = NULL;
}

/* The logging keys a reload applies in place (the file names are handled
 * apart). The formats are not: every worker's lines are formatted as the
 * logger was set up, so a new format waits for an upgrade. */
static bool is_log_key(const char *k)
{
    return strcmp(k, "log") == 0 || strcmp(k, "log-level") == 0 || strcmp(k, "access-log") == 0;
}

static bool has_tls(const flare_settings_t *s)
{
    for (size_t i = 0; i < s->nlisteners; i++) {
        if (s->listeners[i].tls_cert != NULL)
            return true;
    }
    return false;
}

/* The limits and timeouts a reload changes in place: read by the workers
 * from app->cfg and app->limits on their own threads, written only while
 * every worker is parked (apply_parked). The rest of flare_config_t sizes
 * what exists already (workers, job threads, the listen backlog, the header
 * arrays of recycled exchanges: max-headers) and waits for an upgrade. */
static const char *const live_keys[] = {
    "max-conns",     "header-timeout",   "body-timeout", "idle-timeout", "write-timeout",
    "drain-timeout", "max-request-line", "max-head",     "max-body",     "max-conn-body",
};

static bool is_live_key(const char *k)
{
    for (size_t i = 0; i < sizeof(live_keys) / sizeof(live_keys[0]); i++) {
        if (strcmp(k, live_keys[i]) == 0)
            return true;
    }
    return false;
}

static void copy_live(flare_config_t *d, const flare_config_t *c)
{
    d->max_conns = c->max_conns;
    d->header_timeout_ms = c->header_timeout_ms;
    d->body_timeout_ms = c->body_timeout_ms;
    d->idle_timeout_ms = c->idle_timeout_ms;
    d->write_timeout_ms = c->write_timeout_ms;
    d->drain_timeout_ms = c->drain_timeout_ms;
    d->max_request_line = c->max_request_line;
    d->max_head = c->max_head;
    d->max_body = c->max_body;
    d->max_conn_body = c->max_conn_body;
}

/* Every worker parks in a task posted to its own loop (between two event
 * batches: no request is being parsed or swept); once all are parked, this
 * thread writes the values and lets them go. The mutex orders the write
 * before every worker's next read. A worker that does not park within
 * PARK_WAIT_MS (a handler blocking its loop) cancels it: nothing is
 * written, the others go on, and the reload says so. The shared block is
 * freed by whoever leaves it last (a late worker still runs its task, at the
 * latest when its loop is disposed). */
#define PARK_WAIT_MS 2000

typedef struct park {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned n, arrived, refs;
    bool released, cancelled;
    flare_post_node_t nodes[];
} park_t;

static void park_unref(park_t *p) /* under p->mu, which it releases */
{
    bool last = --p->refs == 0;
    pthread_mutex_unlock(&p->mu);
    if (last) {
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        free(p);
    }
}

static void park_worker(void *ud)
{
    park_t *p = ud;
    pthread_mutex_lock(&p->mu);
    if (!p->cancelled) {
        p->arrived++;
        pthread_cond_broadcast(&p->cv);
        while (!p->released && !p->cancelled)
            pthread_cond_wait(&p->cv, &p->mu);
    }
    park_unref(p);
}

/* 0: applied; FLARE_ESTATE: the workers are not up; FLARE_ETIMEDOUT: a
 * worker did not park in time; FLARE_ENOMEM. */
static int apply_parked(flare_app_t *app, const flare_config_t *c)
{
    if (flare__app_enter(app) != 0)
        return FLARE_ESTATE;
    unsigned n = app->nworkers;
    park_t *p = calloc(1, sizeof(*p) + n * sizeof(p->nodes[0]));
    if (p == NULL) {
        flare__app_leave(app);
        return FLARE_ENOMEM;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
    p->n = n;
    p->refs = n + 1;
    for (unsigned i = 0; i < n; i++) {
        p->nodes[i].fn = park_worker;
        p->nodes[i].ud = p;
        flare__loop_post_node(&app->workers[i].loop, &p->nodes[i]);
    }
    flare__app_leave(app);
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += PARK_WAIT_MS / 1000;
    dl.tv_nsec += (long)(PARK_WAIT_MS % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&p->mu);
    while (p->arrived < p->n) {
        if (pthread_cond_timedwait(&p->cv, &p->mu, &dl) == ETIMEDOUT)
            break;
    }
    int rc = 0;
    if (p->arrived == p->n) {
        copy_live(&app->cfg, c);
        app->limits.max_request_line = c->max_request_line;
        app->limits.max_head = c->max_head;
        p->released = true;
    } else {
        p->cancelled = true;
        rc = FLARE_ETIMEDOUT;
    }
    pthread_cond_broadcast(&p->cv);
    park_unref(p);
    return rc;
}

static void on_reload(void *ud)
{
    flare_settings_t *s = ud;
    flare_settings_t next;
    int rc = flare_settings_reload(s, &next);
    if (rc != 0) {
        fprintf(stderr, "flare: reload: nothing changed: %s\n", flare_settings_error(&next));
        flare_settings_free(&next);
        return;
    }
    const char *keys[64];
    size_t n = flare_settings_diff(s, &next, keys, 64);
    if (n > 64)
        n = 64;
    char applied[512] = "", later[512] = "";
    size_t na = 0, nl = 0;
#define ADD(buf, len, k)                                                                  \
    len += (size_t)snprintf(buf + len, len < sizeof(buf) ? sizeof(buf) - len : 0, "%s%s", \
                            len > 0 ? ", " : "", k)
    /* limits and timeouts: as flare_app_new would resolve them (an unset
     * key takes its default), into the running app */
    bool live = false;
    for (size_t i = 0; i < n; i++)
        live |= is_live_key(keys[i]);
    bool live_ok = false;
    if (live && s->priv->app != NULL) {
        flare_config_t want;
        int lrc = flare__config_resolve(&want, &next.app);
        if (lrc == 0)
            lrc = apply_parked(s->priv->app, &want);
        if (lrc == 0) {
            live_ok = true;
            copy_live(&s->app, &next.app); /* the rest stays as it runs */
        } else {
            fprintf(stderr, "flare: reload: limits and timeouts kept: %s\n",
                    lrc == FLARE_ETIMEDOUT ? "a worker did not pause to take them (busy loop?)"
                    : lrc == FLARE_ESTATE  ? "the workers are not running"
                    : lrc == FLARE_ENOMEM  ? "out of memory"
                                           : flare_last_error());
        }
    }
    /* new log file names: the logger moves to them now (the files are
     * opened here; the writer switches between two batches). Turning the
     * access log on or off is not done in place: its rings and hook are
     * made when the run starts. */
    bool log_moved = false, acc_moved = false;
    for (size_t i = 0; i < n; i++) {
        log_moved |= strcmp(keys[i], "log") == 0;
        acc_moved |= strcmp(keys[i], "access-log") == 0;
    }
    bool acc_toggled = acc_moved && (s->access_log == NULL) != (next.access_log == NULL);
    int files_rc = FLARE_ESTATE; /* 0 moved; FLARE_ESTATE: needs an upgrade; else: retry */
    if ((log_moved || (acc_moved && !acc_toggled)) && s->priv->app != NULL) {
        files_rc = flare_log_reopen_as(s->priv->app,
                                       !log_moved         ? NULL
                                       : next.log != NULL ? next.log
                                                          : "-",
                                       acc_moved && !acc_toggled ? next.access_log : NULL);
        if (files_rc != 0 && files_rc != FLARE_ESTATE)
            fprintf(stderr, "flare: reload: log files kept: %s\n", flare_last_error());
    }
    char retry[512] = "";
    size_t nr = 0;
    for (size_t i = 0; i < n; i++) {
        bool file_key = strcmp(keys[i], "log") == 0 || strcmp(keys[i], "access-log") == 0;
        int frc = strcmp(keys[i], "access-log") == 0 && acc_toggled ? FLARE_ESTATE : files_rc;
        if (file_key && frc == FLARE_ESTATE) {
            if (nl < sizeof(later))
                ADD(later, nl, keys[i]);
        } else if (file_key && frc != 0) {
            if (nr < sizeof(retry))
                ADD(retry, nr, keys[i]); /* a new SIGHUP tries the files again */
        } else if (strcmp(keys[i], "log-level") == 0 && !s->priv->logger &&
                   s->priv->log_fn == NULL) {
            if (nl < sizeof(later))
                ADD(later, nl, keys[i]); /* no logger that settings know of */
        } else if (is_log_key(keys[i]) || (live_ok && is_live_key(keys[i]))) {
            if (na < sizeof(applied))
                ADD(applied, na, keys[i]);
        } else if (is_live_key(keys[i])) {
            if (nr < sizeof(retry))
                ADD(retry, nr, keys[i]); /* could change in place, did not this time */
        } else if (nl < sizeof(later)) {
            ADD(later, nl, keys[i]);
        }
    }
    /* the TLS files: re-read whenever there is a TLS listener (a renewed
     * certificate keeps its path) */
    if (has_tls(s) && s->priv->app != NULL) {
        if (flare_app_tls_reload(s->priv->app) == 0) {
            if (na < sizeof(applied))
                ADD(applied, na, "TLS certificates re-read");
        } else {
            fprintf(stderr, "flare: reload: TLS certificates kept: %s\n", flare_last_error());
        }
    }
#undef ADD
    /* the file names in effect stay those the logger writes to, so a name
     * not applied differs again at the next SIGHUP */
    if (log_moved && files_rc == 0)
        take_str(&s->log, &next.log);
    if (s->priv->logger || s->priv->log_fn != NULL)
        take_str(&s->log_level, &next.log_level);
    if (acc_moved && !acc_toggled && files_rc == 0)
        take_str(&s->access_log, &next.access_log);
    /* log-format and access-log-format keep the values in effect: they
     * differ again at the next SIGHUP, and an upgrade takes them */
    flare_settings_free(&next);
    flare_log_level_t lvl;
    if (s->priv->logger && s->priv->app != NULL &&
        flare_log_level_parse(s->log_level != NULL ? s->log_level : "error", &lvl) == 0)
        flare_log_set_level(s->priv->app, lvl);
    fprintf(stderr, "flare: reload: %s: applied: %s%s%s%s%s\n",
            s->config_file != NULL ? s->config_file : "(no file)", na > 0 ? applied : "nothing",
            nr > 0 ? "; not applied this time (a new SIGHUP retries): " : "", nr > 0 ? retry : "",
            nl > 0 ? "; needs an upgrade (SIGUSR2), kept as they were: " : "", nl > 0 ? later : "");
    if (s->priv->log_fn != NULL)
        s->priv->log_fn(s, s->priv->log_ud);
}

int flare_settings_watch(flare_settings_t *s, flare_app_t *app)
{
    if (s == NULL || app == NULL)
        return FLARE_EINVAL;
    if (ensure_priv(s) != 0)
        return FLARE_ENOMEM;
    if (s->priv->watching && s->priv->app == app)
        return 0;
    int rc = flare_app_on_reload(app, on_reload, s);
    if (rc != 0)
        return rc;
    s->priv->app = app;
    s->priv->watching = true;
    return 0;
}
