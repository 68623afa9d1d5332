/* Listening sockets and accept: one SO_REUSEPORT socket per worker so the
 * kernel spreads connections without a shared accept lock. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "app.h"
#include "sd.h"

/* "HOST:PORT", "[v6]:PORT", "*:PORT", ":PORT". */
static int parse_addr(const char *addr, int port_override, struct sockaddr_storage *ss,
                      socklen_t *sl)
{
    if (addr == NULL)
        return FLARE_EADDR;
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || colon[1] == '\0')
        return FLARE_EADDR;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port < 0 || port > 65535)
        return FLARE_EADDR;
    if (port_override >= 0)
        port = port_override;
    char host[128];
    size_t hl = (size_t)(colon - addr);
    if (hl >= sizeof(host))
        return FLARE_EADDR;
    memcpy(host, addr, hl);
    host[hl] = '\0';
    memset(ss, 0, sizeof(*ss));
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        host[hl - 1] = '\0';
        if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) != 1)
            return FLARE_EADDR;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        *sl = sizeof(*s6);
        return 0;
    }
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)port);
    if (hl == 0 || strcmp(host, "*") == 0 || strcmp(host, "0.0.0.0") == 0)
        s4->sin_addr.s_addr = htonl(INADDR_ANY);
    else if (strcmp(host, "localhost") == 0)
        s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else if (inet_pton(AF_INET, host, &s4->sin_addr) != 1)
        return FLARE_EADDR;
    *sl = sizeof(*s4);
    return 0;
}

/* SO_REUSEPORT lets any process of the same user join a port's group, so a
 * second server started on a busy port would silently share it. Before the
 * first listener, a plain bind (no SO_REUSEPORT) checks the port is free and,
 * for port 0, picks it. It is closed at once: the window before the real
 * listeners bind is a few microseconds. */
static int bad_addr(const char *addr)
{
    return flare__fail(FLARE_EADDR, 0, "listen address \"%s\": expected HOST:PORT",
                       addr != NULL ? addr : "(null)");
}

int flare__listen_addr_check(const char *addr, int *port_out)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    if (parse_addr(addr, -1, &ss, &sl) != 0)
        return bad_addr(addr);
    *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

static void bound_port(int fd, int *port_out)
{
    struct sockaddr_storage got;
    socklen_t gl = sizeof(got);
    if (port_out != NULL && getsockname(fd, (struct sockaddr *)&got, &gl) == 0)
        *port_out = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
                                                    : ((struct sockaddr_in *)&got)->sin_port);
}

int flare__listen_probe(const char *addr, int *port_out)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    if (parse_addr(addr, -1, &ss, &sl) != 0)
        return bad_addr(addr);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return flare__fail(FLARE_ESYS, errno, "socket for %s", addr);
    /* SO_REUSEADDR: connections of a previous run in TIME_WAIT do not block
     * a restart; a live listener on the port still does (Linux) */
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
        int e = errno;
        close(fd);
        return flare__fail(FLARE_ESYS, e, "setsockopt(SO_REUSEADDR) for %s", addr);
    }
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0) {
        int e = errno;
        close(fd);
        return flare__fail(FLARE_EBIND, e, "bind %s", addr);
    }
    bound_port(fd, port_out);
    close(fd);
    return 0;
}

int flare__listen_socket(const char *addr, int port_override, int backlog, int *port_out)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    if (parse_addr(addr, port_override, &ss, &sl) != 0)
        return bad_addr(addr);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return flare__fail(FLARE_ESYS, errno, "socket for %s", addr);
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
        int e = errno;
        close(fd);
        return flare__fail(FLARE_ESYS, e, "setsockopt(SO_REUSEPORT) for %s", addr);
    }
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0) {
        int e = errno;
        close(fd);
        return flare__fail(FLARE_EBIND, e, "bind %s (port %d)", addr, port_override);
    }
    if (listen(fd, backlog) != 0) {
        int e = errno;
        close(fd);
        return flare__fail(FLARE_EBIND, e, "listen on %s", addr);
    }
    bound_port(fd, port_out);
    return fd;
}

