/*
 * fanout_null: the ceiling of the kernel path for bench/cluster.sh's fan-out.
 *
 * The same protocol as bench/cluster_server (GET /plaintext, WebSocket /sub?ch=N, WebSocket
 * /pub taking "FIRST COUNT CHANNELS SIZE" and "stats"), with nothing a real server does beyond
 * it: one thread, edge-triggered epoll (each socket registered once, never modified), no
 * header parsing beyond the request line, no limits, no timers. A published message is framed
 * once and appended to the output buffer of each subscriber of its channel; every buffer a
 * turn of the loop filled is written once at the end of that turn (the batching Flare's
 * fan-out gets, at no cost). What Flare's fan-out costs beyond this, on the same load, is the
 * price of being a framework; what this one costs is the kernel's.
 *
 *   fanout_null --listen HOST:PORT
 *
 * Exits 0 on SIGTERM/SIGINT.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#define MAX_CHANNELS 100000
#define MAX_MSG      4096

enum { C_HTTP, C_SUB, C_PUB };

typedef struct conn {
    int fd, kind;
    char *in;
    size_t inlen, incap;
    char *out;
    size_t outoff, outlen, outcap;
    bool queued, closed, doomed;
    struct conn *next_dirty;
    unsigned long long published; /* C_PUB */
} conn_t;

typedef struct channel {
    conn_t **subs;
    size_t n, cap;
} channel_t;

static channel_t channels[MAX_CHANNELS];
static conn_t *dirty;

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n);
    if (p == NULL)
        die("realloc");
    return p;
}

static void grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return;
    size_t c = *cap ? *cap : 4096;
    while (c < need)
        c *= 2;
    *buf = xrealloc(*buf, c);
    *cap = c;
}

static void out_append(conn_t *c, const void *p, size_t n)
{
    if (c->closed)
        return;
    if (c->outoff > 0 && c->outoff == c->outlen)
        c->outoff = c->outlen = 0;
    grow(&c->out, &c->outcap, c->outlen + n);
    memcpy(c->out + c->outlen, p, n);
    c->outlen += n;
    if (!c->queued) {
        c->queued = true;
        c->next_dirty = dirty;
        dirty = c;
    }
}

/* One write of what is owed; the rest waits for EPOLLOUT (edge-triggered). */
static void out_flush(conn_t *c)
{
    while (c->outoff < c->outlen && !c->closed) {
        ssize_t w = write(c->fd, c->out + c->outoff, c->outlen - c->outoff);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                c->closed = true;
            return;
        }
        c->outoff += (size_t)w;
    }
}

static void frame(conn_t *c, int op, const char *p, size_t n)
{
    unsigned char h[4] = { (unsigned char)(0x80 | op) };
    size_t hl = 2;
    if (n < 126) {
        h[1] = (unsigned char)n;
    } else {
        h[1] = 126;
        h[2] = (unsigned char)(n >> 8);
        h[3] = (unsigned char)n;
        hl = 4;
    }
    out_append(c, h, hl);
    out_append(c, p, n);
}

static size_t put_u64(char *out, unsigned long long v)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

static void publish(conn_t *pub, const char *cmd)
{
    if (strcmp(cmd, "stats") == 0) {
        char out[96];
        int n = snprintf(out, sizeof(out), "published %llu failed 0", pub->published);
        frame(pub, 0x1, out, (size_t)n);
        return;
    }
    unsigned long long first, count, nch, size;
    if (sscanf(cmd, "%llu %llu %llu %llu", &first, &count, &nch, &size) != 4 || nch == 0 ||
        size < 48 || size > MAX_MSG)
        return;
    char msg[MAX_MSG + 4];
    memset(msg, 'x', sizeof(msg));
    for (unsigned long long s = first; s < first + count; s++) {
        channel_t *ch = &channels[(s % nch) % MAX_CHANNELS];
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        /* frame once, copy to every subscriber */
        char *p = msg;
        size_t hl = size < 126 ? 2 : 4;
        p[0] = (char)0x81;
        if (hl == 2) {
            p[1] = (char)size;
        } else {
            p[1] = 126;
            p[2] = (char)(size >> 8);
            p[3] = (char)size;
        }
        size_t n = hl + put_u64(p + hl, s);
        p[n++] = ' ';
        n += put_u64(p + n, (unsigned long long)ts.tv_sec * 1000000000ull +
                                (unsigned long long)ts.tv_nsec);
        p[n] = ' ';
        for (size_t i = 0; i < ch->n; i++)
            out_append(ch->subs[i], p, hl + size);
        pub->published++;
    }
}

