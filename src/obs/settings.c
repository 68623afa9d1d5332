/* Settings: the key table and the three sources (file, environment,
 * flags), in that order of precedence, then the checks of the whole.
 *
 * Every value goes through flare__settings_set whatever its source, so a
 * key reads the same text the same way from the file, FLARE_<KEY> and
 * --<key>, and its error names where it came from. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "worker.h"
#include "obs/settings_int.h"

#define OFF(f)   offsetof(flare_settings_t, f)
#define MS_MAX   ((uint64_t)INT_MAX)
#define LISTEN_0 "127.0.0.1:8080"

/* clang-format off */
const settings_key_t flare__settings_keys[] = {
    { "listen", K_LISTEN, 0, 0, 0, 0, NULL,
      "HOST:PORT, unix:PATH[?mode=0660&owner=U&group=G] or unix:@NAME to listen on (repeatable; "
      "in the file a list, entries may carry tls-cert/tls-key)",
      true, true },
    { "listen-plain", K_LISTEN_PLAIN, 0, 0, 0, 0, NULL, "one more plain HTTP listener (repeatable)",
      true, false },
    { "tls-cert", K_TLS_CERT, 0, 0, 0, 0, NULL,
      "the first listener speaks TLS with this certificate chain (PEM, leaf first)", true, true },
    { "tls-key", K_TLS_KEY, 0, 0, 0, 0, NULL, "its private key (PEM)", true, true },
    { "tls-sni-cert", K_SNI_CERT, 0, 0, 0, 0, NULL,
      "one more certificate for the first listener, chosen by SNI (repeatable)", false, false },
    { "tls-sni-key", K_SNI_KEY, 0, 0, 0, 0, NULL,
      "its key (the n-th --tls-sni-key goes with the n-th --tls-sni-cert)", false, false },
    { "tls-handshake-timeout", K_MS, OFF(tls_handshake_timeout_ms), 0, 1, MS_MAX, NULL,
      "from accept to the end of a TLS handshake [10s]", true, true },
    { "workers", K_UINT, OFF(app.workers), 0, 0, 1024, NULL, "worker threads [0: one per CPU]",
      true, true },
    { "max-conns", K_UINT, OFF(app.max_conns), 0, 1, UINT_MAX, NULL,
      "connections per worker [100000]", true, true },
    { "header-timeout", K_MS, OFF(app.header_timeout_ms), 0, 1, MS_MAX, NULL,
      "first byte to complete head [10s]", true, true },
    { "body-timeout", K_MS, OFF(app.body_timeout_ms), 0, 1, MS_MAX, NULL,
      "between body reads [30s]", true, true },
    { "idle-timeout", K_MS, OFF(app.idle_timeout_ms), 0, 1, MS_MAX, NULL, "keep-alive idle [60s]",
      true, true },
    { "write-timeout", K_MS, OFF(app.write_timeout_ms), 0, 1, MS_MAX, NULL,
      "a write that makes no progress [30s]", true, true },
    { "drain-timeout", K_MS, OFF(app.drain_timeout_ms), 0, 1, MS_MAX, NULL,
      "graceful shutdown limit [10s]", true, true },
    { "max-request-line", K_SIZE, OFF(app.max_request_line), 0, 1, (uint64_t)1 << 30, NULL,
      "414 past it [8k]", true, true },
    { "max-head", K_SIZE, OFF(app.max_head), 0, 1, (uint64_t)1 << 30, NULL,
      "431 past it [32k]", true, true },
    { "max-headers", K_SIZE, OFF(app.max_headers), 0, 1, 65535, NULL,
      "header fields, 431 past it [100]", true, true },
    { "max-body", K_SIZE, OFF(app.max_body), 0, 0, (uint64_t)1 << 40, NULL,
      "413 past it [1m]", true, true },
    { "max-conn-body", K_SIZE, OFF(app.max_conn_body), 0, 0, (uint64_t)1 << 42, NULL,
      "request bodies one connection holds at once (HTTP/2 streams) [4 x max-body]", true, true },
    { "job-threads", K_UINT, OFF(app.job_threads), 0, 1, 1024, NULL, "blocking-job threads [4]",
      true, true },
    { "backlog", K_INT, OFF(app.backlog), 0, 0, INT_MAX, NULL, "listen(2) backlog [4096]",
      true, true },
    { "io", K_ENUM, OFF(io), 0, 0, 0, "auto|uring|epoll",
      "the I/O backend [auto: io_uring where this process may use it, else epoll]", true, true },
    { "mw-stats", K_BOOL, OFF(app.mw_stats), 0, 0, 1, NULL, "time every middleware hook [false]",
      true, true },
    { "json-any-content-type", K_BOOL, OFF(app.json_any_content_type), 0, 0, 1, NULL,
      "parse JSON bodies whatever their Content-Type [false: 415 unless application/json]",
      true, true },
    { "admin-listen", K_STR, OFF(admin_listen), 0, 0, 0, NULL,
      "HOST:PORT for /metrics, /status, /healthz, /readyz, then 404 on the other listeners "
      "[off: on every listener]", true, true },
    { "ws-origin", K_LIST, OFF(ws_origins), OFF(nws_origins), 0, 0, NULL,
      "an Origin allowed to open WebSockets (repeatable; * for any) [the page's own origin only]",
      true, true },
    { "rate-limit", K_RATE, OFF(rate_limit), 0, 0, 0, NULL,
      "N[/s|/m|/h]: requests per client address, on every request [none]", true, true },
    { "rate-limit-burst", K_UINT, OFF(rate_limit_burst), 0, 1, UINT_MAX, NULL,
      "requests a client may make at once [one second's worth]", true, true },
    { "rate-limit-redis", K_STR, OFF(rate_limit_redis), 0, 0, 0, NULL,
      "redis://HOST:PORT[/DB]: the limit shared by every instance on that Redis "
      "[cluster's Redis when set, else in this process]",
      true, true },
    { "rate-limit-fail", K_ENUM, OFF(rate_limit_fail), 0, 0, 0, "open|closed",
      "when Redis cannot decide: let the request through, or 503 [open]", true, true },
    { "rate-limit-timeout", K_MS, OFF(rate_limit_timeout_ms), 0, 1, MS_MAX, NULL,
      "the longest a request waits for Redis's decision [250ms]", true, true },
    { "session-secure", K_ENUM, OFF(session_secure), 0, 0, 0, "auto|always|never",
      "session cookie Secure [auto: when the request came over TLS]", true, true },
    { "upstream", K_LIST, OFF(upstreams), OFF(nupstreams), 0, 0, NULL,
      "HOST:PORT (or an http:// or https:// URL) a proxy forwards to (repeatable) [none]", true,
      true },
    { "static", K_LIST, OFF(statics), OFF(nstatics), 0, 0, NULL,
      "DIR served under /static, or /PREFIX=DIR (repeatable)", true, true },
    { "log", K_STR, OFF(log), 0, 0, 0, NULL, "log file, - for stderr [-]", true, true },
    { "log-level", K_ENUM, OFF(log_level), 0, 0, 0, "error|warn|info|debug", "[error]", true,
      true },
    { "log-format", K_ENUM, OFF(log_format), 0, 0, 0, "text|json", "[text]", true, true },
    { "access-log", K_STR, OFF(access_log), 0, 0, 0, NULL, "access log file, - for stdout [off]",
      true, true },
    { "access-log-format", K_ENUM, OFF(access_log_format), 0, 0, 0, "combined|json",
      "[combined]", true, true },
    { "db", K_STR, OFF(db), 0, 0, 0, NULL, "database URL (sqlite:PATH, postgresql://...)", true,
      true },
    { "sessions", K_STR, OFF(sessions), 0, 0, 0, NULL,
      "session store: memory or redis://HOST:PORT [memory]", true, true },
    { "cluster", K_STR, OFF(cluster), 0, 0, 0, NULL,
      "redis://HOST:PORT[/DB]: WebSocket rooms, SSE feeds and channels shared by every instance "
      "on that Redis, with offsets, history and presence [off: this process only]", true, true },
    { "cluster-history", K_UINT, OFF(cluster_history), 0, 1, 1000000, NULL,
      "messages of history kept per channel, for clients that resume [1000]", true, true },
    { "cluster-history-age", K_MS, OFF(cluster_history_age_ms), 0, 1000, MS_MAX, NULL,
      "history entries older than this are dropped [5m]", true, true },
    { "cluster-presence-ttl", K_MS, OFF(cluster_presence_ttl_ms), 0, 300, MS_MAX, NULL,
      "the presence entries of an instance that died expire within this [15s]", true, true },
    { "config", K_CONFIG, 0, 0, 0, 0, NULL, "FILE: read the settings from this YAML file first",
      false, false },
    { "check-config", K_CHECK, 0, 0, 0, 0, NULL,
      "check the settings, print them as YAML and exit (0: good, 1: bad)", false, false },
    { "help", K_HELP, 0, 0, 0, 0, NULL, "this text", false, false },
};
/* clang-format on */
const size_t flare__settings_nkeys = sizeof(flare__settings_keys) / sizeof(flare__settings_keys[0]);

