/* SIGUSR2: start the binary at our own path again, hand it every listening
 * socket, wait for its READY=1, then let flare_app_run drain and return.
 *
 * The sockets: each worker has its own SO_REUSEPORT socket per listener and
 * the kernel spreads connections over all of them, each with its own
 * accept queue. Closing one drops the connections queued on it, so the new
 * process gets a duplicate of every one of them (not new sockets of its
 * own): when the old process closes its descriptors, the sockets and their
 * queues live on in the new one, which serves them all whatever its worker
 * count (flare__worker_listen). The same set of sockets then passes from
 * binary to binary, upgrade after upgrade.
 *
 * The protocol is systemd's: LISTEN_FDS/LISTEN_PID/LISTEN_FDNAMES with the
 * descriptors from 3, and NOTIFY_SOCKET naming a datagram socket of ours
 * on which the new process says READY=1, so any binary that speaks
 * sd_notify can be upgraded to. A Flare process started that way then
 * switches to the target named by FLARE_NOTIFY_NEXT: our own supervisor
 * (systemd), which we tell MAINPID=<new pid> once it is ready. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "app.h"
#include "worker.h"
#include "net/listen.h"
#include "sd.h"
#include "upgrade.h"

extern char **environ;

/* ---- what to start: captured once, at the first run ---- */

static struct {
    bool done;
    char exe[4096]; /* "" when /proc/self/exe could not be read */
    char *cmdline;  /* NUL-separated, as the kernel gives it */
    char **argv;
} self;

void flare__upgrade_capture(void)
{
    if (self.done)
        return;
    self.done = true;
    ssize_t n = readlink("/proc/self/exe", self.exe, sizeof(self.exe) - 1);
    self.exe[n > 0 ? n : 0] = '\0';
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap + 1);
    while (buf != NULL) {
        ssize_t r = read(fd, buf + len, cap - len);
        if (r <= 0)
            break;
        len += (size_t)r;
        if (len == cap) {
            char *b = realloc(buf, cap * 2 + 1);
            if (b == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
    }
    close(fd);
    if (buf == NULL || len == 0) {
        free(buf);
        return;
    }
    buf[len] = '\0';
    size_t argc = 0;
    for (size_t i = 0; i < len; i++)
        argc += buf[i] == '\0';
    if (buf[len - 1] != '\0')
        argc++;
    char **argv = calloc(argc + 1, sizeof(*argv));
    if (argv == NULL) {
        free(buf);
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < len && k < argc; i += strlen(buf + i) + 1)
        argv[k++] = buf + i;
    self.cmdline = buf;
    self.argv = argv;
}

/* ---- the child's environment ---- */

#define PID_DIGITS 24

static bool replaced(const char *e)
{
    static const char *const names[] = { "LISTEN_FDS=",          "LISTEN_PID=",
                                         "LISTEN_FDNAMES=",      "NOTIFY_SOCKET=",
                                         FLARE__SD_NEXT_ENV "=", "WATCHDOG_PID=" };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strncmp(e, names[i], strlen(names[i])) == 0)
            return true;
    }
    return false;
}

static char *kv(const char *k, const char *v, size_t room)
{
    size_t kl = strlen(k), vl = v != NULL ? strlen(v) : 0;
    char *s = malloc(kl + vl + room + 1);
    if (s == NULL)
        return NULL;
    memcpy(s, k, kl);
    if (vl > 0)
        memcpy(s + kl, v, vl);
    memset(s + kl + vl, 0, room + 1);
    return s;
}

