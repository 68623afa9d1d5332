/* Listeners: the addresses an app accepts on, each plain or TLS, and the
 * per-worker sockets (one SO_REUSEPORT socket per listener per worker). */
#ifndef FLARE_NET_LISTEN_H
#define FLARE_NET_LISTEN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "loop/loop.h"

typedef struct flare_tls flare_tls_t; /* net/tls.h */
struct flare_worker;

/* One listening address of the app: TCP, bound by every worker with
 * SO_REUSEPORT, or a unix socket ("unix:/path", "unix:@name"), bound once
 * before the workers start and shared by all of them (AF_UNIX has no
 * SO_REUSEPORT group: each worker watches the one socket, and the losers of
 * an accept race read EAGAIN). */
typedef struct flare_listener {
    char *addr;       /* "HOST:PORT" or "unix:...", owned (NULL for the run's own address) */
    const char *name; /* addr, or the address flare_app_run was given */
    flare_tls_t *tls; /* NULL: plain TCP */
    /* flare_app_admin_listen: the operational routes (metrics, status,
     * health) answer here and nowhere else; read only by those handlers */
    bool admin;
    _Atomic int port; /* bound port of the current run, 0 before (and for unix) */
    /* a unix socket file this run made: removed when the run ends, except
     * when it is handed over to a new process (upgrade) */
    bool unlink;
    /* one it inherited from a Flare process that owned it (upgrade):
     * removed only if this run got to serve (a new process that fails
     * leaves the old one serving on it) */
    bool unlink_adopted;
    /* sockets this run adopted (socket activation, upgrade) instead of
     * binding: owned here until the workers take them (-1 once taken) */
    int *fds;
    unsigned nfds;
    /* who takes an accepted socket (the protocol above: listeners.c installs
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

/* A listen address, parsed. */
typedef struct flare_listen_addr {
    struct sockaddr_storage ss; /* AF_INET, AF_INET6 or AF_UNIX */
    socklen_t sl;
    bool abstract; /* unix:@name: sun_path[0] is the NUL, no file */
    int mode;      /* unix:PATH?mode=0660: the file's permission bits; -1 */
    uid_t uid;     /* ?owner=NAME|UID: (uid_t)-1 for none */
    gid_t gid;     /* ?group=NAME|GID: (gid_t)-1 for none */
} flare_listen_addr_t;

/* Parses "HOST:PORT", "[V6]:PORT", "*:PORT", ":PORT", "unix:PATH" with
 * options "?mode=0660&owner=www-data&group=www-data" (names or numbers,
 * looked up here), or "unix:@NAME" (the abstract namespace). port_override
 * >= 0 replaces a TCP port. 0, or FLARE_EADDR with why (cap bytes) saying
 * what is wrong: no path, a path longer than sun_path holds, a bad mode, an
 * unknown user/group or option, options on an abstract name. Pure but for
 * the user and group look-ups; sets no last error. */
int flare__listen_parse(const char *addr, int port_override, flare_listen_addr_t *a, char *why,
                        size_t cap);
bool flare__listen_is_unix(const char *addr);
/* Checks an address (flare__listen_parse): 0 with its port (0 for unix),
 * or FLARE_EADDR (flare_last_error set). */
int flare__listen_addr_check(const char *addr, int *port_out);
/* Binds unix listener l once for the whole run into l->fds (the workers
 * then share it as they share an adopted socket): a socket file already at
 * the path is removed when nothing answers on it (a dead process's), and
 * refused (FLARE_EBIND, errno EADDRINUSE) when a server does; mode, owner
 * and group are applied before listen(). Sets l->unlink for a path. */
int flare__listen_unix(flare_listener_t *l, int backlog);
/* Removes the socket files of the listeners that own theirs (l->unlink,
 * or l->unlink_adopted when `served`): the run's end, not a hand-over. */
void flare__listen_unlink(flare_listener_t *const *ls, unsigned n, bool served);
/* An upgrade names a unix socket whose file the process does not own (it
 * came from systemd) with this prefix, so the next process leaves it too. */
#define FLARE__LISTEN_KEEP_PREFIX "keep-"
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