#define NKEYS flare__settings_nkeys

static const char *key_name(const flare_settings_t *s, int idx)
{
    return (size_t)idx < NKEYS ? flare__settings_keys[idx].name
                               : s->priv->extra[(size_t)idx - NKEYS].name;
}

/* ---- errors ---- */

int flare__settings_fail(flare_settings_t *s, const settings_src_t *src, const char *key,
                         const char *fmt, ...)
{
    char *e = s->priv->error;
    size_t cap = sizeof(s->priv->error), n = 0;
    int w = 0;
    if (src == NULL || src->layer == LAYER_DEFAULT) {
        w = key != NULL ? snprintf(e, cap, "%s: ", key) : 0;
    } else if (src->layer == LAYER_FILE) {
        w = key != NULL ? snprintf(e, cap, "%s:%u: %s: ", src->file, src->line, key)
                        : snprintf(e, cap, "%s:%u: ", src->file, src->line);
    } else if (src->layer == LAYER_ENV) {
        w = snprintf(e, cap, "FLARE_");
        for (const char *p = key; p != NULL && *p != '\0' && (size_t)w + 3 < cap; p++)
            e[w++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
        e[w++] = ':';
        e[w++] = ' ';
        e[w] = '\0';
    } else {
        w = snprintf(e, cap, "--%s: ", key != NULL ? key : "");
    }
    n = w > 0 && (size_t)w < cap ? (size_t)w : 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e + n, cap - n, fmt, ap);
    va_end(ap);
    return FLARE_EINVAL;
}

int flare__settings_nomem(flare_settings_t *s)
{
    snprintf(s->priv->error, sizeof(s->priv->error), "out of memory");
    return FLARE_ENOMEM;
}

const char *flare_settings_error(const flare_settings_t *s)
{
    return s != NULL && s->priv != NULL ? s->priv->error : "";
}

/* ---- values ---- */

int flare__settings_strset(flare_settings_t *s, char **slot, const char *val)
{
    char *c = NULL;
    if (val != NULL && (c = strdup(val)) == NULL)
        return flare__settings_nomem(s);
    free(*slot);
    *slot = c;
    return 0;
}

static int parse_u64(const char *v, uint64_t *out, const char **rest)
{
    if (!isdigit((unsigned char)v[0]))
        return -1;
    errno = 0;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno != 0)
        return -1;
    *out = x;
    *rest = end;
    return 0;
}

