/* The TLS transport (OpenSSL 3): one per connection accepted on a TLS
 * listener, made from the listener's contexts (tls_ctx.c). The handshake
 * runs inside the first reads; after it, without kTLS, OpenSSL's records
 * go through our own output BIO and leave in batches (see "output").
 *
 * Unexpected EOF (the peer closes without close_notify) reads as 0, as a
 * clean close, like nginx (SSL_OP_IGNORE_UNEXPECTED_EOF, set on every
 * context by tls_ctx.c): HTTP framing, not TLS, tells a truncated request
 * or message, and OpenSSL 3 would otherwise also drop the session from the
 * cache.
 *
 * OpenSSL's per-thread error queue is kept empty at this module's boundary
 * (this file's and tls_ctx.c's): a stale entry makes SSL_get_error() report
 * SSL_ERROR_SSL for a plain WANT_READ. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "core/core.h"
#include "loop/loop.h"
#include "worker.h"
#include "net/tls_int.h"

/* The largest TLS record payload: one SSL_write of at most this many bytes
 * makes one record (partial-write mode), so a retry is one record too. */
#define TLS_RECORD 16384

/* ---- the transport ------------------------------------------------------ */

typedef struct tls_conn {
    flare_transport_t base; /* first: the stream sees only this */
    SSL *ssl;
    ctx_set_t *set;
    flare_tls_counters_t *ctr;
    /* Length of the SSL_write that last returned WANT_*: OpenSSL must be
     * called again with exactly this length (else SSL_R_BAD_LENGTH or
     * SSL_R_BAD_WRITE_RETRY). 0: no write pending. */
    size_t wpending;
    /* With kTLS OpenSSL keeps pointing into the caller's buffer until a
     * pending record is sent, so it must stay put: this connection's own. */
    char *kbuf;
    /* Coalesced output (see "output" below): sealed records the socket did
     * not take yet, this connection's own until they are out; and how many
     * plaintext bytes they hold that were not reported written. */
    char *pend;
    size_t pend_len, pend_off, sealed;
    /* pend holds output OpenSSL made on its own, never tried on the socket
     * yet (the TLS 1.3 session tickets): the next write appends its records
     * to it (out_append) and sends it all at once */
    bool held;
    bool peeked, ktls_send, shut_sent, coalesce;
} tls_conn_t;

static flare_tls_counters_t no_counters;

