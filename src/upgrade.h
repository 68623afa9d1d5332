/* SIGUSR2: the in-process binary upgrade, and systemd's watchdog, both run
 * by the thread in flare_app_run while it waits for a stop (run.c). */
#ifndef FLARE_UPGRADE_H
#define FLARE_UPGRADE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct flare_app flare_app_t;

/* How long a new binary has to report READY=1, unless
 * FLARE_UPGRADE_TIMEOUT_MS says otherwise. */
#define FLARE__UPGRADE_TIMEOUT_MS 30000

typedef struct flare_upgrade {
    pid_t child;      /* the new process until it is ready or gone; 0: none */
    int notify_fd;    /* our private notify socket while waiting; -1 */
    uint64_t start;   /* monotonic ms the child was started */
    uint64_t limit;   /* ms it has to report ready */
    uint64_t wd_next; /* monotonic ms of the next watchdog check; 0: off */
} flare_upgrade_t;

/* Remembers the binary's path (/proc/self/exe) and argv (/proc/self/cmdline)
 * once per process: a later upgrade starts what is at that path then. */
void flare__upgrade_capture(void);

void flare__upgrade_init(flare_upgrade_t *u);
/* Starts the new binary with every listening socket of this run (SIGUSR2).
 * On failure (or an upgrade already under way) logs why to stderr and
 * returns a negative FLARE_E* code; the app keeps serving either way. */
int flare__upgrade_start(flare_upgrade_t *u, flare_app_t *app);
/* The descriptor to poll (the private notify socket), or -1. */
int flare__upgrade_fd(const flare_upgrade_t *u);
/* The poll timeout in ms for the upgrade and the watchdog: -1 for none. */
int flare__upgrade_timeout(const flare_upgrade_t *u);
/* After poll returned: reads notifications, checks the child is alive and
 * within its time, pings the watchdog. true once the new process reported
 * READY=1: the caller stops accepting and drains (a hand-over). */
bool flare__upgrade_poll(flare_upgrade_t *u, flare_app_t *app);
/* The run ends: a child not yet ready is stopped and reaped (logged). */
void flare__upgrade_dispose(flare_upgrade_t *u);

/* Pure, for the unit tests: the child's environment. `env` minus the
 * variables the hand-over sets, plus LISTEN_FDS=nfds, LISTEN_FDNAMES=names,
 * NOTIFY_SOCKET=notify, FLARE_NOTIFY_NEXT=next, and LISTEN_PID= (and
 * WATCHDOG_PID= when `watchdog`) with room for a pid that the child writes
 * after fork (*pid_slots, up to 2, point at where). NULL when out of memory;
 * free the array and its strings with flare__upgrade_env_free. */
char **flare__upgrade_env(char *const *env, unsigned nfds, const char *names, const char *notify,
                          const char *next, bool watchdog, char **pid_slots);
void flare__upgrade_env_free(char **env);
/* Writes pid in decimal at p followed by a NUL (async-signal-safe). */
void flare__upgrade_put_pid(char *p, long pid);

#endif
