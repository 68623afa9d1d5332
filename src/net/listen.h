/* Listeners: the addresses an app accepts on, each plain or TLS, and the
 * per-worker sockets (one SO_REUSEPORT socket per listener per worker). */
#ifndef FLARE_NET_LISTEN_H
#define FLARE_NET_LISTEN_H

#include <stdatomic.h>
#include <sys/socket.h>

#include "loop/loop.h"
#include "net/tls.h"

struct flare_worker;

/* One listening address of the app. */
typedef struct flare_listener {
    char *addr;       /* "HOST:PORT", owned (NULL for the run's own address) */
    const char *name; /* addr, or the address flare_app_run was given */
    flare_tls_t *tls; /* NULL: plain TCP */
    _Atomic int port; /* bound port of the current run, 0 before */
    /* who takes an accepted socket (the protocol above: app.c installs
     * HTTP/1.1's flare__conn_open); it owns fd from the call on */
    void (*on_accept)(struct flare_worker *w, int fd, const struct sockaddr *sa,
                      const struct flare_listener *l);
} flare_listener_t;

/* A worker's socket for one listener. */
typedef struct flare_listen_io {
    flare_io_t io; /* first */
    struct flare_worker *w;
    const flare_listener_t *l;
} flare_listen_io_t;

void flare__listener_resume(void *ud); /* the resume_timer callback (ud: the worker) */
/* Parses HOST:PORT only: 0 or FLARE_EADDR (flare_last_error set). */
int flare__listen_addr_check(const char *addr, int *port_out);
int flare__listen_probe(const char *addr, int *port_out);
int flare__listen_socket(const char *addr, int port_override, int backlog, int *port_out);
void flare__worker_accept_cb(flare_loop_t *l, flare_io_t *io, uint32_t events);

#endif