static inline void bump(_Atomic unsigned long long *c)
{
    /* written only by the owning worker: a load and a store, no lock prefix */
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* Empty the queue before an SSL call when something left an entry there
 * (peeking is cheaper than clearing every slot). */
static inline void clear_errors(void)
{
    if (flare__unlikely(ERR_peek_error() != 0))
        ERR_clear_error();
}

/* ---- I/O ---------------------------------------------------------------- */

/* A per-thread record buffer for coalescing a vector or reading a file
 * range: OpenSSL encrypts from it into its own write buffer during
 * SSL_write and, without kTLS, never reads it again (a retry after
 * WANT_WRITE only flushes the sealed record), so every connection of a
 * worker can share one instead of each holding 16 KiB. */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static _Thread_local char *scratch;

static void scratch_key_init(void)
{
    (void)pthread_key_create(&scratch_key, free);
}

static char *record_buf(tls_conn_t *c)
{
    if (flare__unlikely(c->ktls_send)) {
        if (c->kbuf == NULL)
            c->kbuf = malloc(TLS_RECORD);
        return c->kbuf;
    }
    if (flare__likely(scratch != NULL))
        return scratch;
    pthread_once(&scratch_once, scratch_key_init);
    char *p = malloc(TLS_RECORD);
    if (p != NULL && pthread_setspecific(scratch_key, p) != 0) {
        free(p);
        p = NULL;
    }
    return scratch = p;
}

/* ---- output ------------------------------------------------------------ */

/* After the handshake (without kTLS) the connection's write BIO is ours, not
 * the socket's: OpenSSL seals a record into it, we append the record to a
 * per-thread buffer, and after a batch of records (up to OUT_BATCH bytes of
 * plaintext) one send(2) takes them all. OpenSSL's socket BIO makes one
 * write(2) per 16 KiB record. Measured (1 MiB over TLS, strace): 64
 * writes per MiB -> 16 with 64 KiB batches (as h2o does with its own
 * buffer) -> 4 with 256 KiB ones. A syscall's fixed cost is what the
 * batch saves (here about 2.5 us, as much as copying 200 KiB: pread of
 * 1 MiB in 64 KiB calls 70-100 us, in 256 KiB calls 45-65 us); past
 * 256 KiB little is left to save. The cost: per thread, this buffer and
 * the file buffer (512 KiB, within L2 with OpenSSL's 16 KiB record), and
 * a connection whose socket is full holds up to a batch of records.
 *
 * The per-thread buffer is empty between calls into this module: what the
 * socket does not take is moved to the connection (c->pend) and written
 * first by the next call, so every connection of a worker shares one
 * buffer, and a connection holds output only while its socket is full.
 * The plaintext of records that are sealed but not out yet is reported
 * written only once they are out (c->sealed); until then the stream offers
 * the same bytes again, as after a partial write. */
#define OUT_BATCH (16 * TLS_RECORD)
#define OUT_CAP   (OUT_BATCH + 16 * 256) /* 16 records and their headers and tags */

static _Thread_local struct {
    char *buf;
    size_t len, cap;
} out;
static pthread_key_t out_key;
static pthread_once_t out_once = PTHREAD_ONCE_INIT;
static BIO_METHOD *out_method;

static int out_append(tls_conn_t *c, const char *p, size_t n)
{
    if (c->pend_len > 0) { /* behind what is already waiting */
        char *g = realloc(c->pend, c->pend_len + n);
        if (g == NULL)
            return -1;
        memcpy(g + c->pend_len, p, n);
        c->pend = g;
        c->pend_len += n;
        return 0;
    }
    if (flare__unlikely(out.len + n > out.cap)) {
        size_t cap = out.cap != 0 ? out.cap : OUT_CAP;
        while (cap < out.len + n)
            cap *= 2;
        char *g = realloc(out.buf, cap);
        if (g == NULL)
            return -1;
        (void)pthread_setspecific(out_key, g); /* freed with the thread */
        out.buf = g;
        out.cap = cap;
    }
    memcpy(out.buf + out.len, p, n);
    out.len += n;
    return 0;
}

/* FLARE_TR_HELD tells the stream to flush: output is waiting that no write
 * of the stream's will push (none of its bytes are in it). */
static inline void held_sync(tls_conn_t *c)
{
    if (c->pend_len > 0 && c->sealed == 0)
        c->base.state |= FLARE_TR_HELD;
    else
        c->base.state &= ~(uint32_t)FLARE_TR_HELD;
}

static int out_flush_(tls_conn_t *c);

/* Sends what is waiting: 1 all out, 0 the socket is full (the rest is the
 * connection's now), -1 an error (errno). */
static int out_flush(tls_conn_t *c)
{
    c->held = false;
    int r = out_flush_(c);
    held_sync(c);
    return r;
}

static int out_flush_(tls_conn_t *c)
{
    const char *p = c->pend_len > 0 ? c->pend + c->pend_off : out.buf;
    size_t n = c->pend_len > 0 ? c->pend_len - c->pend_off : out.len;
    size_t sent = 0;
    while (sent < n) {
        ssize_t w = send(c->base.fd, p + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            sent += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            int e = errno;
            out.len = 0; /* lost with the connection */
            errno = e;
            return -1;
        }
        break;
    }
    if (c->pend_len > 0) {
        c->pend_off += sent;
        if (c->pend_off < c->pend_len)
            return 0;
        free(c->pend);
        c->pend = NULL;
        c->pend_len = c->pend_off = 0;
        return 1;
    }
    if (sent == n) {
        out.len = 0;
        return 1;
    }
    char *rest = malloc(n - sent);
    if (rest == NULL) {
        out.len = 0;
        errno = ENOMEM;
        return -1;
    }
    memcpy(rest, p + sent, n - sent);
    c->pend = rest;
    c->pend_len = n - sent;
    c->pend_off = 0;
    out.len = 0;
    return 0;
}

static int out_bio_write(BIO *b, const char *p, size_t n, size_t *written)
{
    BIO_clear_retry_flags(b);
    if (out_append(BIO_get_data(b), p, n) != 0)
        return 0;
    *written = n;
    return 1;
}

static long out_bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num;
    (void)ptr;
    tls_conn_t *c = BIO_get_data(b);
    switch (cmd) {
    case BIO_CTRL_FLUSH: {
        BIO_clear_retry_flags(b);
        /* TLS 1.3 tickets: OpenSSL flushes after each one (2 sends); kept
         * instead for the first response to carry (see handshake) */
        if (SSL_get_state(c->ssl) == TLS_ST_SW_SESSION_TICKET)
            return 1;
        int r = out_flush(c);
        if (r == 0)
            BIO_set_retry_write(b);
        return r == 1 ? 1 : -1;
    }
    case BIO_CTRL_WPENDING:
        return (long)(c->pend_len > 0 ? c->pend_len - c->pend_off : out.len);
    case BIO_CTRL_PENDING:
        return 0;
    case BIO_CTRL_DUP:
        return 1;
    default:
        return 0;
    }
}

