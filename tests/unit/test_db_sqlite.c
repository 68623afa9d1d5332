/* data/sqlite.c: the SQLite driver driven through the public API on a
 * running app — types and conversions, parameters ($1..$n, injection),
 * errors with extended codes, batches, WAL readers beside the writer, the
 * queue bound and deadline, the query timeout, transactions (commit,
 * rollback, rolled back when the owner request ends), shutdown with
 * queries pending, files that outlive the app, :memory:, bad paths, stats,
 * the synchronous level chosen in the URL.
 *
 * Queries are issued on worker 0 (a task posted with flare_app_post); the
 * callbacks copy what they got into `recs`; the test thread waits for them
 * and checks (cmocka asserts only on the test thread). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include <flare/db.h>
#include <flare/flare.h>

#include "harness.h"

/* ---- what the callbacks saw ---- */

#define MAXREC  64
#define MAXCELL 16

typedef struct cellrec {
    bool null;
    int64_t i;
    double d;
    char text[96];
    size_t tlen;
    char bytes[96];
    size_t blen;
} cellrec_t;

typedef struct rec {
    bool done;
    int rc; /* what the call returned */
    int err, code;
    flare_db_errclass_t cls;
    char msg[160];
    size_t rows, cols;
    uint64_t affected;
    char names[4][16];
    int b_rc, x_rc; /* flare_db_res_col_index of "b" (index in b_col) and "x" */
    size_t b_col;
    cellrec_t cells[MAXCELL]; /* row-major, first MAXCELL */
    int seq;                  /* completion order */
} rec_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static rec_t recs[MAXREC];
static int ndone, seq;

static harness_t h;
static flare_db_t *db;

static void reset_recs(void)
{
    pthread_mutex_lock(&mu);
    memset(recs, 0, sizeof(recs));
    ndone = 0;
    seq = 0;
    pthread_mutex_unlock(&mu);
}