char **flare__upgrade_env(char *const *env, unsigned nfds, const char *names, const char *notify,
                          const char *next, bool watchdog, char **pid_slots)
{
    size_t n = 0;
    while (env != NULL && env[n] != NULL)
        n++;
    char **out = calloc(n + 7, sizeof(*out));
    if (out == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (replaced(env[i]))
            continue;
        if ((out[k++] = strdup(env[i])) == NULL)
            goto fail;
    }
    char num[16];
    snprintf(num, sizeof(num), "%u", nfds);
    if ((out[k++] = kv("LISTEN_FDS=", num, 0)) == NULL ||
        (out[k++] = kv("LISTEN_FDNAMES=", names, 0)) == NULL ||
        (out[k++] = kv("NOTIFY_SOCKET=", notify, 0)) == NULL ||
        (out[k++] = kv(FLARE__SD_NEXT_ENV "=", next, 0)) == NULL ||
        (out[k++] = kv("LISTEN_PID=", NULL, PID_DIGITS)) == NULL)
        goto fail;
    pid_slots[0] = out[k - 1] + strlen("LISTEN_PID=");
    pid_slots[1] = NULL;
    if (watchdog) {
        if ((out[k++] = kv("WATCHDOG_PID=", NULL, PID_DIGITS)) == NULL)
            goto fail;
        pid_slots[1] = out[k - 1] + strlen("WATCHDOG_PID=");
    }
    return out;
fail:
    flare__upgrade_env_free(out);
    return NULL;
}

void flare__upgrade_env_free(char **env)
{
    for (size_t i = 0; env != NULL && env[i] != NULL; i++)
        free(env[i]);
    free(env);
}

void flare__upgrade_put_pid(char *p, long pid)
{
    char tmp[PID_DIGITS];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + pid % 10);
        pid /= 10;
    } while (pid > 0 && n < PID_DIGITS - 1);
    for (int i = 0; i < n; i++)
        p[i] = tmp[n - 1 - i];
    p[n] = '\0';
}

/* ---- the hand-over ---- */

static void worker_ping(void *ud)
{
    flare_worker_t *w = ud;
    unsigned long n = atomic_load_explicit(&w->ping_acked, memory_order_relaxed);
    /* release: the node is done with before the run thread, which loads with
     * acquire, posts it again */
    atomic_store_explicit(&w->ping_acked, n + 1, memory_order_release); /* one writer */
}

static void watchdog_post(flare_app_t *app)
{
    for (unsigned i = 0; i < app->nworkers; i++) {
        flare_worker_t *w = &app->workers[i];
        if (atomic_load_explicit(&w->ping_acked, memory_order_acquire) != w->ping_posted)
            continue; /* still queued: posting it again would corrupt the queue */
        w->ping_node.fn = worker_ping;
        w->ping_node.ud = w;
        w->ping_posted++;
        flare__loop_post_node(&w->loop, &w->ping_node);
    }
}

static uint64_t watchdog_period_ms(void)
{
    uint64_t ms = flare__sd_watchdog_usec() / 2000; /* every WATCHDOG_USEC / 2 */
    return ms > 0 ? ms : 1;
}

void flare__upgrade_init(flare_upgrade_t *u)
{
    memset(u, 0, sizeof(*u));
    u->notify_fd = -1;
    if (flare__sd_watchdog_usec() > 0)
        u->wd_next = flare__now_ms(); /* the first ping at once: we are up */
}

static void log_upgrade(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_upgrade(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "flare: upgrade (pid %ld): %s\n", (long)getpid(), line);
}

/* The private notify socket: an abstract address the kernel picks
 * (autobind), credentials on, so only the child's datagrams count. */
static int notify_open(char *name, size_t cap)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int one = 1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa_family_t)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) != 0) {
        close(fd);
        return -1;
    }
    socklen_t sl = sizeof(sa);
    if (getsockname(fd, (struct sockaddr *)&sa, &sl) != 0 ||
        sl <= offsetof(struct sockaddr_un, sun_path) + 1 ||
        sl - offsetof(struct sockaddr_un, sun_path) >= cap) {
        close(fd);
        return -1;
    }
    size_t nl = sl - offsetof(struct sockaddr_un, sun_path);
    memcpy(name, sa.sun_path, nl);
    name[0] = '@';
    name[nl] = '\0';
    return fd;
}

