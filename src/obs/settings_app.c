/* Settings meet the app: the listeners and static directories they make,
 * --check-config's scratch app, and the SIGHUP hook that re-reads them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
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
    return 0;
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

static bool is_log_key(const char *k)
{
    return strcmp(k, "log") == 0 || strcmp(k, "log-level") == 0 || strcmp(k, "log-format") == 0 ||
           strcmp(k, "access-log") == 0 || strcmp(k, "access-log-format") == 0;
}

static bool has_tls(const flare_settings_t *s)
{
    for (size_t i = 0; i < s->nlisteners; i++) {
        if (s->listeners[i].tls_cert != NULL)
            return true;
    }
    return false;
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
    for (size_t i = 0; i < n; i++) {
        if (is_log_key(keys[i]) && na < sizeof(applied))
            ADD(applied, na, keys[i]);
        else if (nl < sizeof(later))
            ADD(later, nl, keys[i]);
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
    take_str(&s->log, &next.log);
    take_str(&s->log_level, &next.log_level);
    take_str(&s->log_format, &next.log_format);
    take_str(&s->access_log, &next.access_log);
    take_str(&s->access_log_format, &next.access_log_format);
    flare_settings_free(&next);
    fprintf(stderr, "flare: reload: %s: applied: %s%s%s\n",
            s->config_file != NULL ? s->config_file : "(no file)", na > 0 ? applied : "nothing",
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
    s->priv->app = app;
    return flare_app_on_reload(app, on_reload, s);
}