static void out_init(void)
{
    (void)pthread_key_create(&out_key, free);
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "flare tls output");
    if (m != NULL &&
        (BIO_meth_set_write_ex(m, out_bio_write) != 1 || BIO_meth_set_ctrl(m, out_bio_ctrl) != 1)) {
        BIO_meth_free(m);
        m = NULL;
    }
    out_method = m; /* NULL: every connection keeps the socket BIO */
    ERR_clear_error();
}

/* After the handshake: OpenSSL writes into our BIO from now on. Without it
 * (no memory) the socket BIO stays, one write(2) per record. */
static void out_attach(tls_conn_t *c)
{
    pthread_once(&out_once, out_init);
    if (out_method == NULL)
        return;
    BIO *b = BIO_new(out_method);
    if (b == NULL) {
        ERR_clear_error();
        return;
    }
    BIO_set_data(b, c);
    BIO_set_init(b, 1);
    SSL_set0_wbio(c->ssl, b); /* drops the wbio's reference to the socket BIO */
    c->coalesce = true;
}

/* After an SSL call that may have written (a read answering a key update,
 * an alert): nothing stays in the per-thread buffer. */
static inline void out_settle(tls_conn_t *c)
{
    if (flare__unlikely(out.len > 0) && c->pend_len == 0)
        (void)out_flush(c);
}

/* Maps a failed SSL call. errno must still be the call's. */
static ssize_t io_error(tls_conn_t *c, int ret)
{
    int sys = errno;
    switch (SSL_get_error(c->ssl, ret)) {
    case SSL_ERROR_WANT_READ:
        c->base.want = FLARE_IO_READ;
        return -EAGAIN;
    case SSL_ERROR_WANT_WRITE:
        c->base.want = FLARE_IO_WRITE;
        return -EAGAIN;
    case SSL_ERROR_ZERO_RETURN:
        return 0;
    case SSL_ERROR_SYSCALL:
        ERR_clear_error();
        c->base.state |= FLARE_TR_FAILED;
        return sys != 0 && sys != EAGAIN ? -sys : -ECONNRESET;
    default:
        ERR_clear_error();
        c->base.state |= FLARE_TR_FAILED;
        return -EPROTO;
    }
}

static const char plain_http_400[] = "HTTP/1.1 400 Bad Request\r\n"
                                     "Content-Type: text/plain\r\n"
                                     "Content-Length: 50\r\n"
                                     "Connection: close\r\n"
                                     "\r\n"
                                     "The plain HTTP request was sent to the HTTPS port\n";
#define PLAIN_HTTP_400_HEAD (sizeof(plain_http_400) - 1 - 50)

