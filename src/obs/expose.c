/* The Prometheus text exposition (format 0.0.4): the writer collectors use,
 * the built-in series summed over the workers' blocks, the process_*
 * series from /proc/self, and the /metrics route.
 *
 * Runs at scrape time only: allocation and printf are fine here. */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "app.h"
#include "app_svc.h"
#include "core/buf.h"
#include "http/svc.h"
#include "flare/db.h"
#include "flare/log.h"
#include "flare/tls.h"
#include "obs/metrics_app.h"

struct flare_metrics_writer {
    flare_buf_t b;
    int err;
};

static void put(flare_metrics_writer_t *mw, const char *s, size_t n)
{
    if (mw->err == 0 && flare__buf_append(&mw->b, s, n) != 0)
        mw->err = FLARE_ENOMEM;
}

static void puts_(flare_metrics_writer_t *mw, const char *s)
{
    put(mw, s, strlen(s));
}

static void putf(flare_metrics_writer_t *mw, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void putf(flare_metrics_writer_t *mw, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        put(mw, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* Label values escape \, " and newline; HELP text escapes \ and newline. */
static void put_escaped(flare_metrics_writer_t *mw, const char *s, bool quote)
{
    for (const char *p = s; *p != '\0'; p++) {
        if (*p == '\\')
            puts_(mw, "\\\\");
        else if (*p == '\n')
            puts_(mw, "\\n");
        else if (*p == '"' && quote)
            puts_(mw, "\\\"");
        else
            put(mw, p, 1);
    }
}

static void put_value(flare_metrics_writer_t *mw, double v)
{
    if (v != v)
        puts_(mw, "NaN");
    else if (v > 1.7976931348623157e308)
        puts_(mw, "+Inf");
    else if (v < -1.7976931348623157e308)
        puts_(mw, "-Inf");
    else {
        /* the shortest form that reads back as the same double */
        char tmp[40];
        snprintf(tmp, sizeof(tmp), "%.15g", v);
        if (strtod(tmp, NULL) != v)
            snprintf(tmp, sizeof(tmp), "%.17g", v);
        puts_(mw, tmp);
    }
}

static void put_u64(flare_metrics_writer_t *mw, uint64_t v)
{
    putf(mw, "%llu", (unsigned long long)v);
}

int flare_metrics_family(flare_metrics_writer_t *mw, const char *name, const char *type,
                         const char *help)
{
    static const char *const types[] = { "counter", "gauge", "histogram", "summary", "untyped" };
    bool ok = false;
    for (size_t i = 0; type != NULL && i < sizeof(types) / sizeof(types[0]); i++)
        ok |= strcmp(type, types[i]) == 0;
    if (mw == NULL || !ok || !flare__metrics_name_ok(name))
        return FLARE_EINVAL;
    puts_(mw, "# HELP ");
    puts_(mw, name);
    puts_(mw, " ");
    put_escaped(mw, help != NULL ? help : "", false);
    puts_(mw, "\n# TYPE ");
    puts_(mw, name);
    puts_(mw, " ");
    puts_(mw, type);
    puts_(mw, "\n");
    return mw->err;
}

/* name{pairs..., extra_name="extra"} value; extra may be NULL. */
static void sample_line(flare_metrics_writer_t *mw, const char *name, const char *suffix,
                        const char *const *labels, const char *xname, const char *xval)
{
    puts_(mw, name);
    if (suffix != NULL)
        puts_(mw, suffix);
    bool any = false;
    for (size_t i = 0; labels != NULL && labels[i] != NULL; i += 2) {
        puts_(mw, any ? "," : "{");
        any = true;
        puts_(mw, labels[i]);
        puts_(mw, "=\"");
        put_escaped(mw, labels[i + 1], true);
        puts_(mw, "\"");
    }
    if (xname != NULL) {
        puts_(mw, any ? "," : "{");
        any = true;
        puts_(mw, xname);
        puts_(mw, "=\"");
        put_escaped(mw, xval, true);
        puts_(mw, "\"");
    }
    puts_(mw, any ? "} " : " ");
}

int flare_metrics_sample(flare_metrics_writer_t *mw, const char *name, const char *const *labels,
                         double value)
{
    if (mw == NULL || !flare__metrics_name_ok(name))
        return FLARE_EINVAL;
    for (size_t i = 0; labels != NULL && labels[i] != NULL; i += 2)
        if (!flare__metrics_label_ok(labels[i]) || labels[i + 1] == NULL)
            return FLARE_EINVAL;
    sample_line(mw, name, NULL, labels, NULL, NULL);
    put_value(mw, value);
    puts_(mw, "\n");
    return mw->err;
}

static void sample_u64(flare_metrics_writer_t *mw, const char *name, const char *const *labels,
                       uint64_t v)
{
    sample_line(mw, name, NULL, labels, NULL, NULL);
    put_u64(mw, v);
    puts_(mw, "\n");
}

/* ---- built-in series ---- */

typedef struct req_cell {
    uint64_t key, count;
} req_cell_t;

static int cell_cmp(const void *a, const void *b)
{
    uint64_t x = ((const req_cell_t *)a)->key, y = ((const req_cell_t *)b)->key;
    return x < y ? -1 : x > y;
}

static void requests(flare_metrics_writer_t *mw, flare_metrics_app_t *ma)
{
    flare_app_t *app = ma->app;
    size_t n = 0, cap = 0;
    req_cell_t *v = NULL;
    for (unsigned i = 0; i < ma->nblocks; i++) {
        flare_mblock_t *b = ma->blocks[i];
        for (uint32_t k = 0; b != NULL && k <= b->m.mask; k++) {
            uint64_t key = atomic_load_explicit(&b->m.keys[k], memory_order_acquire);
            if (key == 0)
                continue;
            if (n == cap) {
                size_t nc = cap != 0 ? cap * 2 : 64;
                req_cell_t *nv = realloc(v, nc * sizeof(*v));
                if (nv == NULL) {
                    mw->err = FLARE_ENOMEM;
                    free(v);
                    return;
                }
                v = nv;
                cap = nc;
            }
            v[n++] = (req_cell_t){ key, flare__ctr_get(&b->m.counts[k]) };
        }
    }
    if (n > 0)
        qsort(v, n, sizeof(*v), cell_cmp);
    flare_metrics_family(mw, "flare_http_requests_total", "counter",
                         "HTTP requests answered, by route pattern (\"\": unmatched), method "
                         "and status");
    for (size_t i = 0; i < n;) {
        uint64_t key = v[i].key, sum = 0;
        for (; i < n && v[i].key == key; i++)
            sum += v[i].count;
        size_t route = (size_t)(key >> 24) & 0xffffffu;
        flare_str_t meth = flare_method_name((flare_method_t)((key >> 12) & 0xfff));
        char mbuf[16], sbuf[8];
        snprintf(mbuf, sizeof(mbuf), "%.*s", (int)meth.len, meth.ptr);
        snprintf(sbuf, sizeof(sbuf), "%u", (unsigned)(key & 0xfff));
        const char *labels[] = { "route",  flare__metrics_route_name(app, route),
                                 "method", mbuf[0] != '\0' ? mbuf : "OTHER",
                                 "status", sbuf,
                                 NULL };
        sample_u64(mw, "flare_http_requests_total", labels, sum);
    }
    free(v);
    uint64_t dropped = 0;
    for (unsigned i = 0; i < ma->nblocks; i++)
        if (ma->blocks[i] != NULL)
            dropped += flare__ctr_get(&ma->blocks[i]->m.dropped);
    if (dropped > 0) {
        flare_metrics_family(mw, "flare_metrics_series_dropped_total", "counter",
                             "Requests not counted by route: the series table was full");
        sample_u64(mw, "flare_metrics_series_dropped_total", NULL, dropped);
    }
}

static void durations(flare_metrics_writer_t *mw, flare_app_t *app, const flare_metrics_totals_t *t)
{
    static const char name[] = "flare_http_request_duration_seconds";
    flare_metrics_family(mw, name, "histogram",
                         "Time from reading a request to its response being complete, by route");
    for (size_t r = 0; r < t->nroutes; r++) {
        /* one series per pattern: the routes of one pattern with different
         * methods (GET, POST, DELETE /items/{id}) are summed into the first,
         * since a repeated label set is an invalid exposition */
        const char *rname = flare__metrics_route_name(app, r);
        bool seen = false;
        for (size_t q = 0; q < r && !seen; q++)
            seen = strcmp(flare__metrics_route_name(app, q), rname) == 0;
        if (seen)
            continue;
        uint64_t h[FLARE__HIST_CELLS] = { 0 };
        for (size_t q = r; q < t->nroutes; q++) {
            if (q != r && strcmp(flare__metrics_route_name(app, q), rname) != 0)
                continue;
            for (unsigned b = 0; b < FLARE__HIST_CELLS; b++)
                h[b] += t->routes[q].hist[b];
        }
        uint64_t total = 0;
        for (unsigned b = 0; b <= FLARE__HIST_NB; b++)
            total += h[b];
        if (total == 0)
            continue;
        const char *labels[] = { "route", rname, NULL };
        uint64_t cum = 0;
        for (unsigned b = 0; b <= FLARE__HIST_NB; b++) {
            char le[32];
            if (b < FLARE__HIST_NB)
                snprintf(le, sizeof(le), "%g", (double)flare__hist_bounds_ns[b] / 1e9);
            else
                snprintf(le, sizeof(le), "+Inf");
            cum += h[b];
            sample_line(mw, name, "_bucket", labels, "le", le);
            put_u64(mw, cum);
            puts_(mw, "\n");
        }
        sample_line(mw, name, "_sum", labels, NULL, NULL);
        put_value(mw, (double)h[FLARE__HIST_NB + 1] / 1e9);
        puts_(mw, "\n");
        sample_line(mw, name, "_count", labels, NULL, NULL);
        put_u64(mw, total);
        puts_(mw, "\n");
    }
}

/* The long-lived streams (SSE, WebSocket upgrades) begun, by route and
 * method: kept out of the duration histogram (a stream's life is not a
 * request's latency), still counted in flare_http_requests_total. */
static void streams(flare_metrics_writer_t *mw, flare_app_t *app, const flare_metrics_totals_t *t)
{
    static const char name[] = "flare_http_streams_total";
    flare_metrics_family(mw, name, "counter",
                         "Long-lived streams begun (server-sent events, WebSocket upgrades), by "
                         "route and method; not in flare_http_request_duration_seconds");
    for (size_t r = 1; r < t->nroutes; r++) {
        uint64_t n = t->routes[r].hist[FLARE__HIST_STREAM];
        if (n == 0)
            continue;
        const char *labels[] = { "route", flare__metrics_route_name(app, r), "method",
                                 flare__metrics_route_method(app, r), NULL };
        sample_u64(mw, name, labels, n);
    }
}

static void connections(flare_metrics_writer_t *mw, flare_metrics_app_t *ma,
                        const flare_metrics_totals_t *t)
{
    flare_metrics_family(mw, "flare_http_connections", "gauge",
                         "HTTP connections: open, active (a request in flight), idle "
                         "(sampled every 250 ms)");
    uint64_t idle = t->open > t->active ? t->open - t->active : 0;
    sample_u64(mw, "flare_http_connections", (const char *[]){ "state", "open", NULL }, t->open);
    sample_u64(mw, "flare_http_connections", (const char *[]){ "state", "active", NULL },
               t->active);
    sample_u64(mw, "flare_http_connections", (const char *[]){ "state", "idle", NULL }, idle);
    flare_metrics_family(mw, "flare_http_bytes_received_total", "counter",
                         "Bytes read from HTTP connections (after TLS)");
    sample_u64(mw, "flare_http_bytes_received_total", NULL, t->rx);
    flare_metrics_family(mw, "flare_http_bytes_sent_total", "counter",
                         "Bytes written to HTTP connections (before TLS)");
    sample_u64(mw, "flare_http_bytes_sent_total", NULL, t->tx);

    uint64_t perr[FLARE__PARSE_ST_N] = { 0 }, to[FLARE__TO_KINDS] = { 0 }, wsm[2] = { 0 };
    for (unsigned i = 0; i < ma->nblocks; i++) {
        flare_mblock_t *b = ma->blocks[i];
        if (b == NULL)
            continue;
        for (unsigned s = 0; s < FLARE__PARSE_ST_N; s++)
            perr[s] += flare__ctr_get(&b->m.parse_err[s]);
        for (unsigned k = 0; k < FLARE__TO_KINDS; k++)
            to[k] += flare__ctr_get(&b->m.timeouts[k]);
        wsm[0] += flare__ctr_get(&b->m.ws_msgs[0]);
        wsm[1] += flare__ctr_get(&b->m.ws_msgs[1]);
    }
    flare_metrics_family(mw, "flare_http_parse_errors_total", "counter",
                         "Requests refused before a handler saw them, by the status sent");
    for (unsigned s = 0; s < FLARE__PARSE_ST_N; s++) {
        if (perr[s] == 0)
            continue;
        char sb[8];
        snprintf(sb, sizeof(sb), "%u", s + FLARE__PARSE_ST_MIN);
        sample_u64(mw, "flare_http_parse_errors_total", (const char *[]){ "status", sb, NULL },
                   perr[s]);
    }
    static const char *const kinds[FLARE__TO_KINDS] = { "header", "body", "idle", "write",
                                                        "tls_handshake" };
    flare_metrics_family(mw, "flare_timeouts_total", "counter",
                         "Connections ended by a timeout, by kind");
    for (unsigned k = 0; k < FLARE__TO_KINDS; k++)
        sample_u64(mw, "flare_timeouts_total", (const char *[]){ "kind", kinds[k], NULL }, to[k]);
    flare_metrics_family(mw, "flare_ws_connections", "gauge", "Open WebSocket connections");
    sample_u64(mw, "flare_ws_connections", NULL, t->ws_open);
    flare_metrics_family(mw, "flare_ws_messages_total", "counter",
                         "WebSocket messages, by direction");
    sample_u64(mw, "flare_ws_messages_total", (const char *[]){ "direction", "received", NULL },
               wsm[0]);
    sample_u64(mw, "flare_ws_messages_total", (const char *[]){ "direction", "sent", NULL },
               wsm[1]);
}

/* HTTP/2: counters summed over the workers, gauges sampled with the
 * connection gauges. Every code and kind is written, zero or not, so that
 * a rate() over them has a series from the first scrape. */
static void h2_series(flare_metrics_writer_t *mw, const flare_metrics_totals_t *t)
{
    static const char *const fam[][3] = {
        { "flare_h2_connections_total", "counter", "HTTP/2 connections begun (the preface read)" },
        { "flare_h2_streams_total", "counter", "HTTP/2 request streams accepted" },
        { "flare_h2_rst_stream_total", "counter", "HTTP/2 RST_STREAM frames sent" },
    };
    static const unsigned cell[] = { FLARE__H2C_CONNS, FLARE__H2C_STREAMS, FLARE__H2C_RST };
    for (unsigned i = 0; i < 3; i++) {
        flare_metrics_family(mw, fam[i][0], fam[i][1], fam[i][2]);
        sample_u64(mw, fam[i][0], NULL, t->h2[cell[i]]);
    }
    static const char goaway[] = "flare_h2_goaway_total";
    flare_metrics_family(mw, goaway, "counter",
                         "HTTP/2 GOAWAY frames sent, by error code (a drain sends two)");
    for (uint32_t code = 0; code <= FLARE__H2E_COUNT; code++) {
        uint64_t v = t->h2[flare__metrics_h2_goaway(code)];
        if (code < FLARE__H2E_COUNT || v > 0)
            sample_u64(mw, goaway, (const char *[]){ "code", flare__h2_error_name(code), NULL }, v);
    }
    static const char floods[] = "flare_h2_floods_total";
    flare_metrics_family(mw, floods, "counter",
                         "HTTP/2 connections ended by a defence (ENHANCE_YOUR_CALM), by kind");
    for (unsigned k = 0; k < FLARE__H2F_COUNT; k++)
        sample_u64(mw, floods, (const char *[]){ "kind", flare__h2_flood_name(k), NULL },
                   t->h2[FLARE__H2C_FLOOD + k]);
    flare_metrics_family(mw, "flare_h2_connections", "gauge",
                         "HTTP/2 connections open (sampled every 250 ms)");
    sample_u64(mw, "flare_h2_connections", NULL, t->h2_open);
    flare_metrics_family(mw, "flare_h2_streams", "gauge",
                         "HTTP/2 request streams open (sampled every 250 ms)");
    sample_u64(mw, "flare_h2_streams", NULL, t->h2_streams);
}

static void middleware(flare_metrics_writer_t *mw, flare_app_t *app)
{
    size_t n = flare_app_mw_stats(app, NULL, 0);
    if (n == 0 || !app->cfg.mw_stats)
        return;
    flare_mw_stats_t *st = calloc(n, sizeof(*st));
    if (st == NULL) {
        mw->err = FLARE_ENOMEM;
        return;
    }
    n = flare_app_mw_stats(app, st, n);
    static const char *const fam[3][3] = {
        { "flare_middleware_calls_total", "counter", "Middleware hook calls" },
        { "flare_middleware_seconds_total", "counter", "Time spent in middleware hooks" },
        { "flare_middleware_max_seconds", "gauge", "Longest middleware hook call" },
    };
    for (unsigned f = 0; f < 3; f++) {
        flare_metrics_family(mw, fam[f][0], fam[f][1], fam[f][2]);
        for (size_t i = 0; i < n; i++) {
            const char *labels[] = { "middleware", st[i].name != NULL ? st[i].name : "", NULL };
            if (f == 0)
                sample_u64(mw, fam[f][0], labels, st[i].count);
            else
                flare_metrics_sample(mw, fam[f][0], labels,
                                     (double)(f == 1 ? st[i].total_ns : st[i].max_ns) / 1e9);
        }
    }
    free(st);
}

static void tls_series(flare_metrics_writer_t *mw, flare_app_t *app)
{
    bool any = false;
    for (unsigned i = 0; i < app->nlisteners; i++)
        any |= app->listeners[i].tls != NULL;
    flare_tls_stats_t st;
    if (!any || flare_app_tls_stats(app, &st) != 0)
        return;
    static const char *const names[5][2] = {
        { "flare_tls_handshakes_total", "TLS handshakes completed" },
        { "flare_tls_resumed_total", "TLS handshakes that resumed a session" },
        { "flare_tls_handshake_errors_total", "TLS handshakes that failed" },
        { "flare_tls_handshake_timeouts_total", "TLS handshakes that timed out" },
        { "flare_tls_plaintext_http_total", "Plain HTTP requests sent to a TLS listener" },
    };
    uint64_t v[5] = { st.handshakes, st.resumed, st.handshake_errors, st.handshake_timeouts,
                      st.plaintext_http };
    for (unsigned i = 0; i < 5; i++) {
        flare_metrics_family(mw, names[i][0], "counter", names[i][1]);
        sample_u64(mw, names[i][0], NULL, v[i]);
    }
}

/* One sample per listener of the run, value 1 (Prometheus's info idiom): what
 * the app listens on, a unix socket's path included. Only from a worker:
 * the list lives while they run. */
static void listener_series(flare_metrics_writer_t *mw, flare_app_t *app, bool on_worker)
{
    if (!on_worker || app->nactive == 0)
        return;
    flare_metrics_family(mw, "flare_listener_info", "gauge",
                         "A listening address of the app (1 per listener)");
    for (unsigned i = 0; i < app->nactive; i++) {
        const flare_listener_t *l = app->active[i];
        const char *kind = flare__listen_is_unix(l->name) ? "unix" : "tcp";
        const char *labels[] = { "address", l->name,
                                 "kind",    kind,
                                 "tls",     l->tls != NULL ? "true" : "false",
                                 "admin",   l->admin ? "true" : "false",
                                 NULL };
        sample_u64(mw, "flare_listener_info", labels, 1);
    }
}

static void user_series(flare_metrics_writer_t *mw, flare_metrics_app_t *ma)
{
    static const char *const types[] = { "counter", "gauge", "histogram" };
    const char *last = NULL;
    for (flare_metric_t *m = ma->metrics; m != NULL; m = m->next) {
        /* one family per name, even when its series were registered apart */
        bool seen = false;
        for (flare_metric_t *o = ma->metrics; o != m; o = o->next)
            seen |= strcmp(o->name, m->name) == 0;
        if (seen)
            continue;
        flare_metrics_family(mw, m->name, types[m->type], m->help);
        last = m->name;
        for (flare_metric_t *s = m; s != NULL; s = s->next) {
            if (strcmp(s->name, last) != 0)
                continue;
            size_t ncells = s->type == FLARE__M_HISTOGRAM ? s->nbounds + 2 : 1;
            uint64_t tmp[64], *sum = ncells <= 64 ? tmp : calloc(ncells, sizeof(*sum));
            if (sum == NULL) {
                mw->err = FLARE_ENOMEM;
                return;
            }
            memset(sum, 0, ncells * sizeof(*sum));
            double dsum = 0;
            for (unsigned i = 0; i < ma->nblocks; i++) {
                flare_mblock_t *b = ma->blocks[i];
                if (b == NULL || s->cell + ncells > b->m.nuser)
                    continue;
                for (size_t c = 0; c < ncells; c++) {
                    uint64_t x = flare__ctr_get(&b->m.user[s->cell + c]);
                    if (s->type == FLARE__M_HISTOGRAM && c == ncells - 1) {
                        double d;
                        memcpy(&d, &x, sizeof(d));
                        dsum += d;
                    } else
                        sum[c] += x;
                }
            }
            const char *const *labels = (const char *const *)s->labels;
            if (s->type == FLARE__M_COUNTER)
                sample_u64(mw, s->name, labels, sum[0]);
            else if (s->type == FLARE__M_GAUGE)
                flare_metrics_sample(mw, s->name, labels, (double)(int64_t)sum[0]);
            else {
                uint64_t cum = 0;
                for (size_t bkt = 0; bkt <= s->nbounds; bkt++) {
                    char le[32];
                    if (bkt < s->nbounds)
                        snprintf(le, sizeof(le), "%.17g", s->bounds[bkt]);
                    else
                        snprintf(le, sizeof(le), "+Inf");
                    cum += sum[bkt];
                    sample_line(mw, s->name, "_bucket", labels, "le", le);
                    put_u64(mw, cum);
                    puts_(mw, "\n");
                }
                sample_line(mw, s->name, "_sum", labels, NULL, NULL);
                put_value(mw, dsum);
                puts_(mw, "\n");
                sample_line(mw, s->name, "_count", labels, NULL, NULL);
                put_u64(mw, cum);
                puts_(mw, "\n");
            }
            if (sum != tmp)
                free(sum);
        }
    }
}

/* ---- process_* from /proc/self ---- */

static void process_series(flare_metrics_writer_t *mw)
{
    long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    char buf[1024];
    unsigned long long ut = 0, st = 0, start = 0, vsize = 0;
    long long rss = 0;
    bool have_stat = false;
    FILE *f = fopen("/proc/self/stat", "re");
    if (f != NULL) {
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        /* fields after the command name, which may hold spaces: from ')' */
        char *p = strrchr(buf, ')');
        have_stat =
            p != NULL && sscanf(p + 2,
                                "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d "
                                "%*d %*d %*d %*d %llu %llu %lld",
                                &ut, &st, &start, &vsize, &rss) == 5;
    }
    double btime = 0;
    f = fopen("/proc/stat", "re");
    if (f != NULL) {
        char line[256];
        while (fgets(line, sizeof(line), f) != NULL) {
            unsigned long long bt;
            if (sscanf(line, "btime %llu", &bt) == 1) {
                btime = (double)bt;
                break;
            }
        }
        fclose(f);
    }
    uint64_t fds = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            fds += e->d_name[0] != '.';
        closedir(d);
        fds--; /* the directory's own descriptor */
    }
    struct rlimit rl = { 0 };
    getrlimit(RLIMIT_NOFILE, &rl);
    if (have_stat && tck > 0) {
        flare_metrics_family(mw, "process_cpu_seconds_total", "counter",
                             "Total user and system CPU time spent in seconds.");
        flare_metrics_sample(mw, "process_cpu_seconds_total", NULL, (double)(ut + st) / tck);
        flare_metrics_family(mw, "process_resident_memory_bytes", "gauge",
                             "Resident memory size in bytes.");
        sample_u64(mw, "process_resident_memory_bytes", NULL, (uint64_t)rss * (uint64_t)page);
        flare_metrics_family(mw, "process_virtual_memory_bytes", "gauge",
                             "Virtual memory size in bytes.");
        sample_u64(mw, "process_virtual_memory_bytes", NULL, vsize);
        flare_metrics_family(mw, "process_start_time_seconds", "gauge",
                             "Start time of the process since unix epoch in seconds.");
        flare_metrics_sample(mw, "process_start_time_seconds", NULL, btime + (double)start / tck);
    }
    flare_metrics_family(mw, "process_open_fds", "gauge", "Number of open file descriptors.");
    sample_u64(mw, "process_open_fds", NULL, fds);
    flare_metrics_family(mw, "process_max_fds", "gauge",
                         "Maximum number of open file descriptors.");
    sample_u64(mw, "process_max_fds", NULL, (uint64_t)rl.rlim_cur);
}

/* ---- the whole exposition ---- */

static int render(flare_app_t *app, bool on_worker, flare_metrics_writer_t *mw)
{
    flare_metrics_app_t *ma = flare__metrics_app(app, false);
    if (ma == NULL || !ma->counting)
        return FLARE_ESTATE;
    flare_metrics_totals_t t;
    int rc = flare__metrics_totals(app, &t);
    if (rc != 0)
        return rc;
    requests(mw, ma);
    durations(mw, app, &t);
    streams(mw, app, &t);
    connections(mw, ma, &t);
    h2_series(mw, &t);
    free(t.routes);
    middleware(mw, app);
    flare_metrics_family(mw, "flare_jobs_queued", "gauge",
                         "Blocking jobs waiting for a job-pool thread");
    /* the pool exists while the workers run: read it from one of them */
    sample_u64(mw, "flare_jobs_queued", NULL, on_worker ? flare__jobs_queued(app) : 0);
    flare_metrics_family(mw, "flare_log_lines_dropped_total", "counter",
                         "Log lines dropped because a worker's ring was full");
    sample_u64(mw, "flare_log_lines_dropped_total", NULL, flare_log_dropped(app));
    tls_series(mw, app);
    listener_series(mw, app, on_worker);
    for (size_t i = 0; i < ma->ndbs; i++) {
        flare_db_stats_t st;
        if (flare_db_stats(ma->dbs[i], UINT32_MAX, &st) != 0)
            continue;
        const char *drv = flare_db_driver(ma->dbs[i]);
        const char *l[] = { "db", drv != NULL ? drv : "", NULL };
        static const char *const fam[][3] = {
            { "flare_db_connections_open", "gauge", "Database connections up" },
            { "flare_db_connections_busy", "gauge", "Database connections with a query" },
            { "flare_db_queue_length", "gauge", "Queries waiting for a database connection" },
            { "flare_db_queries_total", "counter", "Database statements completed" },
            { "flare_db_errors_total", "counter", "Database statements that failed" },
            { "flare_db_timeouts_total", "counter", "Database statements that timed out" },
            { "flare_db_rejected_total", "counter", "Database statements refused (unavailable)" },
            { "flare_db_reconnects_total", "counter", "Database connections remade" },
        };
        uint64_t v[] = { st.conns_open, st.conns_busy, st.queue_len, st.queries,
                         st.errors,     st.timeouts,   st.rejected,  st.reconnects };
        for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++) {
            if (i == 0)
                flare_metrics_family(mw, fam[k][0], fam[k][1], fam[k][2]);
            sample_u64(mw, fam[k][0], l, v[k]);
        }
    }
    user_series(mw, ma);
    for (size_t i = 0; i < ma->ncollectors; i++)
        ma->collectors[i].fn(mw, ma->collectors[i].ud);
    process_series(mw);
    return mw->err;
}

int flare_metrics_render(flare_app_t *app, char **out, size_t *len)
{
    if (app == NULL || out == NULL)
        return FLARE_EINVAL;
    *out = NULL;
    flare_metrics_writer_t mw = { 0 };
    /* while the workers are up, entering the gate orders this thread after
     * their setup (the blocks were made then) */
    bool inside = flare__app_enter(app) == 0;
    int rc = render(app, false, &mw);
    if (inside)
        flare__app_leave(app);
    if (rc == 0)
        put(&mw, "", 1); /* the NUL */
    if (rc != 0 || mw.err != 0) {
        flare__buf_free(&mw.b);
        return rc != 0 ? rc : mw.err;
    }
    *out = mw.b.data;
    if (len != NULL)
        *len = mw.b.len - 1;
    return 0;
}

static int metrics_handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    flare_app_t *app = ud;
    if (flare__admin_elsewhere(req))
        return flare__res_error(req, 404, "not found");
    flare_metrics_writer_t mw = { 0 };
    int rc = render(app, true, &mw);
    if (rc != 0) {
        flare__buf_free(&mw.b);
        return flare_res_send(res, 500, FLARE_STR("text/plain"),
                              (flare_str_t){ flare_strerror(rc), strlen(flare_strerror(rc)) });
    }
    rc = flare_res_send(res, 200, FLARE_STR("text/plain; version=0.0.4; charset=utf-8"),
                        (flare_str_t){ mw.b.data != NULL ? mw.b.data : "", mw.b.len });
    flare__buf_free(&mw.b);
    return rc;
}

int flare_metrics_route(flare_app_t *app, const char *path)
{
    if (app == NULL || path == NULL || path[0] != '/')
        return flare__fail(FLARE_EINVAL, 0, "flare_metrics_route: app NULL or path not /...");
    int rc = flare_metrics_enable(app);
    if (rc != 0)
        return rc;
    return flare_get(app, path, metrics_handler, app);
}

static bool db_ready(void *ud)
{
    flare_db_stats_t st;
    return flare_db_stats(ud, UINT32_MAX, &st) == 0 && st.conns_open > 0;
}

int flare_metrics_db(flare_app_t *app, flare_db_t *db)
{
    if (app == NULL || db == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_metrics_db: app or db is NULL");
    int rc = flare_metrics_enable(app);
    if (rc != 0)
        return rc;
    flare_metrics_app_t *ma = flare__metrics_app(app, false);
    flare_db_t **v = realloc(ma->dbs, (ma->ndbs + 1) * sizeof(*v));
    if (v == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "metrics: out of memory");
    ma->dbs = v;
    ma->dbs[ma->ndbs++] = db;
    return flare_health_check(app, "db", db_ready, db);
}