/* The sockets to pass: every worker's own (not the dups of shared ones: a
 * unix listener's one socket goes once), and their names (the listener's
 * address, ':' -> '_', since ':' separates LISTEN_FDNAMES; a unix socket
 * whose file is not ours gets FLARE__LISTEN_KEEP_PREFIX first). */
static int collect_fds(flare_app_t *app, int **fds_out, char **names_out)
{
    unsigned n = 0;
    size_t nl = 0;
    for (unsigned i = 0; i < app->nworkers; i++) {
        flare_worker_t *w = &app->workers[i];
        for (unsigned k = 0; k < w->nlios; k++) {
            if (w->lios[k].io.fd >= 0 && !w->lios[k].shared) {
                n++;
                nl += strlen(w->lios[k].l->name) + 1 + strlen(FLARE__LISTEN_KEEP_PREFIX);
            }
        }
    }
    int *fds = malloc((n + 1) * sizeof(*fds));
    char *names = malloc(nl + 1);
    if (fds == NULL || names == NULL) {
        free(fds);
        free(names);
        return -1;
    }
    unsigned j = 0;
    char *p = names;
    for (unsigned i = 0; i < app->nworkers; i++) {
        flare_worker_t *w = &app->workers[i];
        for (unsigned k = 0; k < w->nlios; k++) {
            if (w->lios[k].io.fd < 0 || w->lios[k].shared)
                continue;
            if (j > 0)
                *p++ = ':';
            fds[j++] = w->lios[k].io.fd;
            const flare_listener_t *l = w->lios[k].l;
            if (flare__listen_is_unix(l->name) && !l->unlink && !l->unlink_adopted) {
                /* a socket file this process does not own (systemd's) */
                memcpy(p, FLARE__LISTEN_KEEP_PREFIX, strlen(FLARE__LISTEN_KEEP_PREFIX));
                p += strlen(FLARE__LISTEN_KEEP_PREFIX);
            }
            for (const char *s = l->name; *s != '\0'; s++)
                *p++ = *s == ':' ? '_' : *s;
        }
    }
    *p = '\0';
    *fds_out = fds;
    *names_out = names;
    return (int)n;
}

static uint64_t upgrade_limit(void)
{
    const char *v = getenv("FLARE_UPGRADE_TIMEOUT_MS");
    char *end;
    unsigned long long ms = v != NULL ? strtoull(v, &end, 10) : 0;
    if (v == NULL || *v == '\0' || *end != '\0' || ms == 0 || ms > 86400000ull)
        return FLARE__UPGRADE_TIMEOUT_MS;
    return ms;
}

