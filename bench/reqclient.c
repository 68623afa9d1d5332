/*
 * reqclient: a small, deterministic HTTP/1.1 client for the counting benchmarks.
 *
 * Unlike wrk it sends an exact number of requests, so "instructions per request" and
 * "syscalls per request" have an exact denominator. Requests use wrk's format:
 *
 *   GET /plaintext HTTP/1.1\r\nHost: HOST:PORT\r\n\r\n
 *
 * Modes:
 *   reqclient --connect HOST:PORT --requests M [--pipeline P] [--connections C]
 *             [--path /plaintext] [--expect BODY] [--timeout SECONDS] [--gap-us N] [--quiet]
 *       Sends M requests spread over C keep-alive connections (default 1), P requests per
 *       write (default 1: one request, wait for its response, next). Every response is read
 *       in full (framed by Content-Length or chunked encoding) and must have status 200 (and
 *       body BODY with --expect). Any error, short response or closed connection: exit 1.
 *       --gap-us N pauses N microseconds after each round of responses before the next
 *       batch goes out, so the server has always drained its socket and gone back to its
 *       poller: per-request counts then do not depend on whether the next request happened
 *       to arrive while the server was still busy (a slow server under strace or valgrind
 *       would otherwise find it already there and skip its wait).
 *
 *   reqclient --connect HOST:PORT --idle N [--hold SECONDS] [--path ...] [--expect ...]
 *       Opens N keep-alive connections one after the other, sends one request on each and
 *       reads its response, then prints "READY N" on stdout and holds them all open for
 *       SECONDS (default 5) before checking how many the server closed meanwhile (reported
 *       on stderr) and exiting 0. The open-file limit is raised to the hard limit.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

struct conn {
    int fd;
    char *buf; /* received, not yet consumed bytes: buf[start..end) */
    size_t start, end, cap;
    long remaining; /* requests still to send on this connection */
    long inflight;  /* sent, response not read yet */
};

static const char *opt_connect;
static const char *opt_path = "/plaintext";
static const char *opt_expect;
static long opt_requests = 1;
static long opt_pipeline = 1;
static long opt_connections = 1;
static long opt_idle;
static double opt_hold = 5.0;
static double opt_timeout = 60.0;
static long opt_gap_us;
static int opt_quiet;

static struct addrinfo *target;
static char *request;
static size_t request_len;
static char *batch; /* request repeated opt_pipeline times */

static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "reqclient: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: reqclient --connect HOST:PORT [--requests M] [--pipeline P]\n"
               "                 [--connections C] [--path PATH] [--expect BODY]\n"
               "                 [--timeout SECONDS] [--gap-us N] [--quiet]\n"
               "       reqclient --connect HOST:PORT --idle N [--hold SECONDS]\n");
}

static long parse_long(const char *name, const char *s, long min)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < min) {
        fprintf(stderr, "reqclient: bad value for %s: '%s'\n", name, s);
        exit(2);
    }
    return v;
}

static double parse_double(const char *name, const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (*end || v < 0) {
        fprintf(stderr, "reqclient: bad value for %s: '%s'\n", name, s);
        exit(2);
    }
    return v;
}

static void resolve(void)
{
    char host[256];
    const char *colon = strrchr(opt_connect, ':');
    if (!colon || colon == opt_connect || (size_t)(colon - opt_connect) >= sizeof host)
        fail("--connect wants HOST:PORT, got '%s'", opt_connect);
    memcpy(host, opt_connect, (size_t)(colon - opt_connect));
    host[colon - opt_connect] = '\0';
    char *h = host;
    if (h[0] == '[' && h[strlen(h) - 1] == ']') {
        h[strlen(h) - 1] = '\0';
        h++;
    }
    struct addrinfo hints = { .ai_family = AF_UNSPEC,
                              .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV };
    int gai = getaddrinfo(h, colon + 1, &hints, &target);
    if (gai)
        fail("%s: %s", opt_connect, gai_strerror(gai));
}

