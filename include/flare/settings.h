/* Settings: one structure for everything an operator configures, read from a
 * YAML file, then FLARE_* environment variables, then command-line flags
 * (each overrides the one before). docs/config.md lists the keys.
 *
 *     flare_settings_t s;
 *     int code;
 *     if (flare_settings_main(&s, argc, argv, NULL, 0, &code) != 0)
 *         return code;                        // --help, --check-config, a bad flag
 *     flare_app_t *app;                       // flare_app_new + flare_settings_setup:
 *     if (flare_settings_app_new(&s, NULL, &app) != 0) { // logs, listeners (TLS
 *         ... flare_settings_error(&s), exit 1 ...        // too), admin listener,
 *     }                                                   // static, Redis, SIGHUP
 *     ... routes; flare_settings_sessions, flare_settings_ws_config ...
 *     flare_app_run(app, NULL);
 *     flare_app_free(app);
 *     flare_settings_free(&s);
 *
 * Keys are the long flag names without the dashes: `workers: 4` in the file,
 * FLARE_WORKERS=4 in the environment, --workers 4 (or --workers=4) on the
 * command line. Durations are seconds ("30") or suffixed ("500ms", "30s",
 * "2m", "1h"); sizes are bytes ("1048576") or suffixed ("64k", "1m", "1g",
 * powers of 1024). A list key (listen, listen-plain, static) given by a
 * later source replaces the earlier source's list; within one source its
 * entries add up. Errors name where the value came from, the key and what
 * was expected: `hello.yaml:7: workers: expected an integer 0..1024, got
 * "many"`, `FLARE_WORKERS: ...`, `--workers: ...`. Unknown keys and keys
 * given twice in one mapping are errors.
 *
 * Not thread-safe: one thread owns a settings structure (the reload hook
 * runs on the thread that runs flare_app_run, the one that parsed it). */
#ifndef FLARE_SETTINGS_H
#define FLARE_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "flare/flare.h"
#include "flare/static.h"
#include "flare/ws.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One certificate chosen by SNI (paths). */
typedef struct flare_settings_cert {
    char *cert; /* certificate file path */
    char *key;  /* private key file path */
} flare_settings_cert_t;

/* One listening address: plain, or TLS with its own certificate (and more
 * certificates chosen by SNI). */
typedef struct flare_settings_listener {
    char *addr;                 /* HOST:PORT or unix:..., as flare_app_listen takes it */
    char *tls_cert, *tls_key;   /* both or neither */
    flare_settings_cert_t *sni; /* more certificates, in the order given */
    size_t nsni;                /* entries in sni[] */
    char *origin;               /* where it was set ("hello.yaml:4", "--listen"), for errors */
} flare_settings_listener_t;

/* What an example adds through the same code: its own keys and flags. */
typedef enum flare_settings_type {
    FLARE_SETTING_STRING,   /* const char **where: a string owned by the settings */
    FLARE_SETTING_UINT,     /* unsigned *where, within min..max */
    FLARE_SETTING_BOOL,     /* bool *where: true/false, yes/no, on/off, 1/0 */
    FLARE_SETTING_DURATION, /* unsigned *where, milliseconds, within min..max ms */
    FLARE_SETTING_SIZE      /* size_t *where, bytes, within min..max */
} flare_settings_type_t;

/* An option a program adds to the standard keys: its key and flag, type,
 * help and where its value goes. */
typedef struct flare_settings_option {
    const char *name;            /* the key and the flag without "--": "pool" */
    flare_settings_type_t type;  /* what where points to */
    const char *help;            /* one line, for --help */
    void *where;                 /* holds the default before parsing, the value after */
    unsigned long long min, max; /* bounds (UINT, DURATION in ms, SIZE); max 0: the type's */
} flare_settings_option_t;

/* An open struct: read the fields; change them only through the calls
 * below. Strings and arrays are owned by the structure (freed by
 * flare_settings_free). A zero / NULL field means its default. */