static void subscribe(conn_t *c, unsigned long ch)
{
    channel_t *x = &channels[ch % MAX_CHANNELS];
    if (x->n == x->cap) {
        x->cap = x->cap ? x->cap * 2 : 16;
        x->subs = xrealloc(x->subs, x->cap * sizeof(*x->subs));
    }
    x->subs[x->n++] = c;
    c->kind = C_SUB;
}

static void unsubscribe(conn_t *c)
{
    for (size_t k = 0; k < MAX_CHANNELS; k++) {
        channel_t *x = &channels[k];
        for (size_t i = 0; i < x->n; i++) {
            if (x->subs[i] == c) {
                x->subs[i] = x->subs[--x->n];
                return;
            }
        }
    }
}

static bool handshake(conn_t *c, const char *head, size_t len)
{
    static const char plain[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                                "Content-Length: 13\r\n\r\nHello, World!";
    if (len >= 15 && memcmp(head, "GET /plaintext ", 15) == 0) {
        out_append(c, plain, sizeof(plain) - 1);
        return true;
    }
    const char *k = memmem(head, len, "Sec-WebSocket-Key:", 18);
    if (k == NULL)
        return false;
    k += 18;
    while (*k == ' ')
        k++;
    const char *e = memchr(k, '\r', len - (size_t)(k - head));
    if (e == NULL || e - k > 64)
        return false;
    char src[128];
    int n = snprintf(src, sizeof(src), "%.*s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", (int)(e - k), k);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    if (!EVP_Digest(src, (size_t)n, md, &mdlen, EVP_sha1(), NULL))
        return false;
    char acc[64];
    EVP_EncodeBlock((unsigned char *)acc, md, (int)mdlen);
    char resp[256];
    n = snprintf(resp, sizeof(resp),
                 "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                 "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
                 acc);
    if (len >= 13 && memcmp(head, "GET /sub?ch=", 12) == 0) {
        subscribe(c, strtoul(head + 12, NULL, 10));
    } else if (len >= 9 && memcmp(head, "GET /pub ", 9) == 0) {
        c->kind = C_PUB;
    } else {
        return false;
    }
    out_append(c, resp, (size_t)n);
    return true;
}

/* Client frames (masked); only the control connection's text frames matter. */
static size_t frames(conn_t *c, const unsigned char *p, size_t len)
{
    size_t pos = 0;
    while (len - pos >= 6) {
        const unsigned char *h = p + pos;
        size_t n = h[1] & 0x7F, hl = 2;
        if (n == 126) {
            if (len - pos < 8)
                break;
            n = (size_t)h[2] << 8 | h[3];
            hl = 4;
        } else if (n == 127) {
            c->closed = true; /* never sent by the bench client */
            return len;
        }
        if ((h[1] & 0x80) == 0 || len - pos < hl + 4 + n)
            break;
        const unsigned char *mask = h + hl;
        char cmd[256];
        size_t k = n < sizeof(cmd) - 1 ? n : sizeof(cmd) - 1;
        for (size_t i = 0; i < k; i++)
            cmd[i] = (char)(h[hl + 4 + i] ^ mask[i & 3]);
        cmd[k] = '\0';
        if ((h[0] & 0x0F) == 0x8) {
            c->closed = true;
            return len;
        }
        if ((h[0] & 0x0F) == 0x1 && c->kind == C_PUB)
            publish(c, cmd);
        pos += hl + 4 + n;
    }
    return pos;
}

static void on_read(conn_t *c)
{
    for (;;) {
        grow(&c->in, &c->incap, c->inlen + 16384);
        ssize_t r = read(c->fd, c->in + c->inlen, c->incap - c->inlen);
        if (r == 0) {
            c->closed = true;
            return;
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                c->closed = true;
            break;
        }
        c->inlen += (size_t)r;
    }
    size_t pos = 0;
    while (c->kind == C_HTTP && !c->closed) {
        char *end = memmem(c->in + pos, c->inlen - pos, "\r\n\r\n", 4);
        if (end == NULL)
            break;
        size_t hl = (size_t)(end + 4 - (c->in + pos));
        if (!handshake(c, c->in + pos, hl))
            c->closed = true;
        pos += hl;
    }
    if (c->kind != C_HTTP && !c->closed)
        pos += frames(c, (const unsigned char *)c->in + pos, c->inlen - pos);
    memmove(c->in, c->in + pos, c->inlen - pos);
    c->inlen -= pos;
}

static void conn_free(conn_t *c)
{
    if (c->kind == C_SUB)
        unsubscribe(c);
    close(c->fd);
    free(c->in);
    free(c->out);
    free(c);
}

int main(int argc, char **argv)
{
    if (argc != 3 || strcmp(argv[1], "--listen") != 0) {
        fprintf(stderr, "usage: fanout_null --listen HOST:PORT\n");
        return 2;
    }
    char host[64];
    const char *colon = strrchr(argv[2], ':');
    if (colon == NULL || (size_t)(colon - argv[2]) >= sizeof(host)) {
        fprintf(stderr, "fanout_null: --listen HOST:PORT\n");
        return 2;
    }
    memcpy(host, argv[2], (size_t)(colon - argv[2]));
    host[colon - argv[2]] = '\0';
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1)) };
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "fanout_null: %s: not an IPv4 address\n", host);
        return 2;
    }
    int one = 1;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 4096) != 0)
        die("listen");
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGTERM);
    sigaddset(&ss, SIGINT);
    sigprocmask(SIG_BLOCK, &ss, NULL);
    int sfd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (sfd < 0 || ep < 0)
        die("epoll");
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &lfd };
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    ev.data.ptr = &sfd;
    epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);
    fprintf(stderr, "fanout_null: listening on %s\n", argv[2]);
    struct epoll_event evs[512];
    for (;;) {
        int n = epoll_wait(ep, evs, 512, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait");
        }
        conn_t *gone = NULL;
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == &sfd)
                return 0;
            if (evs[i].data.ptr == &lfd) {
                int fd;
                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                    conn_t *c = calloc(1, sizeof(*c));
                    if (c == NULL)
                        die("calloc");
                    c->fd = fd;
                    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
                    ev.data.ptr = c;
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
                }
                continue;
            }
            conn_t *c = evs[i].data.ptr;
            if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                on_read(c);
            if ((evs[i].events & EPOLLOUT) && !c->queued)
                out_flush(c);
        }
        /* the end of the turn: one write per connection the turn gave output */
        while (dirty != NULL) {
            conn_t *c = dirty;
            dirty = c->next_dirty;
            c->queued = false;
            out_flush(c);
        }
        for (int i = 0; i < n; i++) {
            conn_t *c = evs[i].data.ptr;
            if (c != (void *)&sfd && c != (void *)&lfd && c->closed && !c->doomed) {
                c->doomed = true; /* once on the list */
                c->next_dirty = gone;
                gone = c;
            }
        }
        while (gone != NULL) {
            conn_t *c = gone;
            gone = c->next_dirty;
            conn_free(c);
        }
    }
}
