/* The load client of bench/cluster.sh: channel fan-out over WebSocket to
 * many subscribers spread over one or more instances of
 * bench/cluster_server.c, publishing through those instances.
 *
 *   cluster_client --ports P1[,P2...] [--subs 1000] [--channels 1] [--size 64]
 *                  [--rate MSGS_PER_S | --window COPIES] [--warmup 1] [--seconds 5]
 *                  [--server-pids PID[,PID...]] [--redis-pid PID]
 *
 * Subscriber i opens /sub?ch=(i % CHANNELS) on instance ((i / CHANNELS) %
 * INSTANCES): every channel has subscribers on every instance (with 1
 * channel, subscribers alternate). One control connection per instance
 * (/pub) publishes: the client numbers the messages itself and hands each
 * batch of sequence numbers to the instances in turn, so with two
 * instances each publishes half.
 *
 * --rate R: R messages per second in all, paced by the clock (batches of at
 * most 32 sent every millisecond or so). --window W (the default, 20000):
 * as fast as deliveries come back, keeping at most W copies (messages times
 * their channel's subscribers) published but not yet received.
 *
 * Every copy is checked: the right channel; per subscriber and publishing
 * instance, increasing sequence numbers (the channel layer keeps the order
 * of one publishing thread); each message reaching every subscriber of its
 * channel exactly once (after the run the client waits for what is in
 * flight, then counts what never came). Latency: the client's
 * CLOCK_MONOTONIC at receipt minus the publisher's, written in the message
 * by the server just before it published (processes on one host share that
 * clock), for the copies received during the measured seconds.
 * --server-pids: the servers' CPU time (utime+stime, /proc/PID/stat) and
 * write-type syscalls (/proc/PID/io syscw) over the measured seconds, per
 * copy; --redis-pid: Redis's CPU time per published message.
 *
 * Prints one line "RESULT key=value ..." (see the end of main). Exit 1 when
 * a connection fails or closes, or on a wrong, duplicated, reordered or
 * missing copy.
 *
 * Single-threaded epoll; frames masked as RFC 6455 requires. Standalone (no
 * libflare). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_INST  8
#define BATCH_MAX 32
#define HIST_US   1000000 /* latency histogram: 1 µs buckets up to 1 s */

typedef struct conn {
    int fd;
    int idx;
    int inst;
    unsigned ch;
    bool ctl;
    bool open;
    char *in;
    size_t inlen, incap;
    char *out;
    size_t outlen, outcap;
    uint8_t key[4];
    uint64_t last[MAX_INST]; /* per publishing instance: last sequence + 1 */
} conn_t;

static const char *host = "127.0.0.1";
static int ports[MAX_INST], ninst;
static int nsubs = 1000;
static unsigned nchannels = 1;
static unsigned msg_size = 64;
static double rate;             /* messages/s; 0: window mode */
static uint64_t window = 20000; /* copies in flight (window mode) */
static double warmup_s = 1, measure_s = 5;
static int server_pids[MAX_INST], nserver_pids, redis_pid;

static int epfd;
static conn_t *subs, ctls[MAX_INST];
static unsigned *per_channel; /* subscribers of each channel */

/* messages */
static uint32_t *remain; /* copies not yet received, by sequence */
static uint8_t *pub_of;  /* the publishing instance, by sequence */
static uint64_t cap_msgs, issued, outstanding;
static int next_pub;

/* results */
static uint64_t copies, meas_copies, wrong, dups, reorders;
static bool measuring;
static uint32_t *hist;
static uint64_t hist_over, hist_n, lat_max_ns;
static char stats_reply[MAX_INST][96];

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static void fail(const char *fmt, const char *a, long b)
{
    fprintf(stderr, "cluster_client: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
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
    size_t off = 0;
    while (off < c->outlen) {
        ssize_t w = write(c->fd, c->out + off, c->outlen - off);
        if (w < 0) {
            if (errno == EAGAIN)
                break;
            die("write");
        }
        off += (size_t)w;
    }
    memmove(c->out, c->out + off, c->outlen - off);
    c->outlen -= off;
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
    } else {
        h[1] = 0x80 | 126;
        h[2] = (uint8_t)(n >> 8);
        h[3] = (uint8_t)n;
        hl = 4;
    }
    memcpy(h + hl, c->key, 4);
    hl += 4;
    for (size_t i = 0; i < n; i++)
        h[hl + i] = (uint8_t)p[i] ^ c->key[i & 3];
    c->outlen += hl + n;
}