int flare__settings_rate(const char *v, double *per_second)
{
    if (!isdigit((unsigned char)v[0]) && v[0] != '.')
        return -1;
    errno = 0;
    char *end;
    double n = strtod(v, &end);
    if (errno != 0 || !(n > 0) || n > 1e12)
        return -1;
    double per = 1;
    if (strcmp(end, "/m") == 0)
        per = 60;
    else if (strcmp(end, "/h") == 0)
        per = 3600;
    else if (*end != '\0' && strcmp(end, "/s") != 0)
        return -1;
    *per_second = n / per;
    return 0;
}

/* "30" (seconds), "500ms", "30s", "2m", "1h" -> ms */
static int parse_ms(const char *v, uint64_t *ms)
{
    uint64_t x, mul;
    const char *r;
    if (parse_u64(v, &x, &r) != 0)
        return -1;
    if (*r == '\0' || strcmp(r, "s") == 0)
        mul = 1000;
    else if (strcmp(r, "ms") == 0)
        mul = 1;
    else if (strcmp(r, "m") == 0)
        mul = 60000;
    else if (strcmp(r, "h") == 0)
        mul = 3600000;
    else
        return -1;
    if (x > UINT64_MAX / mul)
        return -1;
    *ms = x * mul;
    return 0;
}

/* "1048576", "64k", "1m", "1g" (powers of 1024; "kb"/"mb"/"gb" too) */
static int parse_size(const char *v, uint64_t *out)
{
    uint64_t x, mul = 1;
    const char *r;
    if (parse_u64(v, &x, &r) != 0)
        return -1;
    char c = (char)tolower((unsigned char)r[0]);
    if (c == 'k')
        mul = 1024;
    else if (c == 'm')
        mul = 1024 * 1024;
    else if (c == 'g')
        mul = 1024 * 1024 * 1024;
    else if (c != '\0')
        return -1;
    if (c != '\0' && r[1] != '\0' && !((r[1] == 'b' || r[1] == 'B') && r[2] == '\0'))
        return -1;
    if (x > UINT64_MAX / mul)
        return -1;
    *out = x * mul;
    return 0;
}

static int parse_bool(const char *v, bool *out)
{
    static const char *yes[] = { "true", "yes", "on", "1" }, *no[] = { "false", "no", "off", "0" };
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0)
            return *out = true, 0;
        if (strcasecmp(v, no[i]) == 0)
            return *out = false, 0;
    }
    return -1;
}

static bool enum_ok(const char *choices, const char *v)
{
    size_t n = strlen(v);
    for (const char *p = choices; *p != '\0';) {
        const char *bar = strchr(p, '|');
        size_t l = bar != NULL ? (size_t)(bar - p) : strlen(p);
        if (l == n && strncmp(p, v, n) == 0)
            return true;
        p += l + (bar != NULL);
    }
    return false;
}

static int bad(flare_settings_t *s, const settings_src_t *src, const char *key, const char *what,
               const char *v)
{
    return flare__settings_fail(s, src, key, "expected %s, got \"%s\"", what, v);
}

static int set_number(flare_settings_t *s, const settings_src_t *src, const char *name,
                      settings_kind_t kind, uint64_t min, uint64_t max, const char *v,
                      uint64_t *out)
{
    char what[96];
    uint64_t x;
    int ok;
    if (kind == K_MS) {
        ok = parse_ms(v, &x);
        if (ok == 0 && (x < min || x > max))
            return flare__settings_fail(s, src, name, "%s is out of range (%llums..%llums)", v,
                                        (unsigned long long)min, (unsigned long long)max);
        snprintf(what, sizeof(what), "a duration (30, 500ms, 30s, 2m, 1h)");
    } else if (kind == K_SIZE) {
        ok = parse_size(v, &x);
        if (ok == 0 && (x < min || x > max))
            return flare__settings_fail(s, src, name, "%s is out of range (%llu..%llu bytes)", v,
                                        (unsigned long long)min, (unsigned long long)max);
        snprintf(what, sizeof(what), "a size (1048576, 64k, 1m)");
    } else {
        const char *r;
        ok = parse_u64(v, &x, &r) == 0 && *r == '\0' && x >= min && x <= max ? 0 : -1;
        snprintf(what, sizeof(what), "an integer %llu..%llu", (unsigned long long)min,
                 (unsigned long long)max);
    }
    if (ok != 0)
        return bad(s, src, name, what, v);
    *out = x;
    return 0;
}

static flare_settings_listener_t *listener0(flare_settings_t *s, const settings_src_t *src)
{
    if (s->nlisteners == 0)
        return flare__settings_add_listener(s, LISTEN_0, src, false);
    return &s->listeners[0];
}

static void listener_dispose(flare_settings_listener_t *l)
{
    free(l->addr);
    free(l->tls_cert);
    free(l->tls_key);
    for (size_t i = 0; i < l->nsni; i++) {
        free(l->sni[i].cert);
        free(l->sni[i].key);
    }
    free(l->sni);
    free(l->origin);
}

static void listeners_clear(flare_settings_t *s)
{
    for (size_t i = 0; i < s->nlisteners; i++)
        listener_dispose(&s->listeners[i]);
    free(s->listeners);
    s->listeners = NULL;
    s->nlisteners = 0;
    s->priv->nsni_cert = s->priv->nsni_key = 0;
}

static char *origin_of(const settings_src_t *src, const char *key)
{
    char buf[512];
    if (src == NULL || src->layer == LAYER_DEFAULT)
        snprintf(buf, sizeof(buf), "%s", key);
    else if (src->layer == LAYER_FILE)
        snprintf(buf, sizeof(buf), "%s:%u", src->file, src->line);
    else if (src->layer == LAYER_ENV)
        snprintf(buf, sizeof(buf), "FLARE_%s", key);
    else
        snprintf(buf, sizeof(buf), "--%s", key);
    for (char *p = buf; src != NULL && src->layer == LAYER_ENV && *p != '\0'; p++)
        *p = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    return strdup(buf);
}

