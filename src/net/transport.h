/* A transport: how a stream's bytes reach the socket. Plain TCP is the
 * stream's own fast path (no transport object: direct read/write/sendfile
 * syscalls); TLS (net/tls.c) is the first transport with an object.
 *
 * Every call is non-blocking. -EAGAIN means "call again when the socket is
 * ready for t->want" (FLARE_IO_READ and/or FLARE_IO_WRITE): a TLS write may
 * have to wait for the socket to become readable (a key update), a TLS read
 * (the handshake) for it to become writable. A call that returns -EAGAIN
 * after a partial attempt must be repeated with the same bytes first (the
 * stream never consumes output the transport did not accept). */
#ifndef FLARE_NET_TRANSPORT_H
#define FLARE_NET_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

typedef struct flare_transport flare_transport_t;

typedef struct flare_transport_ops {
    /* Up to len bytes of application data: >0 bytes, 0 the peer closed
     * cleanly (close_notify, or FIN where that is the protocol's end),
     * -EAGAIN (see t->want), or -errno (-ECONNRESET, -EPROTO for bad input:
     * the connection is then unusable). Runs the handshake first while it
     * is not done. */
    ssize_t (*read)(flare_transport_t *t, char *buf, size_t len);
    /* Writes from the vector, in order: bytes accepted (> 0, maybe fewer
     * than offered), -EAGAIN, or -errno. `more`: more output follows at
     * once (a hint: coalesce, MSG_MORE). */
    ssize_t (*writev)(flare_transport_t *t, const struct iovec *iov, int n, bool more);
    /* len bytes of file fd from offset off, without loading the file whole:
     * bytes sent, -EAGAIN, or -errno (-EIO: the file is shorter than
     * promised). */
    ssize_t (*sendfile)(flare_transport_t *t, int fd, uint64_t off, size_t len);
    /* Ends the write side cleanly (TLS: close_notify; the caller then shuts
     * the socket's write side). 0 done, -EAGAIN try again (t->want), -errno. */
    int (*shutdown)(flare_transport_t *t);
    /* Sends output the transport made on its own and still holds
     * (FLARE_TR_HELD: TLS session tickets kept to leave with the first
     * response). 0 done, -EAGAIN try again (t->want), -errno. */
    int (*flush)(flare_transport_t *t);
    /* Application bytes the transport already holds: readable without the
     * socket becoming readable again (epoll does not see them). */
    size_t (*pending)(const flare_transport_t *t);
    /* Frees the transport's state (never closes fd: the stream does). */
    void (*free)(flare_transport_t *t);
} flare_transport_ops_t;

/* Transport state flags */
enum {
    FLARE_TR_ESTABLISHED = 1u << 0, /* handshake done: application data flows */
    FLARE_TR_FAILED = 1u << 1,      /* unusable: close without a clean shutdown */
    /* set by the transport: it holds output of its own (not bytes the
     * stream offered): the stream calls flush once its own output is out */
    FLARE_TR_HELD = 1u << 2,
    /* set by the stream around a writev that carries the last bytes the
     * connection will send: the transport may end its side right after
     * them, in the same send (TLS: close_notify) */
    FLARE_TR_LAST = 1u << 3,
};

struct flare_stream;

struct flare_transport {
    const flare_transport_ops_t *ops;
    int fd;
    uint32_t want;  /* FLARE_IO_* the last -EAGAIN waits for */
    uint32_t state; /* FLARE_TR_* */
    /* called once when the handshake completes, inside the
     * flare__stream_read that completed it, before that read returns (its
     * application bytes, if any, are in the buffer then); NULL: none. A
     * server's handshake always completes in a read: nothing is written
     * before the client's first request. Set by the stream's owner. Here,
     * not in the stream: only a transport with a handshake needs it. */
    void (*on_open)(struct flare_stream *s);
    /* accept + the listener's handshake timeout (ms, loop clock): a
     * handshake not done by then is closed (counted from accept: a client
     * trickling its hello gains nothing) */
    uint64_t hs_deadline;
};

#endif