_Static_assert(sizeof("The plain HTTP request was sent to the HTTPS port\n") - 1 == 50,
               "Content-Length of the plain-HTTP answer");

/* Before OpenSSL sees a byte: a TLS connection starts with a handshake
 * record (0x16). A plain HTTP request gets a readable 400 instead of an
 * alert; anything else is dropped. 1 TLS, 0 EOF, -EAGAIN, -errno. */
static ssize_t peek_first(tls_conn_t *c)
{
    unsigned char b;
    ssize_t r;
    do
        r = recv(c->base.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    while (r < 0 && errno == EINTR);
    if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            c->base.want = FLARE_IO_READ;
            return -EAGAIN;
        }
        int e = errno;
        bump(&c->ctr->handshake_errors);
        c->base.state |= FLARE_TR_FAILED;
        return -e;
    }
    if (r == 0)
        return 0; /* closed before saying anything: not a failed handshake */
    if (b == 0x16) {
        c->peeked = true;
        return 1;
    }
    c->base.state |= FLARE_TR_FAILED;
    if (b >= 'A' && b <= 'Z') {
        bump(&c->ctr->plaintext_http);
        /* take what has arrived, so closing does not reset the connection
         * (and the answer with it) for unread bytes */
        char sink[4096];
        ssize_t got = recv(c->base.fd, sink, sizeof(sink), MSG_DONTWAIT);
        /* a HEAD request gets the head alone (RFC 9110 section 9.3.2) */
        bool head = got >= 5 && memcmp(sink, "HEAD ", 5) == 0;
        while (got == (ssize_t)sizeof(sink))
            got = recv(c->base.fd, sink, sizeof(sink), MSG_DONTWAIT);
        (void)send(c->base.fd, plain_http_400,
                   head ? PLAIN_HTTP_400_HEAD : sizeof(plain_http_400) - 1,
                   MSG_NOSIGNAL | MSG_DONTWAIT);
    } else {
        bump(&c->ctr->handshake_errors);
    }
    return -EPROTO;
}

/* After an SSL call of the handshake: what it left in the per-thread
 * buffer is sent, or, with `keep` (the handshake is done), kept by the
 * connection for its first response to carry. That is the TLS 1.3 session
 * tickets: the client's Finished usually comes with its request, and the
 * tickets, the response and (Connection: close) close_notify then leave in
 * one send instead of four (nginx: four writes; h2o: three). No response
 * in this batch (an incomplete or asynchronous one): the stream's flush at
 * the end of the batch sends them (FLARE_TR_HELD). */
static void out_after_handshake(tls_conn_t *c, bool keep)
{
    if (flare__likely(out.len == 0)) {
        held_sync(c);
        return;
    }
    char *p = keep && c->pend_len == 0 ? malloc(out.len) : NULL;
    if (p == NULL) {
        (void)out_flush(c); /* an error shows on the next call */
        return;
    }
    memcpy(p, out.buf, out.len);
    c->pend = p;
    c->pend_len = out.len;
    c->pend_off = 0;
    c->held = true;
    out.len = 0;
    held_sync(c);
}

/* Runs the handshake: 1 established, 0 the peer closed, -EAGAIN, -errno. */
static ssize_t handshake(tls_conn_t *c)
{
    if (c->base.state & FLARE_TR_FAILED)
        return -EPROTO;
    if (!c->peeked) {
        ssize_t r = peek_first(c);
        if (r <= 0)
            return r;
    }
    clear_errors();
    errno = 0;
    int r = SSL_do_handshake(c->ssl);
    if (c->coalesce)
        out_after_handshake(c, r == 1);
    if (r == 1) {
        c->base.state |= FLARE_TR_ESTABLISHED;
        bump(&c->ctr->handshakes);
        if (SSL_session_reused(c->ssl))
            bump(&c->ctr->resumed);
        c->ktls_send = BIO_get_ktls_send(SSL_get_wbio(c->ssl));
        if (!c->ktls_send && !c->coalesce)
            out_attach(c);
        return 1;
    }
    ssize_t e = io_error(c, r);
    if (e != -EAGAIN) {
        bump(&c->ctr->handshake_errors);
        c->base.state |= FLARE_TR_FAILED;
    }
    return e;
}