static void grow_msgs(uint64_t need)
{
    if (need <= cap_msgs)
        return;
    uint64_t c = cap_msgs != 0 ? cap_msgs : 1 << 16;
    while (c < need)
        c *= 2;
    remain = realloc(remain, c * sizeof(*remain));
    pub_of = realloc(pub_of, c);
    if (remain == NULL || pub_of == NULL)
        die("realloc");
    cap_msgs = c;
}

/* Publishes the next n messages through the next instance. */
static void publish(uint64_t n)
{
    grow_msgs(issued + n);
    for (uint64_t s = issued; s < issued + n; s++) {
        remain[s] = per_channel[s % nchannels];
        pub_of[s] = (uint8_t)next_pub;
        outstanding += remain[s];
    }
    char cmd[96];
    int len = snprintf(cmd, sizeof(cmd), "%llu %llu %u %u", (unsigned long long)issued,
                       (unsigned long long)n, nchannels, msg_size);
    send_frame(&ctls[next_pub], 0x1, cmd, (size_t)len);
    flush(&ctls[next_pub]);
    issued += n;
    next_pub = (next_pub + 1) % ninst;
}

static bool parse_u64(const char **p, const char *end, uint64_t *out)
{
    uint64_t v = 0;
    const char *s = *p;
    while (s < end && *s >= '0' && *s <= '9')
        v = v * 10 + (uint64_t)(*s++ - '0');
    if (s == *p || s == end || *s != ' ')
        return false;
    *p = s + 1;
    *out = v;
    return true;
}

static void on_copy(conn_t *c, const char *p, size_t n, uint64_t t)
{
    const char *end = p + n;
    uint64_t seq, ts;
    if (!parse_u64(&p, end, &seq) || !parse_u64(&p, end, &ts) || seq >= issued ||
        seq % nchannels != c->ch) {
        wrong++;
        return;
    }
    copies++;
    int pi = pub_of[seq];
    if (seq + 1 <= c->last[pi])
        reorders++; /* an older message of the same publisher after a newer one */
    else
        c->last[pi] = seq + 1;
    if (remain[seq] == 0) {
        dups++;
        return;
    }
    remain[seq]--;
    outstanding--;
    if (measuring) {
        meas_copies++;
        uint64_t l = t > ts ? t - ts : 0;
        if (l > lat_max_ns)
            lat_max_ns = l;
        if (l / 1000 < HIST_US)
            hist[l / 1000]++;
        else
            hist_over++;
        hist_n++;
    }
}

static void on_frame(conn_t *c, uint8_t op, const char *p, size_t n, uint64_t t)
{
    if (op == 0x9) {
        send_frame(c, 0xA, p, n);
        flush(c);
        return;
    }
    if (op == 0x8)
        fail("%s %ld closed by the server", c->ctl ? "control connection" : "subscriber",
             (long)c->idx);
    if (op != 0x1)
        return;
    if (c->ctl) {
        size_t k = n < sizeof(stats_reply[0]) - 1 ? n : sizeof(stats_reply[0]) - 1;
        memcpy(stats_reply[c->idx], p, k);
        stats_reply[c->idx][k] = '\0';
        return;
    }
    on_copy(c, p, n, t);
}