static void record(rec_t *rc, const flare_db_res_t *r)
{
    pthread_mutex_lock(&mu);
    rc->err = flare_db_res_error(r);
    rc->code = flare_db_res_code(r);
    rc->cls = flare_db_error_class(r);
    snprintf(rc->msg, sizeof(rc->msg), "%s", flare_db_res_message(r));
    rc->rows = flare_db_res_rows(r);
    rc->cols = flare_db_res_cols(r);
    rc->affected = flare_db_res_affected(r);
    for (size_t c = 0; c < rc->cols && c < 4; c++)
        snprintf(rc->names[c], sizeof(rc->names[c]), "%s", flare_db_res_col_name(r, c));
    size_t x_col = 99;
    rc->b_rc = flare_db_res_col_index(r, "b", &rc->b_col);
    rc->x_rc = flare_db_res_col_index(r, "x", &x_col);
    if (rc->x_rc == 0 || x_col != 99)
        rc->x_rc = 1; /* "x" is no column of these tests: never found, *col untouched */
    size_t k = 0;
    for (size_t row = 0; row < rc->rows; row++) {
        for (size_t c = 0; c < rc->cols && k < MAXCELL; c++, k++) {
            cellrec_t *cr = &rc->cells[k];
            cr->null = flare_db_is_null(r, row, c);
            cr->i = flare_db_get_int64(r, row, c);
            cr->d = flare_db_get_double(r, row, c);
            flare_str_t t = flare_db_get_text(r, row, c);
            cr->tlen = t.len;
            memcpy(cr->text, t.ptr, t.len < sizeof(cr->text) ? t.len : sizeof(cr->text));
            flare_str_t b = flare_db_get_bytes(r, row, c);
            cr->blen = b.len;
            memcpy(cr->bytes, b.ptr, b.len < sizeof(cr->bytes) ? b.len : sizeof(cr->bytes));
        }
    }
    rc->seq = seq++;
    rc->done = true;
    ndone++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void rec_cb(flare_db_res_t *r, void *ud)
{
    record(ud, r);
}

static void call_failed(rec_t *rc, int rcode)
{
    pthread_mutex_lock(&mu);
    rc->rc = rcode;
    rc->done = true;
    rc->seq = seq++;
    ndone++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

/* Waits until n callbacks have run (10 s at most). */
static void wait_done(int n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 20;
    pthread_mutex_lock(&mu);
    while (ndone < n) {
        if (pthread_cond_timedwait(&cv, &mu, &ts) != 0)
            break;
    }
    int got = ndone;
    pthread_mutex_unlock(&mu);
    assert_int_equal(got, n);
}

/* ---- queries, issued on worker 0 ---- */

typedef struct qspec {
    const char *sql;
    flare_db_val_t p[6];
    size_t n;
} qspec_t;

typedef struct batch {
    const qspec_t *qs;
    size_t n;
    size_t first; /* recs[first..] */
} batch_t;

static uint64_t batch_queue_len; /* queue_len right after batch_task issued its batch */

static void batch_task(void *ud)
{
    batch_t *b = ud;
    flare_worker_t *w = flare_app_worker(h.app, 0);
    for (size_t i = 0; i < b->n; i++) {
        rec_t *rc = &recs[b->first + i];
        /* the values are copied during the call: pass a copy and clobber
         * it afterwards */
        flare_db_val_t p[6];
        char text[6][128];
        for (size_t k = 0; k < b->qs[i].n; k++) {
            p[k] = b->qs[i].p[k];
            if ((p[k].type == FLARE_DB_TEXT || p[k].type == FLARE_DB_BYTES) && p[k].s.ptr != NULL &&
                p[k].s.len <= sizeof(text[k])) {
                memcpy(text[k], p[k].s.ptr, p[k].s.len);
                p[k].s.ptr = text[k];
            }
        }
        int r = flare_db_query(db, w, b->qs[i].sql, p, b->qs[i].n, rec_cb, rc);
        memset(text, 'X', sizeof(text));
        if (r != 0)
            call_failed(rc, r);
    }
    flare_db_stats_t st;
    flare_db_stats(db, 0, &st);
    batch_queue_len = st.queue_len;
    free(b);
}

/* Runs qs on worker 0 in one go, waits for every callback; results in
 * recs[first..first+n). */
static void run_batch_at(size_t first, const qspec_t *qs, size_t n)
{
    batch_t *b = malloc(sizeof(*b));
    *b = (batch_t){ qs, n, first };
    int before;
    pthread_mutex_lock(&mu);
    before = ndone;
    pthread_mutex_unlock(&mu);
    assert_int_equal(flare_app_post(h.app, 0, batch_task, b), 0);
    wait_done(before + (int)n);
}

static rec_t *q1(size_t at, const char *sql, const flare_db_val_t *p, size_t n)
{
    qspec_t q = { .sql = sql, .n = n };
    for (size_t i = 0; i < n; i++)
        q.p[i] = p[i];
    run_batch_at(at, &q, 1);
    return &recs[at];
}

#define Q(at, sql, ...)                                \
    q1((at), (sql), (flare_db_val_t[]){ __VA_ARGS__ }, \
       sizeof((flare_db_val_t[]){ __VA_ARGS__ }) / sizeof(flare_db_val_t))
#define Q0(at, sql) q1((at), (sql), NULL, 0)

static void expect_ok(const rec_t *r)
{
    if (r->err != 0 || r->rc != 0)
        fprintf(stderr, "unexpected error in rec %d: %d/%d (code %d): %s\n", (int)(r - recs), r->rc,
                r->err, r->code, r->msg);
    assert_int_equal(r->rc, 0);
    assert_int_equal(r->err, 0);
}

/* ---- the app ---- */

static char dbpath[64];

static void make_path(void)
{
    snprintf(dbpath, sizeof(dbpath), "/tmp/flare-test-sqlite-%d.db", (int)getpid());
}

static void remove_db(void)
{
    char p[96];
    unlink(dbpath);
    snprintf(p, sizeof(p), "%s-wal", dbpath);
    unlink(p);
    snprintf(p, sizeof(p), "%s-shm", dbpath);
    unlink(p);
}

static void start(const char *url, const flare_db_config_t *cfg, unsigned workers)
{
    flare_config_t c;
    flare_config_init(&c);
    c.workers = workers;
    h.app = flare_app_new(&c);
    assert_non_null(h.app);
    int rc = flare_db_open(h.app, url, cfg, &db);
    if (rc != 0)
        fprintf(stderr, "open %s: %s\n", url, flare_last_error());
    assert_int_equal(rc, 0);
    assert_string_equal(flare_db_driver(db), "sqlite");
    assert_int_equal(harness_start(&h), 0);
    reset_recs();
}

static void stop(void)
{
    assert_int_equal(harness_stop(&h), 0);
}

static void finish_app(void)
{
    stop();
    flare_app_free(h.app);
    h.app = NULL;
    db = NULL;
}

/* ---- tests ---- */

static void tx_never(flare_db_tx_t *tx, flare_db_res_t *r, void *ud)
{
    (void)tx, (void)r, (void)ud;
    fail_msg("a refused flare_db_begin called back");
}

static void test_types(void **state)
{
    (void)state;
    start("sqlite::memory:", NULL, 1);
    expect_ok(
        Q0(0, "CREATE TABLE t (k INTEGER PRIMARY KEY, i INTEGER, d REAL, s TEXT, b BLOB, n)"));
    static const char blob[] = { 'a', 0, 'b', 0, (char)0xff };
    static const char quoted[] = "O'Reilly said \"hi\"; --";
    rec_t *r = Q(1, "INSERT INTO t VALUES ($1, $2, $3, $4, $5, $6)", FLARE_DB_INT(1),
                 FLARE_DB_INT(INT64_MIN), FLARE_DB_DBL(1.5), FLARE_DB_TEXTV(quoted, strlen(quoted)),
                 FLARE_DB_BYTESV(blob, sizeof(blob)), FLARE_DB_NULLV);
    expect_ok(r);
    assert_int_equal(r->affected, 1);
    assert_int_equal(r->cols, 0);
    /* off the worker's thread (this test's own): refused with a reason, no
     * callback, nothing touched */
    assert_int_equal(
        flare_db_query(db, flare_app_worker(h.app, 0), "SELECT 1", NULL, 0, rec_cb, &recs[0]),
        FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "off the thread of worker 0"));
    assert_int_equal(flare_db_begin(db, flare_app_worker(h.app, 0), NULL, tx_never, NULL),
                     FLARE_EINVAL);
    /* empty text and empty blob are values, not NULL */
    expect_ok(Q(2, "INSERT INTO t VALUES ($1, $2, $3, $4, $5, $6)", FLARE_DB_INT(2),
                FLARE_DB_INT(42), FLARE_DB_DBL(-0.25), FLARE_DB_TEXTV("", 0),
                FLARE_DB_BYTESV(NULL, 0), FLARE_DB_TEXTV("123", 3)));
    r = Q0(3, "SELECT i, d, s, b, n, typeof(s), typeof(b) FROM t ORDER BY k");
    expect_ok(r);
    assert_int_equal(r->rows, 2);
    assert_int_equal(r->cols, 7);
    assert_string_equal(r->names[0], "i");
    assert_string_equal(r->names[3], "b");
    assert_int_equal(r->b_rc, 0);
    assert_int_equal(r->b_col, 3);
    assert_int_equal(r->x_rc, FLARE_ENOTFOUND);
    const cellrec_t *c = r->cells;
    assert_false(c[0].null);
    assert_true(c[0].i == INT64_MIN);
    assert_int_equal(c[0].tlen, 20);
    assert_memory_equal(c[0].text, "-9223372036854775808", 20);
    assert_true(c[1].d == 1.5);
    assert_int_equal(c[1].tlen, 3);
    assert_memory_equal(c[1].text, "1.5", 3);
    assert_int_equal(c[1].i, 1);
    assert_int_equal(c[2].tlen, strlen(quoted));
    assert_memory_equal(c[2].text, quoted, strlen(quoted));
    assert_int_equal(c[2].i, 0); /* not a number */
    assert_int_equal(c[3].blen, sizeof(blob));
    assert_memory_equal(c[3].bytes, blob, sizeof(blob));
    assert_true(c[4].null);
    assert_int_equal(c[4].i, 0);
    assert_int_equal(c[4].tlen, 0);
    assert_memory_equal(c[5].text, "text", 4);
    assert_memory_equal(c[6].text, "blob", 4);
    c = r->cells + 7;
    assert_int_equal(c[0].i, 42);
    assert_memory_equal(c[0].text, "42", 2);
    assert_true(c[0].d == 42.0);
    assert_true(c[1].d == -0.25);
    assert_false(c[2].null);
    assert_int_equal(c[2].tlen, 0);
    assert_false(c[3].null);
    assert_int_equal(c[3].blen, 0);
    assert_int_equal(c[4].i, 123); /* text read as a number */
    assert_true(c[4].d == 123.0);
    /* a double that prints with its ".0", and out-of-range reads */
    r = Q0(4, "SELECT 2.0, 'x'");
    expect_ok(r);
    assert_int_equal(r->cells[0].tlen, 3);
    assert_memory_equal(r->cells[0].text, "2.0", 3);
    /* no rows, but columns */
    r = Q0(5, "SELECT k FROM t WHERE k < 0");
    expect_ok(r);
    assert_int_equal(r->rows, 0);
    assert_int_equal(r->cols, 1);
    assert_string_equal(r->names[0], "k");
    finish_app();
}

static void test_params_and_injection(void **state)
{
    (void)state;
    start("sqlite::memory:", NULL, 1);
    expect_ok(Q0(0, "CREATE TABLE users (name TEXT)"));
    static const char evil[] = "x'); DROP TABLE users; --";
    expect_ok(Q(1, "INSERT INTO users (name) VALUES ($1)", FLARE_DB_TEXTV(evil, strlen(evil))));
    static const char evil2[] = "' OR '1'='1";
    rec_t *r =
        Q(2, "SELECT count(*) FROM users WHERE name = $1", FLARE_DB_TEXTV(evil2, strlen(evil2)));
    expect_ok(r);
    assert_int_equal(r->cells[0].i, 0);
    r = Q0(3, "SELECT name, count(*) OVER () FROM users");
    expect_ok(r);
    assert_int_equal(r->rows, 1);
    assert_int_equal(r->cells[0].tlen, strlen(evil));
    assert_memory_equal(r->cells[0].text, evil, strlen(evil));
    /* the same $1 twice, and $2 before $1 */
    r = Q(4, "SELECT $1 + $1, $2 || '-' || $1", FLARE_DB_INT(21), FLARE_DB_TEXTV("b", 1));
    expect_ok(r);
    assert_int_equal(r->cells[0].i, 42);
    assert_int_equal(r->cells[1].tlen, 4);
    assert_memory_equal(r->cells[1].text, "b-21", 4);
    r = Q(5, "SELECT $2, $1, $3", FLARE_DB_TEXTV("one", 3), FLARE_DB_INT(2), FLARE_DB_NULLV);
    expect_ok(r);
    assert_int_equal(r->cells[0].i, 2);
    assert_memory_equal(r->cells[1].text, "one", 3);
    assert_true(r->cells[2].null);
    /* wrong counts and names are errors, not NULLs */
    r = Q(6, "SELECT $1", FLARE_DB_INT(1), FLARE_DB_INT(2));
    assert_int_equal(r->err, FLARE_EDB);
    assert_int_equal(r->code, SQLITE_RANGE);
    r = Q0(7, "SELECT $1");
    assert_int_equal(r->err, FLARE_EDB);
    r = Q(8, "SELECT :name", FLARE_DB_INT(1));
    assert_int_equal(r->err, FLARE_EDB);
    /* one statement per query: a second one is refused, not run */
    r = Q0(9, "SELECT 1; DROP TABLE users");
    assert_int_equal(r->err, FLARE_EDB);
    r = Q0(10, "SELECT count(*) FROM users; -- a comment is fine");
    expect_ok(r);
    assert_int_equal(r->cells[0].i, 1);
    finish_app();
}

static void test_errors_and_batch(void **state)
{
    (void)state;
    start("sqlite::memory:", NULL, 1);
    rec_t *r = Q0(0, "SELEC 1");
    assert_int_equal(r->err, FLARE_EDB);
    assert_int_equal(r->code, SQLITE_ERROR);
    assert_non_null(strstr(r->msg, "syntax error"));
    expect_ok(Q0(1, "CREATE TABLE k (id INTEGER PRIMARY KEY, v TEXT NOT NULL)"));
    expect_ok(Q(2, "INSERT INTO k VALUES ($1, $2)", FLARE_DB_INT(1), FLARE_DB_TEXTV("a", 1)));
    r = Q(3, "INSERT INTO k VALUES ($1, $2)", FLARE_DB_INT(1), FLARE_DB_TEXTV("b", 1));
    assert_int_equal(r->err, FLARE_EDB);
    assert_int_equal(r->code, SQLITE_CONSTRAINT_PRIMARYKEY);
    assert_non_null(strstr(r->msg, "UNIQUE"));
    r = Q(4, "INSERT INTO k VALUES ($1, $2)", FLARE_DB_INT(2), FLARE_DB_NULLV);
    assert_int_equal(r->code, SQLITE_CONSTRAINT_NOTNULL);
    r = Q0(5, "SELECT * FROM missing");
    assert_int_equal(r->err, FLARE_EDB);
    assert_non_null(strstr(r->msg, "no such table"));
    /* a statement that opens a transaction by hand is refused (and undone) */
    r = Q0(6, "BEGIN");
    assert_int_equal(r->err, FLARE_EDB);
    assert_int_equal(r->code, SQLITE_MISUSE);
    expect_ok(Q0(7, "SELECT 1"));

    /* 20 in one go, the 8th bad: the others are unaffected */
    qspec_t qs[20];
    for (int i = 0; i < 20; i++)
        qs[i] = (qspec_t){ .sql = i == 7 ? "SELECT nope FROM k" : "SELECT $1 * 10",
                           .n = i == 7 ? 0 : 1,
                           .p = { FLARE_DB_INT(i) } };
    reset_recs();
    run_batch_at(0, qs, 20);
    /* issued in one loop iteration, they went to the pool together at its
     * end: all 20 were still waiting when the last call returned */
    assert_int_equal(batch_queue_len, 20);
    for (int i = 0; i < 20; i++) {
        if (i == 7) {
            assert_int_equal(recs[i].err, FLARE_EDB);
            continue;
        }
        expect_ok(&recs[i]);
        assert_int_equal(recs[i].cells[0].i, i * 10);
    }
    finish_app();
}

/* A read that runs for a while: a recursive CTE. */
#define SLOW_READ(n)                                                               \
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < " #n \
    ") SELECT count(*) FROM c"