typedef struct flare_settings {
    flare_config_t app; /* workers, max-conns, the timeouts and limits, job-threads,
                           backlog, mw-stats */
    flare_settings_listener_t *listeners; /* [one: 127.0.0.1:8080] */
    size_t nlisteners;                    /* entries in listeners[] */
    unsigned tls_handshake_timeout_ms;    /* every TLS listener [the TLS layer's 10 s] */
    char **statics;                       /* "DIR" (mounted at /static) or "/PREFIX=DIR" */
    size_t nstatics;                      /* entries in statics[] */
    char *log;                            /* "-" (stderr) or a file [stderr] */
    char *log_level;                      /* error|warn|info|debug [error] */
    char *log_format;                     /* text|json [text] */
    char *access_log;                     /* "-" or a file [off] */
    char *access_log_format;              /* combined|json [combined] */
    char *db;                             /* database URL (flare/db.h) */
    char *sessions;                       /* session store: memory or redis://HOST:PORT [memory]:
                                             flare_settings_sessions */
    char *cluster;                        /* redis://HOST:PORT[/DB]: channels shared by every
                                             instance on that Redis [none]: flare_app_cluster */
    unsigned cluster_history;             /* messages kept per channel [1000] */
    unsigned cluster_history_age_ms;      /* and at most this old [5 min] */
    unsigned cluster_presence_ttl_ms;     /* a dead instance's presence expires within [15 s] */
    char *session_secure; /* auto|always|never [auto]: flare_settings_session_config */
    char *admin_listen;   /* HOST:PORT of the admin listener [none]: flare_settings_listen */
    char **ws_origins;    /* Origins allowed on WebSocket routes, NULL-terminated
                             [none: same origin only]: flare_settings_ws_config */
    size_t nws_origins;   /* entries in ws_origins[] (its NULL not counted) */
    char *rate_limit;     /* requests a client may make: "N[/s|/m|/h]" [none: no limit]; with it,
                             flare_settings_setup puts flare_ratelimit on every request */
    unsigned rate_limit_burst; /* the bucket [0: one second's worth, at least 1] */
    char *rate_limit_redis;    /* redis://HOST:PORT[/DB]: the buckets in Redis, one limit
                                  for every instance [none: in this process] */
    char *rate_limit_fail;     /* open|closed: Redis cannot decide, let through or 503 [open] */
    unsigned rate_limit_timeout_ms;    /* the longest a request waits for Redis's decision
                                          [250 ms] */
    char **upstreams;                  /* HOST:PORT (or http:// / https:// URLs) a proxy
                                          forwards to, NULL-terminated [none]: flare/proxy.h,
                                          examples/gateway */
    size_t nupstreams;                 /* entries in upstreams[] (its NULL not counted) */
    char *io;                          /* auto|uring|epoll [auto]: the loop's I/O backend, also
                                          set in app.io (flare_config_t.io) */
    char *config_file;                 /* --config FILE or FLARE_CONFIG, NULL: none */
    bool check_config;                 /* --check-config was given */
    struct flare__settings_priv *priv; /* private */
} flare_settings_t;

/* Returned by flare_settings_parse_args when the work is done (--help or
 * --check-config printed on stdout): main exits 0. */
#define FLARE_SETTINGS_EXIT 1

/* Fills *s with the defaults (no allocation). */
FLARE_API void flare_settings_init(flare_settings_t *s);

/* Frees what *s owns; *s is then as after flare_settings_init. */
FLARE_API void flare_settings_free(flare_settings_t *s);

/* Reads the configuration: finds `--config FILE` (else $FLARE_CONFIG) and
 * loads that file, then the FLARE_* variables, then every flag of argv (argc
 * entries: the standard keys and the `extra` options, nextra of them,
 * which must outlive *s). Then
 * checks the whole: a TLS listener needs both tls-cert and tls-key, the
 * limits their bounds (flare_config_t). argv is copied for
 * flare_settings_reload. Extra options' `where` is written once all passed.
 *
 * --help prints the flags on stdout and returns FLARE_SETTINGS_EXIT.
 * --check-config also builds a scratch app with the result (so certificate
 * files are loaded and static directories opened, nothing bound), prints
 * the effective configuration as YAML on stdout and returns
 * FLARE_SETTINGS_EXIT; on an error it returns the error (main exits 1, as
 * `nginx -t`). Returns 0 (run), FLARE_SETTINGS_EXIT, or FLARE_EINVAL /
 * FLARE_ENOMEM with the message in flare_settings_error. */
FLARE_API int flare_settings_parse_args(flare_settings_t *s, int argc, char **argv,
                                        const flare_settings_option_t *extra, size_t nextra);

