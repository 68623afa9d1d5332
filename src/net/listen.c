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
#include <grp.h>
#include <pwd.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "app.h"
#include "worker.h"
#include "net/listen.h"
#include "sd.h"

static int ss_port(const struct sockaddr_storage *ss)
{
    return ntohs(ss->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)ss)->sin6_port
                                           : ((const struct sockaddr_in *)ss)->sin_port);
}

/* "HOST:PORT", "[v6]:PORT", "*:PORT", ":PORT". */
static int parse_tcp(const char *addr, int port_override, struct sockaddr_storage *ss,
                     socklen_t *sl)
{
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

/* owner= / group=: a name, or a number. */
static int lookup_id(const char *v, size_t n, bool group, unsigned *out)
{
    char name[256];
    if (n == 0 || n >= sizeof(name))
        return -1;
    memcpy(name, v, n);
    name[n] = '\0';
    char *end;
    unsigned long id = strtoul(name, &end, 10);
    if (name[0] >= '0' && name[0] <= '9' && *end == '\0' && id < UINT32_MAX) {
        *out = (unsigned)id;
        return 0;
    }
    char buf[4096];
    if (group) {
        struct group gr, *g = NULL;
        if (getgrnam_r(name, &gr, buf, sizeof(buf), &g) != 0 || g == NULL)
            return -1;
        *out = (unsigned)g->gr_gid;
    } else {
        struct passwd pw, *u = NULL;
        if (getpwnam_r(name, &pw, buf, sizeof(buf), &u) != 0 || u == NULL)
            return -1;
        *out = (unsigned)u->pw_uid;
    }
    return 0;
}

#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

/* "unix:PATH[?mode=0660&owner=U&group=G]" or "unix:@NAME" (abstract). */
static int parse_unix(const char *spec, flare_listen_addr_t *a, char *why, size_t cap)
{
    const char *q = strchr(spec, '?');
    size_t pl = q != NULL ? (size_t)(q - spec) : strlen(spec);
    struct sockaddr_un *su = (struct sockaddr_un *)&a->ss;
    su->sun_family = AF_UNIX;
    if (pl == 0 || (pl == 1 && spec[0] == '@')) {
        snprintf(why, cap,
                 "expected a socket path (unix:/run/app.sock) or an abstract name "
                 "(unix:@app)");
        return FLARE_EADDR;
    }
    if (pl > SUN_PATH_MAX) {
        snprintf(why, cap, "the socket path is %zu bytes; the limit (sun_path) is %zu", pl,
                 (size_t)SUN_PATH_MAX);
        return FLARE_EADDR;
    }
    memcpy(su->sun_path, spec, pl);
    a->abstract = spec[0] == '@';
    if (a->abstract) {
        su->sun_path[0] = '\0'; /* the name's bytes exactly: no NUL counted */
        a->sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + pl);
    } else {
        su->sun_path[pl] = '\0';
        a->sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + pl + 1);
    }
    for (const char *o = q; o != NULL && *o != '\0';) {
        o++; /* '?' or '&' */
        const char *amp = strchr(o, '&');
        size_t ol = amp != NULL ? (size_t)(amp - o) : strlen(o);
        const char *eq = memchr(o, '=', ol);
        size_t kl = eq != NULL ? (size_t)(eq - o) : ol;
        const char *v = eq != NULL ? eq + 1 : o + ol;
        size_t vl = eq != NULL ? ol - kl - 1 : 0;
        if (a->abstract && ol > 0) {
            snprintf(why, cap,
                     "an abstract socket (@name) has no file: mode, owner and group do "
                     "not apply");
            return FLARE_EADDR;
        }
        if (kl == 4 && memcmp(o, "mode", 4) == 0) {
            unsigned m = 0;
            size_t i = 0;
            for (; i < vl && i < 4 && v[i] >= '0' && v[i] <= '7'; i++)
                m = m * 8 + (unsigned)(v[i] - '0');
            if (vl == 0 || i != vl || m > 0777) {
                snprintf(why, cap, "mode \"%.*s\": expected octal permission bits, 0 to 0777",
                         (int)vl, v);
                return FLARE_EADDR;
            }
            a->mode = (int)m;
        } else if ((kl == 5 && memcmp(o, "owner", 5) == 0) ||
                   (kl == 5 && memcmp(o, "group", 5) == 0)) {
            bool grp = o[0] == 'g';
            unsigned id;
            if (lookup_id(v, vl, grp, &id) != 0) {
                snprintf(why, cap, "%s \"%.*s\": no such %s", grp ? "group" : "owner", (int)vl, v,
                         grp ? "group" : "user");
                return FLARE_EADDR;
            }
            if (grp)
                a->gid = (gid_t)id;
            else
                a->uid = (uid_t)id;
        } else {
            snprintf(why, cap, "unknown option \"%.*s\" (mode, owner, group)", (int)ol, o);
            return FLARE_EADDR;
        }
        o += ol;
    }
    return 0;
}