static void test_wal_readers_beside_writer(void **state)
{
    (void)state;
    make_path();
    remove_db();
    /* one reader: the long read holds it, so the first INSERT (never seen,
     * not known to write yet) must be told apart on the idle writer;
     * generous queue and query deadlines, as a sanitizer on a loaded machine
     * is slow (the long read passed the default 10 s under ASan at load 8) */
    flare_db_config_t cfg = {
        .pool_size = 1, .threads = 3, .queue_timeout_ms = 60000, .query_timeout_ms = 60000
    };
    char url[96];
    snprintf(url, sizeof(url), "sqlite:%s", dbpath);
    start(url, &cfg, 2);
    expect_ok(Q0(0, "PRAGMA journal_mode"));
    assert_memory_equal(recs[0].cells[0].text, "wal", 3);
    expect_ok(Q0(1, "CREATE TABLE w (v INTEGER)"));
    /* a long read, then writes: the writes finish first (they do not wait
     * behind the reader), and the read sees its own snapshot */
    qspec_t qs[6] = { { .sql = SLOW_READ(3000000) } };
    for (int i = 1; i < 6; i++)
        qs[i] = (qspec_t){ .sql = "INSERT INTO w VALUES ($1)", .n = 1, .p = { FLARE_DB_INT(i) } };
    reset_recs();
    run_batch_at(0, qs, 6);
    expect_ok(&recs[0]);
    assert_int_equal(recs[0].cells[0].i, 3000000);
    for (int i = 1; i < 6; i++) {
        expect_ok(&recs[i]);
        assert_int_equal(recs[i].affected, 1);
        assert_true(recs[i].seq < recs[0].seq);
    }
    rec_t *r = Q0(6, "SELECT count(*), sum(v) FROM w");
    expect_ok(r);
    assert_int_equal(r->cells[0].i, 5);
    assert_int_equal(r->cells[1].i, 15);
    flare_db_stats_t st;
    assert_int_equal(flare_db_stats(db, UINT32_MAX, &st), 0);
    assert_int_equal(st.conns_open, 2);
    assert_int_equal(st.conns_busy, 0);
    assert_int_equal(st.queue_len, 0);
    assert_int_equal(st.queries, 9);
    assert_int_equal(st.errors, 0);
    finish_app();
}