/* Out of descriptors: the pending connection would make the poller report the
 * listener readable forever. Spend the reserve descriptor to accept and
 * close it, then take the reserve back (the classic EMFILE guard). */
static void listeners_watch(flare_worker_t *w, uint32_t events)
{
    for (unsigned i = 0; i < w->nlios; i++) {
        if (w->lios[i].io.fd >= 0 && flare__loop_mod(&w->loop, &w->lios[i].io, events) != 0)
            flare__timer_start(&w->loop, &w->resume_timer, 100); /* try again, never give up */
    }
}

void flare__listener_resume(void *ud)
{
    flare_worker_t *w = ud;
    if (!w->draining && w->lios != NULL)
        listeners_watch(w, FLARE_IO_READ);
}

static void emfile_guard(flare_worker_t *w, int lfd)
{
    if (w->reserve_fd >= 0) {
        close(w->reserve_fd);
        w->reserve_fd = -1;
    }
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0)
        close(fd);
    w->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    /* Workers share the descriptor table: another one may take the freed
     * descriptor first, and more connections keep arriving. Rather than spin
     * on listeners that cannot be served, stop watching them for 100 ms
     * (nginx does the same with accept_mutex_delay). */
    listeners_watch(w, 0);
    flare__timer_start(&w->loop, &w->resume_timer, 100);
}

void flare__worker_accept_cb(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    (void)l;
    (void)events;
    flare_listen_io_t *lio = (flare_listen_io_t *)(void *)io; /* io is the first member */
    flare_worker_t *w = lio->w;
    for (int i = 0; i < 64; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(io->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE)
                emfile_guard(w, io->fd);
            return;
        }
        if (w->nconns >= w->app->cfg.max_conns || w->draining) {
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        lio->l->on_accept(w, fd, (const struct sockaddr *)&ss, lio->l);
    }
}

/* ---- adopted sockets (socket activation, upgrade) ---- */

static bool same_host(const struct sockaddr_storage *want, const struct sockaddr_storage *got)
{
    if (want->ss_family != got->ss_family)
        return false;
    if (want->ss_family == AF_INET)
        return ((const struct sockaddr_in *)want)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)got)->sin_addr.s_addr;
    return memcmp(&((const struct sockaddr_in6 *)want)->sin6_addr,
                  &((const struct sockaddr_in6 *)got)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

static int ss_port(const struct sockaddr_storage *ss)
{
    return ntohs(ss->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)ss)->sin6_port
                                           : ((const struct sockaddr_in *)ss)->sin_port);
}

static void ss_format(const struct sockaddr_storage *ss, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (ss->ss_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, host, sizeof(host));
    else if (ss->ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ss)->sin6_addr, host, sizeof(host));
    snprintf(out, cap, ss->ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", host, ss_port(ss));
}

static int adopt_one(flare_listener_t *const *ls, unsigned n, int fd, const char *name)
{
    const char *nm = name != NULL ? name : "unnamed";
    int acc = 0;
    socklen_t al = sizeof(acc);
    struct sockaddr_storage got;
    socklen_t gl = sizeof(got);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) != 0 || !acc ||
        getsockname(fd, (struct sockaddr *)&got, &gl) != 0 ||
        (got.ss_family != AF_INET && got.ss_family != AF_INET6))
        return flare__fail(FLARE_EADDR, errno,
                           "inherited descriptor %d (%s) is not a listening TCP socket", fd, nm);
    for (unsigned i = 0; i < n; i++) {
        struct sockaddr_storage want;
        socklen_t wl;
        if (parse_addr(ls[i]->name, -1, &want, &wl) != 0)
            return bad_addr(ls[i]->name);
        int wport = ss_port(&want);
        if (!same_host(&want, &got) || (wport != 0 && wport != ss_port(&got)))
            continue;
        int *v = realloc(ls[i]->fds, (ls[i]->nfds + 1) * sizeof(*v));
        if (v == NULL)
            return flare__fail(FLARE_ENOMEM, 0, "adopting descriptor %d: out of memory", fd);
        ls[i]->fds = v;
        v[ls[i]->nfds++] = fd;
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0)
            return flare__fail(FLARE_ESYS, errno, "fcntl(O_NONBLOCK) on descriptor %d", fd);
        return 0;
    }
    char addr[INET6_ADDRSTRLEN + 16];
    ss_format(&got, addr, sizeof(addr));
    return flare__fail(FLARE_EADDR, 0,
                       "inherited descriptor %d (%s) listens on %s, which no configured listener "
                       "is",
                       fd, nm, addr);
}

