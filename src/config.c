/* The application configuration: defaults and bounds, in one place.
 *
 * A zero field means its default (so a zeroed flare_config_t is the default
 * configuration); every other value is checked against what the code that
 * uses it can represent, and refused with a message naming the field rather
 * than truncated or wrapped later:
 *   - max_head: the read buffer grows to max_head + 4 KiB and keeps its
 *     capacity and offsets in 32 bits; the parser returns the head length
 *     as an int;
 *   - max_headers: each exchange holds an array of max_headers fields
 *     (max_headers * sizeof(flare_header_t) bytes, allocated per exchange);
 *   - workers: a worker id is packed into 16 bits of a WebSocket connection
 *     id (ws/hub.c);
 *   - the timeouts: compared with 64-bit millisecond clocks, but kept within
 *     int milliseconds so that they can be handed to poll-style waits. */
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "worker.h"

#define MAX_WORKERS     1024u
#define MAX_JOB_THREADS 1024u
#define MAX_TIMEOUT_MS  ((uint64_t)INT_MAX)
#define MAX_HEAD        ((uint64_t)1 << 30) /* 1 GiB: far inside uint32_t and int */
#define MAX_HEADERS     65535u
#define MAX_BODY        ((uint64_t)1 << 40) /* 1 TiB */
#define MAX_CONN_BODY   ((uint64_t)1 << 42) /* 4 TiB */

void flare_config_init(flare_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->workers = 0;
    cfg->max_conns = 100000;
    cfg->header_timeout_ms = 10000;
    cfg->body_timeout_ms = 30000;
    cfg->idle_timeout_ms = 60000;
    cfg->write_timeout_ms = 30000;
    cfg->drain_timeout_ms = 10000;
    cfg->max_request_line = 8192;
    cfg->max_head = 32768;
    cfg->max_headers = 100;
    cfg->max_body = 1024 * 1024;
    cfg->job_threads = 4;
    cfg->backlog = 4096;
    cfg->max_conn_body = 0; /* 4 x max_body, whatever max_body becomes (flare_app_new) */
}

static int too_big(const char *field, uint64_t v, uint64_t max)
{
    return flare__fail(FLARE_EINVAL, 0, "flare_config_t.%s: %llu is more than %llu", field,
                       (unsigned long long)v, (unsigned long long)max);
}

int flare__config_resolve(flare_config_t *out, const flare_config_t *in)
{
    flare_config_t def;
    flare_config_init(&def);
    *out = in != NULL ? *in : def;
#define DEFAULT(f)   \
    if (out->f == 0) \
        out->f = def.f;
    DEFAULT(workers) /* 0 itself: one per CPU, decided when the app runs */
    DEFAULT(max_conns)
    DEFAULT(header_timeout_ms)
    DEFAULT(body_timeout_ms)
    DEFAULT(idle_timeout_ms)
    DEFAULT(write_timeout_ms)
    DEFAULT(drain_timeout_ms)
    DEFAULT(max_request_line)
    DEFAULT(max_head)
    DEFAULT(max_headers)
    DEFAULT(max_body)
    DEFAULT(job_threads)
    DEFAULT(backlog)
#undef DEFAULT
    if (out->max_conn_body == 0 && out->max_body <= MAX_BODY)
        out->max_conn_body = 4 * out->max_body;

#define CHECK_MAX(f, max)         \
    if ((uint64_t)out->f > (max)) \
        return too_big(#f, (uint64_t)out->f, (max));
    CHECK_MAX(workers, MAX_WORKERS)
    CHECK_MAX(header_timeout_ms, MAX_TIMEOUT_MS)
    CHECK_MAX(body_timeout_ms, MAX_TIMEOUT_MS)
    CHECK_MAX(idle_timeout_ms, MAX_TIMEOUT_MS)
    CHECK_MAX(write_timeout_ms, MAX_TIMEOUT_MS)
    CHECK_MAX(drain_timeout_ms, MAX_TIMEOUT_MS)
    CHECK_MAX(max_request_line, MAX_HEAD)
    CHECK_MAX(max_head, MAX_HEAD)
    CHECK_MAX(max_headers, MAX_HEADERS)
    CHECK_MAX(max_body, MAX_BODY)
    CHECK_MAX(max_conn_body, MAX_CONN_BODY)
    CHECK_MAX(job_threads, MAX_JOB_THREADS)
#undef CHECK_MAX
    if (out->backlog < 0)
        return flare__fail(FLARE_EINVAL, 0, "flare_config_t.backlog: %d is negative", out->backlog);
    if ((unsigned)out->io > FLARE_IO_URING)
        return flare__fail(FLARE_EINVAL, 0, "flare_config_t.io: %u is not a flare_io_backend_t",
                           (unsigned)out->io);
    return 0;
}