int flare__listen_parse(const char *addr, int port_override, flare_listen_addr_t *a, char *why,
                        size_t cap)
{
    memset(a, 0, sizeof(*a));
    a->mode = -1;
    a->uid = (uid_t)-1;
    a->gid = (gid_t)-1;
    if (cap > 0)
        why[0] = '\0';
    if (addr == NULL) {
        snprintf(why, cap, "no address");
        return FLARE_EADDR;
    }
    if (strncmp(addr, "unix:", 5) == 0)
        return parse_unix(addr + 5, a, why, cap);
    if (parse_tcp(addr, port_override, &a->ss, &a->sl) != 0) {
        snprintf(why, cap, "expected HOST:PORT, [IPV6]:PORT, unix:PATH or unix:@NAME");
        return FLARE_EADDR;
    }
    return 0;
}

bool flare__listen_is_unix(const char *addr)
{
    return addr != NULL && strncmp(addr, "unix:", 5) == 0;
}

static int parse_addr(const char *addr, int port_override, flare_listen_addr_t *a)
{
    char why[160];
    if (flare__listen_parse(addr, port_override, a, why, sizeof(why)) != 0)
        return flare__fail(FLARE_EADDR, 0, "listen address \"%s\": %s",
                           addr != NULL ? addr : "(null)", why);
    return 0;
}

/* SO_REUSEPORT lets any process of the same user join a port's group, so a
 * second server started on a busy port would silently share it. Before the
 * first listener, a plain bind (no SO_REUSEPORT) checks the port is free and,
 * for port 0, picks it. It is closed at once: the window before the real
 * listeners bind is a few microseconds. */
int flare__listen_addr_check(const char *addr, int *port_out)
{
    flare_listen_addr_t a;
    int rc = parse_addr(addr, -1, &a);
    if (rc != 0)
        return rc;
    *port_out = a.ss.ss_family == AF_UNIX ? 0 : ss_port(&a.ss);
    return 0;
}

static void bound_port(int fd, int *port_out)
{
    struct sockaddr_storage got;
    socklen_t gl = sizeof(got);
    if (port_out != NULL && getsockname(fd, (struct sockaddr *)&got, &gl) == 0)
        *port_out = got.ss_family == AF_UNIX ? 0 : ss_port(&got);
}

