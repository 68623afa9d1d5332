/* systemd's two protocols, spoken natively (no libsystemd): readiness
 * notification (a datagram to $NOTIFY_SOCKET) and socket activation
 * (LISTEN_FDS/LISTEN_PID/LISTEN_FDNAMES, descriptors from 3). The same code
 * serves the in-process upgrade (upgrade.c): the old process is the new
 * one's "systemd". Process-wide state: one process has one notify target. */
#ifndef FLARE_SD_H
#define FLARE_SD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

/* The first descriptor socket activation passes (SD_LISTEN_FDS_START). */
#define FLARE__SD_FDS_START 3
/* More inherited descriptors than this is refused as malformed. */
#define FLARE__SD_FDS_MAX   4096

/* Where the old process tells its new one to report first during an
 * upgrade; NOTIFY_SOCKET is then the old process's private socket and this
 * names the target to use once READY=1 went there (empty: none). */
#define FLARE__SD_NEXT_ENV "FLARE_NOTIFY_NEXT"

/* Encodes a $NOTIFY_SOCKET value as a unix address: "/path", or "@name"
 * for the abstract namespace (the '@' becomes a NUL byte). 0, or
 * FLARE_EINVAL (empty, too long, neither '/' nor '@' first). Pure. */
int flare__sd_addr(const char *value, struct sockaddr_un *sa, socklen_t *len);

/* The socket activation variables, parsed: *n descriptors (0 when
 * LISTEN_PID is unset or not `self`: they are someone else's); names[i]
 * points into `buf` (NULL when LISTEN_FDNAMES is unset). 0, or
 * FLARE_EINVAL with flare_last_error() naming the variable (not a number,
 * zero or too many fds, a name count that differs from LISTEN_FDS). Pure. */
int flare__sd_listen_parse(const char *fds, const char *pid, const char *names, pid_t self,
                           unsigned *n, char *buf, size_t bufsize, const char **name_v,
                           unsigned name_max);

/* WATCHDOG_USEC/WATCHDOG_PID, parsed: *usec 0 when off (unset, or for
 * another pid). 0, or FLARE_EINVAL (not a positive number). Pure. */
int flare__sd_watchdog_parse(const char *usec, const char *pid, pid_t self, uint64_t *usec_out);

/* Reads the environment once per process (later calls return the first
 * result): the notify target, the watchdog, the inherited sockets (whose
 * variables are then unset, so children do not see them, and which get
 * FD_CLOEXEC). 0, or FLARE_EINVAL for malformed variables. */
int flare__sd_init(void);

/* Sends msg ("READY=1", "STOPPING=1", lines joined by '\n') to the notify
 * target. 0 when sent or when there is no target (not under systemd), a
 * negative FLARE_E* code when the send failed. Any thread; meant for the
 * thread running flare_app_run. */
int flare__sd_notify(const char *msg);

/* READY=1 to the target; during an upgrade (FLARE_NOTIFY_NEXT was set) the
 * target then becomes the next one, which gets READY=1 too. */
int flare__sd_ready(void);

/* "RELOADING=1\nMONOTONIC_USEC=<now>" (around a SIGHUP reload: send
 * flare__sd_ready() once the reload is done). */
int flare__sd_reloading(void);

/* The current target ("" when none) and the watchdog period (0: off). */
const char *flare__sd_target(void);
uint64_t flare__sd_watchdog_usec(void);
/* This process was started by a Flare process's upgrade (its sockets are
 * that process's, not systemd's). */
bool flare__sd_by_upgrade(void);

/* The inherited listening sockets not yet taken: *fds and *names (names[i]
 * may be NULL) stay valid until flare__sd_listen_done. */
unsigned flare__sd_listen_fds(const int **fds, const char *const **names);
/* They were adopted (owned elsewhere now) or, on failure, are closed here. */
void flare__sd_listen_done(bool adopted);

#endif