/* The start of every main: flare_settings_init(s), then
 * flare_settings_parse_args (argc, argv, the nextra `extra` options), and
 * what a
 * program does with its result. Returns 0: run (*s holds the settings;
 * free it with flare_settings_free). Returns FLARE_SETTINGS_EXIT: main
 * returns *exit_code at once (*s is freed already):
 *   - --help printed the flags on stdout: 0;
 *   - --check-config printed the configuration on stdout: 0;
 *     it found an error (printed on stderr): 1, as `nginx -t`;
 *   - a bad flag, key, value or file (printed on stderr as "PROG: MESSAGE",
 *     PROG the base name of argv[0]): 2.
 * A program's own checks after it (a required key) exit 2 the same way. */
FLARE_API int flare_settings_main(flare_settings_t *s, int argc, char **argv,
                                  const flare_settings_option_t *extra, size_t nextra,
                                  int *exit_code);

/* The message of the last failed call on *s ("" when none): valid until
 * the next call on *s. */
FLARE_API const char *flare_settings_error(const flare_settings_t *s);

/* *out = the app configuration (limits, timeouts, workers...) that s
 * holds, for flare_app_new. */
FLARE_API void flare_settings_app_config(const flare_settings_t *s, flare_config_t *out);

/* Adds every listener to app with flare_app_listen (TLS ones with their
 * certificates and tls-handshake-timeout), in order, then the admin-listen
 * address with flare_app_admin_listen (flare/metrics.h), and mounts every
 * static directory with flare_static (opts: NULL for the defaults). Before
 * flare_app_run, which then takes NULL as its address. 0, or the failing
 * call's code with flare_settings_error naming the key ("listen
 * 0.0.0.0:443: ..."). */
FLARE_API int flare_settings_apply(flare_settings_t *s, flare_app_t *app,
                                   const flare_static_opts_t *opts);
/* The two halves of flare_settings_apply (s, app, opts as there). */
FLARE_API int flare_settings_listen(flare_settings_t *s, flare_app_t *app);
FLARE_API int flare_settings_static(flare_settings_t *s, flare_app_t *app,
                                    const flare_static_opts_t *opts);

/* What flare_settings_setup does besides its defaults: a zeroed struct (or
 * NULL) is all defaults. */
typedef struct flare_settings_setup_opts {
    const flare_static_opts_t *static_opts; /* options of the `static` directories
                                               [NULL: flare_static's defaults] */
    bool no_static;    /* the program mounts `static` itself (it reads s->statics):
                          not mounted here */
    void *reserved[4]; /* zero: room to grow without changing the struct's size */
} flare_settings_setup_opts_t;

/* Wires into app everything the settings hold that needs no route, in
 * one call after flare_app_new (made from flare_settings_app_config) and
 * before flare_app_run; routes may come before or after it:
 *   - logging (flare/log.h) when one of its keys is set: flare_log_setup
 *     with log (stderr when unset), log-level [error], log-format,
 *     access-log (none when unset) and access-log-format; the files are
 *     opened here, so an unwritable path fails now (with none set there is
 *     no logger, no writer thread: the library's own errors go to stderr);
 *   - a Redis session store when `sessions` is redis://... (flare_redis_open:
 *     the URL is checked here, the connections are made as the workers
 *     start), for flare_settings_sessions;
 *   - the listeners and admin-listen (flare_settings_listen);
 *   - when rate-limit is set, flare_ratelimit on every request (flare_use:
 *     ahead of the middlewares the program adds after this call), with
 *     rate-limit-burst; its buckets in Redis when rate-limit-redis is set
 *     (a handle of its own whose command timeout is rate-limit-timeout;
 *     rate-limit-fail: closed answers 503 when Redis cannot decide);
 *   - the static directories (flare_settings_static with
 *     opts->static_opts) unless opts->no_static;
 *   - SIGHUP (flare_settings_watch), which then also sets the new log-level.
 * Call it once per app. *s must stay valid until flare_app_free(app); the
 * app owns what is opened here (the logger, the Redis handle). 0, or the
 * failing call's code with flare_settings_error naming the key ("log:
 * cannot open /x/e.log: ...", "sessions redis://...: ...", "listen ...").
 * On failure main frees the app and exits 1 (the server cannot start). */
FLARE_API int flare_settings_setup(flare_settings_t *s, flare_app_t *app,
                                   const flare_settings_setup_opts_t *opts);

/* flare_app_new with flare_settings_app_config, then flare_settings_setup
 * (with opts):
 * the app of a main in one call. On success *out is the app (free it with
 * flare_app_free before *s); on failure *out is NULL, nothing is left
 * behind, and flare_settings_error says why (main exits 1). */