flare_settings_listener_t *flare__settings_add_listener(flare_settings_t *s, const char *addr,
                                                        const settings_src_t *src, bool replace)
{
    int layer = src != NULL ? src->layer : LAYER_DEFAULT;
    if (replace && s->priv->layer[0] != layer) {
        listeners_clear(s);
        s->priv->layer[0] = (uint8_t)layer;
    }
    flare_settings_listener_t *v = realloc(s->listeners, (s->nlisteners + 1) * sizeof(*v));
    if (v == NULL)
        return flare__settings_nomem(s), NULL;
    s->listeners = v;
    flare_settings_listener_t *l = &v[s->nlisteners];
    memset(l, 0, sizeof(*l));
    l->addr = strdup(addr);
    l->origin = origin_of(src, "listen");
    if (l->addr == NULL || l->origin == NULL) {
        listener_dispose(l);
        return flare__settings_nomem(s), NULL;
    }
    s->nlisteners++;
    return l;
}

int flare__settings_add_sni(flare_settings_t *s, flare_settings_listener_t *l, const char *cert,
                            const char *key)
{
    flare_settings_cert_t *v = realloc(l->sni, (l->nsni + 1) * sizeof(*v));
    if (v == NULL)
        return flare__settings_nomem(s);
    l->sni = v;
    v[l->nsni].cert = cert != NULL ? strdup(cert) : NULL;
    v[l->nsni].key = key != NULL ? strdup(key) : NULL;
    l->nsni++;
    if ((cert != NULL && v[l->nsni - 1].cert == NULL) ||
        (key != NULL && v[l->nsni - 1].key == NULL))
        return flare__settings_nomem(s);
    return 0;
}

/* --tls-sni-cert / --tls-sni-key: the n-th of each make the n-th pair */
static int set_sni(flare_settings_t *s, bool is_key, const char *v, const settings_src_t *src)
{
    flare_settings_listener_t *l = listener0(s, src);
    if (l == NULL)
        return FLARE_ENOMEM;
    free(l->origin);
    if ((l->origin = origin_of(src, is_key ? "tls-sni-key" : "tls-sni-cert")) == NULL)
        return flare__settings_nomem(s);
    size_t *n = is_key ? &s->priv->nsni_key : &s->priv->nsni_cert;
    if (*n >= l->nsni) {
        int rc = flare__settings_add_sni(s, l, NULL, NULL);
        if (rc != 0)
            return rc;
    }
    return flare__settings_strset(s, is_key ? &l->sni[*n].key : &l->sni[*n].cert, v) == 0
               ? ((*n)++, 0)
               : FLARE_ENOMEM;
}

static int list_add(flare_settings_t *s, int idx, const settings_key_t *k, const char *v,
                    const settings_src_t *src)
{
    char ***list = (char ***)((char *)s + k->off);
    size_t *n = (size_t *)((char *)s + k->off2);
    if (s->priv->layer[idx] != src->layer) {
        for (size_t i = 0; i < *n; i++)
            free((*list)[i]);
        free(*list);
        *list = NULL;
        *n = 0;
        s->priv->layer[idx] = (uint8_t)src->layer;
    }
    /* one more slot: the list stays NULL-terminated (ws-origin is handed
     * to flare_ws_config_t.origins as it is) */
    char **nv = realloc(*list, (*n + 2) * sizeof(char *));
    if (nv == NULL)
        return flare__settings_nomem(s);
    *list = nv;
    nv[*n + 1] = NULL;
    if ((nv[*n] = strdup(v)) == NULL)
        return flare__settings_nomem(s);
    (*n)++;
    return 0;
}

static int set_extra(flare_settings_t *s, size_t j, const char *v, const settings_src_t *src)
{
    const flare_settings_option_t *o = &s->priv->extra[j];
    settings_value_t *val = &s->priv->ext[j];
    uint64_t x;
    int rc;
    switch (o->type) {
    case FLARE_SETTING_STRING:
        return flare__settings_strset(s, &val->s, v);
    case FLARE_SETTING_BOOL:
        if (parse_bool(v, &val->b) != 0)
            return bad(s, src, o->name, "true or false", v);
        return 0;
    case FLARE_SETTING_UINT:
        rc = set_number(s, src, o->name, K_UINT, o->min, o->max != 0 ? o->max : UINT_MAX, v, &x);
        if (rc == 0)
            val->u = (unsigned)x;
        return rc;
    case FLARE_SETTING_DURATION:
        rc = set_number(s, src, o->name, K_MS, o->min, o->max != 0 ? o->max : MS_MAX, v, &x);
        if (rc == 0)
            val->u = (unsigned)x;
        return rc;
    case FLARE_SETTING_SIZE:
        rc = set_number(s, src, o->name, K_SIZE, o->min, o->max != 0 ? o->max : SIZE_MAX, v, &x);
        if (rc == 0)
            val->z = (size_t)x;
        return rc;
    }
    return flare__settings_fail(s, src, o->name, "unknown option type %d", (int)o->type);
}

