/* Settings internals shared by settings.c (the key table, the three
 * sources, checks, diff), settings_yaml.c (the file, the printout) and
 * settings_app.c (apply, check-config, the reload hook). */
#ifndef FLARE_OBS_SETTINGS_INT_H
#define FLARE_OBS_SETTINGS_INT_H

#include <stdint.h>

#include "flare/settings.h"

/* What a standard key holds and how its text is read. */
typedef enum settings_kind {
    K_UINT,         /* unsigned at off */
    K_INT,          /* int at off (backlog) */
    K_SIZE,         /* size_t at off, "64k" */
    K_MS,           /* unsigned ms at off, "500ms" */
    K_BOOL,         /* bool at off */
    K_STR,          /* char * at off */
    K_ENUM,         /* char * at off, one of `choices` ("a|b|c") */
    K_RATE,         /* char * at off, a rate: "10", "10/s", "5/m", "100/h" */
    K_LIST,         /* char ** at off, count at off2 */
    K_LISTEN,       /* a listener address: the list */
    K_LISTEN_PLAIN, /* one more plain listener (hello's --listen-plain) */
    K_TLS_CERT,     /* listener 0's certificate */
    K_TLS_KEY,
    K_SNI_CERT, /* one more certificate for listener 0 */
    K_SNI_KEY,
    K_CONFIG, /* flags only: --config FILE, --check-config, --help */
    K_CHECK,
    K_HELP
} settings_kind_t;

typedef struct settings_key {
    const char *name;
    settings_kind_t kind;
    size_t off, off2;
    uint64_t min, max;
    const char *choices;
    const char *help;
    bool file; /* may appear in the file (else flags only, and env when `env`) */
    bool env;
} settings_key_t;

/* Where a value comes from: the layers, in precedence order. */
enum { LAYER_DEFAULT, LAYER_FILE, LAYER_ENV, LAYER_FLAGS };

typedef struct settings_src {
    int layer;
    const char *file; /* LAYER_FILE */
    unsigned line;
} settings_src_t;

typedef union settings_value {
    char *s;
    unsigned u;
    bool b;
    size_t z;
} settings_value_t;

struct flare__settings_priv {
    char error[1024];
    int argc;
    char **argv; /* a copy, for reload */
    const flare_settings_option_t *extra;
    size_t nextra;
    settings_value_t *ext;     /* nextra values */
    settings_value_t *ext_def; /* the defaults, as `where` held them */
    uint8_t *layer;            /* by option index: the layer that last set a list */
    size_t nsni_cert, nsni_key;
    flare_settings_log_fn log_fn;
    void *log_ud;
    flare_app_t *app;          /* flare_settings_watch */
    bool watching;             /* its hook is registered on app */
    bool logger;               /* flare_settings_setup made the logger: a reload sets the level */
    struct flare_redis *redis; /* the `sessions` Redis, on redis_app */
    flare_app_t *redis_app;
};

extern const settings_key_t flare__settings_keys[];
extern const size_t flare__settings_nkeys;

/* Option index (standard keys first, then the extras) for a name, or -1. */
int flare__settings_find(const flare_settings_t *s, const char *name, size_t len);

/* Sets option idx from text; FLARE_EINVAL with the error naming src. */
int flare__settings_set(flare_settings_t *s, int idx, const char *val, const settings_src_t *src);

/* Appends a listener (addr copied, origin "file:line"); clears the list
 * first when this is the first `listen` of the layer. Returns it, or NULL
 * (FLARE_ENOMEM, error set). */
flare_settings_listener_t *flare__settings_add_listener(flare_settings_t *s, const char *addr,
                                                        const settings_src_t *src, bool replace);
int flare__settings_add_sni(flare_settings_t *s, flare_settings_listener_t *l, const char *cert,
                            const char *key);
int flare__settings_strset(flare_settings_t *s, char **slot, const char *val);

/* Formats the error ("hello.yaml:7: workers: " and fmt); returns FLARE_EINVAL. */
int flare__settings_fail(flare_settings_t *s, const settings_src_t *src, const char *key,
                         const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int flare__settings_nomem(flare_settings_t *s);

/* rate-limit-timeout's default: a decision from Redis takes well under a
 * millisecond on a LAN; past this the request is let through (or 503) */
#define FLARE__RATE_LIMIT_TIMEOUT_MS 250

/* A rate as K_RATE reads it ("N", "N/s", "N/m", "N/h"; N a positive
 * decimal number) into *per_second: 0, or -1 when v is not one. */
int flare__settings_rate(const char *v, double *per_second);

/* settings_yaml.c: loads the file as LAYER_FILE. */
int flare__settings_load_file(flare_settings_t *s, const char *path);

/* settings_app.c: --check-config's scratch app. */
int flare__settings_check_app(flare_settings_t *s);

#endif
