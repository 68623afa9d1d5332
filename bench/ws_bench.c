/* WebSocket load client: echo round trips and broadcast fan-out.
 *
 *   ws_bench echo   [--port P] [--path /ws/echo] [--conns N] [--size B]
 *                   [--inflight K] [--seconds S | --count M] [--server-pid PID]
 *   ws_bench fanout [--port P] [--path '/ws?room=bench&name=b%d'] [--conns N]
 *                   [--size B] [--inflight K] [--seconds S | --count M]
 *                   [--server-pid PID]
 *
 * echo: N connections each keep K binary messages of B bytes in flight to an
 * echo endpoint; reports round trips per second and latency.
 * fanout: N connections join one room of a chat-like server (examples/chat
 * protocol: text in, JSON events out); connection 0 sends text messages of
 * B bytes, keeping K in flight (a message is done when all N connections
 * have it); reports messages and deliveries per second. Only frames whose
 * text contains "type":"msg" count; join events are drained first.
 * --server-pid: also reports the server's CPU time per message (utime+stime
 * from /proc/PID/stat; for fan-out, per delivered copy as well).
 *
 * Single-threaded epoll; frames are masked as RFC 6455 requires. Standalone
 * (no libflare): the server under test may be any implementation. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct conn {
    int fd;
    int idx;
    bool open;
    char *in;
    size_t inlen, incap;
    char *out;
    size_t outlen, outcap;
    uint8_t key[4];
    uint64_t inflight;
} conn_t;

static const char *host = "127.0.0.1";
static int port = 8080;
static const char *path;
static int nconns = 1, inflight = 1;
static size_t msg_size = 32;
static double seconds = 5;
static uint64_t count; /* 0: run for `seconds` */
static int server_pid;
static bool fanout;
static int epfd;
static conn_t *conns;

/* results */
static uint64_t sent, received, deliveries;
static double lat_sum;
static double *lats;
static size_t nlats, caplats;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static void grow(char **buf, size_t *cap, size_t need)
{
    if (*cap >= need)
        return;
    size_t c = *cap != 0 ? *cap : 65536;
    while (c < need)
        c *= 2;
    *buf = realloc(*buf, c);
    if (*buf == NULL)
        die("realloc");
    *cap = c;
}

static void flush(conn_t *c)
{
    while (c->outlen > 0) {
        ssize_t w = write(c->fd, c->out, c->outlen);
        if (w < 0) {
            if (errno == EAGAIN)
                break;
            die("write");
        }
        memmove(c->out, c->out + w, c->outlen - (size_t)w);
        c->outlen -= (size_t)w;
    }
    struct epoll_event ev = { .events = EPOLLIN | (c->outlen > 0 ? EPOLLOUT : 0), .data.ptr = c };
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Queues one masked frame. */
static void send_frame(conn_t *c, uint8_t op, const char *p, size_t n)
{
    grow(&c->out, &c->outcap, c->outlen + n + 14);
    uint8_t *h = (uint8_t *)c->out + c->outlen;
    size_t hl;
    h[0] = (uint8_t)(0x80 | op);
    if (n < 126) {
        h[1] = (uint8_t)(0x80 | n);
        hl = 2;
    } else if (n <= 0xFFFF) {
        h[1] = 0x80 | 126;
        h[2] = (uint8_t)(n >> 8);
        h[3] = (uint8_t)n;
        hl = 4;
    } else {
        h[1] = 0x80 | 127;
        for (int i = 0; i < 8; i++)
            h[2 + i] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
        hl = 10;
    }
    memcpy(h + hl, c->key, 4);
    hl += 4;
    uint8_t *d = h + hl;
    uint32_t k32;
    memcpy(&k32, c->key, 4);
    uint64_t k64 = (uint64_t)k32 << 32 | k32;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        w ^= k64;
        memcpy(d + i, &w, 8);
    }
    for (; i < n; i++)
        d[i] = (uint8_t)p[i] ^ c->key[i & 3];
    c->outlen += hl + n;
}

static char *payload;

static void send_message(conn_t *c)
{
    double t = now_s();
    memcpy(payload, &t, sizeof(t) < msg_size ? sizeof(t) : msg_size);
    if (fanout) {
        /* text: digits of the time then padding, all ASCII */
        char *p = payload;
        int n = snprintf(p, msg_size + 1, "%.9f", t);
        for (size_t i = (size_t)n; i < msg_size; i++)
            p[i] = 'x';
        send_frame(c, 0x1, payload, msg_size);
    } else {
        send_frame(c, 0x2, payload, msg_size);
    }
    c->inflight++;
    sent++;
}

static void record_latency(double t0)
{
    double l = now_s() - t0;
    lat_sum += l;
    if (nlats == caplats) {
        caplats = caplats != 0 ? caplats * 2 : 1 << 16;
        lats = realloc(lats, caplats * sizeof(*lats));
        if (lats == NULL)
            die("realloc");
    }
    lats[nlats++] = l;
}