FLARE_API int flare_settings_app_new(flare_settings_t *s, const flare_settings_setup_opts_t *opts,
                                     flare_app_t **out);

/* The session middleware as the settings s configure it (flare_sessions):
 * *cfg (NULL: all defaults) with `secure` from session-secure
 * (flare_settings_session_config) and the store from `sessions`: "memory"
 * or unset keeps cfg->store (.load NULL: a new in-memory store);
 * redis://... is a store on the Redis that flare_settings_setup opened
 * (opened here when setup was not called), keys prefixed with
 * redis_prefix (NULL: "flare:sess:"; flare_session_redis_store). Each call
 * makes its own middleware (into *out) and store, owned by the app. 0, or FLARE_EINVAL,
 * FLARE_ENOMEM with flare_settings_error saying what failed. */
FLARE_API int flare_settings_sessions(flare_settings_t *s, flare_app_t *app,
                                      const flare_session_config_t *cfg, const char *redis_prefix,
                                      flare_middleware_t *out);

/* Sets the fields of a WebSocket route's configuration that settings
 * hold: origins (ws-origin; left as it is when none is given). cfg->origins
 * then points into *s, which must outlive the flare_ws_route call (it
 * copies them). */
FLARE_API void flare_settings_ws_config(const flare_settings_t *s, flare_ws_config_t *cfg);

/* Sets the fields of a session configuration (*cfg) that settings s hold:
 * secure (session-secure; left as it is when not given). */
FLARE_API void flare_settings_session_config(const flare_settings_t *s,
                                             flare_session_config_t *cfg);

/* Reads the configuration of cur again as parse_args did (the same file, the
 * environment as it is now, the same flags and extra options) into *next
 * (initialized here; free it with flare_settings_free). Extra options'
 * `where` is not written. 0, or an error in flare_settings_error(next), for
 * example "hello.yaml:3: workers: ...". */
FLARE_API int flare_settings_reload(const flare_settings_t *cur, flare_settings_t *next);

/* The keys whose values differ between a and b ("workers", "listen",
 * "tls-cert" for any certificate path, extra options by name), up to max
 * of them in out (static strings); returns how many differ. */
FLARE_API size_t flare_settings_diff(const flare_settings_t *a, const flare_settings_t *b,
                                     const char **out, size_t max);

/* Sets on s the callback fn, called (with ud) after each successful reload
 * with the settings in effect, whose logging fields (log, log-level,
 * log-format, access-log, access-log-format) are the ones in effect: set the level when the
 * program set up the logger itself (flare_settings_setup sets it before
 * this runs; new log and access-log names were applied already,
 * flare_log_reopen_as; a name that could not be opened, and a format
 * that changed, are still the old ones here).
 * Runs on the thread that runs flare_app_run. Set it after
 * flare_settings_parse_args (which starts from a clean structure). */
typedef void (*flare_settings_log_fn)(const flare_settings_t *s, void *ud);
FLARE_API void flare_settings_on_log(flare_settings_t *s, flare_settings_log_fn fn, void *ud);

/* Makes SIGHUP (flare_app_on_reload) re-read the configuration:
 *   - a file that does not parse or check changes nothing; one line on
 *     stderr says why ("flare: reload: nothing changed: hello.yaml:7: ...");
 *   - the TLS certificates and keys are re-read (flare_app_tls_reload) when
 *     the app has a TLS listener; a new path for them is logged as needing
 *     an upgrade (the files at the paths in effect are what is re-read);
 *   - the logging fields are taken and the flare_settings_on_log callback
 *     runs; new log/access-log names are opened first (flare_log_reopen_as)
 *     and kept only if that worked; a new log-level is set when
 *     flare_settings_setup made the logger (else it counts as applied
 *     only with an on_log callback); an access log turned on or off, and a
 *     new log-format or access-log-format, need an upgrade (the running
 *     logger keeps its formats);
 *   - every other key that differs is logged as needing an upgrade.
 * *s must stay valid until flare_app_free(app). A second call for the same
 * app does nothing. 0 or FLARE_E* from flare_app_on_reload. */
FLARE_API int flare_settings_watch(flare_settings_t *s, flare_app_t *app);

/* Prints the effective configuration of s to out as YAML (what --check-config
 * shows). */
FLARE_API int flare_settings_print(const flare_settings_t *s, FILE *out);

#ifdef __cplusplus
}
#endif

#endif