static void test_queue_full_and_deadline(void **state)
{
    (void)state;
    /* one connection, one thread: a slow query holds it */
    flare_db_config_t cfg = { .threads = 1, .queue_max = 2, .queue_timeout_ms = 100 };
    start("sqlite::memory:", &cfg, 1);
    qspec_t qs[6] = { { .sql = SLOW_READ(2000000) } };
    for (int i = 1; i < 6; i++)
        qs[i] = (qspec_t){ .sql = "SELECT 1" };
    run_batch_at(0, qs, 6);
    expect_ok(&recs[0]);
    int full = 0, waited = 0;
    for (int i = 1; i < 6; i++) {
        assert_int_equal(recs[i].err, FLARE_EUNAVAIL);
        /* no connection could take it: the portable class says so */
        assert_int_equal(recs[i].cls, FLARE_DB_ERR_CONNECTION);
        if (strstr(recs[i].msg, "queue_max") != NULL)
            full++;
        else if (strstr(recs[i].msg, "queue_timeout_ms") != NULL)
            waited++;
    }
    /* two were queued (and waited past 100 ms), the rest found it full */
    assert_int_equal(full + waited, 5);
    assert_true(full >= 3);
    assert_true(waited >= 1);
    flare_db_stats_t st;
    assert_int_equal(flare_db_stats(db, 0, &st), 0);
    assert_int_equal(st.queries, 6);
    assert_int_equal(st.errors, 5);
    assert_int_equal(st.rejected, 5);
    assert_int_equal(st.conns_open, 1);
    finish_app();
}

static void test_query_timeout(void **state)
{
    (void)state;
    flare_db_config_t cfg = { .query_timeout_ms = 200 };
    start("sqlite::memory:", &cfg, 1);
    rec_t *r = Q0(0, SLOW_READ(1000000000000));
    assert_int_equal(r->err, FLARE_ETIMEDOUT);
    assert_int_equal(r->code, SQLITE_INTERRUPT);
    assert_non_null(strstr(r->msg, "query_timeout_ms"));
    /* the connection is fine afterwards */
    r = Q0(1, "SELECT 7");
    expect_ok(r);
    assert_int_equal(r->cells[0].i, 7);
    flare_db_stats_t st;
    assert_int_equal(flare_db_stats(db, UINT32_MAX, &st), 0);
    assert_int_equal(st.timeouts, 1);
    assert_int_equal(st.errors, 1);
    finish_app();
}