int flare__settings_set(flare_settings_t *s, int idx, const char *v, const settings_src_t *src)
{
    if ((size_t)idx >= NKEYS)
        return set_extra(s, (size_t)idx - NKEYS, v, src);
    const settings_key_t *k = &flare__settings_keys[idx];
    void *at = (char *)s + k->off;
    uint64_t x;
    int rc;
    flare_settings_listener_t *l;
    switch (k->kind) {
    case K_UINT:
    case K_INT:
    case K_SIZE:
    case K_MS:
        if ((rc = set_number(s, src, k->name, k->kind, k->min, k->max, v, &x)) != 0)
            return rc;
        if (k->kind == K_SIZE)
            *(size_t *)at = (size_t)x;
        else if (k->kind == K_INT)
            *(int *)at = (int)x;
        else
            *(unsigned *)at = (unsigned)x;
        return 0;
    case K_BOOL:
        if (parse_bool(v, (bool *)at) != 0)
            return bad(s, src, k->name, "true or false", v);
        return 0;
    case K_ENUM:
        if (!enum_ok(k->choices, v))
            return bad(s, src, k->name, k->choices, v);
        return flare__settings_strset(s, (char **)at, v);
    case K_STR:
        if (*v == '\0')
            return flare__settings_fail(s, src, k->name, "expected a value, got \"\"");
        return flare__settings_strset(s, (char **)at, v);
    case K_RATE: {
        double r;
        if (flare__settings_rate(v, &r) != 0)
            return bad(s, src, k->name, "a rate (10, 10/s, 5/m, 100/h)", v);
        return flare__settings_strset(s, (char **)at, v);
    }
    case K_LIST:
        if (*v == '\0')
            return flare__settings_fail(s, src, k->name, "expected a value, got \"\"");
        return list_add(s, idx, k, v, src);
    case K_LISTEN:
    case K_LISTEN_PLAIN:
        if (*v == '\0')
            return flare__settings_fail(s, src, k->name,
                                        "expected HOST:PORT or unix:PATH, got \"\"");
        if (k->kind == K_LISTEN_PLAIN && listener0(s, src) == NULL)
            return FLARE_ENOMEM;
        l = flare__settings_add_listener(s, v, src, k->kind == K_LISTEN);
        return l != NULL ? 0 : FLARE_ENOMEM;
    case K_TLS_CERT:
    case K_TLS_KEY:
        if ((l = listener0(s, src)) == NULL)
            return FLARE_ENOMEM;
        if (flare__settings_strset(s, k->kind == K_TLS_CERT ? &l->tls_cert : &l->tls_key, v) != 0)
            return FLARE_ENOMEM;
        free(l->origin);
        l->origin = origin_of(src, k->name);
        return l->origin != NULL ? 0 : flare__settings_nomem(s);
    case K_SNI_CERT:
    case K_SNI_KEY:
        return set_sni(s, k->kind == K_SNI_KEY, v, src);
    case K_CONFIG:
    case K_CHECK:
    case K_HELP:
        break;
    }
    return flare__settings_fail(s, src, k->name, "not a configuration key");
}

int flare__settings_find(const flare_settings_t *s, const char *name, size_t len)
{
    for (size_t i = 0; i < NKEYS; i++) {
        if (strlen(flare__settings_keys[i].name) == len &&
            memcmp(flare__settings_keys[i].name, name, len) == 0)
            return (int)i;
    }
    for (size_t j = 0; s->priv != NULL && j < s->priv->nextra; j++) {
        if (strlen(s->priv->extra[j].name) == len && memcmp(s->priv->extra[j].name, name, len) == 0)
            return (int)(NKEYS + j);
    }
    return -1;
}

/* ---- life ---- */

void flare_settings_init(flare_settings_t *s)
{
    memset(s, 0, sizeof(*s));
}

static void ext_free(settings_value_t *v, const flare_settings_option_t *extra, size_t n)
{
    for (size_t j = 0; v != NULL && j < n; j++) {
        if (extra[j].type == FLARE_SETTING_STRING)
            free(v[j].s);
    }
    free(v);
}

void flare_settings_free(flare_settings_t *s)
{
    if (s == NULL)
        return;
    struct flare__settings_priv *p = s->priv;
    if (p != NULL) {
        listeners_clear(s);
        for (int i = 0; i < p->argc; i++)
            free(p->argv[i]);
        free(p->argv);
        ext_free(p->ext, p->extra, p->nextra);
        ext_free(p->ext_def, p->extra, p->nextra);
        free(p->layer);
        free(p);
    }
    for (size_t i = 0; i < s->nstatics; i++)
        free(s->statics[i]);
    free(s->statics);
    for (size_t i = 0; i < s->nws_origins; i++)
        free(s->ws_origins[i]);
    free(s->ws_origins);
    for (size_t i = 0; i < s->nupstreams; i++)
        free(s->upstreams[i]);
    free(s->upstreams);
    free(s->admin_listen);
    free(s->session_secure);
    free(s->rate_limit);
    free(s->rate_limit_redis);
    free(s->rate_limit_fail);
    free(s->log);
    free(s->log_level);
    free(s->log_format);
    free(s->io);
    free(s->access_log);
    free(s->access_log_format);
    free(s->db);
    free(s->sessions);
    free(s->cluster);
    free(s->config_file);
    flare_settings_init(s);
}

/* Sets up priv: the extras (their defaults read from `where`, or copied
 * from `def` for a reload) and a copy of argv. */
static int priv_setup(flare_settings_t *s, int argc, char **argv,
                      const flare_settings_option_t *extra, size_t nextra,
                      const settings_value_t *def)
{
    struct flare__settings_priv *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return FLARE_ENOMEM;
    s->priv = p;
    p->extra = extra;
    p->nextra = nextra;
    p->layer = calloc(NKEYS + nextra + 1, 1);
    p->ext = calloc(nextra + 1, sizeof(*p->ext));
    p->ext_def = calloc(nextra + 1, sizeof(*p->ext_def));
    p->argv = calloc((size_t)(argc > 0 ? argc : 0) + 1, sizeof(char *));
    if (p->layer == NULL || p->ext == NULL || p->ext_def == NULL || p->argv == NULL)
        return flare__settings_nomem(s);
    for (; p->argc < argc; p->argc++) {
        if ((p->argv[p->argc] = strdup(argv[p->argc])) == NULL)
            return flare__settings_nomem(s);
    }
    for (size_t j = 0; j < nextra; j++) {
        const flare_settings_option_t *o = &extra[j];
        if (o->name == NULL ||
            flare__settings_find(s, o->name, strlen(o->name)) != (int)(NKEYS + j))
            return flare__settings_fail(s, NULL, o->name != NULL ? o->name : "(null)",
                                        "extra option: no name, or the name of another key");
        settings_value_t d = { 0 };
        if (def != NULL) {
            d = def[j];
        } else if (o->where != NULL) {
            switch (o->type) {
            case FLARE_SETTING_STRING:
                d.s = *(char **)o->where;
                break;
            case FLARE_SETTING_BOOL:
                d.b = *(bool *)o->where;
                break;
            case FLARE_SETTING_UINT:
            case FLARE_SETTING_DURATION:
                d.u = *(unsigned *)o->where;
                break;
            case FLARE_SETTING_SIZE:
                d.z = *(size_t *)o->where;
                break;
            }
        }
        p->ext[j] = p->ext_def[j] = d;
        if (o->type == FLARE_SETTING_STRING && d.s != NULL) {
            p->ext[j].s = strdup(d.s);
            p->ext_def[j].s = strdup(d.s);
            if (p->ext[j].s == NULL || p->ext_def[j].s == NULL)
                return flare__settings_nomem(s);
        }
    }
    return 0;
}

