/* The SQLite driver's result block (sqlite_int.h): rows materialised on a
 * pool thread into a scratch it keeps, copied into one allocation, read on
 * the worker through the flare_db_res_ops_t getters. Numbers read as text
 * are formatted on demand into memory the block owns. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "data/sqlite_int.h"

#define SCRATCH_KEEP (1u << 20) /* a pool thread keeps this much scratch */

static int sc_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * elem);
    if (q == NULL)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

static int sc_cell(scratch_t *sc, cell_t c)
{
    if (sc_grow((void **)&sc->cells, &sc->capcells, sc->ncells + 1, sizeof(cell_t)) != 0)
        return -1;
    sc->cells[sc->ncells++] = c;
    return 0;
}

static int sc_text(scratch_t *sc, uint8_t type, const void *p, size_t n)
{
    if (n > UINT32_MAX || sc_grow((void **)&sc->bytes, &sc->capbytes, sc->nbytes + n + 1, 1) != 0)
        return -1;
    if (n > 0)
        memcpy(sc->bytes + sc->nbytes, p, n);
    sc->bytes[sc->nbytes + n] = '\0';
    cell_t c = { .type = type, .len = (uint32_t)n, .off = sc->nbytes };
    sc->nbytes += n + 1;
    return sc_cell(sc, c);
}

sq_res_t *flare__sq_res_build(const scratch_t *sc, size_t nrows, size_t ncols, uint64_t affected,
                              const char *msg)
{
    size_t ncells = sc != NULL ? sc->ncells : 0, nbytes = sc != NULL ? sc->nbytes : 0;
    size_t mlen = strlen(msg);
    sq_res_t *r = malloc(sizeof(*r) + ncells * sizeof(cell_t) + nbytes + mlen + 1);
    if (r == NULL)
        return NULL;
    *r = (sq_res_t){ .nrows = nrows, .ncols = ncols, .affected = affected };
    r->bytes = (char *)&r->cells[ncells];
    if (ncells > 0)
        memcpy(r->cells, sc->cells, ncells * sizeof(cell_t));
    if (nbytes > 0)
        memcpy(r->bytes, sc->bytes, nbytes);
    memcpy(r->bytes + nbytes, msg, mlen + 1);
    r->msg = r->bytes + nbytes;
    return r;
}

void flare__sq_res_free(sq_res_t *r)
{
    if (r == NULL)
        return;
    while (r->conv != NULL) {
        conv_t *c = r->conv;
        r->conv = c->next;
        free(c);
    }
    free(r);
}

static const cell_t *res_cell(const flare_db_res_t *r, size_t row, size_t col)
{
    const sq_res_t *s = r->impl;
    return &s->cells[s->ncols + row * s->ncols + col];
}

static const char *op_col_name(const flare_db_res_t *r, size_t col)
{
    const sq_res_t *s = r->impl;
    return s->bytes + s->cells[col].off;
}

static bool op_is_null(const flare_db_res_t *r, size_t row, size_t col)
{
    return res_cell(r, row, col)->type == FLARE_DB_NULL;
}

static int64_t dbl_to_i64(double d)
{
    if (!(d == d))
        return 0;
    if (d >= 9223372036854775807.0)
        return INT64_MAX;
    if (d <= -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)d;
}

/* Text is NUL-terminated in the block; what is not a number gives 0. */
static int64_t op_get_int64(const flare_db_res_t *r, size_t row, size_t col)
{
    const cell_t *c = res_cell(r, row, col);
    const sq_res_t *s = r->impl;
    switch (c->type) {
    case FLARE_DB_INT64:
        return c->i;
    case FLARE_DB_DOUBLE:
        return dbl_to_i64(c->d);
    case FLARE_DB_TEXT:
    case FLARE_DB_BYTES: {
        const char *p = s->bytes + c->off;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (*end == '.' || *end == 'e' || *end == 'E')
            return dbl_to_i64(strtod(p, NULL));
        return end == p ? 0 : v;
    }
    default:
        return 0;
    }
}

static double op_get_double(const flare_db_res_t *r, size_t row, size_t col)
{
    const cell_t *c = res_cell(r, row, col);
    const sq_res_t *s = r->impl;
    switch (c->type) {
    case FLARE_DB_INT64:
        return (double)c->i;
    case FLARE_DB_DOUBLE:
        return c->d;
    case FLARE_DB_TEXT:
    case FLARE_DB_BYTES:
        return strtod(s->bytes + c->off, NULL);
    default:
        return 0.0;
    }
}