/* ---- transactions, chained on the worker ---- */

typedef struct txrun {
    bool commit;
    const char *val;
    rec_t *begin, *ins, *end;
    int again; /* what a second end returned (FLARE_ESTATE expected) */
} txrun_t;

static void tx_end_cb(flare_db_res_t *r, void *ud)
{
    txrun_t *t = ud;
    record(t->end, r);
}

static void tx_ins_cb(flare_db_res_t *r, void *ud)
{
    txrun_t *t = ud;
    record(t->ins, r);
}

static void tx_begun(flare_db_tx_t *tx, flare_db_res_t *r, void *ud)
{
    txrun_t *t = ud;
    if (tx == NULL) {
        record(t->begin, r);
        return;
    }
    flare_db_val_t v = FLARE_DB_TEXTV(t->val, strlen(t->val));
    int rc = flare_db_tx_query(tx, "INSERT INTO acct (name) VALUES ($1)", &v, 1, tx_ins_cb, t);
    if (rc != 0)
        call_failed(t->ins, rc);
    /* ends right away: the statement above runs first (in order) */
    rc = t->commit ? flare_db_tx_commit(tx, tx_end_cb, t) : flare_db_tx_rollback(tx, tx_end_cb, t);
    if (rc != 0)
        call_failed(t->end, rc);
    /* ending: another end is refused */
    t->again = flare_db_tx_commit(tx, NULL, NULL);
    record(t->begin, r);
}

static void tx_task(void *ud)
{
    int rc = flare_db_begin(db, flare_app_worker(h.app, 0), NULL, tx_begun, ud);
    if (rc != 0)
        call_failed(((txrun_t *)ud)->begin, rc);
}

/* A transaction the test thread steps through: begun, left open. */
static flare_db_tx_t *held_tx;

static void tx_held(flare_db_tx_t *tx, flare_db_res_t *r, void *ud)
{
    held_tx = tx;
    record(ud, r);
}

static void tx_hold_task(void *ud)
{
    int rc = flare_db_begin(db, flare_app_worker(h.app, 0), NULL, tx_held, ud);
    if (rc != 0)
        call_failed(ud, rc);
}

static void tx_commit_held_task(void *ud)
{
    int rc = flare_db_tx_commit(held_tx, rec_cb, ud);
    if (rc != 0)
        call_failed(ud, rc);
}

static void query_task_write(void *ud)
{
    int rc = flare_db_query(db, flare_app_worker(h.app, 0), "INSERT INTO acct VALUES ('dave')",
                            NULL, 0, rec_cb, ud);
    if (rc != 0)
        call_failed(ud, rc);
}

static void query_task_read(void *ud)
{
    int rc = flare_db_query(db, flare_app_worker(h.app, 0), "SELECT count(*) FROM acct", NULL, 0,
                            rec_cb, ud);
    if (rc != 0)
        call_failed(ud, rc);
}

/* An open transaction, left open (worker shutdown must roll it back). */
static void tx_left_open(flare_db_tx_t *tx, flare_db_res_t *r, void *ud)
{
    if (tx != NULL) {
        flare_db_val_t v = FLARE_DB_TEXTV("never", 5);
        int rc =
            flare_db_tx_query(tx, "INSERT INTO acct (name) VALUES ($1)", &v, 1, rec_cb, &recs[41]);
        if (rc != 0)
            call_failed(&recs[41], rc);
    }
    record(ud, r);
}

static void tx_open_task(void *ud)
{
    (void)ud;
    int rc = flare_db_begin(db, flare_app_worker(h.app, 0), NULL, tx_left_open, &recs[40]);
    if (rc != 0)
        call_failed(&recs[40], rc);
}

/* The owner-tied transactions, over HTTP. mode 0: answer in the BEGIN
 * callback; 1: in the INSERT's callback; 2: commit, answer in its
 * callback. Modes 0 and 1 never end the transaction themselves. */
typedef struct hx {
    flare_res_t *res;
    flare_db_tx_t *tx;
    int mode;
} hx_t;

static void hx_send(hx_t *x, int status)
{
    flare_res_t *res = x->res;
    free(x);
    flare_res_send(res, status, FLARE_STR("text/plain"), FLARE_STR("ok"));
}

static void hx_committed(flare_db_res_t *r, void *ud)
{
    hx_send(ud, flare_db_res_error(r) == 0 ? 200 : 500);
}

static void hx_inserted(flare_db_res_t *r, void *ud)
{
    hx_t *x = ud;
    if (flare_db_res_error(r) != 0 || x->mode == 1) {
        hx_send(x, flare_db_res_error(r) == 0 ? 201 : 500); /* rolls back: owner ends */
        return;
    }
    if (flare_db_tx_commit(x->tx, hx_committed, x) != 0)
        hx_send(x, 500);
}

static void hx_begun(flare_db_tx_t *tx, flare_db_res_t *r, void *ud)
{
    hx_t *x = ud;
    if (tx == NULL) {
        hx_send(x, 503);
        return;
    }
    x->tx = tx;
    flare_db_val_t v = FLARE_DB_TEXTV(x->mode == 2 ? "kept" : "dropped", x->mode == 2 ? 4 : 7);
    if (x->mode == 0) {
        /* the owner ends inside the BEGIN callback: rolled back at once */
        hx_send(x, 202);
        return;
    }
    (void)r;
    if (flare_db_tx_query(tx, "INSERT INTO acct (name) VALUES ($1)", &v, 1, hx_inserted, x) != 0)
        hx_send(x, 500);
}

