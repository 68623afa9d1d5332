/* The app's listeners: the addresses flare_app_listen and
 * flare_app_admin_listen register, their ports and TLS (reload,
 * statistics), and each run's set-up of them (probed, adopted or bound
 * before any thread starts, each handing its connections to HTTP/1.1) and
 * tear-down. The sockets themselves are net/listen.c's. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "flare/tls.h"
#include "app.h"
#include "worker.h"
#include "net/listen.h"
#include "net/tls.h"
#include "http1/accept.h"
#include "run_int.h"

bool flare__app_has_admin(const flare_app_t *app)
{
    return app->has_admin;
}

int flare_app_port(const flare_app_t *app)
{
    return atomic_load(&app->port);
}

/* This run's listeners: the run's own address first (when given), then
 * those added with flare_app_listen; each probed, so a bad address or a
 * taken port fails before any thread starts, and port 0 becomes the port
 * every worker binds. */
int flare__listeners_begin(flare_app_t *app, const char *listen_addr)
{
    app->active = calloc(app->nlisteners + 1, sizeof(*app->active));
    if (app->active == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "flare_app_run: out of memory");
    app->nactive = 0;
    if (listen_addr != NULL) {
        app->run_listener.name = listen_addr;
        app->run_listener.tls = NULL;
        app->active[app->nactive++] = &app->run_listener;
        atomic_store(&app->run_addr_used, true);
    }
    for (unsigned i = 0; i < app->nlisteners; i++)
        app->active[app->nactive++] = &app->listeners[i];
    if (app->nactive == 0)
        return flare__fail(FLARE_EADDR, 0,
                           "flare_app_run: no listen address (pass one, or call flare_app_listen)");
    /* sockets inherited from systemd or from the process we upgrade */
    int rc = flare__listen_adopt(app->active, app->nactive);
    if (rc != 0)
        return rc;
    for (unsigned i = 0; i < app->nactive; i++) {
        flare_listener_t *l = app->active[i];
        l->on_accept = flare__conn_open; /* every listener speaks HTTP/1.1 */
        int port = -1;
        if (l->nfds > 0) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof(ss);
            if (getsockname(l->fds[0], (struct sockaddr *)&ss, &sl) == 0)
                port = ss.ss_family == AF_UNIX
                           ? 0
                           : ntohs(((struct sockaddr_in *)&ss)->sin_port); /* same place in v6 */
        } else if (flare__listen_is_unix(l->name)) {
            /* one socket for every worker, bound now (no SO_REUSEPORT for AF_UNIX) */
            if ((rc = flare__listen_unix(l, app->cfg.backlog)) != 0)
                return rc;
            port = 0;
        } else if ((rc = flare__listen_probe(l->name, &port)) != 0)
            return rc;
        atomic_store(&l->port, port);
    }
    return 0;
}

/* `handover`: an upgrade's new process holds the sockets now, and the unix
 * socket files stay; `served`: this run's workers ran (an inherited file is
 * removed only then: a new process that failed leaves the old one on it). */
void flare__listeners_end(flare_app_t *app, bool handover, bool served)
{
    flare__listen_adopt_end(app->active, app->nactive);
    if (!handover)
        flare__listen_unlink(app->active, app->nactive, served);
    for (unsigned i = 0; i < app->nactive; i++)
        atomic_store(&app->active[i]->port, 0);
    atomic_store(&app->run_addr_used, false);
    app->run_listener.name = NULL;
    free(app->active);
    app->active = NULL;
    app->nactive = 0;
}

static int add_listener(flare_app_t *app, const char *addr, const flare_tls_config_t *tls,
                        bool admin)
{
    const char *fn = admin ? "flare_app_admin_listen" : "flare_app_listen";
    if (app == NULL || addr == NULL)
        return flare__fail(FLARE_EINVAL, 0, "%s: %s is NULL", fn, app == NULL ? "app" : "addr");
    if (atomic_load(&app->running))
        return flare__fail(FLARE_ESTATE, 0, "%s: the app is running", fn);
    if (admin && app->has_admin)
        return flare__fail(FLARE_EEXIST, 0, "%s: the app has an admin listener already", fn);
    int port;
    int rc = flare__listen_addr_check(addr, &port);
    if (rc != 0)
        return rc;
    flare_listener_t *v = realloc(app->listeners, (app->nlisteners + 1) * sizeof(*v));
    if (v == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "%s: out of memory", fn);
    app->listeners = v;
    flare_listener_t *l = &v[app->nlisteners];
    memset(l, 0, sizeof(*l));
    l->addr = strdup(addr);
    if (l->addr == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "%s: out of memory", fn);
    l->name = l->addr;
    if (tls != NULL && (rc = flare__tls_new(&l->tls, tls)) != 0) {
        free(l->addr);
        return rc;
    }
    l->admin = admin;
    app->has_admin |= admin;
    app->nlisteners++;
    return 0;
}

int flare_app_listen(flare_app_t *app, const char *addr, const flare_tls_config_t *tls)
{
    return add_listener(app, addr, tls, false);
}

int flare_app_admin_listen(flare_app_t *app, const char *addr)
{
    return add_listener(app, addr, NULL, true);
}

int flare_app_admin_port(const flare_app_t *app)
{
    for (unsigned i = 0; app != NULL && i < app->nlisteners; i++) {
        if (app->listeners[i].admin)
            return atomic_load(&app->listeners[i].port);
    }
    return 0;
}

int flare_app_listener_port(const flare_app_t *app, unsigned i)
{
    if (app == NULL)
        return 0;
    if (atomic_load(&((flare_app_t *)app)->run_addr_used)) {
        if (i == 0)
            return atomic_load(&((flare_app_t *)app)->run_listener.port);
        i--;
    }
    return i < app->nlisteners ? atomic_load(&app->listeners[i].port) : 0;
}

int flare_app_tls_reload(flare_app_t *app)
{
    if (app == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_app_tls_reload: app is NULL");
    int rc = 0;
    for (unsigned i = 0; i < app->nlisteners && rc == 0; i++) {
        if (app->listeners[i].tls != NULL)
            rc = flare__tls_reload(app->listeners[i].tls);
    }
    return rc;
}

int flare_app_tls_stats(flare_app_t *app, flare_tls_stats_t *out)
{
    if (app == NULL || out == NULL)
        return FLARE_EINVAL;
    memset(out, 0, sizeof(*out));
    /* the worker array lives until flare_app_free once made */
    for (unsigned i = 0; app->workers != NULL && i < app->nworkers; i++) {
        const flare_tls_counters_t *c = &app->workers[i].tls_counters;
        out->handshakes += atomic_load_explicit(&c->handshakes, memory_order_relaxed);
        out->resumed += atomic_load_explicit(&c->resumed, memory_order_relaxed);
        out->handshake_errors += atomic_load_explicit(&c->handshake_errors, memory_order_relaxed);
        out->handshake_timeouts +=
            atomic_load_explicit(&c->handshake_timeouts, memory_order_relaxed);
        out->plaintext_http += atomic_load_explicit(&c->plaintext_http, memory_order_relaxed);
    }
    return 0;
}
