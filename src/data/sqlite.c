/* Placeholder: the sqlite driver is being written. */
#include "core/core.h"
#include "data/db_int.h"

static int open_(flare_db_t *db, const char *url)
{
    (void)db;
    (void)url;
    return flare__fail(FLARE_EINVAL, 0, "sqlite driver: not built yet");
}
static void close_(flare_db_t *db)
{
    (void)db;
}
static int winit(flare_db_t *db, flare_worker_t *w, flare_db_wstats_t *st, void **ws)
{
    (void)db, (void)w, (void)st, (void)ws;
    return FLARE_EINVAL;
}
static void wdispose(flare_db_t *db, flare_worker_t *w, void *ws)
{
    (void)db, (void)w, (void)ws;
}
static int query(void *ws, flare_db_tx_t *tx, const char *sql, const flare_db_val_t *p, size_t n,
                 flare_db_fn cb, void *ud)
{
    (void)ws, (void)tx, (void)sql, (void)p, (void)n, (void)cb, (void)ud;
    return FLARE_EINVAL;
}
static int begin(void *ws, flare_req_t *owner, flare_db_tx_fn cb, void *ud)
{
    (void)ws, (void)owner, (void)cb, (void)ud;
    return FLARE_EINVAL;
}
static int tx_end(flare_db_tx_t *tx, bool commit, flare_db_fn cb, void *ud)
{
    (void)tx, (void)commit, (void)cb, (void)ud;
    return FLARE_EINVAL;
}
const flare_db_driver_t flare__db_sqlite = {
    .name = "sqlite",
    .open = open_,
    .close = close_,
    .worker_init = winit,
    .worker_dispose = wdispose,
    .query = query,
    .begin = begin,
    .tx_end = tx_end,
};