int flare__upgrade_start(flare_upgrade_t *u, flare_app_t *app)
{
    if (u->child > 0) {
        log_upgrade("ignored: the new process (pid %ld) has not reported ready yet",
                    (long)u->child);
        return FLARE_ESTATE;
    }
    if (self.exe[0] == '\0' || self.argv == NULL) {
        log_upgrade("cannot upgrade: the path of this binary (/proc/self/exe) or its "
                    "arguments (/proc/self/cmdline) were not readable at startup");
        return FLARE_ESYS;
    }
    int *fds = NULL, *hi = NULL;
    char *names = NULL, **envp = NULL, *slots[2] = { NULL, NULL };
    int rc = FLARE_ENOMEM, pfd[2] = { -1, -1 };
    char notify[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
    int n = collect_fds(app, &fds, &names);
    if (n < 0)
        goto fail_log;
    u->notify_fd = notify_open(notify, sizeof(notify));
    if (u->notify_fd < 0) {
        rc = FLARE_ESYS;
        log_upgrade("cannot upgrade: notify socket: %s", strerror(errno));
        goto out;
    }
    envp = flare__upgrade_env(environ, (unsigned)n, names, notify, flare__sd_target(),
                              flare__sd_watchdog_usec() > 0, slots);
    hi = malloc(((size_t)n + 1) * sizeof(*hi));
    if (envp == NULL || hi == NULL)
        goto fail_log;
    /* above 3 + n, so that the child's dup2 to 3.. never overwrites one it
     * has yet to move; CLOEXEC, so the new binary only keeps 3.. */
    int nhi = 0;
    for (; nhi < n; nhi++) {
        if ((hi[nhi] = fcntl(fds[nhi], F_DUPFD_CLOEXEC, FLARE__SD_FDS_START + n)) < 0)
            break;
    }
    if (nhi < n || pipe2(pfd, O_CLOEXEC) != 0) {
        rc = FLARE_ESYS;
        log_upgrade("cannot upgrade: %s", strerror(errno));
        n = nhi;
        goto out_hi;
    }
    pid_t pid = fork();
    if (pid == 0) {
        /* the child of a threaded process: async-signal-safe calls only */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL); /* the run blocked its signals */
        struct sigaction dfl = { .sa_handler = SIG_DFL };
        sigaction(SIGPIPE, &dfl, NULL); /* an ignored signal stays ignored across exec */
        for (int i = 0; i < n; i++) {
            if (dup2(hi[i], FLARE__SD_FDS_START + i) < 0)
                goto child_fail;
        }
        long me = (long)getpid();
        flare__upgrade_put_pid(slots[0], me);
        if (slots[1] != NULL)
            flare__upgrade_put_pid(slots[1], me);
        execve(self.exe, self.argv, envp);
    child_fail:;
        int e = errno;
        ssize_t w = write(pfd[1], &e, sizeof(e));
        (void)w;
        _exit(127);
    }
    int fork_errno = errno;
    close(pfd[1]);
    pfd[1] = -1;
    if (pid < 0) {
        rc = FLARE_ESYS;
        log_upgrade("cannot upgrade: fork: %s", strerror(fork_errno));
        goto out_hi;
    }
    /* EOF: the exec happened (the pipe was close-on-exec); an int: why not */
    int e = 0;
    ssize_t r;
    while ((r = read(pfd[0], &e, sizeof(e))) < 0 && errno == EINTR) {
    }
    if (r == (ssize_t)sizeof(e)) {
        waitpid(pid, NULL, 0);
        rc = FLARE_ESYS;
        log_upgrade("cannot start %s: %s; still serving", self.exe, strerror(e));
        goto out_hi;
    }
    u->child = pid;
    u->start = flare__now_ms();
    u->limit = upgrade_limit();
    log_upgrade("started %s (pid %ld) with %d listening sockets; waiting up to %llu ms for "
                "its READY=1",
                self.exe, (long)pid, n, (unsigned long long)u->limit);
    rc = 0;
    goto out_hi;
fail_log:
    log_upgrade("cannot upgrade: out of memory");
    goto out;
out_hi:
    for (int i = 0; i < n; i++)
        close(hi[i]);
out:
    if (pfd[0] >= 0)
        close(pfd[0]);
    if (pfd[1] >= 0)
        close(pfd[1]);
    if (rc != 0 && u->notify_fd >= 0) {
        close(u->notify_fd);
        u->notify_fd = -1;
    }
    free(hi);
    free(fds);
    free(names);
    flare__upgrade_env_free(envp);
    return rc;
}

int flare__upgrade_fd(const flare_upgrade_t *u)
{
    return u->notify_fd;
}

int flare__upgrade_timeout(const flare_upgrade_t *u)
{
    int t = -1;
    if (u->child > 0)
        t = 100; /* how soon an early exit is noticed */
    if (u->wd_next != 0) {
        uint64_t now = flare__now_ms();
        int left = u->wd_next > now ? (int)(u->wd_next - now) : 0;
        if (t < 0 || left < t)
            t = left;
    }
    return t;
}

static void child_end(flare_upgrade_t *u)
{
    if (u->notify_fd >= 0)
        close(u->notify_fd);
    u->notify_fd = -1;
    u->child = 0;
}