static bool measuring;
static bool done;

static bool want_more(void)
{
    if (!measuring)
        return false;
    if (count != 0)
        return sent < count;
    return true;
}

/* one complete server frame */
static void on_frame(conn_t *c, uint8_t op, const char *p, size_t n)
{
    if (op == 0x9) { /* ping: answer */
        send_frame(c, 0xA, p, n);
        return;
    }
    if (op == 0x8) {
        fprintf(stderr, "connection %d closed by the server\n", c->idx);
        exit(1);
    }
    if (!fanout) {
        if (op != 0x2 || n != msg_size)
            return;
        double t0;
        memcpy(&t0, p, sizeof(t0) < n ? sizeof(t0) : n);
        if (measuring)
            record_latency(t0);
        received++;
        c->inflight--;
        if (want_more())
            send_message(c);
        return;
    }
    if (op != 0x1 || memmem(p, n, "\"type\":\"msg\"", 12) == NULL)
        return;
    deliveries++;
    /* the message is done for everyone when deliveries reach k * nconns */
    if (deliveries % (uint64_t)nconns == 0) {
        const char *t = memmem(p, n, "\"text\":\"", 8);
        if (t != NULL && measuring)
            record_latency(strtod(t + 8, NULL));
        received++;
        conns[0].inflight--;
        if (want_more())
            send_message(&conns[0]);
    }
}

static void on_read(conn_t *c)
{
    for (;;) {
        grow(&c->in, &c->incap, c->inlen + 65536);
        ssize_t r = read(c->fd, c->in + c->inlen, c->incap - c->inlen);
        if (r == 0) {
            fprintf(stderr, "connection %d: EOF\n", c->idx);
            exit(1);
        }
        if (r < 0) {
            if (errno == EAGAIN)
                break;
            die("read");
        }
        c->inlen += (size_t)r;
    }
    size_t pos = 0;
    if (!c->open) {
        char *end = memmem(c->in, c->inlen, "\r\n\r\n", 4);
        if (end == NULL)
            return;
        if (strncmp(c->in, "HTTP/1.1 101", 12) != 0) {
            fprintf(stderr, "handshake refused: %.*s\n", (int)(end - c->in), c->in);
            exit(1);
        }
        c->open = true;
        pos = (size_t)(end + 4 - c->in);
    }
    for (;;) {
        size_t avail = c->inlen - pos;
        if (avail < 2)
            break;
        const uint8_t *h = (const uint8_t *)c->in + pos;
        size_t n = h[1] & 0x7F, hl = 2;
        if (n == 126) {
            if (avail < 4)
                break;
            n = (size_t)h[2] << 8 | h[3];
            hl = 4;
        } else if (n == 127) {
            if (avail < 10)
                break;
            n = 0;
            for (int i = 0; i < 8; i++)
                n = n << 8 | h[2 + i];
            hl = 10;
        }
        if (avail < hl + n)
            break;
        if (h[0] & 0x40) {
            fprintf(stderr, "compressed frame: run without permessage-deflate\n");
            exit(1);
        }
        on_frame(c, h[0] & 0x0F, c->in + pos + hl, n);
        pos += hl + n;
    }
    memmove(c->in, c->in + pos, c->inlen - pos);
    c->inlen -= pos;
    if (c->outlen > 0)
        flush(c);
}

static void connect_all(void)
{
    for (int i = 0; i < nconns; i++) {
        conn_t *c = &conns[i];
        c->idx = i;
        c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (c->fd < 0)
            die("socket");
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
        inet_pton(AF_INET, host, &sa.sin_addr);
        if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS)
            die("connect");
        for (int k = 0; k < 4; k++)
            c->key[k] = (uint8_t)rand();
        char target[256];
        snprintf(target, sizeof(target), path, i);
        char req[512];
        int n = snprintf(req, sizeof(req),
                         "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
                         "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                         "Sec-WebSocket-Version: 13\r\n\r\n",
                         target, host, port);
        grow(&c->out, &c->outcap, (size_t)n);
        memcpy(c->out, req, (size_t)n);
        c->outlen = (size_t)n;
        struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.ptr = c };
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0)
            die("epoll_ctl");
    }
}

static void poll_once(int timeout_ms)
{
    struct epoll_event evs[256];
    int n = epoll_wait(epfd, evs, 256, timeout_ms);
    for (int i = 0; i < n; i++) {
        conn_t *c = evs[i].data.ptr;
        if (evs[i].events & EPOLLOUT)
            flush(c);
        if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
            on_read(c);
    }
    /* fan-out: the copy that completes a message may arrive on any
     * connection; the next message leaves on connection 0 */
    if (fanout && conns[0].outlen > 0 && conns[0].open)
        flush(&conns[0]);
}