/* ---- the sources ---- */

static int load_env(flare_settings_t *s)
{
    settings_src_t src = { .layer = LAYER_ENV };
    size_t n = NKEYS + s->priv->nextra;
    for (size_t i = 0; i < n; i++) {
        bool env = i >= NKEYS || flare__settings_keys[i].env;
        if (!env)
            continue;
        const char *name = key_name(s, (int)i);
        char var[128] = "FLARE_";
        size_t w = 6;
        for (const char *p = name; *p != '\0' && w + 1 < sizeof(var); p++)
            var[w++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
        var[w] = '\0';
        const char *v = getenv(var);
        if (v == NULL)
            continue;
        settings_kind_t kind = i < NKEYS ? flare__settings_keys[i].kind : K_STR;
        if (kind != K_LISTEN && kind != K_LIST) {
            int rc = flare__settings_set(s, (int)i, v, &src);
            if (rc != 0)
                return rc;
            continue;
        }
        /* a list: comma-separated */
        char *copy = strdup(v);
        if (copy == NULL)
            return flare__settings_nomem(s);
        int rc = 0;
        char *save = NULL;
        for (char *t = strtok_r(copy, ",", &save); t != NULL && rc == 0;
             t = strtok_r(NULL, ",", &save))
            rc = flare__settings_set(s, (int)i, t, &src);
        free(copy);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* The flags: listen ones first, so that --tls-cert before --listen still
 * goes to the listener --listen makes. */
static int load_flags(flare_settings_t *s, bool listen_pass)
{
    settings_src_t src = { .layer = LAYER_FLAGS };
    struct flare__settings_priv *p = s->priv;
    for (int i = 1; i < p->argc; i++) {
        const char *a = p->argv[i];
        if (strcmp(a, "-h") == 0)
            continue;
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
            return flare__settings_fail(s, NULL, NULL, "unexpected argument \"%s\" (see --help)",
                                        a);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq != NULL ? (size_t)(eq - name) : strlen(name);
        int idx = flare__settings_find(s, name, len);
        if (idx < 0)
            return flare__settings_fail(s, NULL, NULL, "--%.*s: unknown option (see --help)",
                                        (int)len, name);
        settings_kind_t kind = (size_t)idx < NKEYS ? flare__settings_keys[idx].kind : K_STR;
        bool is_bool = (size_t)idx < NKEYS
                           ? kind == K_BOOL
                           : p->extra[(size_t)idx - NKEYS].type == FLARE_SETTING_BOOL;
        if (kind == K_CHECK || kind == K_HELP) {
            if (eq != NULL)
                return flare__settings_fail(s, &src, key_name(s, idx), "takes no value");
            if (kind == K_CHECK)
                s->check_config = true;
            continue;
        }
        const char *v = eq != NULL ? eq + 1 : NULL;
        if (v == NULL && is_bool) {
            v = "true";
        } else if (v == NULL) {
            if (i + 1 >= p->argc)
                return flare__settings_fail(s, &src, key_name(s, idx), "missing value");
            v = p->argv[++i];
        }
        bool is_listen = kind == K_LISTEN || kind == K_LISTEN_PLAIN;
        if (kind == K_CONFIG || is_listen != listen_pass)
            continue;
        int rc = flare__settings_set(s, idx, v, &src);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static bool has_flag(const flare_settings_t *s, const char *flag)
{
    for (int i = 1; i < s->priv->argc; i++) {
        if (strcmp(s->priv->argv[i], flag) == 0)
            return true;
    }
    return false;
}

/* --config FILE / --config=FILE, else $FLARE_CONFIG */
static int find_config(flare_settings_t *s)
{
    const char *file = NULL;
    for (int i = 1; i < s->priv->argc; i++) {
        const char *a = s->priv->argv[i];
        if (strcmp(a, "--config") == 0) {
            if (i + 1 >= s->priv->argc)
                return flare__settings_fail(s, NULL, NULL, "--config: missing value");
            file = s->priv->argv[++i];
        } else if (strncmp(a, "--config=", 9) == 0) {
            file = a + 9;
        }
    }
    if (file == NULL)
        file = getenv("FLARE_CONFIG");
    if (file != NULL && *file == '\0')
        return flare__settings_fail(s, NULL, NULL, "--config: empty file name");
    return flare__settings_strset(s, &s->config_file, file);
}

/* The whole: what no single key can check. */
static int check(flare_settings_t *s)
{
    if (s->io != NULL) /* one of the three: set_value checked it */
        s->app.io = strcmp(s->io, "uring") == 0   ? FLARE_IO_URING
                    : strcmp(s->io, "epoll") == 0 ? FLARE_IO_EPOLL
                                                  : FLARE_IO_AUTO;
    bool any_tls = false;
    for (size_t i = 0; i < s->nlisteners; i++) {
        flare_settings_listener_t *l = &s->listeners[i];
        if ((l->tls_cert == NULL) != (l->tls_key == NULL))
            return flare__settings_fail(s, NULL, NULL, "%s: listen %s: %s without %s", l->origin,
                                        l->addr, l->tls_cert != NULL ? "tls-cert" : "tls-key",
                                        l->tls_cert != NULL ? "tls-key" : "tls-cert");
        for (size_t j = 0; j < l->nsni; j++) {
            if (l->sni[j].cert == NULL || l->sni[j].key == NULL)
                return flare__settings_fail(
                    s, NULL, NULL, "%s: listen %s: SNI certificate %zu needs tls-cert and tls-key",
                    l->origin, l->addr, j + 1);
        }
        if (l->nsni > 0 && l->tls_cert == NULL)
            return flare__settings_fail(s, NULL, NULL,
                                        "%s: listen %s: SNI certificates need tls-cert/tls-key",
                                        l->origin, l->addr);
        any_tls |= l->tls_cert != NULL;
    }
    if (!any_tls && s->tls_handshake_timeout_ms != 0)
        return flare__settings_fail(s, NULL, "tls-handshake-timeout", "no listener has tls-cert");
    for (size_t i = 0; i < s->nstatics; i++) {
        const char *v = s->statics[i];
        if (v[0] == '/' && strchr(v, '=') != NULL && strchr(v, '=')[1] == '\0')
            return flare__settings_fail(s, NULL, "static", "\"%s\": no directory after '='", v);
    }
    if (s->rate_limit_redis != NULL && strncmp(s->rate_limit_redis, "redis://", 8) != 0)
        return flare__settings_fail(s, NULL, "rate-limit-redis",
                                    "expected redis://HOST:PORT[/DB], got \"%s\"",
                                    s->rate_limit_redis);
    if (s->rate_limit == NULL) {
        const char *alone = s->rate_limit_burst != 0        ? "rate-limit-burst"
                            : s->rate_limit_redis != NULL   ? "rate-limit-redis"
                            : s->rate_limit_fail != NULL    ? "rate-limit-fail"
                            : s->rate_limit_timeout_ms != 0 ? "rate-limit-timeout"
                                                            : NULL;
        if (alone != NULL)
            return flare__settings_fail(s, NULL, alone, "needs rate-limit (N[/s|/m|/h])");
    }
    if (s->sessions != NULL && strcmp(s->sessions, "memory") != 0 &&
        strncmp(s->sessions, "redis://", 8) != 0)
        return flare__settings_fail(
            s, NULL, "sessions", "expected memory or redis://HOST:PORT, got \"%s\"", s->sessions);
    if (s->cluster != NULL && strncmp(s->cluster, "redis://", 8) != 0)
        return flare__settings_fail(s, NULL, "cluster",
                                    "expected redis://HOST:PORT[/DB], got \"%s\"", s->cluster);
    flare_config_t out;
    if (flare__config_resolve(&out, &s->app) != 0)
        return flare__settings_fail(s, NULL, NULL, "%s", flare_last_error());
    return 0;
}

static int load_all(flare_settings_t *s)
{
    int rc = find_config(s);
    if (rc == 0 && s->config_file != NULL)
        rc = flare__settings_load_file(s, s->config_file);
    if (rc == 0)
        rc = load_env(s);
    if (rc == 0)
        rc = load_flags(s, true);
    if (rc == 0)
        rc = load_flags(s, false);
    if (rc == 0 && s->nlisteners == 0 && listener0(s, NULL) == NULL)
        rc = FLARE_ENOMEM;
    if (rc == 0)
        rc = check(s);
    return rc;
}

static void print_help(const flare_settings_t *s, const char *argv0)
{
    printf("usage: %s [--config FILE] [--check-config] [--KEY VALUE]...\n"
           "Every key also reads from the YAML file (KEY: VALUE) and the environment\n"
           "(FLARE_KEY, upper-case, '-' as '_'); flags win over both. docs/config.md.\n",
           argv0);
    for (size_t i = 0; i < NKEYS + s->priv->nextra; i++) {
        const char *help =
            i < NKEYS ? flare__settings_keys[i].help : s->priv->extra[i - NKEYS].help;
        const char *choices = i < NKEYS ? flare__settings_keys[i].choices : NULL;
        printf("  --%-22s %s%s%s\n", key_name(s, (int)i), choices != NULL ? choices : "",
               choices != NULL ? " " : "", help != NULL ? help : "");
    }
}

static void write_extras(flare_settings_t *s)
{
    for (size_t j = 0; j < s->priv->nextra; j++) {
        const flare_settings_option_t *o = &s->priv->extra[j];
        settings_value_t v = s->priv->ext[j];
        if (o->where == NULL)
            continue;
        switch (o->type) {
        case FLARE_SETTING_STRING:
            *(const char **)o->where = v.s;
            break;
        case FLARE_SETTING_BOOL:
            *(bool *)o->where = v.b;
            break;
        case FLARE_SETTING_UINT:
        case FLARE_SETTING_DURATION:
            *(unsigned *)o->where = v.u;
            break;
        case FLARE_SETTING_SIZE:
            *(size_t *)o->where = v.z;
            break;
        }
    }
}

int flare_settings_parse_args(flare_settings_t *s, int argc, char **argv,
                              const flare_settings_option_t *extra, size_t nextra)
{
    flare_settings_free(s);
    int rc = priv_setup(s, argc, argv, extra, nextra, NULL);
    if (rc != 0)
        return rc;
    if (has_flag(s, "--help") || has_flag(s, "-h")) {
        print_help(s, argc > 0 ? argv[0] : "flare");
        return FLARE_SETTINGS_EXIT;
    }
    s->check_config = has_flag(s, "--check-config");
    if ((rc = load_all(s)) != 0)
        return rc;
    if (s->check_config) {
        if ((rc = flare__settings_check_app(s)) != 0)
            return rc;
        flare_settings_print(s, stdout);
        fflush(stdout);
        return FLARE_SETTINGS_EXIT;
    }
    write_extras(s);
    return 0;
}

int flare_settings_main(flare_settings_t *s, int argc, char **argv,
                        const flare_settings_option_t *extra, size_t nextra, int *exit_code)
{
    flare_settings_init(s);
    int rc = flare_settings_parse_args(s, argc, argv, extra, nextra);
    if (rc == 0)
        return 0;
    if (rc < 0) {
        const char *prog = argc > 0 && argv[0] != NULL ? argv[0] : "flare";
        const char *slash = strrchr(prog, '/');
        fprintf(stderr, "%s: %s\n", slash != NULL ? slash + 1 : prog, flare_settings_error(s));
    }
    if (exit_code != NULL)
        *exit_code = rc > 0 ? 0 : s->check_config ? 1 : 2;
    flare_settings_free(s);
    return FLARE_SETTINGS_EXIT;
}

int flare_settings_reload(const flare_settings_t *cur, flare_settings_t *next)
{
    flare_settings_init(next);
    const struct flare__settings_priv *p = cur->priv;
    int rc = p != NULL ? priv_setup(next, p->argc, p->argv, p->extra, p->nextra, p->ext_def)
                       : priv_setup(next, 0, NULL, NULL, 0, NULL);
    if (rc != 0)
        return rc;
    return load_all(next);
}

void flare_settings_app_config(const flare_settings_t *s, flare_config_t *out)
{
    *out = s->app;
}

void flare_settings_on_log(flare_settings_t *s, flare_settings_log_fn fn, void *ud)
{
    if (s->priv == NULL && priv_setup(s, 0, NULL, NULL, 0, NULL) != 0)
        return;
    s->priv->log_fn = fn;
    s->priv->log_ud = ud;
}

/* ---- diff ---- */

static bool str_eq(const char *a, const char *b)
{
    return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static void diff_listeners(const flare_settings_t *a, const flare_settings_t *b, bool *addr,
                           bool *tls)
{
    *addr = a->nlisteners != b->nlisteners;
    *tls = false;
    for (size_t i = 0; !*addr && i < a->nlisteners; i++) {
        const flare_settings_listener_t *x = &a->listeners[i], *y = &b->listeners[i];
        *addr |= !str_eq(x->addr, y->addr);
        *tls |= !str_eq(x->tls_cert, y->tls_cert) || !str_eq(x->tls_key, y->tls_key) ||
                x->nsni != y->nsni;
        for (size_t j = 0; !*tls && j < x->nsni; j++)
            *tls |=
                !str_eq(x->sni[j].cert, y->sni[j].cert) || !str_eq(x->sni[j].key, y->sni[j].key);
    }
}

/* The value a string key has when unset, so that unset and its default
 * compare equal (what --check-config prints reads back the same). */
static const char *str_default(const settings_key_t *k)
{
    static const char *const defs[][2] = { { "log", "-" },
                                           { "log-level", "error" },
                                           { "log-format", "text" },
                                           { "access-log-format", "combined" },
                                           { "session-secure", "auto" } };
    for (size_t i = 0; i < sizeof(defs) / sizeof(defs[0]); i++) {
        if (strcmp(k->name, defs[i][0]) == 0)
            return defs[i][1];
    }
    return NULL;
}

size_t flare_settings_diff(const flare_settings_t *a0, const flare_settings_t *b0, const char **out,
                           size_t max)
{
    size_t n = 0;
    /* compare what takes effect: zero limits as their defaults */
    flare_settings_t ra = *a0, rb = *b0;
    const flare_settings_t *a = &ra, *b = &rb;
    if (flare__config_resolve(&ra.app, &a0->app) != 0)
        ra.app = a0->app;
    if (flare__config_resolve(&rb.app, &b0->app) != 0)
        rb.app = b0->app;
#define DIFFERS(name)      \
    do {                   \
        if (n < max)       \
            out[n] = name; \
        n++;               \
    } while (0)
    bool addr, tls;
    diff_listeners(a, b, &addr, &tls);
    for (size_t i = 0; i < NKEYS; i++) {
        const settings_key_t *k = &flare__settings_keys[i];
        const char *x = (const char *)a + k->off, *y = (const char *)b + k->off;
        bool d = false;
        switch (k->kind) {
        case K_UINT:
        case K_MS:
            d = *(const unsigned *)x != *(const unsigned *)y;
            break;
        case K_INT:
            d = *(const int *)x != *(const int *)y;
            break;
        case K_SIZE:
            d = *(const size_t *)x != *(const size_t *)y;
            break;
        case K_BOOL:
            d = *(const bool *)x != *(const bool *)y;
            break;
        case K_STR:
        case K_ENUM:
        case K_RATE: {
            const char *sx = *(char *const *)x, *sy = *(char *const *)y;
            d = !str_eq(sx != NULL ? sx : str_default(k), sy != NULL ? sy : str_default(k));
            break;
        }
        case K_LIST: {
            size_t na = *(const size_t *)((const char *)a + k->off2);
            size_t nb = *(const size_t *)((const char *)b + k->off2);
            d = na != nb;
            for (size_t j = 0; !d && j < na; j++)
                d = !str_eq((*(char **const *)x)[j], (*(char **const *)y)[j]);
            break;
        }
        case K_LISTEN:
            d = addr;
            break;
        case K_TLS_CERT:
            d = tls;
            break;
        default:
            break;
        }
        if (d)
            DIFFERS(k->name);
    }
    size_t ne = a->priv != NULL && b->priv != NULL && a->priv->nextra == b->priv->nextra
                    ? a->priv->nextra
                    : 0;
    for (size_t j = 0; j < ne; j++) {
        const flare_settings_option_t *o = &a->priv->extra[j];
        settings_value_t x = a->priv->ext[j], y = b->priv->ext[j];
        bool d = o->type == FLARE_SETTING_STRING ? !str_eq(x.s, y.s)
                 : o->type == FLARE_SETTING_BOOL ? x.b != y.b
                 : o->type == FLARE_SETTING_SIZE ? x.z != y.z
                                                 : x.u != y.u;
        if (d)
            DIFFERS(o->name);
    }
#undef DIFFERS
    return n;
}