static ssize_t tls_read(flare_transport_t *t, char *buf, size_t len)
{
    tls_conn_t *c = (tls_conn_t *)t;
    if (flare__unlikely(!(t->state & FLARE_TR_ESTABLISHED))) {
        ssize_t r = handshake(c);
        if (r <= 0)
            return r;
    }
    if (flare__unlikely(t->state & FLARE_TR_FAILED))
        return -EPROTO;
    if (len == 0)
        return -EINVAL;
    clear_errors();
    errno = 0;
    size_t got;
    int ok = SSL_read_ex(c->ssl, buf, len, &got);
    int sys = errno;
    if (c->coalesce)
        out_settle(c); /* a key update answered, an alert */
    if (flare__likely(ok == 1))
        return (ssize_t)got;
    errno = sys;
    return io_error(c, 0);
}

/* One record of len bytes from src; len is the pending length on a retry.
 * With our output BIO it only seals: OpenSSL's write cannot block. */
static ssize_t write_record(tls_conn_t *c, const void *src, size_t len)
{
    clear_errors();
    errno = 0;
    size_t done;
    if (flare__likely(SSL_write_ex(c->ssl, src, len, &done) == 1)) {
        c->wpending = 0;
        return (ssize_t)done;
    }
    ssize_t e = io_error(c, 0);
    if (e == -EAGAIN)
        c->wpending = len;
    return e == 0 ? -EPIPE : e;
}

/* Checks before a write: 0 go on, else what to return. */
static ssize_t write_ready(tls_conn_t *c)
{
    if (flare__unlikely(!(c->base.state & FLARE_TR_ESTABLISHED))) {
        ssize_t r = handshake(c);
        if (r <= 0)
            return r == 0 ? -EPIPE : r;
    }
    if (flare__unlikely(c->base.state & FLARE_TR_FAILED))
        return -EPROTO;
    /* after close_notify only the retry of the batch it was sealed with */
    if (flare__unlikely(c->shut_sent) && c->sealed == 0)
        return -EPIPE;
    return 0;
}

/* close_notify sealed behind the batch (FLARE_TR_LAST): SSL_shutdown's
 * flush sends both at once; out_batch then reports them out or waiting. */
static void seal_close_notify(tls_conn_t *c)
{
    clear_errors();
    if (SSL_shutdown(c->ssl) >= 0)
        c->shut_sent = true;
    else
        ERR_clear_error(); /* tls_shutdown tries again when the stream ends */
}

static ssize_t out_failed(tls_conn_t *c, int e)
{
    out.len = 0;
    c->base.state |= FLARE_TR_FAILED;
    return e != 0 && e != EAGAIN ? -e : -EPIPE;
}

/* Output still waiting from the last call goes first: 1 go on, *done the
 * plaintext it held (now out, so reported), else what to return. */
static ssize_t out_resume(tls_conn_t *c, size_t len, size_t *done)
{
    *done = 0;
    if (flare__likely(c->pend_len == 0))
        return 1;
    if (c->held)
        return 1; /* the tickets: the records sealed next join them, one send */
    int r = out_flush(c);
    if (r == 0) {
        c->base.want = FLARE_IO_WRITE;
        return -EAGAIN;
    }
    if (r < 0)
        return out_failed(c, errno);
    if (len < c->sealed)
        return -EINVAL; /* a retry must offer at least the bytes sealed */
    *done = c->sealed;
    c->sealed = 0;
    return 1;
}

/* Sends the batch sealed after `done` reported bytes: what to report. */
static ssize_t out_batch(tls_conn_t *c, size_t done)
{
    int r = out_flush(c);
    if (r == 1) {
        done += c->sealed;
        c->sealed = 0;
        return (ssize_t)done;
    }
    if (r < 0)
        return done > 0 ? (ssize_t)done : out_failed(c, errno);
    c->base.want = FLARE_IO_WRITE;
    return done > 0 ? (ssize_t)done : -EAGAIN;
}

