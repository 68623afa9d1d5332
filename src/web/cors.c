/* CORS (Fetch standard): every header value is built once at setup; the
 * request path only compares the Origin and copies precomputed strings. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "flare/middleware.h"
#include "app_svc.h"

typedef struct cors {
    char **origins; /* exact, owned */
    size_t norigins;
    bool any;
    char *pat_prefix, *pat_suffix; /* pattern: prefix, one wildcard, suffix */
    bool credentials;
    char *methods, *headers, *expose, *max_age;
} cors_t;

static void cors_free(void *p)
{
    cors_t *c = p;
    for (size_t i = 0; i < c->norigins; i++)
        free(c->origins[i]);
    free(c->origins);
    free(c->pat_prefix);
    free(c->pat_suffix);
    free(c->methods);
    free(c->headers);
    free(c->expose);
    free(c->max_age);
    free(c);
}

/* scheme "://" host [":" port], no path, no control characters */
static bool origin_ok(const char *o)
{
    const char *sep = strstr(o, "://");
    if (sep == NULL || sep == o || sep[3] == '\0')
        return false;
    for (const char *p = o; *p != '\0'; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch <= 0x20 || ch >= 0x7f || ch == ',' || ch == ';')
            return false;
    }
    return strchr(sep + 3, '/') == NULL;
}

static bool allowed(const cors_t *c, flare_str_t origin)
{
    if (c->any)
        return true;
    for (size_t i = 0; i < c->norigins; i++) {
        if (strlen(c->origins[i]) == origin.len &&
            memcmp(c->origins[i], origin.ptr, origin.len) == 0)
            return true;
    }
    if (c->pat_prefix != NULL) {
        size_t pl = strlen(c->pat_prefix), sl = strlen(c->pat_suffix);
        if (origin.len <= pl + sl || memcmp(origin.ptr, c->pat_prefix, pl) != 0 ||
            memcmp(origin.ptr + origin.len - sl, c->pat_suffix, sl) != 0)
            return false;
        /* the wildcard part: DNS labels only */
        for (size_t i = pl; i < origin.len - sl; i++) {
            unsigned char ch = (unsigned char)origin.ptr[i];
            if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '-' || ch == '.'))
                return false;
        }
        return true;
    }
    return false;
}

static void allow_origin(const cors_t *c, flare_res_t *res, flare_str_t origin)
{
    if (c->any && !c->credentials)
        flare_res_header(res, FLARE_STR("Access-Control-Allow-Origin"), FLARE_STR("*"));
    else
        flare_res_header(res, FLARE_STR("Access-Control-Allow-Origin"), origin);
    if (c->credentials)
        flare_res_header(res, FLARE_STR("Access-Control-Allow-Credentials"), FLARE_STR("true"));
}

static int cors_before(flare_req_t *req, flare_res_t *res, void *ud)
{
    const cors_t *c = ud;
    flare_str_t origin = flare_req_header(req, "Origin");
    if (!c->any || c->credentials)
        flare_res_header(res, FLARE_STR("Vary"), FLARE_STR("Origin"));
    if (origin.ptr == NULL)
        return 0;
    flare_str_t acrm = flare_req_header(req, "Access-Control-Request-Method");
    if (flare_req_method(req) != FLARE_METHOD_OPTIONS || acrm.ptr == NULL)
        return 0; /* an actual request: headers added in the after hook */
    /* preflight */
    bool method_ok = false;
    const char *m = c->methods;
    while (*m != '\0') {
        const char *end = strchr(m, ',');
        size_t n = end != NULL ? (size_t)(end - m) : strlen(m);
        if (n == acrm.len && memcmp(m, acrm.ptr, n) == 0)
            method_ok = true;
        if (end == NULL)
            break;
        m = end + 1;
        while (*m == ' ')
            m++;
    }
    if (!allowed(c, origin) || !method_ok)
        return flare_res_send(res, 403, FLARE_STR("text/plain"),
                              FLARE_STR("CORS preflight rejected: origin or method not allowed\n"));
    allow_origin(c, res, origin);
    flare_res_header(res, FLARE_STR("Access-Control-Allow-Methods"), flare_str(c->methods));
    flare_res_header(res, FLARE_STR("Access-Control-Allow-Headers"), flare_str(c->headers));
    if (c->max_age != NULL)
        flare_res_header(res, FLARE_STR("Access-Control-Max-Age"), flare_str(c->max_age));
    return flare_res_send(res, 204, FLARE_STR_NULL, FLARE_STR_NULL);
}