static int h_tx(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    hx_t *x = malloc(sizeof(*x));
    *x = (hx_t){ .res = res, .mode = (int)strtol(flare_req_param(req, "mode").ptr, NULL, 10) };
    int rc = flare_db_begin(db, flare_req_worker(req), req, hx_begun, x);
    if (rc != 0) {
        free(x);
        return rc;
    }
    return FLARE_ASYNC;
}

static int status_of(const char *resp)
{
    return strncmp(resp, "HTTP/1.1 ", 9) == 0 ? atoi(resp + 9) : 0;
}

static void test_transactions(void **state)
{
    (void)state;
    make_path();
    remove_db();
    char url[96];
    snprintf(url, sizeof(url), "sqlite:%s", dbpath);
    flare_config_t c;
    flare_config_init(&c);
    c.workers = 1;
    h.app = flare_app_new(&c);
    assert_int_equal(flare_get(h.app, "/tx/{mode}", h_tx, NULL), 0);
    assert_int_equal(flare_db_open(h.app, url, NULL, &db), 0);
    assert_int_equal(harness_start(&h), 0);
    reset_recs();
    expect_ok(Q0(0, "CREATE TABLE acct (name TEXT UNIQUE)"));

    txrun_t t1 = { .commit = true, .val = "alice", &recs[1], &recs[2], &recs[3] };
    assert_int_equal(flare_app_post(h.app, 0, tx_task, &t1), 0);
    wait_done(4);
    expect_ok(&recs[1]);
    assert_int_equal(t1.again, FLARE_ESTATE);
    expect_ok(&recs[2]);
    expect_ok(&recs[3]);
    txrun_t t2 = { .commit = false, .val = "bob", &recs[4], &recs[5], &recs[6] };
    assert_int_equal(flare_app_post(h.app, 0, tx_task, &t2), 0);
    wait_done(7);
    expect_ok(&recs[4]);
    expect_ok(&recs[5]);
    expect_ok(&recs[6]);
    rec_t *r = Q0(7, "SELECT group_concat(name) FROM acct");
    expect_ok(r);
    assert_int_equal(r->cells[0].tlen, 5);
    assert_memory_equal(r->cells[0].text, "alice", 5);

    /* a failing statement inside: commit still ends it */
    txrun_t t3 = { .commit = true, .val = "alice", &recs[8], &recs[9], &recs[10] };
    assert_int_equal(flare_app_post(h.app, 0, tx_task, &t3), 0);
    wait_done(11);
    assert_int_equal(recs[9].code, SQLITE_CONSTRAINT_UNIQUE);
    expect_ok(&recs[10]);

    /* tied to a request: rolled back when it is answered without a commit */
    for (int mode = 0; mode < 3; mode++) {
        char req[64];
        snprintf(req, sizeof(req), "GET /tx/%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 mode);
        char *resp = harness_roundtrip(&h, req);
        assert_int_equal(status_of(resp), mode == 0 ? 202 : mode == 1 ? 201 : 200);
        free(resp);
    }
    /* the writer is free again (a write goes through) and only the
     * committed row is there */
    expect_ok(Q0(11, "INSERT INTO acct (name) VALUES ('carol')"));
    r = Q0(12, "SELECT group_concat(name, ',') FROM (SELECT name FROM acct ORDER BY name)");
    expect_ok(r);
    assert_int_equal(r->cells[0].tlen, strlen("alice,carol,kept"));
    assert_memory_equal(r->cells[0].text, "alice,carol,kept", r->cells[0].tlen);

    /* a transaction holds the writer: other writes wait behind it, reads
     * go on */
    assert_int_equal(flare_app_post(h.app, 0, tx_hold_task, &recs[13]), 0);
    wait_done(14);
    expect_ok(&recs[13]);
    assert_int_equal(flare_app_post(h.app, 0, query_task_write, &recs[14]), 0);
    assert_int_equal(flare_app_post(h.app, 0, query_task_read, &recs[15]), 0);
    wait_done(15);
    assert_true(recs[15].done);
    expect_ok(&recs[15]);
    usleep(100 * 1000);
    assert_false(recs[14].done);
    flare_db_stats_t st;
    assert_int_equal(flare_db_stats(db, 0, &st), 0);
    assert_int_equal(st.conns_busy, 1); /* the transaction's */
    assert_int_equal(st.queue_len, 1);  /* the write */
    assert_int_equal(flare_app_post(h.app, 0, tx_commit_held_task, &recs[16]), 0);
    wait_done(17);
    expect_ok(&recs[14]);
    expect_ok(&recs[16]);
    assert_true(recs[16].seq < recs[14].seq);
    assert_int_equal(flare_db_stats(db, 0, &st), 0);
    assert_int_equal(st.conns_busy, 0);
    assert_int_equal(st.queue_len, 0);
    finish_app();
    remove_db();
}

static void test_shutdown_pending(void **state)
{
    (void)state;
    make_path();
    remove_db();
    char url[96];
    snprintf(url, sizeof(url), "sqlite:%s", dbpath);
    flare_db_config_t cfg = { .pool_size = 1, .threads = 1 };
    start(url, &cfg, 1);
    expect_ok(Q0(0, "CREATE TABLE acct (name TEXT UNIQUE)"));
    /* a transaction left open, then a slow read and queries behind it:
     * stopping the app completes all of them, on the worker */
    assert_int_equal(flare_app_post(h.app, 0, tx_open_task, NULL), 0);
    wait_done(3);
    expect_ok(&recs[40]);
    expect_ok(&recs[41]);
    qspec_t qs[8] = { { .sql = SLOW_READ(1000000000000) } };
    for (int i = 1; i < 8; i++)
        qs[i] = (qspec_t){ .sql = i % 2 ? "INSERT INTO acct VALUES ('x')" : "SELECT 1" };
    batch_t *b = malloc(sizeof(*b));
    *b = (batch_t){ qs, 8, 1 };
    assert_int_equal(flare_app_post(h.app, 0, batch_task, b), 0);
    usleep(100 * 1000);
    stop();
    pthread_mutex_lock(&mu);
    int n = ndone;
    pthread_mutex_unlock(&mu);
    assert_int_equal(n, 11);
    for (int i = 1; i < 9; i++) {
        if (recs[i].err != 0)
            assert_int_equal(recs[i].err, FLARE_EUNAVAIL);
    }
    assert_int_equal(recs[1].err, FLARE_EUNAVAIL); /* the slow one, stopped */
    flare_app_free(h.app);

    /* the open transaction was rolled back: a new app finds no row, and
     * the file is usable (the writer is not stuck) */
    start(url, NULL, 1);
    rec_t *r = Q0(0, "SELECT count(*) FROM acct WHERE name = 'never'");
    expect_ok(r);
    assert_int_equal(r->cells[0].i, 0);
    expect_ok(Q0(1, "INSERT INTO acct VALUES ('after')"));
    finish_app();
    remove_db();
}

static void test_file_survives_and_reruns(void **state)
{
    (void)state;
    make_path();
    remove_db();
    char url[96];
    snprintf(url, sizeof(url), "sqlite:%s", dbpath);
    start(url, NULL, 1);
    expect_ok(Q0(0, "CREATE TABLE keep (v TEXT)"));
    expect_ok(Q(1, "INSERT INTO keep VALUES ($1)", FLARE_DB_TEXTV("persisted", 9)));
    /* the same app runs again: the pool and connections are still there */
    stop();
    assert_int_equal(harness_start(&h), 0);
    reset_recs();
    rec_t *r = Q0(0, "SELECT v FROM keep");
    expect_ok(r);
    assert_memory_equal(r->cells[0].text, "persisted", 9);
    flare_db_stats_t st;
    assert_int_equal(flare_db_stats(db, UINT32_MAX, &st), 0);
    assert_int_equal(st.queries, 1); /* counted per run */
    finish_app();
    /* a new app on the same file */
    start(url, NULL, 1);
    r = Q0(0, "SELECT v FROM keep");
    expect_ok(r);
    assert_int_equal(r->rows, 1);
    assert_memory_equal(r->cells[0].text, "persisted", 9);
    finish_app();
    remove_db();
}

/* The portable class beside SQLite's own code: what an application tests
 * to answer "already taken" without knowing the driver. */
static void test_error_classes(void **state)
{
    (void)state;
    start("sqlite::memory:", NULL, 1);
    expect_ok(Q0(0, "PRAGMA foreign_keys = ON"));
    expect_ok(Q0(1, "CREATE TABLE owner (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, "
                    "age INTEGER CHECK (age >= 0))"));
    expect_ok(Q0(2, "CREATE TABLE pet (id INTEGER PRIMARY KEY, owner INTEGER NOT NULL "
                    "REFERENCES owner (id))"));
    rec_t *r = Q(3, "INSERT INTO owner (id, name) VALUES ($1, $2)", FLARE_DB_INT(1),
                 FLARE_DB_TEXTV("ann", 3));
    expect_ok(r);
    assert_int_equal(r->cls, FLARE_DB_ERR_NONE);
    /* a unique column, then the primary key: both "taken" */
    r = Q(4, "INSERT INTO owner (id, name) VALUES ($1, $2)", FLARE_DB_INT(2),
          FLARE_DB_TEXTV("ann", 3));
    assert_int_equal(r->code, SQLITE_CONSTRAINT_UNIQUE);
    assert_int_equal(r->cls, FLARE_DB_ERR_UNIQUE);
    r = Q(5, "INSERT INTO owner (id, name) VALUES ($1, $2)", FLARE_DB_INT(1),
          FLARE_DB_TEXTV("bob", 3));
    assert_int_equal(r->code, SQLITE_CONSTRAINT_PRIMARYKEY);
    assert_int_equal(r->cls, FLARE_DB_ERR_UNIQUE);
    r = Q(6, "INSERT INTO owner (id, name) VALUES ($1, $2)", FLARE_DB_INT(3), FLARE_DB_NULLV);
    assert_int_equal(r->cls, FLARE_DB_ERR_NOT_NULL);
    r = Q(7, "INSERT INTO owner (id, name, age) VALUES ($1, 'cy', $2)", FLARE_DB_INT(4),
          FLARE_DB_INT(-1));
    assert_int_equal(r->cls, FLARE_DB_ERR_CHECK);
    r = Q(8, "INSERT INTO pet (owner) VALUES ($1)", FLARE_DB_INT(99));
    assert_int_equal(r->code, SQLITE_CONSTRAINT_FOREIGNKEY);
    assert_int_equal(r->cls, FLARE_DB_ERR_FOREIGN_KEY);
    r = Q0(9, "SELEC 1");
    assert_int_equal(r->cls, FLARE_DB_ERR_OTHER);
    finish_app();

    /* another process holds the write lock past busy_timeout_ms: the
     * statement lost to a concurrent transaction, as a serialization
     * failure; running it later may work */
    make_path();
    remove_db();
    char url[96];
    snprintf(url, sizeof(url), "sqlite:%s", dbpath);
    flare_db_config_t cfg = { .busy_timeout_ms = 50 };
    start(url, &cfg, 1);
    expect_ok(Q0(0, "CREATE TABLE t (v INTEGER)"));
    sqlite3 *other;
    assert_int_equal(sqlite3_open(dbpath, &other), SQLITE_OK);
    assert_int_equal(sqlite3_exec(other, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
    r = Q(1, "INSERT INTO t VALUES ($1)", FLARE_DB_INT(1));
    assert_int_equal(r->err, FLARE_EUNAVAIL);
    assert_int_equal(r->code & 0xff, SQLITE_BUSY);
    assert_int_equal(r->cls, FLARE_DB_ERR_SERIALIZATION);
    assert_int_equal(sqlite3_exec(other, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(other);
    expect_ok(Q(2, "INSERT INTO t VALUES ($1)", FLARE_DB_INT(1)));
    finish_app();
    remove_db();

    /* the names, and no result at all */
    assert_int_equal(flare_db_error_class(NULL), FLARE_DB_ERR_NONE);
    assert_string_equal(flare_db_error_class_name(FLARE_DB_ERR_UNIQUE), "unique");
    assert_string_equal(flare_db_error_class_name(FLARE_DB_ERR_FOREIGN_KEY), "foreign_key");
    assert_string_equal(flare_db_error_class_name(FLARE_DB_ERR_CONNECTION), "connection");
    assert_string_equal(flare_db_error_class_name((flare_db_errclass_t)99), "unknown");
}

static void test_open_errors(void **state)
{
    (void)state;
    flare_app_t *app = flare_app_new(NULL);
    flare_db_t *d = NULL;
    assert_int_equal(flare_db_open(app, "sqlite:/nonexistent-flare-dir/x.db", NULL, &d), FLARE_EDB);
    assert_non_null(strstr(flare_last_error(), "unable to open"));
    assert_null(d);
    assert_int_equal(flare_db_open(app, "sqlite:", NULL, &d), FLARE_EINVAL);
    assert_int_equal(flare_db_open(app, "sqlite:/tmp", NULL, &d), FLARE_EDB);
    /* not a database */
    char p[64];
    snprintf(p, sizeof(p), "/tmp/flare-test-notdb-%d", (int)getpid());
    FILE *f = fopen(p, "w");
    fputs("this is not a database file, not even close to one................", f);
    fclose(f);
    char url[96];
    snprintf(url, sizeof(url), "sqlite:%s", p);
    assert_int_equal(flare_db_open(app, url, NULL, &d), FLARE_EDB);
    unlink(p);
    flare_db_config_t bad = { .threads = 65 };
    assert_int_equal(flare_db_open(app, "sqlite::memory:", &bad, &d), FLARE_EINVAL);
    assert_int_equal(flare_db_open(app, "sqlite::memory:", NULL, &d), 0);
    assert_int_equal(flare_db_listen(d, 0, "chan", (flare_db_notify_fn)(void (*)(void))abort, NULL),
                     FLARE_EINVAL);
    flare_db_stats_t st;
    assert_int_equal(flare_db_stats(d, UINT32_MAX, &st), 0);
    assert_int_equal(st.queries, 0);
    flare_app_free(app); /* never ran: the pool stops cleanly */
}

/* sqlite:PATH?synchronous=LEVEL: the level on the writer (read back through
 * a write, which runs there) and on the readers; NORMAL without it; an
 * unknown level or parameter refuses the open. */
static void sync_case(const char *query, int64_t want)
{
    remove_db();
    char url[128];
    snprintf(url, sizeof(url), "sqlite:%s%s", dbpath, query);
    flare_db_config_t cfg = { .pool_size = 1, .threads = 2 };
    start(url, &cfg, 1);
    expect_ok(Q0(0, "CREATE TABLE s AS SELECT synchronous AS v FROM pragma_synchronous"));
    rec_t *r = Q0(1, "SELECT v FROM s");
    expect_ok(r);
    assert_int_equal(r->cells[0].i, want); /* the writer's */
    r = Q0(2, "PRAGMA synchronous");
    expect_ok(r);
    assert_int_equal(r->cells[0].i, want); /* a reader's */
    finish_app();
    assert_int_equal(access(dbpath, F_OK), 0); /* the file is PATH, without the query */
}

static void test_synchronous_choice(void **state)
{
    (void)state;
    make_path();
    sync_case("", 1);
    sync_case("?synchronous=off", 0);
    sync_case("?synchronous=normal", 1);
    sync_case("?synchronous=full", 2);
    sync_case("?synchronous=FULL", 2);
    sync_case("?synchronous=extra", 3);
    remove_db();

    flare_app_t *app = flare_app_new(NULL);
    flare_db_t *d = NULL;
    char url[128];
    snprintf(url, sizeof(url), "sqlite:%s?synchronous=always", dbpath);
    assert_int_equal(flare_db_open(app, url, NULL, &d), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "synchronous"));
    assert_non_null(strstr(flare_last_error(), "\"always\""));
    assert_non_null(strstr(flare_last_error(), "off|normal|full|extra"));
    assert_null(d);
    snprintf(url, sizeof(url), "sqlite:%s?synchronous=", dbpath);
    assert_int_equal(flare_db_open(app, url, NULL, &d), FLARE_EINVAL);
    snprintf(url, sizeof(url), "sqlite:%s?cache=shared", dbpath);
    assert_int_equal(flare_db_open(app, url, NULL, &d), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "cache"));
    assert_int_equal(flare_db_open(app, "sqlite:?synchronous=full", NULL, &d), FLARE_EINVAL);
    assert_int_equal(access(dbpath, F_OK), -1); /* nothing was created */
    flare_app_free(app);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_params_and_injection),
        cmocka_unit_test(test_errors_and_batch),
        cmocka_unit_test(test_wal_readers_beside_writer),
        cmocka_unit_test(test_queue_full_and_deadline),
        cmocka_unit_test(test_query_timeout),
        cmocka_unit_test(test_transactions),
        cmocka_unit_test(test_shutdown_pending),
        cmocka_unit_test(test_file_survives_and_reruns),
        cmocka_unit_test(test_error_classes),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_synchronous_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