static void on_read(conn_t *c)
{
    for (;;) {
        grow(&c->in, &c->incap, c->inlen + 65536);
        ssize_t r = read(c->fd, c->in + c->inlen, c->incap - c->inlen);
        if (r == 0)
            fail("%s %ld: EOF", c->ctl ? "control connection" : "subscriber", (long)c->idx);
        if (r < 0) {
            if (errno == EAGAIN)
                break;
            die("read");
        }
        c->inlen += (size_t)r;
        if ((size_t)r < 65536)
            break;
    }
    uint64_t t = now_ns();
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
        on_frame(c, h[0] & 0x0F, c->in + pos + hl, n, t);
        pos += hl + n;
    }
    memmove(c->in, c->in + pos, c->inlen - pos);
    c->inlen -= pos;
}

static void open_conn(conn_t *c, int inst, const char *target)
{
    c->inst = inst;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (c->fd < 0)
        die("socket");
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)ports[inst]) };
    inet_pton(AF_INET, host, &sa.sin_addr);
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS)
        die("connect");
    for (int k = 0; k < 4; k++)
        c->key[k] = (uint8_t)rand();
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                     "Sec-WebSocket-Version: 13\r\n\r\n",
                     target, host, ports[inst]);
    grow(&c->out, &c->outcap, (size_t)n);
    memcpy(c->out, req, (size_t)n);
    c->outlen = (size_t)n;
    struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.ptr = c };
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0)
        die("epoll_ctl");
}

static void poll_once(int timeout_ms)
{
    struct epoll_event evs[512];
    int n = epoll_wait(epfd, evs, 512, timeout_ms);
    if (n < 0 && errno != EINTR)
        die("epoll_wait");
    for (int i = 0; i < n; i++) {
        conn_t *c = evs[i].data.ptr;
        if (evs[i].events & EPOLLOUT)
            flush(c);
        if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
            on_read(c);
    }
}