/* Stops a child that never became ready: SIGTERM (it may hold connections
 * it accepted already), SIGKILL after a second. */
static void child_stop(flare_upgrade_t *u)
{
    kill(u->child, SIGTERM);
    for (int i = 0; i < 100; i++) {
        if (waitpid(u->child, NULL, WNOHANG) == u->child)
            return child_end(u);
        usleep(10000);
    }
    kill(u->child, SIGKILL);
    waitpid(u->child, NULL, 0);
    child_end(u);
}

static void describe_status(int st, char *out, size_t cap)
{
    if (WIFEXITED(st))
        snprintf(out, cap, "exited with status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(out, cap, "was killed by signal %d", WTERMSIG(st));
    else
        snprintf(out, cap, "ended");
}

/* Reads the child's datagrams: true when one says READY=1. */
static bool read_notify(flare_upgrade_t *u)
{
    bool ready = false;
    for (;;) {
        char buf[4096];
        union {
            struct cmsghdr h;
            char b[CMSG_SPACE(sizeof(struct ucred))];
        } ctl;
        struct iovec iov = { buf, sizeof(buf) - 1 };
        struct msghdr mh = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = &ctl, .msg_controllen = sizeof(ctl)
        };
        ssize_t r = recvmsg(u->notify_fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (r < 0)
            return ready;
        buf[r] = '\0';
        pid_t from = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
                struct ucred uc;
                memcpy(&uc, CMSG_DATA(c), sizeof(uc));
                from = uc.pid;
            }
        }
        if (from != u->child) {
            log_upgrade("ignored a notification from pid %ld (expected %ld)", (long)from,
                        (long)u->child);
            continue;
        }
        for (char *line = buf; line != NULL;) {
            char *nl = strchr(line, '\n');
            if (nl != NULL)
                *nl = '\0';
            if (strcmp(line, "READY=1") == 0)
                ready = true;
            line = nl != NULL ? nl + 1 : NULL;
        }
    }
}

bool flare__upgrade_poll(flare_upgrade_t *u, flare_app_t *app)
{
    uint64_t now = flare__now_ms();
    if (u->wd_next != 0 && now >= u->wd_next) {
        /* WATCHDOG=1 only while every worker answers its posts */
        bool alive = true;
        for (unsigned i = 0; i < app->nworkers; i++) {
            flare_worker_t *w = &app->workers[i];
            if (atomic_load_explicit(&w->ping_acked, memory_order_acquire) != w->ping_posted)
                alive = false;
        }
        if (alive)
            flare__sd_notify("WATCHDOG=1");
        watchdog_post(app);
        u->wd_next = now + watchdog_period_ms();
    }
    if (u->child <= 0)
        return false;
    if (read_notify(u)) {
        pid_t pid = u->child;
        child_end(u);
        if (flare__sd_target()[0] != '\0') {
            char msg[48];
            snprintf(msg, sizeof(msg), "MAINPID=%ld", (long)pid);
            flare__sd_notify(msg);
        }
        log_upgrade("the new process (pid %ld) is ready: this one stops accepting and drains",
                    (long)pid);
        return true;
    }
    int st;
    if (waitpid(u->child, &st, WNOHANG) == u->child) {
        char why[64];
        describe_status(st, why, sizeof(why));
        log_upgrade("the new process (pid %ld) %s before it was ready; still serving",
                    (long)u->child, why);
        child_end(u);
        return false;
    }
    if (now - u->start >= u->limit) {
        log_upgrade("the new process (pid %ld) did not report READY=1 within %llu ms; "
                    "stopping it, still serving",
                    (long)u->child, (unsigned long long)u->limit);
        child_stop(u);
    }
    return false;
}

void flare__upgrade_dispose(flare_upgrade_t *u)
{
    if (u->child > 0) {
        log_upgrade("stopping: the new process (pid %ld) was not ready yet, stopping it too",
                    (long)u->child);
        child_stop(u);
    }
    child_end(u);
}