static int dial(void)
{
    int fd = socket(target->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        fail("socket: %s", strerror(errno));
    if (connect(fd, target->ai_addr, target->ai_addrlen) < 0)
        fail("connect %s: %s", opt_connect, strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = { .tv_sec = (time_t)opt_timeout,
                          .tv_usec =
                              (suseconds_t)((opt_timeout - (double)(time_t)opt_timeout) * 1e6) };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

static void send_all(int fd, const char *p, size_t len)
{
    while (len) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            fail("send: %s", errno == EAGAIN ? "timed out" : strerror(errno));
        }
        p += w;
        len -= (size_t)w;
    }
}

/* Read more bytes into c->buf; fails on EOF, error or timeout. */
static void fill(struct conn *c)
{
    if (c->start == c->end)
        c->start = c->end = 0;
    if (c->end == c->cap) {
        if (c->start > 0) {
            memmove(c->buf, c->buf + c->start, c->end - c->start);
            c->end -= c->start;
            c->start = 0;
        } else {
            c->cap = c->cap ? c->cap * 2 : 16384;
            c->buf = realloc(c->buf, c->cap);
            if (!c->buf)
                fail("out of memory");
        }
    }
    for (;;) {
        ssize_t r = recv(c->fd, c->buf + c->end, c->cap - c->end, 0);
        if (r > 0) {
            c->end += (size_t)r;
            return;
        }
        if (r == 0)
            fail("server closed the connection with %ld response(s) outstanding", c->inflight);
        if (errno == EINTR)
            continue;
        fail("recv: %s", (errno == EAGAIN || errno == EWOULDBLOCK) ? "timed out" : strerror(errno));
    }
}

/* Ensure at least n unconsumed bytes; returns a pointer to them. */
static const char *need(struct conn *c, size_t n)
{
    while (c->end - c->start < n)
        fill(c);
    return c->buf + c->start;
}

/* Returns the offset (from c->start) just past the next CRLF, reading as needed. */
static size_t line_end(struct conn *c, size_t from)
{
    for (;;) {
        const char *p = c->buf + c->start + from;
        size_t avail = c->end - c->start - from;
        const char *nl = avail ? memchr(p, '\n', avail) : NULL;
        if (nl)
            return (size_t)(nl - (c->buf + c->start)) + 1;
        if (c->end - c->start > (1u << 20))
            fail("response header line too long");
        fill(c);
    }
}

static void check_body(const char *body, size_t len)
{
    if (opt_expect && (len != strlen(opt_expect) || memcmp(body, opt_expect, len) != 0))
        fail("unexpected body (%zu bytes): '%.*s'", len, (int)(len > 200 ? 200 : len), body);
}

/* Read and check exactly one response. */
static void read_response(struct conn *c)
{
    /* headers */
    size_t hdr_end = 0;
    for (;;) {
        size_t e = line_end(c, hdr_end);
        size_t linelen = e - hdr_end;
        hdr_end = e;
        if (linelen <= 2 && (linelen == 1 || c->buf[c->start + e - 2] == '\r'))
            break; /* empty line */
    }
    const char *h = c->buf + c->start;
    if (hdr_end < 12 || strncmp(h, "HTTP/1.", 7) != 0)
        fail("not an HTTP/1.x response: '%.*s'", (int)(hdr_end > 80 ? 80 : hdr_end), h);
    int status = atoi(h + 9);
    if (status != 200)
        fail("status %d: '%.*s'", status, (int)(hdr_end > 300 ? 300 : hdr_end), h);

    long content_length = -1;
    int chunked = 0;
    for (size_t i = 0; i < hdr_end;) {
        const char *line = h + i;
        const char *nl = memchr(line, '\n', hdr_end - i);
        size_t len = (size_t)(nl - line);
        if (len > 15 && !strncasecmp(line, "Content-Length:", 15))
            content_length = strtol(line + 15, NULL, 10);
        else if (len > 18 && !strncasecmp(line, "Transfer-Encoding:", 18) &&
                 memmem(line, len, "chunked", 7))
            chunked = 1;
        i += len + 1;
    }
    c->start += hdr_end;

    if (chunked) {
        char *body = NULL;
        size_t body_len = 0;
        for (;;) {
            size_t e = line_end(c, 0);
            long size = strtol(c->buf + c->start, NULL, 16);
            c->start += e;
            if (size < 0)
                fail("bad chunk size");
            if (size == 0) {
                /* trailers until the empty line */
                for (;;) {
                    size_t t = line_end(c, 0);
                    c->start += t;
                    if (t <= 2)
                        break;
                }
                break;
            }
            const char *p = need(c, (size_t)size + 2);
            body = realloc(body, body_len + (size_t)size);
            if (!body)
                fail("out of memory");
            memcpy(body + body_len, p, (size_t)size);
            body_len += (size_t)size;
            c->start += (size_t)size + 2;
        }
        check_body(body, body_len);
        free(body);
    } else if (content_length >= 0) {
        const char *p = need(c, (size_t)content_length);
        check_body(p, (size_t)content_length);
        c->start += (size_t)content_length;
    } else {
        fail("response without Content-Length or chunked encoding");
    }
    c->inflight--;
}

static void build_request(void)
{
    size_t cap = strlen(opt_path) + strlen(opt_connect) + 64;
    request = malloc(cap);
    if (!request)
        fail("out of memory");
    int n = snprintf(request, cap, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", opt_path, opt_connect);
    request_len = (size_t)n;
    batch = malloc(request_len * (size_t)opt_pipeline);
    if (!batch)
        fail("out of memory");
    for (long i = 0; i < opt_pipeline; i++)
        memcpy(batch + (size_t)i * request_len, request, request_len);
}

static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static int run_requests(void)
{
    if (opt_connections > opt_requests)
        opt_connections = opt_requests;
    struct conn *conns = calloc((size_t)opt_connections, sizeof *conns);
    if (!conns)
        fail("out of memory");
    for (long i = 0; i < opt_connections; i++) {
        conns[i].fd = dial();
        conns[i].remaining = opt_requests / opt_connections + (i < opt_requests % opt_connections);
    }
    long done = 0;
    while (done < opt_requests) {
        if (done && opt_gap_us) {
            struct timespec ts = { .tv_sec = opt_gap_us / 1000000,
                                   .tv_nsec = (opt_gap_us % 1000000) * 1000 };
            while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
            }
        }
        /* one batch out on every connection, then all the answers in */
        for (long i = 0; i < opt_connections; i++) {
            struct conn *c = &conns[i];
            long k = c->remaining < opt_pipeline ? c->remaining : opt_pipeline;
            if (k) {
                send_all(c->fd, batch, (size_t)k * request_len);
                c->remaining -= k;
                c->inflight = k;
            }
        }
        for (long i = 0; i < opt_connections; i++) {
            struct conn *c = &conns[i];
            long k = c->inflight;
            while (c->inflight)
                read_response(c);
            if (c->end != c->start)
                fail("%zu unexpected bytes after the responses", c->end - c->start);
            done += k;
        }
    }
    for (long i = 0; i < opt_connections; i++) {
        close(conns[i].fd);
        free(conns[i].buf);
    }
    free(conns);
    if (!opt_quiet)
        fprintf(stderr, "reqclient: %ld responses OK (%ld connection(s), pipeline %ld)\n", done,
                opt_connections, opt_pipeline);
    return 0;
}

static int run_idle(void)
{
    raise_nofile();
    struct conn *conns = calloc((size_t)opt_idle, sizeof *conns);
    if (!conns)
        fail("out of memory");
    for (long i = 0; i < opt_idle; i++) {
        struct conn *c = &conns[i];
        c->fd = dial();
        send_all(c->fd, request, request_len);
        c->inflight = 1;
        read_response(c);
        free(c->buf);
        c->buf = NULL;
        c->start = c->end = c->cap = 0;
    }
    printf("READY %ld\n", opt_idle);
    fflush(stdout);

    struct timespec ts = { .tv_sec = (time_t)opt_hold,
                           .tv_nsec = (long)((opt_hold - (double)(time_t)opt_hold) * 1e9) };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }

    long closed = 0;
    for (long i = 0; i < opt_idle; i++) {
        struct pollfd p = { .fd = conns[i].fd, .events = POLLIN | POLLRDHUP };
        if (poll(&p, 1, 0) > 0)
            closed++;
        close(conns[i].fd);
    }
    free(conns);
    if (closed)
        fprintf(stderr, "reqclient: warning: the server closed %ld of %ld idle connections\n",
                closed, opt_idle);
    else if (!opt_quiet)
        fprintf(stderr, "reqclient: %ld idle connections held for %.1f s\n", opt_idle, opt_hold);
    return 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            opt_quiet = 1;
            continue;
        }
        if (!v) {
            usage(stderr);
            return 2;
        }
        if (!strcmp(a, "--connect"))
            opt_connect = v;
        else if (!strcmp(a, "--requests"))
            opt_requests = parse_long(a, v, 1);
        else if (!strcmp(a, "--pipeline"))
            opt_pipeline = parse_long(a, v, 1);
        else if (!strcmp(a, "--connections"))
            opt_connections = parse_long(a, v, 1);
        else if (!strcmp(a, "--path"))
            opt_path = v;
        else if (!strcmp(a, "--expect"))
            opt_expect = v;
        else if (!strcmp(a, "--idle"))
            opt_idle = parse_long(a, v, 1);
        else if (!strcmp(a, "--hold"))
            opt_hold = parse_double(a, v);
        else if (!strcmp(a, "--gap-us"))
            opt_gap_us = parse_long(a, v, 0);
        else if (!strcmp(a, "--timeout"))
            opt_timeout = parse_double(a, v);
        else {
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (!opt_connect) {
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    resolve();
    build_request();
    int rc = opt_idle ? run_idle() : run_requests();
    freeaddrinfo(target);
    free(request);
    free(batch);
    return rc;
}
