/* examples/gateway: Flare as a gateway in front of other servers.
 *
 *   gateway --listen HOST:PORT --workers N --upstream HOST:PORT [--upstream HOST:PORT]...
 *
 * Every path and method goes to the pool of upstreams (flare/proxy.h):
 * round robin, a request whose connection fails goes to the next upstream,
 * 502 when none answers, 504 when one stops answering. The standard keys
 * apply (docs/config.md): --config FILE (a YAML file, with the upstreams as
 * a list: `upstream: [127.0.0.1:9001, 127.0.0.1:9002]`), the TLS
 * listeners, logs, --rate-limit (per client address, in front of the
 * proxied routes), the timeouts and limits. Its own keys:
 *   --auth-token TOKEN   requests must carry "Authorization: Bearer TOKEN"
 *                        (401 otherwise), checked before anything is forwarded
 *   --upstream-timeout D the longest an upstream may take to answer [30s]
 *   --keep-host          send the client's Host to the upstream [the upstream's]
 *
 * Not yet: WebSocket pass-through (an Upgrade is answered by the upstream
 * as a plain request), streaming bodies (both ways they are read whole,
 * up to max-body). */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <flare/flare.h>
#include <flare/proxy.h>
#include <flare/settings.h>

static const char *auth_token;
static unsigned upstream_timeout_ms = 30000;
static bool keep_host;

static const flare_settings_option_t options[] = {
    { "auth-token", FLARE_SETTING_STRING,
      "requests must carry Authorization: Bearer TOKEN (401 otherwise) [none]", &auth_token, 0, 0 },
    { "upstream-timeout", FLARE_SETTING_DURATION,
      "the longest an upstream may take to answer, from the request sent [30s]",
      &upstream_timeout_ms, 1, 3600000 },
    { "keep-host", FLARE_SETTING_BOOL, "send the client's Host to the upstream [false]", &keep_host,
      0, 0 },
};

/* The token check: a middleware in front of the proxied routes. */
static int require_token(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t h = flare_req_header(req, "authorization");
    size_t tl = strlen(auth_token);
    if (h.len == 7 + tl && strncasecmp(h.ptr, "Bearer ", 7) == 0 &&
        memcmp(h.ptr + 7, auth_token, tl) == 0)
        return 0; /* on to the proxy */
    flare_res_header(res, FLARE_STR("WWW-Authenticate"), FLARE_STR("Bearer"));
    return flare_res_send(res, 401, FLARE_STR("text/plain"), FLARE_STR("401 Unauthorized\n"));
}

int main(int argc, char **argv)
{
    flare_settings_t st;
    int rc;
    if (flare_settings_main(&st, argc, argv, options, FLARE_MAP_N(options), &rc) != 0)
        return rc;
    if (st.nupstreams == 0) {
        fprintf(stderr, "gateway: no upstream: give --upstream HOST:PORT (repeatable) or "
                        "upstream: [...] in the --config file\n");
        flare_settings_free(&st);
        return 2;
    }
    flare_app_t *app;
    if ((rc = flare_settings_app_new(&st, NULL, &app)) != 0) {
        fprintf(stderr, "gateway: %s\n", flare_settings_error(&st));
        flare_settings_free(&st);
        return 1;
    }
    flare_proxy_t *proxy;
    flare_proxy_config_t pc = {
        .upstreams = (const char *const *)st.upstreams,
        .keep_host = keep_host,
        .client = { .first_byte_timeout_ms = upstream_timeout_ms,
                    .idle_timeout_ms = upstream_timeout_ms,
                    .max_response = st.app.max_body ? st.app.max_body : 0 },
    };
    if ((rc = flare_proxy_new(app, &pc, &proxy)) != 0) {
        fprintf(stderr, "gateway: %s: %s\n", flare_strerror(rc), flare_last_error());
        goto out;
    }
    if (auth_token != NULL) {
        flare_middleware_t m = { "auth-token", require_token, NULL, NULL };
        if ((rc = flare_use(app, &m)) != 0) {
            fprintf(stderr, "gateway: %s: %s\n", flare_strerror(rc), flare_last_error());
            goto out;
        }
    }
    if ((rc = flare_proxy_route(app, "", proxy)) != 0) {
        fprintf(stderr, "gateway: %s: %s\n", flare_strerror(rc), flare_last_error());
        goto out;
    }
    fprintf(stderr, "gateway: %s -> %zu upstream(s)\n", st.listeners[0].addr, st.nupstreams);
    if ((rc = flare_app_run(app, NULL)) != 0)
        fprintf(stderr, "gateway: %s: %s\n", flare_strerror(rc), flare_last_error());
out:
    flare_app_free(app);
    flare_settings_free(&st);
    return rc != 0;
}
