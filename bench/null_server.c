/*
 * null_server: the ceiling of the kernel path.
 *
 * A single-threaded, level-triggered epoll loop that answers every request with a canned
 * response. It does no HTTP parsing at all: each read() of up to 64 KiB is scanned for
 * "\r\n\r\n" and that many copies of the canned response go out in a single write(). What
 * any real server costs beyond this is the price of being a real server.
 *
 *   null_server --listen HOST:PORT [--io epoll|uring] [--content-type TYPE]
 *               [--body TEXT | --body-file PATH]
 *
 * --io uring (built when liburing is there: bench/CMakeLists.txt) answers the same way on the
 * io_uring design a completion backend would use, the ceiling for one: multishot accept;
 * multishot receive into a ring of provided buffers (set up by hand: Debian's liburing 2.3
 * has no io_uring_setup_buf_ring), each buffer handed back as soon as it is scanned; one send
 * per connection per loop turn from the canned run (never more than one in flight: the next
 * goes when it completes); one io_uring_submit_and_wait per turn; SINGLE_ISSUER and
 * DEFER_TASKRUN where the kernel has them, the ring's fd registered. Connections keep being
 * read while output is owed (a client that stops reading holds only its own send). The
 * signalfd is read through the ring too.
 *
 * The canned response is "200 OK" with Content-Type TYPE (default text/plain) and the body
 * TEXT or the contents of PATH (default "Hello, World!"; a file may hold any bytes): bench/run.sh
 * starts one per body it needs (/plaintext, /json, /users/123, the 1 KiB echo, the 4 KiB and
 * 1 MiB static files), so every scenario has its own ceiling. A request body is never parsed
 * either: it just must not contain "\r\n\r\n".
 *
 * Exits 0 on SIGTERM/SIGINT (through a signalfd, so the loop never races a flag).
 *
 * The only state kept per connection is what correctness needs and nothing more:
 *   - how much of "\r\n\r\n" matched at the end of the previous read (a terminator split
 *     across two reads is still counted exactly once);
 *   - how many response bytes are still owed after a short write. Because the output is
 *     always whole copies of one canned response, the owed bytes are a suffix of a long run
 *     of copies: a count plus a phase into the response is enough. While bytes are owed the
 *     connection waits for EPOLLOUT and stops reading (back-pressure, like a real server).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* The canned response: built once at startup from --body/--body-file and --content-type
 * (default: text/plain "Hello, World!"). */
static char *response;
static size_t response_len;
#define READ_BUF_SIZE (64 * 1024)
#define MAX_EVENTS    256

struct conn {
    size_t owed;     /* response bytes still to write */
    uint8_t matched; /* bytes of "\r\n\r\n" matched at the end of the last read */
    uint8_t open;
    /* --io uring only */
    uint8_t recving; /* a multishot receive is armed */
    uint8_t sending; /* a send is in flight */
    uint8_t closing; /* close once nothing is in flight */
    uint8_t dirty;   /* on the list of connections with output to queue */
};

static struct conn *conns;
static size_t conns_cap;

/* out: the response repeated out_copies times (+1 spare copy so any phase can start anywhere). */
static char *out;
static size_t out_copies;

/* First size of `out`: 64 copies, or as many as fit in 4 MiB when the response is large (the
 * 1 MiB body), at least one. It grows (doubling) when a read brings more requests. */
static size_t out_initial_copies(void)
{
    size_t n = ((size_t)4 << 20) / response_len;
    return n < 1 ? 1 : n > 64 ? 64 : n;
}

static char readbuf[READ_BUF_SIZE];

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static struct conn *conn_get(int fd)
{
    if ((size_t)fd >= conns_cap) {
        size_t cap = conns_cap ? conns_cap : 1024;
        while (cap <= (size_t)fd)
            cap *= 2;
        struct conn *n = realloc(conns, cap * sizeof *n);
        if (!n)
            die("realloc");
        memset(n + conns_cap, 0, (cap - conns_cap) * sizeof *n);
        conns = n;
        conns_cap = cap;
    }
    return &conns[fd];
}