/* Room for a number's text in the result (freed with it). */
static char *res_conv(sq_res_t *s, size_t n)
{
    if (s->conv == NULL || s->conv->cap - s->conv->used < n) {
        size_t cap = n > 1024 ? n : 1024;
        conv_t *c = malloc(sizeof(*c) + cap);
        if (c == NULL)
            return NULL;
        *c = (conv_t){ .next = s->conv, .cap = cap };
        s->conv = c;
    }
    char *p = s->conv->buf + s->conv->used;
    s->conv->used += n;
    return p;
}

/* Numbers as SQLite prints them: digits, or "%!.15g" (1.0 stays "1.0"). */
static flare_str_t op_get_text(const flare_db_res_t *r, size_t row, size_t col)
{
    const cell_t *c = res_cell(r, row, col);
    sq_res_t *s = r->impl;
    if (c->type == FLARE_DB_TEXT || c->type == FLARE_DB_BYTES)
        return (flare_str_t){ s->bytes + c->off, c->len };
    if (c->type == FLARE_DB_NULL)
        return (flare_str_t){ "", 0 };
    char *p = res_conv(s, 32);
    if (p == NULL)
        return (flare_str_t){ "", 0 };
    if (c->type == FLARE_DB_INT64) {
        size_t n = 0;
        uint64_t u = (uint64_t)c->i;
        if (c->i < 0) {
            p[n++] = '-';
            u = 0 - u;
        }
        n += flare__u64toa(p + n, u);
        p[n] = '\0';
        return (flare_str_t){ p, n };
    }
    sqlite3_snprintf(32, p, "%!.15g", c->d);
    return (flare_str_t){ p, strlen(p) };
}

static flare_str_t op_get_bytes(const flare_db_res_t *r, size_t row, size_t col)
{
    return op_get_text(r, row, col);
}

const flare_db_res_ops_t flare__sq_res_ops = {
    .col_name = op_col_name,
    .is_null = op_is_null,
    .get_int64 = op_get_int64,
    .get_double = op_get_double,
    .get_text = op_get_text,
    .get_bytes = op_get_bytes,
};

/* Steps st to the end, materialising its rows into sc. */
int flare__sq_step_all(sqlite3_stmt *st, scratch_t *sc, size_t *nrows, size_t *ncols,
                       const char **why)
{
    sc->ncells = sc->nbytes = 0;
    int nc = sqlite3_column_count(st);
    *ncols = (size_t)nc;
    *nrows = 0;
    for (int i = 0; i < nc; i++) {
        const char *name = sqlite3_column_name(st, i);
        if (name == NULL || sc_text(sc, FLARE_DB_TEXT, name, strlen(name)) != 0)
            goto nomem;
    }
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        for (int i = 0; i < nc; i++) {
            int r = 0;
            switch (sqlite3_column_type(st, i)) {
            case SQLITE_INTEGER:
                r = sc_cell(sc,
                            (cell_t){ .type = FLARE_DB_INT64, .i = sqlite3_column_int64(st, i) });
                break;
            case SQLITE_FLOAT:
                r = sc_cell(sc,
                            (cell_t){ .type = FLARE_DB_DOUBLE, .d = sqlite3_column_double(st, i) });
                break;
            case SQLITE_TEXT: {
                const unsigned char *p = sqlite3_column_text(st, i);
                size_t n = (size_t)sqlite3_column_bytes(st, i);
                r = p == NULL ? -1 : sc_text(sc, FLARE_DB_TEXT, p, n);
                break;
            }
            case SQLITE_BLOB: {
                const void *p = sqlite3_column_blob(st, i);
                size_t n = (size_t)sqlite3_column_bytes(st, i);
                r = p == NULL && n > 0 ? -1 : sc_text(sc, FLARE_DB_BYTES, p, n);
                break;
            }
            default:
                r = sc_cell(sc, (cell_t){ .type = FLARE_DB_NULL });
                break;
            }
            if (r != 0)
                goto nomem;
        }
        (*nrows)++;
    }
    return rc;
nomem:
    *why = "database: out of memory for the result";
    return SQLITE_NOMEM;
}

void flare__sq_scratch_trim(scratch_t *sc)
{
    if (sc->capbytes > SCRATCH_KEEP || sc->capcells * sizeof(cell_t) > SCRATCH_KEEP) {
        free(sc->cells);
        free(sc->bytes);
        *sc = (scratch_t){ 0 };
    }
}