static double server_cpu(void)
{
    if (server_pid <= 0)
        return 0;
    char p[64], buf[1024];
    snprintf(p, sizeof(p), "/proc/%d/stat", server_pid);
    FILE *f = fopen(p, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *s = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    /* fields after the name: state(3) ... utime(14) stime(15) */
    if (s == NULL ||
        sscanf(s + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void usage(void)
{
    fprintf(stderr, "usage: ws_bench echo|fanout [--host H] [--port P] [--path PATH] "
                    "[--conns N] [--size B] [--inflight K] [--seconds S | --count M] "
                    "[--server-pid PID]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    fanout = strcmp(argv[1], "fanout") == 0;
    if (!fanout && strcmp(argv[1], "echo") != 0)
        usage();
    path = fanout ? "/ws?room=bench&name=b%d" : "/ws/echo";
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (strcmp(k, "--host") == 0)
            host = v;
        else if (strcmp(k, "--port") == 0)
            port = atoi(v);
        else if (strcmp(k, "--path") == 0)
            path = v;
        else if (strcmp(k, "--conns") == 0)
            nconns = atoi(v);
        else if (strcmp(k, "--size") == 0)
            msg_size = (size_t)atol(v);
        else if (strcmp(k, "--inflight") == 0)
            inflight = atoi(v);
        else if (strcmp(k, "--seconds") == 0)
            seconds = atof(v);
        else if (strcmp(k, "--count") == 0)
            count = (uint64_t)atoll(v);
        else if (strcmp(k, "--server-pid") == 0)
            server_pid = atoi(v);
        else
            usage();
    }
    if (nconns < 1 || inflight < 1 || msg_size < 24)
        usage();
    payload = calloc(1, msg_size + 32);
    conns = calloc((size_t)nconns, sizeof(*conns));
    epfd = epoll_create1(0);
    if (payload == NULL || conns == NULL || epfd < 0)
        die("setup");
    srand((unsigned)getpid());
    connect_all();
    /* handshakes, then (fan-out) the join events die down */
    double t = now_s();
    for (;;) {
        int open = 0;
        for (int i = 0; i < nconns; i++)
            open += conns[i].open;
        if (open == nconns)
            break;
        if (now_s() - t > 30) {
            fprintf(stderr, "only %d of %d connections opened\n", open, nconns);
            return 1;
        }
        poll_once(100);
    }
    for (double quiet = now_s(); now_s() - quiet < 0.5;) {
        uint64_t before = deliveries;
        poll_once(50);
        if (deliveries != before)
            quiet = now_s();
    }
    deliveries = 0;

    measuring = true;
    double cpu0 = server_cpu(), t0 = now_s();
    if (fanout) {
        for (int k = 0; k < inflight; k++)
            send_message(&conns[0]);
        flush(&conns[0]);
    } else {
        for (int i = 0; i < nconns; i++) {
            for (int k = 0; k < inflight && want_more(); k++)
                send_message(&conns[i]);
            flush(&conns[i]);
        }
    }
    double end = t0 + seconds;
    while (!done) {
        poll_once(10);
        if (count == 0 && now_s() >= end)
            measuring = false;
        if (count != 0 && received >= count)
            break;
        if (count == 0 && !measuring) {
            /* let what is in flight come back (bounded) */
            uint64_t left = 0;
            for (int i = 0; i < nconns; i++)
                left += conns[i].inflight;
            if (left == 0 || now_s() > end + 5)
                break;
        }
    }
    double t1 = now_s(), cpu1 = server_cpu();
    double el = t1 - t0;
    qsort(lats, nlats, sizeof(*lats), cmp_double);
    double p50 = nlats ? lats[nlats / 2] : 0, p99 = nlats ? lats[(size_t)(nlats * 0.99)] : 0;
    if (fanout) {
        printf("fanout: %d connections, %zu-byte messages, %d in flight: %llu messages in %.2f s "
               "= %.0f msg/s, %.0f deliveries/s; latency (send to last copy) p50 %.3f ms, "
               "p99 %.3f ms\n",
               nconns, msg_size, inflight, (unsigned long long)received, el, (double)received / el,
               (double)deliveries / el, p50 * 1e3, p99 * 1e3);
    } else {
        printf("echo: %d connections, %zu-byte messages, %d in flight each: %llu round trips in "
               "%.2f s = %.0f msg/s; latency p50 %.3f ms, p99 %.3f ms\n",
               nconns, msg_size, inflight, (unsigned long long)received, el, (double)received / el,
               p50 * 1e3, p99 * 1e3);
    }
    if (server_pid > 0 && received > 0) {
        double cpu = cpu1 - cpu0;
        printf("server CPU: %.2f s = %.2f us per message", cpu, cpu * 1e6 / (double)received);
        if (fanout && deliveries > 0)
            printf(", %.3f us per delivered copy", cpu * 1e6 / (double)deliveries);
        printf("\n");
    }
    return 0;
}