/* Make sure `out` holds at least `copies` (+1) back-to-back responses. */
static void out_reserve(size_t copies)
{
    if (copies <= out_copies)
        return;
    size_t want = out_copies ? out_copies : out_initial_copies();
    while (want < copies)
        want *= 2;
    char *n = realloc(out, (want + 1) * response_len);
    if (!n)
        die("realloc");
    for (size_t i = out_copies ? out_copies + 1 : 0; i < want + 1; i++)
        memcpy(n + i * response_len, response, response_len);
    out = n;
    out_copies = want;
}

/* Count "\r\n\r\n" in buf[0..len), continuing a partial match of *matched bytes. */
static size_t count_requests(const char *buf, size_t len, uint8_t *matched)
{
    static const char term[4] = { '\r', '\n', '\r', '\n' };
    size_t n = 0, pos = 0;

    /* Finish a terminator that started in the previous read. */
    if (*matched) {
        size_t m = *matched;
        while (m < 4 && pos < len && buf[pos] == term[m]) {
            m++;
            pos++;
        }
        if (m == 4) {
            n++;
            *matched = 0;
        } else if (pos == len) {
            *matched = (uint8_t)m;
            return 0;
        } else {
            *matched = 0;
            pos = 0; /* mismatch: rescan from the start of this buffer */
        }
    }

    for (;;) {
        const char *hit = memmem(buf + pos, len - pos, term, 4);
        if (!hit)
            break;
        n++;
        pos = (size_t)(hit - buf) + 4;
    }

    /* Longest suffix (not overlapping a counted terminator) that is a prefix of term. */
    size_t tail = len - pos < 3 ? len - pos : 3;
    for (size_t k = tail; k > 0; k--) {
        if (memcmp(buf + len - k, term, k) == 0) {
            *matched = (uint8_t)k;
            return n;
        }
    }
    *matched = 0;
    return n;
}

static void conn_close(int ep, int fd)
{
    struct conn *c = conn_get(fd);
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
    memset(c, 0, sizeof *c);
}

/* Write what is owed. Returns 0 if everything went out, 1 if the socket is full, -1 on error. */
static int conn_flush(int fd, struct conn *c)
{
    while (c->owed) {
        /* Owed bytes end on a response boundary, so they start at this phase. */
        size_t phase = (response_len - c->owed % response_len) % response_len;
        size_t avail = out_copies * response_len; /* from `phase` there is >= this much */
        size_t len = c->owed < avail ? c->owed : avail;
        ssize_t w = write(fd, out + phase, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 1;
            return -1;
        }
        c->owed -= (size_t)w;
    }
    return 0;
}

static void set_events(int ep, int fd, uint32_t events)
{
    struct epoll_event ev = { .events = events, .data.fd = fd };
    if (epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev) < 0)
        die("epoll_ctl MOD");
}

static void on_readable(int ep, int fd)
{
    struct conn *c = conn_get(fd);
    ssize_t r = read(fd, readbuf, sizeof readbuf);
    if (r <= 0) {
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        conn_close(ep, fd);
        return;
    }
    size_t n = count_requests(readbuf, (size_t)r, &c->matched);
    if (!n)
        return;
    out_reserve(n);
    c->owed = n * response_len;
    int rc = conn_flush(fd, c);
    if (rc < 0)
        conn_close(ep, fd);
    else if (rc > 0)
        set_events(ep, fd, EPOLLOUT);
}

static void on_writable(int ep, int fd)
{
    struct conn *c = conn_get(fd);
    int rc = conn_flush(fd, c);
    if (rc < 0)
        conn_close(ep, fd);
    else if (rc == 0)
        set_events(ep, fd, EPOLLIN);
}

static void on_accept(int ep, int lfd)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE)
                perror("accept4");
            return; /* EAGAIN, or out of descriptors: level-triggered, we will be back */
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = conn_get(fd);
        memset(c, 0, sizeof *c);
        c->open = 1;
        struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
            perror("epoll_ctl ADD");
            close(fd);
            c->open = 0;
        }
    }
}

#ifdef NULL_URING
#include <liburing.h>
#include <sys/mman.h>

/* ---- --io uring ---- */

enum { U_ACCEPT = 1, U_RECV, U_SEND, U_SIGNAL };
#define U_DATA(type, fd) (((uint64_t)(type) << 32) | (uint32_t)(fd))
#define U_ENTRIES        4096
#define U_NBUFS          2048 /* provided buffers (a power of two) */
#define U_BUF_SIZE       4096
#define U_BGID           1