/* utime + stime of process pid, in seconds (0 when unreadable). */
static double proc_cpu(int pid)
{
    if (pid <= 0)
        return 0;
    char p[64], buf[1024];
    snprintf(p, sizeof(p), "/proc/%d/stat", pid);
    FILE *f = fopen(p, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *s = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (s == NULL ||
        sscanf(s + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* write-type syscalls of process pid so far (/proc/PID/io syscw: write,
 * writev), 0 when unreadable. */
static unsigned long long proc_writes(int pid)
{
    char p[64], line[128];
    snprintf(p, sizeof(p), "/proc/%d/io", pid);
    FILE *f = fopen(p, "r");
    unsigned long long v = 0;
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "syscw: %llu", &v) == 1)
            break;
    }
    fclose(f);
    return v;
}

static unsigned long long servers_writes(void)
{
    unsigned long long t = 0;
    for (int i = 0; i < nserver_pids; i++)
        t += proc_writes(server_pids[i]);
    return t;
}

static double servers_cpu(void)
{
    double t = 0;
    for (int i = 0; i < nserver_pids; i++)
        t += proc_cpu(server_pids[i]);
    return t;
}

static double self_cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static int parse_list(const char *v, int *out)
{
    int n = 0;
    for (const char *p = v; *p != '\0' && n < MAX_INST;) {
        out[n++] = atoi(p);
        p = strchr(p, ',');
        if (p == NULL)
            break;
        p++;
    }
    return n;
}

static void usage(void)
{
    fprintf(stderr, "usage: cluster_client --ports P1[,P2...] [--subs N] [--channels C] "
                    "[--size B] [--rate MSGS_PER_S | --window COPIES] [--warmup S] "
                    "[--seconds S] [--server-pids PID,...] [--redis-pid PID]\n");
    exit(2);
}

/* Publishes what the mode allows now (rate: what the clock says is due;
 * window: while the copies in flight stay under the window). */
static void pace(uint64_t t_start)
{
    if (rate > 0) {
        double el = (double)(now_ns() - t_start) * 1e-9;
        uint64_t due = (uint64_t)(rate * el);
        while (issued < due && outstanding < 4000000) {
            uint64_t n = due - issued < BATCH_MAX ? due - issued : BATCH_MAX;
            publish(n);
        }
        return;
    }
    for (;;) {
        uint64_t n = 0, add = 0;
        while (n < BATCH_MAX) {
            uint64_t k = per_channel[(issued + n) % nchannels];
            if (outstanding + add + k > window)
                break;
            add += k;
            n++;
        }
        if (n == 0)
            return;
        publish(n);
    }
}

static uint64_t percentile(double q)
{
    uint64_t want = (uint64_t)((double)hist_n * q), acc = 0;
    if (want >= hist_n && hist_n > 0)
        want = hist_n - 1;
    for (uint64_t i = 0; i < HIST_US; i++) {
        acc += hist[i];
        if (acc > want)
            return i;
    }
    return lat_max_ns / 1000;
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (strcmp(k, "--host") == 0)
            host = v;
        else if (strcmp(k, "--ports") == 0)
            ninst = parse_list(v, ports);
        else if (strcmp(k, "--subs") == 0)
            nsubs = atoi(v);
        else if (strcmp(k, "--channels") == 0)
            nchannels = (unsigned)atoi(v);
        else if (strcmp(k, "--size") == 0)
            msg_size = (unsigned)atoi(v);
        else if (strcmp(k, "--rate") == 0)
            rate = atof(v);
        else if (strcmp(k, "--window") == 0)
            window = (uint64_t)atoll(v);
        else if (strcmp(k, "--warmup") == 0)
            warmup_s = atof(v);
        else if (strcmp(k, "--seconds") == 0)
            measure_s = atof(v);
        else if (strcmp(k, "--server-pids") == 0)
            nserver_pids = parse_list(v, server_pids);
        else if (strcmp(k, "--redis-pid") == 0)
            redis_pid = atoi(v);
        else
            usage();
    }
    if (ninst < 1 || nsubs < 1 || nchannels < 1 || nchannels > (unsigned)nsubs || msg_size < 48 ||
        msg_size > 4096 || measure_s <= 0 || warmup_s < 0 || (rate <= 0 && window < 1))
        usage();
    subs = calloc((size_t)nsubs, sizeof(*subs));
    per_channel = calloc(nchannels, sizeof(*per_channel));
    hist = calloc(HIST_US, sizeof(*hist));
    epfd = epoll_create1(0);
    if (subs == NULL || per_channel == NULL || hist == NULL || epfd < 0)
        die("setup");
    srand((unsigned)getpid());
    for (int i = 0; i < nsubs; i++) {
        conn_t *c = &subs[i];
        c->idx = i;
        c->ch = (unsigned)i % nchannels;
        per_channel[c->ch]++;
        char target[64];
        snprintf(target, sizeof(target), "/sub?ch=%u", c->ch);
        open_conn(c, (int)(((unsigned)i / nchannels) % (unsigned)ninst), target);
    }
    for (int i = 0; i < ninst; i++) {
        ctls[i].idx = i;
        ctls[i].ctl = true;
        open_conn(&ctls[i], i, "/pub");
    }
    uint64_t t = now_ns();
    for (;;) {
        int open = 0;
        for (int i = 0; i < nsubs; i++)
            open += subs[i].open;
        for (int i = 0; i < ninst; i++)
            open += ctls[i].open;
        if (open == nsubs + ninst)
            break;
        if (now_ns() - t > 30000000000ull) {
            fprintf(stderr, "cluster_client: only %d of %d connections opened\n", open,
                    nsubs + ninst);
            return 1;
        }
        poll_once(100);
    }
    /* a moment for the joins to settle (a cluster reads each new channel's
     * position from Redis first) */
    for (uint64_t q = now_ns(); now_ns() - q < 300000000ull;)
        poll_once(50);

    int tick = rate > 0 ? 1 : 10;
    uint64_t t_start = now_ns();
    uint64_t t_meas = t_start + (uint64_t)(warmup_s * 1e9);
    uint64_t t_end = t_meas + (uint64_t)(measure_s * 1e9);
    double cpu0 = 0, rcpu0 = 0, ccpu0 = 0;
    unsigned long long wr0 = 0;
    uint64_t issued0 = 0;
    for (;;) {
        pace(t_start);
        poll_once(tick);
        uint64_t now = now_ns();
        if (!measuring && now >= t_meas && now < t_end) {
            measuring = true;
            cpu0 = servers_cpu();
            wr0 = servers_writes();
            rcpu0 = proc_cpu(redis_pid);
            ccpu0 = self_cpu();
            issued0 = issued;
            t_meas = now;
        }
        if (now >= t_end)
            break;
    }
    uint64_t t1 = now_ns();
    unsigned long long wr1 = servers_writes();
    double cpu1 = servers_cpu(), rcpu1 = proc_cpu(redis_pid), ccpu1 = self_cpu();
    uint64_t issued1 = issued;
    measuring = false;
    /* what is in flight, then count what never came */
    uint64_t last_progress = now_ns(), seen = copies;
    while (outstanding > 0 && now_ns() - last_progress < 3000000000ull) {
        poll_once(10);
        if (copies != seen) {
            seen = copies;
            last_progress = now_ns();
        }
    }
    for (int i = 0; i < ninst; i++) {
        send_frame(&ctls[i], 0x1, "stats", 5);
        flush(&ctls[i]);
    }
    for (uint64_t q = now_ns(); now_ns() - q < 2000000000ull;) {
        int got = 0;
        for (int i = 0; i < ninst; i++)
            got += stats_reply[i][0] != '\0';
        if (got == ninst)
            break;
        poll_once(10);
    }
    uint64_t lost = outstanding, missing_msgs = 0;
    for (uint64_t s = 0; s < issued; s++)
        missing_msgs += remain[s] != 0;
    double el = (double)(t1 - t_meas) * 1e-9;
    double scpu = cpu1 - cpu0, rcpu = rcpu1 - rcpu0, ccpu = ccpu1 - ccpu0;
    uint64_t published_meas = issued1 - issued0;
    unsigned long long srv_pub = 0, srv_fail = 0;
    for (int i = 0; i < ninst; i++) {
        unsigned long long a = 0, b = 0;
        if (sscanf(stats_reply[i], "published %llu failed %llu", &a, &b) == 2) {
            srv_pub += a;
            srv_fail += b;
        }
    }
    printf("RESULT instances=%d subs=%d channels=%u size=%u mode=%s rate=%.0f window=%llu "
           "seconds=%.3f published=%llu msgs_per_s=%.1f copies=%llu copies_per_s=%.1f "
           "p50_us=%llu p99_us=%llu p999_us=%llu max_us=%llu server_cpu_s=%.3f "
           "server_cpu_pct=%.1f us_per_copy=%.4f writes_per_copy=%.3f redis_cpu_s=%.3f "
           "redis_us_per_msg=%.3f "
           "client_cpu_pct=%.1f total_published=%llu server_published=%llu server_failed=%llu "
           "lost_copies=%llu lost_msgs=%llu dups=%llu reorders=%llu wrong=%llu\n",
           ninst, nsubs, nchannels, msg_size, rate > 0 ? "rate" : "max", rate,
           (unsigned long long)window, el, (unsigned long long)published_meas,
           (double)published_meas / el, (unsigned long long)meas_copies, (double)meas_copies / el,
           (unsigned long long)percentile(0.50), (unsigned long long)percentile(0.99),
           (unsigned long long)percentile(0.999), (unsigned long long)(lat_max_ns / 1000), scpu,
           scpu * 100 / el, meas_copies > 0 ? scpu * 1e6 / (double)meas_copies : 0,
           meas_copies > 0 ? (double)(wr1 - wr0) / (double)meas_copies : 0, rcpu,
           published_meas > 0 ? rcpu * 1e6 / (double)published_meas : 0, ccpu * 100 / el,
           (unsigned long long)issued, srv_pub, srv_fail, (unsigned long long)lost,
           (unsigned long long)missing_msgs, (unsigned long long)dups, (unsigned long long)reorders,
           (unsigned long long)wrong);
    bool bad =
        lost != 0 || dups != 0 || reorders != 0 || wrong != 0 || srv_fail != 0 || srv_pub != issued;
    if (bad)
        fprintf(stderr, "cluster_client: deliveries were not exact (see the RESULT line)\n");
    return bad ? 1 : 0;
}