int flare__listen_adopt(flare_listener_t *const *ls, unsigned n)
{
    const int *fds;
    const char *const *names;
    unsigned nfds = flare__sd_listen_fds(&fds, &names);
    if (nfds == 0)
        return 0;
    int rc = 0;
    for (unsigned i = 0; i < nfds && rc == 0; i++)
        rc = adopt_one(ls, n, fds[i], names != NULL ? names[i] : NULL);
    if (rc != 0) {
        for (unsigned i = 0; i < n; i++) { /* the inherited ones are closed below */
            free(ls[i]->fds);
            ls[i]->fds = NULL;
            ls[i]->nfds = 0;
        }
    }
    flare__sd_listen_done(rc == 0);
    return rc;
}

void flare__listen_adopt_end(flare_listener_t *const *ls, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        for (unsigned k = 0; k < ls[i]->nfds; k++) {
            if (ls[i]->fds[k] >= 0)
                close(ls[i]->fds[k]);
        }
        free(ls[i]->fds);
        ls[i]->fds = NULL;
        ls[i]->nfds = 0;
    }
}

int flare__worker_listen(flare_worker_t *w)
{
    flare_app_t *app = w->app;
    unsigned nw = app->nworkers, total = 0;
    for (unsigned i = 0; i < app->nactive; i++) {
        unsigned k = app->active[i]->nfds;
        total += k == 0 ? 1 : (k + nw - 1 - w->id) / nw + (k <= w->id);
    }
    w->lios = calloc(total, sizeof(*w->lios));
    if (w->lios == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "flare_app_run: out of memory");
    w->nlios = 0;
    for (unsigned i = 0; i < app->nactive; i++) {
        flare_listener_t *l = app->active[i];
        if (l->nfds == 0) {
            int fd = flare__listen_socket(l->name, atomic_load(&l->port), app->cfg.backlog, NULL);
            if (fd < 0)
                return fd;
            w->lios[w->nlios++] =
                (flare_listen_io_t){ { fd, 0, flare__worker_accept_cb, NULL }, w, l, false };
            continue;
        }
        for (unsigned k = w->id; k < l->nfds; k += nw) {
            w->lios[w->nlios++] =
                (flare_listen_io_t){ { l->fds[k], 0, flare__worker_accept_cb, NULL }, w, l, false };
            l->fds[k] = -1; /* the worker's now */
        }
        if (l->nfds <= w->id) {
            /* fewer sockets than workers: share one (the kernel wakes every
             * worker watching it; the losers' accept says EAGAIN) */
            int src = -1;
            for (unsigned x = 0; x < app->nworkers && src < 0; x++) {
                flare_worker_t *o = &app->workers[(w->id + x) % l->nfds];
                for (unsigned y = 0; o->lios != NULL && y < o->nlios && src < 0; y++) {
                    if (o->lios[y].l == l && !o->lios[y].shared)
                        src = o->lios[y].io.fd;
                }
            }
            int fd = src >= 0 ? fcntl(src, F_DUPFD_CLOEXEC, 0) : -1;
            if (fd < 0)
                return flare__fail(FLARE_ESYS, errno, "dup of an adopted socket for %s", l->name);
            w->lios[w->nlios++] =
                (flare_listen_io_t){ { fd, 0, flare__worker_accept_cb, NULL }, w, l, true };
        }
    }
    return 0;
}
