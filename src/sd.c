/* systemd's notify and socket activation protocols, written natively.
 *
 * Why not libsystemd: the two protocols are a few lines each (a datagram of
 * "KEY=VALUE" lines to a unix socket; descriptors from 3 named by three
 * variables), libsystemd would be one more runtime dependency for every
 * user of libflare, and the in-process upgrade needs the same code pointed
 * at a socket of the old process's own, which sd_notify() cannot do
 * without rewriting the environment. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "sd.h"

int flare__sd_addr(const char *value, struct sockaddr_un *sa, socklen_t *len)
{
    if (value == NULL || (value[0] != '/' && value[0] != '@') || value[1] == '\0')
        return FLARE_EINVAL;
    size_t n = strlen(value);
    if (n > sizeof(sa->sun_path) - (value[0] == '/')) /* a path keeps its NUL */
        return FLARE_EINVAL;
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path, value, n);
    if (value[0] == '@')
        sa->sun_path[0] = '\0'; /* abstract: the length says where it ends */
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (value[0] == '/'));
    return 0;
}

/* A decimal number with nothing around it, <= max. */
static bool parse_uint(const char *s, unsigned long long max, unsigned long long *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return false;
    unsigned long long v = 0;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (max - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

int flare__sd_listen_parse(const char *fds, const char *pid, const char *names, pid_t self,
                           unsigned *n, char *buf, size_t bufsize, const char **name_v,
                           unsigned name_max)
{
    *n = 0;
    unsigned long long v;
    if (pid == NULL || fds == NULL)
        return 0; /* not socket-activated */
    if (!parse_uint(pid, INT_MAX, &v))
        return flare__fail(FLARE_EINVAL, 0, "LISTEN_PID=\"%s\": expected a process id", pid);
    if ((pid_t)v != self)
        return 0; /* meant for another process (ours forked after it was set) */
    if (!parse_uint(fds, FLARE__SD_FDS_MAX, &v) || v == 0)
        return flare__fail(FLARE_EINVAL, 0,
                           "LISTEN_FDS=\"%s\": expected a number of descriptors, 1 to %d", fds,
                           FLARE__SD_FDS_MAX);
    unsigned count = (unsigned)v;
    for (unsigned i = 0; i < name_max; i++)
        name_v[i] = NULL;
    if (names != NULL) {
        size_t l = strlen(names);
        if (l >= bufsize)
            return flare__fail(FLARE_EINVAL, 0, "LISTEN_FDNAMES: longer than %zu bytes",
                               bufsize - 1);
        memcpy(buf, names, l + 1);
        unsigned k = 0;
        char *p = buf;
        for (;;) {
            char *colon = strchr(p, ':');
            if (k < name_max)
                name_v[k] = p;
            k++;
            if (colon == NULL)
                break;
            *colon = '\0';
            p = colon + 1;
        }
        if (k != count)
            return flare__fail(FLARE_EINVAL, 0,
                               "LISTEN_FDNAMES has %u names for LISTEN_FDS=%u descriptors", k,
                               count);
    }
    *n = count;
    return 0;
}

int flare__sd_watchdog_parse(const char *usec, const char *pid, pid_t self, uint64_t *usec_out)
{
    *usec_out = 0;
    unsigned long long v;
    if (usec == NULL)
        return 0;
    if (pid != NULL) {
        if (!parse_uint(pid, INT_MAX, &v))
            return flare__fail(FLARE_EINVAL, 0, "WATCHDOG_PID=\"%s\": expected a process id", pid);
        if ((pid_t)v != self)
            return 0;
    }
    if (!parse_uint(usec, UINT64_MAX / 2, &v) || v == 0)
        return flare__fail(FLARE_EINVAL, 0, "WATCHDOG_USEC=\"%s\": expected microseconds > 0",
                           usec);
    *usec_out = v;
    return 0;
}

/* ---- the process-wide state ---- */

static struct {
    bool done;
    int rc;
    char target[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
    char next[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
    bool upgraded;   /* started by an upgrade: READY=1 goes to target, then next */
    bool by_upgrade; /* the same, kept after READY=1 */
    uint64_t watchdog_usec;
    unsigned nfds;
    int *fds;
    const char **names;
    char *namebuf;
} sd;

static void copy_env(char *dst, size_t cap, const char *name)
{
    const char *v = getenv(name);
    dst[0] = '\0';
    if (v != NULL && strlen(v) < cap)
        memcpy(dst, v, strlen(v) + 1);
}

static int listen_init(void)
{
    const char *fds = getenv("LISTEN_FDS"), *pid = getenv("LISTEN_PID");
    const char *names = getenv("LISTEN_FDNAMES");
    if (fds == NULL || pid == NULL)
        return 0;
    size_t bufsize = (names != NULL ? strlen(names) : 0) + 1;
    char *buf = malloc(bufsize);
    const char **nv = calloc(FLARE__SD_FDS_MAX, sizeof(*nv));
    if (buf == NULL || nv == NULL) {
        free(buf);
        free(nv);
        return flare__fail(FLARE_ENOMEM, 0, "socket activation: out of memory");
    }
    unsigned n;
    int rc =
        flare__sd_listen_parse(fds, pid, names, getpid(), &n, buf, bufsize, nv, FLARE__SD_FDS_MAX);
    if (rc == 0 && n > 0) {
        sd.fds = malloc(n * sizeof(*sd.fds));
        if (sd.fds == NULL)
            rc = flare__fail(FLARE_ENOMEM, 0, "socket activation: out of memory");
    }
    if (rc != 0 || n == 0) {
        free(buf);
        free(nv);
        free(sd.fds);
        sd.fds = NULL;
        return rc;
    }
    for (unsigned i = 0; i < n; i++) {
        sd.fds[i] = FLARE__SD_FDS_START + (int)i;
        int fl = fcntl(sd.fds[i], F_GETFD);
        if (fl < 0) {
            int e = errno;
            free(buf);
            free(nv);
            free(sd.fds);
            sd.fds = NULL;
            return flare__fail(FLARE_EINVAL, e, "LISTEN_FDS=%u: descriptor %d is not open", n,
                               FLARE__SD_FDS_START + (int)i);
        }
        fcntl(sd.fds[i], F_SETFD, fl | FD_CLOEXEC);
    }
    sd.nfds = n;
    sd.names = nv;
    sd.namebuf = buf;
    /* ours now: a process we start must not believe they are its own */
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDNAMES");
    return 0;
}

int flare__sd_init(void)
{
    if (sd.done)
        return sd.rc;
    sd.done = true;
    copy_env(sd.target, sizeof(sd.target), "NOTIFY_SOCKET");
    const char *ns = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa;
    socklen_t sl;
    if (ns != NULL && flare__sd_addr(ns, &sa, &sl) != 0) {
        /* a supervisor waiting for a READY=1 that cannot be sent would wait
         * forever: say so now */
        sd.rc = flare__fail(FLARE_EINVAL, 0, "NOTIFY_SOCKET=\"%s\": expected /path or @name", ns);
        return sd.rc;
    }
    sd.upgraded = sd.by_upgrade = getenv(FLARE__SD_NEXT_ENV) != NULL;
    copy_env(sd.next, sizeof(sd.next), FLARE__SD_NEXT_ENV);
    unsetenv(FLARE__SD_NEXT_ENV);
    int rc = flare__sd_watchdog_parse(getenv("WATCHDOG_USEC"), getenv("WATCHDOG_PID"), getpid(),
                                      &sd.watchdog_usec);
    if (rc == 0)
        rc = listen_init();
    sd.rc = rc;
    return rc;
}

static int send_to(const char *target, const char *msg)
{
    struct sockaddr_un sa;
    socklen_t sl;
    if (target[0] == '\0')
        return 0;
    if (flare__sd_addr(target, &sa, &sl) != 0)
        return flare__fail(FLARE_EINVAL, 0, "NOTIFY_SOCKET=\"%s\": expected /path or @name",
                           target);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return flare__fail(FLARE_ESYS, errno, "socket (notify)");
    ssize_t r = sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa, sl);
    int e = errno;
    close(fd);
    if (r < 0)
        return flare__fail(FLARE_ESYS, e, "notify %s: %s", target, msg);
    return 0;
}

int flare__sd_notify(const char *msg)
{
    return send_to(sd.target, msg);
}

int flare__sd_ready(void)
{
    int rc = send_to(sd.target, "READY=1");
    if (sd.upgraded) {
        /* the old process heard us: from now on we talk to its supervisor
         * (or to nobody when it had none) */
        sd.upgraded = false;
        memcpy(sd.target, sd.next, sizeof(sd.target));
        sd.next[0] = '\0';
        if (sd.target[0] != '\0')
            rc = send_to(sd.target, "READY=1");
    }
    return rc;
}

int flare__sd_reloading(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char msg[64];
    snprintf(msg, sizeof(msg), "RELOADING=1\nMONOTONIC_USEC=%llu",
             (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000);
    return send_to(sd.target, msg);
}

const char *flare__sd_target(void)
{
    return sd.upgraded ? sd.next : sd.target;
}

bool flare__sd_by_upgrade(void)
{
    return sd.by_upgrade;
}

uint64_t flare__sd_watchdog_usec(void)
{
    return sd.watchdog_usec;
}

unsigned flare__sd_listen_fds(const int **fds, const char *const **names)
{
    *fds = sd.fds;
    *names = sd.names;
    return sd.nfds;
}

void flare__sd_listen_done(bool adopted)
{
    for (unsigned i = 0; !adopted && i < sd.nfds; i++)
        close(sd.fds[i]);
    free(sd.fds);
    free(sd.names);
    free(sd.namebuf);
    sd.fds = NULL;
    sd.names = NULL;
    sd.namebuf = NULL;
    sd.nfds = 0;
}