static struct io_uring ring;
static struct io_uring_buf_ring *br;
static char *bufbase;
static int *dirty;
static size_t ndirty, dirty_cap;

static struct io_uring_sqe *u_sqe(void)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    if (!sqe) {
        io_uring_submit(&ring);
        sqe = io_uring_get_sqe(&ring);
        if (!sqe)
            die("io_uring_get_sqe");
    }
    return sqe;
}

static void u_arm_accept(int lfd)
{
    struct io_uring_sqe *sqe = u_sqe();
    io_uring_prep_multishot_accept(sqe, lfd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(sqe, U_DATA(U_ACCEPT, lfd));
}

static void u_arm_recv(int fd, struct conn *c)
{
    struct io_uring_sqe *sqe = u_sqe();
    io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = U_BGID;
    io_uring_sqe_set_data64(sqe, U_DATA(U_RECV, fd));
    c->recving = 1;
}

static void u_send(int fd, struct conn *c)
{
    size_t phase = (response_len - c->owed % response_len) % response_len;
    size_t avail = out_copies * response_len;
    size_t len = c->owed < avail ? c->owed : avail;
    struct io_uring_sqe *sqe = u_sqe();
    io_uring_prep_send(sqe, fd, out + phase, len, MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, U_DATA(U_SEND, fd));
    c->sending = 1;
}

static void u_mark_dirty(int fd, struct conn *c)
{
    if (c->dirty)
        return;
    if (ndirty == dirty_cap) {
        dirty_cap = dirty_cap ? dirty_cap * 2 : 1024;
        dirty = realloc(dirty, dirty_cap * sizeof *dirty);
        if (!dirty)
            die("realloc");
    }
    dirty[ndirty++] = fd;
    c->dirty = 1;
}

/* Closes once neither the receive nor a send is in flight (a closed fd's
 * multishot receive would keep the socket alive: shutdown ends it first). */
static void u_close(int fd, struct conn *c)
{
    if (c->recving || c->sending) {
        if (!c->closing)
            shutdown(fd, SHUT_RDWR);
        c->closing = 1;
        return;
    }
    close(fd);
    memset(c, 0, sizeof *c);
}

static void u_setup_buffers(void)
{
    size_t ring_sz = U_NBUFS * sizeof(struct io_uring_buf);
    br = mmap(NULL, ring_sz, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    if (br == MAP_FAILED)
        die("mmap");
    struct io_uring_buf_reg reg = { .ring_addr = (unsigned long)br,
                                    .ring_entries = U_NBUFS,
                                    .bgid = U_BGID };
    int rc = io_uring_register_buf_ring(&ring, &reg, 0);
    if (rc < 0) {
        errno = -rc;
        die("io_uring_register_buf_ring");
    }
    io_uring_buf_ring_init(br);
    bufbase = malloc((size_t)U_NBUFS * U_BUF_SIZE);
    if (!bufbase)
        die("malloc");
    int mask = io_uring_buf_ring_mask(U_NBUFS);
    for (int i = 0; i < U_NBUFS; i++)
        io_uring_buf_ring_add(br, bufbase + (size_t)i * U_BUF_SIZE, U_BUF_SIZE, (unsigned short)i,
                              mask, i);
    io_uring_buf_ring_advance(br, U_NBUFS);
}

static void u_on_recv(int fd, struct io_uring_cqe *cqe)
{
    struct conn *c = conn_get(fd);
    int res = cqe->res;
    if (res > 0 && (cqe->flags & IORING_CQE_F_BUFFER)) {
        unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
        char *buf = bufbase + (size_t)bid * U_BUF_SIZE;
        size_t n = c->closing ? 0 : count_requests(buf, (size_t)res, &c->matched);
        io_uring_buf_ring_add(br, buf, U_BUF_SIZE, (unsigned short)bid,
                              io_uring_buf_ring_mask(U_NBUFS), 0);
        io_uring_buf_ring_advance(br, 1);
        if (n) {
            c->owed += n * response_len;
            u_mark_dirty(fd, c);
        }
    }
    if (!(cqe->flags & IORING_CQE_F_MORE)) {
        c->recving = 0;
        if (c->closing)
            u_close(fd, c);
        else if (res > 0 || res == -ENOBUFS)
            u_arm_recv(fd, c); /* the multishot ended early (no buffer, or the kernel's choice) */
        else
            u_close(fd, c); /* EOF or an error */
    }
}

static void u_on_send(int fd, int res)
{
    struct conn *c = conn_get(fd);
    c->sending = 0;
    if (res < 0) {
        c->owed = 0;
        u_close(fd, c);
        return;
    }
    c->owed -= (size_t)res;
    if (c->closing)
        u_close(fd, c);
    else if (c->owed)
        u_mark_dirty(fd, c);
}

static int run_uring(int lfd, int sfd)
{
    struct io_uring_params p = { .flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN };
    int rc = io_uring_queue_init_params(U_ENTRIES, &ring, &p);
    if (rc == -EINVAL) { /* an older kernel: without them */
        p = (struct io_uring_params){ 0 };
        rc = io_uring_queue_init_params(U_ENTRIES, &ring, &p);
    }
    if (rc < 0) {
        errno = -rc;
        die("io_uring_queue_init");
    }
    io_uring_register_ring_fd(&ring); /* fewer fd lookups per enter; optional */
    u_setup_buffers();
    out_reserve(out_initial_copies()); /* never grown while sends point into it */

    u_arm_accept(lfd);
    struct signalfd_siginfo si;
    struct io_uring_sqe *sqe = u_sqe();
    io_uring_prep_read(sqe, sfd, &si, sizeof si, 0);
    io_uring_sqe_set_data64(sqe, U_DATA(U_SIGNAL, sfd));

    for (;;) {
        for (size_t i = 0; i < ndirty; i++) {
            struct conn *c = conn_get(dirty[i]);
            c->dirty = 0;
            if (c->owed && !c->sending && !c->closing)
                u_send(dirty[i], c);
        }
        ndirty = 0;
        rc = io_uring_submit_and_wait(&ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            errno = -rc;
            die("io_uring_submit_and_wait");
        }
        unsigned head, seen = 0;
        struct io_uring_cqe *cqe;
        io_uring_for_each_cqe(&ring, head, cqe)
        {
            seen++;
            uint64_t ud = io_uring_cqe_get_data64(cqe);
            int type = (int)(ud >> 32), fd = (int)(uint32_t)ud;
            switch (type) {
            case U_ACCEPT:
                if (cqe->res >= 0) {
                    int one = 1;
                    setsockopt(cqe->res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct conn *c = conn_get(cqe->res);
                    memset(c, 0, sizeof *c);
                    c->open = 1;
                    u_arm_recv(cqe->res, c);
                }
                if (!(cqe->flags & IORING_CQE_F_MORE))
                    u_arm_accept(lfd);
                break;
            case U_RECV:
                u_on_recv(fd, cqe);
                break;
            case U_SEND:
                u_on_send(fd, cqe->res);
                break;
            case U_SIGNAL:
                io_uring_cq_advance(&ring, seen);
                for (size_t k = 0; k < conns_cap; k++)
                    if (conns[k].open)
                        close((int)k);
                io_uring_queue_exit(&ring);
                close(lfd);
                free(conns);
                free(out);
                free(response);
                free(bufbase);
                free(dirty);
                return 0;
            }
        }
        io_uring_cq_advance(&ring, seen);
    }
}
#endif

static int listen_on(const char *spec)
{
    char host[256];
    const char *colon = strrchr(spec, ':');
    if (!colon || colon == spec || !colon[1] || (size_t)(colon - spec) >= sizeof host) {
        fprintf(stderr, "null_server: --listen wants HOST:PORT, got '%s'\n", spec);
        exit(2);
    }
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    char *h = host;
    if (h[0] == '[' && h[strlen(h) - 1] == ']') { /* [::1]:8080 */
        h[strlen(h) - 1] = '\0';
        h++;
    }

    struct addrinfo hints = { .ai_family = AF_UNSPEC,
                              .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *res;
    int gai = getaddrinfo(h, colon + 1, &hints, &res);
    if (gai) {
        fprintf(stderr, "null_server: %s: %s\n", spec, gai_strerror(gai));
        exit(2);
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        fprintf(stderr, "null_server: cannot listen on %s: %s\n", spec, strerror(errno));
        exit(1);
    }
    return fd;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: null_server --listen HOST:PORT [--io epoll|uring] [--content-type TYPE]"
               " [--body TEXT | --body-file PATH]\n");
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die(path);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        die("malloc");
    for (;;) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap) {
            if (ferror(f))
                die(path);
            break;
        }
        cap *= 2;
        char *nb = realloc(buf, cap);
        if (!nb)
            die("realloc");
        buf = nb;
    }
    fclose(f);
    *len = n;
    return buf;
}

static void build_response(const char *ctype, const char *body, size_t body_len)
{
    static const char fmt[] = "HTTP/1.1 200 OK\r\n"
                              "Server: null\r\n"
                              "Date: Mon, 30 Nov 2026 05:00:00 GMT\r\n"
                              "Content-Type: %s\r\n"
                              "Content-Length: %zu\r\n"
                              "\r\n";
    int head = snprintf(NULL, 0, fmt, ctype, body_len);
    if (head < 0)
        die("snprintf");
    response_len = (size_t)head + body_len;
    response = malloc(response_len + 1);
    if (!response)
        die("malloc");
    snprintf(response, (size_t)head + 1, fmt, ctype, body_len);
    memcpy(response + head, body, body_len);
}

int main(int argc, char **argv)
{
    const char *listen_spec = NULL;
    const char *ctype = "text/plain";
    const char *body_text = "Hello, World!";
    const char *body_path = NULL;
    const char *io = "epoll";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--listen") && i + 1 < argc)
            listen_spec = argv[++i];
        else if (!strncmp(argv[i], "--listen=", 9))
            listen_spec = argv[i] + 9;
        else if (!strcmp(argv[i], "--io") && i + 1 < argc)
            io = argv[++i];
        else if (!strcmp(argv[i], "--content-type") && i + 1 < argc)
            ctype = argv[++i];
        else if (!strcmp(argv[i], "--body") && i + 1 < argc)
            body_text = argv[++i];
        else if (!strcmp(argv[i], "--body-file") && i + 1 < argc)
            body_path = argv[++i];
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (!listen_spec) {
        usage(stderr);
        return 2;
    }
    bool uring = !strcmp(io, "uring");
    if (!uring && strcmp(io, "epoll") != 0) {
        fprintf(stderr, "null_server: --io wants epoll or uring, got '%s'\n", io);
        return 2;
    }
#ifndef NULL_URING
    if (uring) {
        fprintf(stderr, "null_server: built without liburing: --io uring is not available\n");
        return 2;
    }
#endif
    if (body_path) {
        size_t len;
        char *b = read_file(body_path, &len);
        build_response(ctype, b, len);
        free(b);
    } else {
        build_response(ctype, body_text, strlen(body_text));
    }

    signal(SIGPIPE, SIG_IGN);
    /* A shell starts background jobs with SIGINT ignored, and an ignored signal is dropped
     * before it can be queued for the signalfd: restore the default first (it stays blocked,
     * so the default action never runs). */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
        die("sigprocmask");
    int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0)
        die("signalfd");

    int lfd = listen_on(listen_spec);
#ifdef NULL_URING
    if (uring)
        return run_uring(lfd, sfd);
#endif
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        die("epoll_create1");
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = lfd };
    if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0)
        die("epoll_ctl listen");
    ev.data.fd = sfd;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev) < 0)
        die("epoll_ctl signalfd");
    out_reserve(out_initial_copies());

    struct epoll_event events[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(ep, events, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            uint32_t e = events[i].events;
            if (fd == lfd) {
                on_accept(ep, lfd);
            } else if (fd == sfd) {
                struct signalfd_siginfo si;
                if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                    for (size_t k = 0; k < conns_cap; k++)
                        if (conns[k].open)
                            close((int)k);
                    close(lfd);
                    close(ep);
                    free(conns);
                    free(out);
                    free(response);
                    return 0;
                }
            } else if (!conn_get(fd)->open) {
                continue; /* closed earlier in this batch */
            } else if (e & EPOLLOUT) {
                on_writable(ep, fd);
            } else if (e & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                on_readable(ep, fd);
            }
        }
    }
}