/* The next len bytes of the vector, advancing *i / *at: straight from it
 * when one piece holds them (not with kTLS: its pending record stays in the
 * caller's buffer), else gathered into the record buffer. */
static const char *iov_take(tls_conn_t *c, const struct iovec *iov, int *i, size_t *at, size_t len)
{
    while (iov[*i].iov_len == *at) {
        (*i)++;
        *at = 0;
    }
    if (iov[*i].iov_len - *at >= len && !c->ktls_send) {
        const char *p = (const char *)iov[*i].iov_base + *at;
        *at += len;
        return p;
    }
    char *rec = record_buf(c);
    if (rec == NULL)
        return NULL;
    for (size_t got = 0; got < len;) {
        if (iov[*i].iov_len == *at) {
            (*i)++;
            *at = 0;
            continue;
        }
        size_t take = iov[*i].iov_len - *at < len - got ? iov[*i].iov_len - *at : len - got;
        memcpy(rec + got, (const char *)iov[*i].iov_base + *at, take);
        got += take;
        *at += take;
    }
    return rec;
}

static ssize_t tls_writev(flare_transport_t *t, const struct iovec *iov, int n, bool more)
{
    (void)more; /* every call ends with its records sent: nothing to hold back */
    tls_conn_t *c = (tls_conn_t *)t;
    ssize_t r = write_ready(c);
    if (r != 0)
        return r;
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    size_t done = 0;
    if (c->coalesce && (r = out_resume(c, total, &done)) != 1)
        return r;
    if (flare__unlikely(c->shut_sent))
        return done > 0 ? (ssize_t)done : -EPIPE; /* nothing may follow close_notify */
    if (c->wpending != 0 && total < c->wpending)
        return -EINVAL; /* a retry must offer at least the pending bytes */
    int i = 0;
    size_t at = 0;
    for (size_t skip = done; skip > 0;) { /* reported by out_resume */
        size_t take = iov[i].iov_len - at < skip ? iov[i].iov_len - at : skip;
        at += take;
        skip -= take;
        if (at == iov[i].iov_len && skip > 0) {
            i++;
            at = 0;
        }
    }
    /* record after record until the vector is done or the socket is full
     * (the stream takes a short count for a full socket) */
    while (done < total) {
        size_t batch = 0;
        do {
            size_t len =
                c->wpending != 0
                    ? c->wpending
                    : (total - done - batch < TLS_RECORD ? total - done - batch : TLS_RECORD);
            const char *src = iov_take(c, iov, &i, &at, len);
            if (src == NULL)
                return done > 0 ? (ssize_t)done : -ENOMEM;
            r = write_record(c, src, len);
            if (r <= 0) {
                if (c->coalesce)
                    return out_failed(c, errno);
                return done > 0 ? (ssize_t)done : r;
            }
            if (!c->coalesce) {
                done += (size_t)r;
                break;
            }
            batch += (size_t)r;
            c->sealed += (size_t)r;
        } while (done + batch < total && batch < OUT_BATCH);
        if (c->coalesce) {
            if (flare__unlikely(t->state & FLARE_TR_LAST) && done + batch == total)
                seal_close_notify(c);
            r = out_batch(c, done);
            if (r < 0 || (size_t)r < done + batch)
                return r;
            done = (size_t)r;
        }
    }
    return (ssize_t)done;
}

/* The buffer a file range is read into: OUT_BATCH bytes, per thread (see
 * record_buf: OpenSSL does not read it after SSL_write without kTLS). One
 * pread(2) per batch instead of one per record: 64 per MiB -> 4. */
static _Thread_local char *file_scratch;
static pthread_key_t file_key;
static pthread_once_t file_once = PTHREAD_ONCE_INIT;

static void file_key_init(void)
{
    (void)pthread_key_create(&file_key, free);
}

static char *file_buf(void)
{
    if (flare__likely(file_scratch != NULL))
        return file_scratch;
    pthread_once(&file_once, file_key_init);
    char *p = malloc(OUT_BATCH);
    if (p != NULL && pthread_setspecific(file_key, p) != 0) {
        free(p);
        p = NULL;
    }
    return file_scratch = p;
}