int flare__listen_probe(const char *addr, int *port_out)
{
    flare_listen_addr_t a;
    int rc = parse_addr(addr, -1, &a);
    if (rc != 0)
        return rc;
    if (a.ss.ss_family == AF_UNIX) /* bound once, for every worker: flare__listen_unix */
        return flare__fail(FLARE_EINVAL, 0, "probe of %s: a unix socket is not probed", addr);
    int fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
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
    if (bind(fd, (struct sockaddr *)&a.ss, a.sl) != 0) {
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
    flare_listen_addr_t a;
    int rc = parse_addr(addr, port_override, &a);
    if (rc != 0)
        return rc;
    int fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return flare__fail(FLARE_ESYS, errno, "socket for %s", addr);
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
        int e = errno;
        close(fd);
        return flare__fail(FLARE_ESYS, e, "setsockopt(SO_REUSEPORT) for %s", addr);
    }
    if (bind(fd, (struct sockaddr *)&a.ss, a.sl) != 0) {
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

/* ---- unix sockets: one socket for every worker ---- */

/* A socket file already at the path: a server that answers is left alone
 * (refused, as a taken port is); one that refuses the connection is the
 * leftover of a process that died without removing it, and goes. */
static int unix_clear_stale(const char *addr, const flare_listen_addr_t *a)
{
    const char *path = ((const struct sockaddr_un *)&a->ss)->sun_path;
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : flare__fail(FLARE_EBIND, errno, "stat %s", path);
    if (!S_ISSOCK(st.st_mode))
        return flare__fail(FLARE_EBIND, EEXIST, "listen on %s: %s exists and is not a socket", addr,
                           path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return flare__fail(FLARE_ESYS, errno, "socket for %s", addr);
    int rc = connect(fd, (const struct sockaddr *)&a->ss, a->sl);
    int e = errno;
    close(fd);
    /* EAGAIN: a live server whose queue is full */
    if (rc == 0 || e == EAGAIN || e == EINPROGRESS)
        return flare__fail(FLARE_EBIND, EADDRINUSE, "listen on %s: a server answers on %s already",
                           addr, path);
    if (e != ECONNREFUSED)
        return flare__fail(FLARE_EBIND, e, "listen on %s: probing the existing %s", addr, path);
    if (unlink(path) != 0 && errno != ENOENT)
        return flare__fail(FLARE_EBIND, errno, "listen on %s: removing the stale %s", addr, path);
    return 0;
}

int flare__listen_unix(flare_listener_t *l, int backlog)
{
    flare_listen_addr_t a;
    int rc = parse_addr(l->name, -1, &a);
    if (rc != 0)
        return rc;
    if (!a.abstract && (rc = unix_clear_stale(l->name, &a)) != 0)
        return rc;
    const char *path = ((const struct sockaddr_un *)&a.ss)->sun_path;
    int *v = realloc(l->fds, (l->nfds + 1) * sizeof(*v));
    if (v == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "flare_app_run: out of memory");
    l->fds = v;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return flare__fail(FLARE_ESYS, errno, "socket for %s", l->name);
    if (bind(fd, (struct sockaddr *)&a.ss, a.sl) != 0) {
        int e = errno;
        close(fd);
        return flare__fail(FLARE_EBIND, e, "bind %s", l->name);
    }
    l->unlink = !a.abstract; /* ours from here: removed at the run's end */
    /* before listen(): no client connects while the file has the umask's bits */
    if (a.mode >= 0 && chmod(path, (mode_t)a.mode) != 0) {
        int e = errno;
        close(fd);
        return flare__fail(FLARE_EBIND, e, "chmod %s to %04o", path, (unsigned)a.mode);
    }
    if ((a.uid != (uid_t)-1 || a.gid != (gid_t)-1) && chown(path, a.uid, a.gid) != 0) {
        int e = errno;
        close(fd);
        return flare__fail(FLARE_EBIND, e, "chown %s (owner/group of %s)", path, l->name);
    }
    if (listen(fd, backlog) != 0) {
        int e = errno;
        close(fd);
        return flare__fail(FLARE_EBIND, e, "listen on %s", l->name);
    }
    l->fds[l->nfds++] = fd;
    return 0;
}

void flare__listen_unlink(flare_listener_t *const *ls, unsigned n, bool served)
{
    for (unsigned i = 0; i < n; i++) {
        flare_listen_addr_t a;
        char why[160];
        bool go = ls[i]->unlink || (served && ls[i]->unlink_adopted);
        ls[i]->unlink = ls[i]->unlink_adopted = false;
        if (!go || flare__listen_parse(ls[i]->name, -1, &a, why, sizeof(why)) != 0)
            continue;
        unlink(((const struct sockaddr_un *)&a.ss)->sun_path);
    }
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
        if (ss.ss_family != AF_UNIX)
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

/* Whether a unix socket's bound address is the one a listener names. */
static bool same_unix(const flare_listen_addr_t *want, const struct sockaddr_storage *got,
                      socklen_t gl)
{
    const struct sockaddr_un *w = (const struct sockaddr_un *)&want->ss;
    const struct sockaddr_un *g = (const struct sockaddr_un *)got;
    size_t off = offsetof(struct sockaddr_un, sun_path);
    if (gl <= off || want->ss.ss_family != AF_UNIX)
        return false;
    if (want->abstract)
        return gl == want->sl && memcmp(w->sun_path, g->sun_path, gl - off) == 0;
    return g->sun_path[0] != '\0' && strncmp(w->sun_path, g->sun_path, sizeof(g->sun_path)) == 0;
}

static void ss_format(const struct sockaddr_storage *ss, socklen_t sl, char *out, size_t cap)
{
    if (ss->ss_family == AF_UNIX) {
        const struct sockaddr_un *su = (const struct sockaddr_un *)ss;
        size_t off = offsetof(struct sockaddr_un, sun_path), n = sl > off ? sl - off : 0;
        if (n > 0 && su->sun_path[0] == '\0')
            snprintf(out, cap, "unix:@%.*s", (int)(n - 1), su->sun_path + 1);
        else
            snprintf(out, cap, "unix:%.*s", (int)n, su->sun_path);
        return;
    }
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
        (got.ss_family != AF_INET && got.ss_family != AF_INET6 && got.ss_family != AF_UNIX))
        return flare__fail(FLARE_EADDR, errno,
                           "inherited descriptor %d (%s) is not a listening TCP or unix stream "
                           "socket",
                           fd, nm);
    for (unsigned i = 0; i < n; i++) {
        flare_listen_addr_t want;
        int rc = parse_addr(ls[i]->name, -1, &want);
        if (rc != 0)
            return rc;
        if (got.ss_family == AF_UNIX) {
            if (!same_unix(&want, &got, gl))
                continue;
            /* the file is ours to remove at exit when a Flare process that
             * owned it handed it over; never when systemd made it (its
             * socket unit serves the path again after we stop) */
            ls[i]->unlink_adopted =
                !want.abstract && flare__sd_by_upgrade() && name != NULL &&
                strncmp(name, FLARE__LISTEN_KEEP_PREFIX, strlen(FLARE__LISTEN_KEEP_PREFIX)) != 0;
        } else {
            int wport = ss_port(&want.ss);
            if (!same_host(&want.ss, &got) || (wport != 0 && wport != ss_port(&got)))
                continue;
        }
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
    char addr[INET6_ADDRSTRLEN + 112];
    ss_format(&got, gl, addr, sizeof(addr));
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
        for (unsigned i = 0; i < n; i++) {                 /* the inherited ones are closed below */
            ls[i]->unlink = ls[i]->unlink_adopted = false; /* the old process's files */
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
