/* Security headers: values fixed at setup, added to every response. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "flare/middleware.h"
#include "app_svc.h"

typedef struct sec {
    char *frame, *referrer, *hsts, *csp;
    flare_str_t (*csp_fn)(flare_req_t *req, void *ud);
    void *csp_ud;
} sec_t;

static void sec_free(void *p)
{
    sec_t *s = p;
    free(s->frame);
    free(s->referrer);
    free(s->hsts);
    free(s->csp);
    free(s);
}

static void sec_after(flare_req_t *req, flare_res_t *res, void *ud)
{
    const sec_t *s = ud;
    flare_res_header(res, FLARE_STR("X-Content-Type-Options"), FLARE_STR("nosniff"));
    if (s->frame != NULL)
        flare_res_header(res, FLARE_STR("X-Frame-Options"), flare_str(s->frame));
    if (s->referrer != NULL)
        flare_res_header(res, FLARE_STR("Referrer-Policy"), flare_str(s->referrer));
    if (s->hsts != NULL)
        flare_res_header(res, FLARE_STR("Strict-Transport-Security"), flare_str(s->hsts));
    flare_str_t csp = FLARE_STR_NULL;
    if (s->csp_fn != NULL)
        csp = s->csp_fn(req, s->csp_ud);
    if (csp.ptr == NULL && s->csp != NULL)
        csp = flare_str(s->csp);
    if (csp.ptr != NULL)
        flare_res_header(res, FLARE_STR("Content-Security-Policy"), csp);
}

/* NULL -> default, "" -> omitted */
static int set(char **dst, const char *v, const char *def)
{
    const char *x = v != NULL ? v : def;
    if (x == NULL || x[0] == '\0')
        return 0;
    if (!flare__field_value_ok(flare_str(x)))
        return FLARE_EINVAL;
    *dst = strdup(x);
    return *dst != NULL ? 0 : FLARE_ENOMEM;
}

int flare_security_headers(flare_app_t *app, const flare_security_config_t *cfg,
                           flare_middleware_t *out)
{
    if (app == NULL || out == NULL)
        return FLARE_EINVAL;
    memset(out, 0, sizeof(*out));
    flare_security_config_t def = { 0 };
    if (cfg == NULL)
        cfg = &def;
    sec_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return FLARE_ENOMEM;
    int rc = set(&s->frame, cfg->frame_options, "DENY");
    if (rc == 0)
        rc = set(&s->referrer, cfg->referrer_policy, "no-referrer");
    if (rc == 0)
        rc = set(&s->csp, cfg->csp, NULL);
    if (rc == 0 && cfg->hsts_max_age > 0) {
        char v[80] = "max-age=";
        size_t n = 8 + flare__u64toa(v + 8, cfg->hsts_max_age);
        v[n] = '\0';
        if (cfg->hsts_subdomains)
            strcat(v, "; includeSubDomains");
        rc = set(&s->hsts, v, NULL);
    }
    if (rc != 0) {
        sec_free(s);
        return rc;
    }
    s->csp_fn = cfg->csp_fn;
    s->csp_ud = cfg->csp_ud;
    rc = flare__app_own(app, s, sec_free);
    if (rc != 0)
        return rc;
    *out = (flare_middleware_t){ "security-headers", NULL, sec_after, s };
    return 0;
}
