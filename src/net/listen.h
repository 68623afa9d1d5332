/* Listeners: the addresses an app accepts on, each plain or TLS, and the
 * per-worker sockets (one SO_REUSEPORT socket per listener per worker). */
#ifndef FLARE_NET_LISTEN_H
#define FLARE_NET_LISTEN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>

#include "loop/loop.h"
#include "net/tls.h"

struct flare_worker;

/* One listening address of the app. */
typedef struct flare_listener {
    char *addr;       /* "HOST:PORT", owned (NULL for the run's own address) */
    const char *name; /* addr, or the address flare_app_run was given */
    flare_tls_t *tls; /* NULL: plain TCP */
    /* flare_app_admin_listen: the operational routes (metrics, status,
     * health) answer here and nowhere else; read only by those handlers */
    bool admin;
    _Atomic int port; /* bound port of the current run, 0 before */
    /* sockets this run adopted (socket activation, upgrade) instead of
     * binding: owned here until the workers take them (-1 once taken) */
    int *fds;
    unsigned nfds;
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
    bool shared; /* a dup of a socket another worker owns (adopted sockets) */
} flare_listen_io_t;

void flare__listener_resume(void *ud); /* the resume_timer callback (ud: the worker) */
/* Parses HOST:PORT only: 0 or FLARE_EADDR (flare_last_error set). */
int flare__listen_addr_check(const char *addr, int *port_out);
int flare__listen_probe(const char *addr, int *port_out);
int flare__listen_socket(const char *addr, int port_override, int backlog, int *port_out);
void flare__worker_accept_cb(flare_loop_t *l, flare_io_t *io, uint32_t events);

/* Matches the inherited sockets (flare__sd_listen_fds) to the run's
 * listeners by bound address (getsockname; a configured port 0 matches any
 * port of the same host): each goes to its listener's fds, made
 * non-blocking. 0 (nothing inherited is fine), or FLARE_EADDR naming the
 * descriptor that is not a listening socket or that no listener matches:
 * the inherited ones are then closed. */
int flare__listen_adopt(flare_listener_t *const *ls, unsigned n);
/* Closes what the listeners still own of their adopted sockets; frees fds. */
void flare__listen_adopt_end(flare_listener_t *const *ls, unsigned n);
/* Opens worker w's sockets (w->lios, w->nlios): for a bound listener, one
 * SO_REUSEPORT socket of its own; for an adopted one, the adopted sockets
 * with index % nworkers == w->id, or a dup of one when there are fewer
 * sockets than workers, so that every adopted socket is served (a queue no
 * one accepts from would hold connections forever). */
int flare__worker_listen(struct flare_worker *w);

#endif