static ssize_t tls_sendfile(flare_transport_t *t, int fd, uint64_t off, size_t len)
{
    tls_conn_t *c = (tls_conn_t *)t;
    ssize_t r = write_ready(c);
    if (r != 0)
        return r;
    if (len == 0)
        return 0;
    if (c->ktls_send && c->wpending == 0) {
        /* the kernel seals the records: the file never enters user space */
        clear_errors();
        errno = 0;
        ossl_ssize_t s = SSL_sendfile(c->ssl, fd, (off_t)off, len, 0);
        if (s > 0)
            return (ssize_t)s;
        if (s == 0)
            return -EIO; /* the file ended before len */
        r = io_error(c, -1);
        return r == 0 ? -EPIPE : r;
    }
    size_t done = 0;
    if (c->coalesce) {
        if ((r = out_resume(c, len, &done)) != 1)
            return r;
        char *buf = file_buf();
        if (buf == NULL)
            return done > 0 ? (ssize_t)done : -ENOMEM;
        while (done < len) {
            size_t batch = len - done < OUT_BATCH ? len - done : OUT_BATCH;
            if (flare__pread_all(fd, buf, off + done, batch) != 0)
                return done > 0 ? (ssize_t)done : -EIO;
            for (size_t k = 0; k < batch; k += (size_t)r) {
                r = write_record(c, buf + k, batch - k < TLS_RECORD ? batch - k : TLS_RECORD);
                if (r <= 0)
                    return out_failed(c, errno);
                c->sealed += (size_t)r;
            }
            r = out_batch(c, done);
            if (r < 0 || (size_t)r < done + batch)
                return r;
            done = (size_t)r;
        }
        return (ssize_t)done;
    }
    char *rec = record_buf(c);
    if (rec == NULL)
        return -ENOMEM;
    /* record after record until the range is done or the socket is full:
     * the stream takes a short count for a full socket and waits for
     * EPOLLOUT, so returning after one record cost an epoll_wait per 16 KiB */
    while (done < len) {
        /* a retry reads the same bytes again (the record is already sealed,
         * but the contract is the same bytes) */
        size_t n =
            c->wpending != 0 ? c->wpending : (len - done < TLS_RECORD ? len - done : TLS_RECORD);
        if (len - done < n)
            return done > 0 ? (ssize_t)done : -EINVAL;
        if (flare__pread_all(fd, rec, off + done, n) != 0)
            return done > 0 ? (ssize_t)done : -EIO;
        r = write_record(c, rec, n);
        if (r <= 0)
            return done > 0 ? (ssize_t)done : r;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

/* The close_notify (and anything before it) out of our buffer: 0 out,
 * -EAGAIN (the socket is full), -errno. */
static int out_drain(tls_conn_t *c)
{
    if (!c->coalesce)
        return 0;
    out_settle(c);
    if (c->pend_len == 0)
        return 0;
    int r = out_flush(c);
    if (r == 1)
        return 0;
    if (r == 0) {
        c->base.want = FLARE_IO_WRITE;
        return -EAGAIN;
    }
    return (int)out_failed(c, errno);
}

static int tls_shutdown(flare_transport_t *t)
{
    tls_conn_t *c = (tls_conn_t *)t;
    if (t->state & FLARE_TR_FAILED)
        return -EPIPE;
    if (!(t->state & FLARE_TR_ESTABLISHED))
        return 0; /* nothing to close cleanly */
    if (c->shut_sent)
        return out_drain(c); /* already sent, or on its way */
    clear_errors();
    errno = 0;
    /* sends close_notify; the peer's is not waited for */
    int r = SSL_shutdown(c->ssl);
    if (r >= 0) {
        c->shut_sent = true;
        return out_drain(c);
    }
    ssize_t e = io_error(c, r);
    return e == 0 ? 0 : (int)e;
}

static int tls_flush(flare_transport_t *t)
{
    tls_conn_t *c = (tls_conn_t *)t;
    if (t->state & FLARE_TR_FAILED)
        return -EPIPE;
    int r = c->pend_len > 0 ? out_flush(c) : 1;
    if (r == 1)
        return 0;
    if (r == 0) {
        t->want = FLARE_IO_WRITE;
        return -EAGAIN;
    }
    return (int)out_failed(c, errno);
}

static size_t tls_pending(const flare_transport_t *t)
{
    const tls_conn_t *c = (const tls_conn_t *)t;
    if (!(t->state & FLARE_TR_ESTABLISHED) || (t->state & FLARE_TR_FAILED))
        return 0;
    int n = SSL_pending(c->ssl);
    if (n > 0)
        return (size_t)n;
    /* read-ahead may hold more records than the current one; this may also
     * be the start of a record still arriving, then a read says -EAGAIN */
    return SSL_has_pending(c->ssl) ? 1 : 0;
}

static void tls_free(flare_transport_t *t)
{
    tls_conn_t *c = (tls_conn_t *)t;
    /* OpenSSL drops the session from the cache when a connection goes
     * without close_notify sent; only a failed one should lose it (a
     * connection closed on a timeout or after the peer's EOF stays
     * resumable, as in nginx) */
    if (c->ssl != NULL && !(t->state & FLARE_TR_FAILED))
        SSL_set_shutdown(c->ssl, SSL_get_shutdown(c->ssl) | SSL_SENT_SHUTDOWN);
    SSL_free(c->ssl); /* never closes the fd: SSL_set_fd's BIO does not own it */
    ERR_clear_error();
    flare__tls_set_release(c->set);
    free(c->kbuf);
    free(c->pend);
    free(c);
}

static const flare_transport_ops_t tls_ops = {
    .read = tls_read,
    .writev = tls_writev,
    .sendfile = tls_sendfile,
    .shutdown = tls_shutdown,
    .flush = tls_flush,
    .pending = tls_pending,
    .free = tls_free,
};

flare_transport_t *flare__tls_accept(flare_tls_t *t, int fd, flare_tls_counters_t *ctr)
{
    tls_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->base.ops = &tls_ops;
    c->base.fd = fd;
    c->ctr = ctr != NULL ? ctr : &no_counters;
    /* one uncontended lock per accept, next to the handshake's ~100 us of
     * public-key work; the I/O path takes none */
    pthread_mutex_lock(&t->pub_lock);
    c->set = t->set;
    atomic_fetch_add_explicit(&c->set->refs, 1, memory_order_relaxed);
    pthread_mutex_unlock(&t->pub_lock);
    c->ssl = SSL_new(t->base);
    if (c->ssl == NULL || SSL_set_SSL_CTX(c->ssl, c->set->cert[0].ctx) == NULL ||
        SSL_set_fd(c->ssl, fd) != 1) {
        ERR_clear_error();
        tls_free(&c->base);
        return NULL;
    }
    /* our output BIO from the start (the handshake's flights go out as
     * before, one send each; the tickets wait for the response), except
     * where kTLS may take over: OpenSSL sets it up on the socket BIO */
    if (!flare__tls_ktls_available())
        out_attach(c);
    SSL_set_accept_state(c->ssl);
    return &c->base;
}

flare_str_t flare__tls_alpn(const flare_transport_t *tr)
{
    const tls_conn_t *c = (const tls_conn_t *)tr;
    const unsigned char *p = NULL;
    unsigned n = 0;
    SSL_get0_alpn_selected(c->ssl, &p, &n);
    return p != NULL ? (flare_str_t){ (const char *)p, n } : (flare_str_t){ "", 0 };
}

flare_str_t flare__tls_sni(const flare_transport_t *tr)
{
    const tls_conn_t *c = (const tls_conn_t *)tr;
    const char *s = SSL_get_servername(c->ssl, TLSEXT_NAMETYPE_host_name);
    return s != NULL ? (flare_str_t){ s, strlen(s) } : (flare_str_t){ "", 0 };
}