static void cors_after(flare_req_t *req, flare_res_t *res, void *ud)
{
    const cors_t *c = ud;
    flare_str_t origin = flare_req_header(req, "Origin");
    if (origin.ptr == NULL || flare_res_status(res) == 204 ||
        (flare_req_method(req) == FLARE_METHOD_OPTIONS &&
         flare_req_header(req, "Access-Control-Request-Method").ptr != NULL))
        return; /* no Origin, or the preflight answer already has its headers */
    if (!allowed(c, origin))
        return;
    allow_origin(c, res, origin);
    if (c->expose != NULL)
        flare_res_header(res, FLARE_STR("Access-Control-Expose-Headers"), flare_str(c->expose));
}

static char *dup_or(const char *s, const char *def)
{
    const char *v = s != NULL ? s : def;
    return v != NULL ? strdup(v) : NULL;
}

int flare_cors(flare_app_t *app, const flare_cors_config_t *cfg, flare_middleware_t *out)
{
    if (app == NULL || cfg == NULL || out == NULL)
        return FLARE_EINVAL;
    memset(out, 0, sizeof(*out));
    cors_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return FLARE_ENOMEM;
    int rc = FLARE_EINVAL;
    size_t n = 0;
    while (cfg->origins != NULL && cfg->origins[n] != NULL)
        n++;
    if (n == 1 && strcmp(cfg->origins[0], "*") == 0) {
        c->any = true;
        n = 0;
    }
    if (c->any && cfg->credentials) { /* the Fetch standard forbids credentials with "*" */
        flare__fail(rc, 0, "flare_cors_config_t.credentials: not allowed with origin \"*\"");
        goto fail;
    }
    if (n > 0) {
        c->origins = calloc(n, sizeof(*c->origins));
        if (c->origins == NULL)
            goto nomem;
        for (size_t i = 0; i < n; i++) {
            if (!origin_ok(cfg->origins[i])) {
                flare__fail(rc, 0,
                            "flare_cors_config_t.origins[%zu]: \"%s\" is not scheme://host[:port]",
                            i, cfg->origins[i]);
                goto fail;
            }
            if ((c->origins[i] = strdup(cfg->origins[i])) == NULL)
                goto nomem;
            c->norigins++;
        }
    }
    if (cfg->origin_pattern != NULL) {
        const char *star = strchr(cfg->origin_pattern, '*');
        if (star == NULL || strchr(star + 1, '*') != NULL || star[1] != '.') {
            flare__fail(rc, 0,
                        "flare_cors_config_t.origin_pattern: \"%s\" needs one '*' before a '.'",
                        cfg->origin_pattern);
            goto fail;
        }
        c->pat_prefix = strndup(cfg->origin_pattern, (size_t)(star - cfg->origin_pattern));
        c->pat_suffix = strdup(star + 1);
        if (c->pat_prefix == NULL || c->pat_suffix == NULL)
            goto nomem;
        if (strstr(c->pat_prefix, "://") == NULL || strchr(c->pat_suffix, '/') != NULL) {
            flare__fail(rc, 0, "flare_cors_config_t.origin_pattern: \"%s\" is not scheme://host",
                        cfg->origin_pattern);
            goto fail;
        }
    }
    if (!c->any && c->norigins == 0 && c->pat_prefix == NULL) {
        /* nothing allowed: a configuration mistake (there is no default:
         * which origins to trust is the application's decision) */
        flare__fail(rc, 0, "flare_cors_config_t.origins: none (and no origin_pattern)");
        goto fail;
    }
    c->credentials = cfg->credentials;
    c->methods = dup_or(cfg->methods, "GET, HEAD, POST, PUT, PATCH, DELETE");
    c->headers = dup_or(cfg->headers, "Content-Type");
    c->expose = dup_or(cfg->expose_headers, NULL);
    if (c->methods == NULL || c->headers == NULL ||
        (cfg->expose_headers != NULL && c->expose == NULL))
        goto nomem;
    if (!flare__field_value_ok(flare_str(c->methods)) ||
        !flare__field_value_ok(flare_str(c->headers)) ||
        (c->expose != NULL && !flare__field_value_ok(flare_str(c->expose)))) {
        flare__fail(rc, 0,
                    "flare_cors_config_t: a control character in methods, headers or "
                    "expose_headers");
        goto fail;
    }
    if (cfg->max_age > 0) {
        c->max_age = malloc(24);
        if (c->max_age == NULL)
            goto nomem;
        c->max_age[flare__u64toa(c->max_age, cfg->max_age)] = '\0';
    }
    rc = flare__app_own(app, c, cors_free);
    if (rc != 0)
        return rc;
    *out = (flare_middleware_t){ "cors", cors_before, cors_after, c };
    return 0;
nomem:
    rc = FLARE_ENOMEM;
fail:
    cors_free(c);
    return rc;
}
