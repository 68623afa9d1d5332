/* The PostgreSQL driver against a real server (tests/services.py starts a
 * private cluster and exports FLARE_TEST_PG_URL, FLARE_TEST_PG_SOCKDIR and
 * FLARE_TEST_PG_CTL). An app runs on one worker; the test thread posts tasks
 * there that issue queries, and the callbacks copy what they got into
 * records the test thread then checks (cmocka asserts only on this thread). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include <flare/db.h>

#include "harness.h"

static const char *pg_url(void)
{
    const char *u = getenv("FLARE_TEST_PG_URL");
    if (u == NULL) {
        fprintf(stderr, "FLARE_TEST_PG_URL is not set: run through tests/services.py --pg\n");
        exit(1);
    }
    return u;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- a copied result ---- */

#define ROWS 8
#define COLS 6
typedef struct qres {
    atomic_int done;
    int rc; /* what flare_db_query returned */
    int err;
    flare_db_errclass_t cls;
    char sqlstate[8];
    char msg[256];
    size_t rows, cols;
    uint64_t affected;
    char text[ROWS][COLS][64];
    bool null[ROWS][COLS];
    char bytes[COLS][64];
    size_t blen[COLS];
    int64_t i64[COLS];
    double dbl[COLS];
    uint64_t at; /* completion time */
} qres_t;

static void copy_res(qres_t *o, flare_db_res_t *r)
{
    o->err = flare_db_res_error(r);
    o->cls = flare_db_error_class(r);
    snprintf(o->sqlstate, sizeof(o->sqlstate), "%s", flare_db_res_sqlstate(r));
    snprintf(o->msg, sizeof(o->msg), "%s", flare_db_res_message(r));
    o->rows = flare_db_res_rows(r);
    o->cols = flare_db_res_cols(r);
    o->affected = flare_db_res_affected(r);
    for (size_t i = 0; i < o->rows && i < ROWS; i++)
        for (size_t c = 0; c < o->cols && c < COLS; c++) {
            flare_str_t t = flare_db_get_text(r, i, c);
            snprintf(o->text[i][c], sizeof(o->text[i][c]), "%.*s", (int)t.len, t.ptr);
            o->null[i][c] = flare_db_is_null(r, i, c);
        }
    for (size_t c = 0; o->rows > 0 && c < o->cols && c < COLS; c++) {
        flare_str_t b = flare_db_get_bytes(r, 0, c);
        o->blen[c] = b.len < sizeof(o->bytes[c]) ? b.len : sizeof(o->bytes[c]);
        if (b.len > 0)
            memcpy(o->bytes[c], b.ptr, o->blen[c]);
        o->i64[c] = flare_db_get_int64(r, 0, c);
        o->dbl[c] = flare_db_get_double(r, 0, c);
    }
    o->at = now_ms();
}

static void got(flare_db_res_t *r, void *ud)
{
    qres_t *o = ud;
    copy_res(o, r);
    atomic_store(&o->done, 1);
}

static void wait_done(atomic_int *v, int want, int ms)
{
    for (int i = 0; i < ms / 5 && atomic_load(v) < want; i++)
        usleep(5000);
    assert_true(atomic_load(v) >= want);
}

/* ---- an app with one database ---- */

typedef struct ctx {
    harness_t h;
    flare_db_t *db;
} ctx_t;

static void ctx_start(ctx_t *x, const char *url, const flare_db_config_t *cfg)
{
    memset(x, 0, sizeof(*x));
    flare_config_t c;
    flare_config_init(&c);
    c.workers = 1;
    c.drain_timeout_ms = 500;
    x->h.app = flare_app_new(&c);
    assert_non_null(x->h.app);
    assert_int_equal(flare_db_open(x->h.app, url, cfg, &x->db), 0);
    assert_string_equal(flare_db_driver(x->db), "postgresql");
}

static void ctx_run(ctx_t *x)
{
    assert_int_equal(harness_start(&x->h), 0);
}

static void ctx_stop(ctx_t *x)
{
    assert_int_equal(harness_stop(&x->h), 0);
    flare_app_free(x->h.app);
}

static flare_worker_t *w0(ctx_t *x)
{
    return flare_app_worker(x->h.app, 0);
}

/* One query run on the worker, waited for. */
typedef struct qtask {
    ctx_t *x;
    const char *sql;
    const flare_db_val_t *p;
    size_t n;
    qres_t *out;
} qtask_t;

static void qtask_run(void *ud)
{
    qtask_t *t = ud;
    t->out->rc = flare_db_query(t->x->db, w0(t->x), t->sql, t->p, t->n, got, t->out);
    if (t->out->rc != 0)
        atomic_store(&t->out->done, 1);
}

static void q(ctx_t *x, qres_t *out, const char *sql, const flare_db_val_t *p, size_t n)
{
    memset(out, 0, sizeof(*out));
    qtask_t t = { x, sql, p, n, out };
    assert_int_equal(flare_app_post(x->h.app, 0, qtask_run, &t), 0);
    wait_done(&out->done, 1, 20000);
    assert_int_equal(out->rc, 0);
}

/* The statement must succeed. */
static void ok(ctx_t *x, const char *sql)
{
    qres_t r;
    q(x, &r, sql, NULL, 0);
    if (r.err != 0)
        fprintf(stderr, "%s: %s %s\n", sql, r.sqlstate, r.msg);
    assert_int_equal(r.err, 0);
}

/* The server may still be starting the connections: wait for one. */
static void wait_up(ctx_t *x)
{
    for (int i = 0; i < 200; i++) {
        qres_t r;
        q(x, &r, "SELECT 1", NULL, 0);
        if (r.err == 0)
            return;
        usleep(50000);
    }
    fail_msg("the database never came up");
}

static ctx_t *start_default(ctx_t *x)
{
    ctx_start(x, pg_url(), NULL);
    ctx_run(x);
    wait_up(x);
    return x;
}

/* ---- parameters and results ---- */

static void test_types(void **state)
{
    (void)state;
    ctx_t x;
    start_default(&x);
    static const char bin[] = { 'a', 0, 1, 2, (char)0xff, 0, 'z' };
    static const char quoted[] = "It's \"quoted\" \\ back";
    flare_db_val_t p[] = {
        FLARE_DB_INT(INT64_MIN),
        FLARE_DB_DBL(3.25),
        FLARE_DB_TEXTV(quoted, sizeof(quoted) - 1),
        FLARE_DB_BYTESV(bin, sizeof(bin)),
        FLARE_DB_NULLV,
        FLARE_DB_INT(INT64_MAX),
    };
    qres_t r;
    q(&x, &r,
      "SELECT $1::bigint AS a, $2::float8 AS b, $3::text AS c, $4::bytea AS d, "
      "$5::text AS e, $6::bigint AS f",
      p, 6);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.rows, 1);
    assert_int_equal(r.cols, 6);
    assert_true(r.i64[0] == INT64_MIN);
    assert_true(r.i64[5] == INT64_MAX);
    assert_true(r.dbl[1] == 3.25);
    assert_string_equal(r.text[0][2], quoted);
    assert_int_equal(r.blen[3], sizeof(bin));
    assert_memory_equal(r.bytes[3], bin, sizeof(bin));
    assert_true(r.null[0][4]);
    assert_false(r.null[0][0]);
    /* the same text again: prepared once, reused */
    flare_db_val_t p2[] = { FLARE_DB_INT(-7),       FLARE_DB_DBL(-1e300),   FLARE_DB_TEXTV("", 0),
                            FLARE_DB_BYTESV("", 0), FLARE_DB_TEXTV("x", 1), FLARE_DB_NULLV };
    q(&x, &r,
      "SELECT $1::bigint AS a, $2::float8 AS b, $3::text AS c, $4::bytea AS d, "
      "$5::text AS e, $6::bigint AS f",
      p2, 6);
    assert_int_equal(r.err, 0);
    assert_true(r.i64[0] == -7);
    assert_true(r.dbl[1] == -1e300);
    assert_string_equal(r.text[0][2], "");
    assert_false(r.null[0][2]);
    assert_int_equal(r.blen[3], 0);
    assert_true(r.null[0][5]);
    /* a NUL inside text cannot be sent: an error, not a truncation */
    flare_db_val_t nul = FLARE_DB_TEXTV("a\0b", 3);
    q(&x, &r, "SELECT $1::text", &nul, 1);
    assert_int_equal(r.err, FLARE_EDB);
    ctx_stop(&x);
}

static void test_injection_and_errors(void **state)
{
    (void)state;
    ctx_t x;
    start_default(&x);
    ok(&x, "DROP TABLE IF EXISTS inj");
    ok(&x, "CREATE TABLE inj (id int PRIMARY KEY, v text)");
    const char *evil[] = { "1; DROP TABLE inj", "' OR 1=1 --", "'); DELETE FROM inj; --" };
    qres_t r;
    for (int i = 0; i < 3; i++) {
        flare_db_val_t p[] = { FLARE_DB_INT(i + 1), FLARE_DB_TEXTV(evil[i], strlen(evil[i])) };
        q(&x, &r, "INSERT INTO inj (id, v) VALUES ($1, $2)", p, 2);
        assert_int_equal(r.err, 0);
        assert_int_equal(r.affected, 1);
    }
    q(&x, &r, "SELECT v FROM inj ORDER BY id", NULL, 0);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.rows, 3);
    for (int i = 0; i < 3; i++)
        assert_string_equal(r.text[i][0], evil[i]);
    flare_db_val_t e = FLARE_DB_TEXTV(evil[1], strlen(evil[1]));
    q(&x, &r, "SELECT count(*) FROM inj WHERE v = $1", &e, 1);
    assert_int_equal(r.i64[0], 1);
    /* SQLSTATEs */
    q(&x, &r, "SELEC 1", NULL, 0);
    assert_int_equal(r.err, FLARE_EDB);
    assert_string_equal(r.sqlstate, "42601");
    assert_true(strstr(r.msg, "syntax error") != NULL);
    q(&x, &r, "SELEC 1", NULL, 0); /* again: prepared again, same error */
    assert_string_equal(r.sqlstate, "42601");
    flare_db_val_t dup[] = { FLARE_DB_INT(1), FLARE_DB_TEXTV("x", 1) };
    q(&x, &r, "INSERT INTO inj (id, v) VALUES ($1, $2)", dup, 2);
    assert_int_equal(r.err, FLARE_EDB);
    assert_string_equal(r.sqlstate, "23505");
    assert_int_equal(r.cls, FLARE_DB_ERR_UNIQUE);
    assert_true(strlen(r.msg) > 0);
    q(&x, &r, "SELEC 1", NULL, 0);
    assert_int_equal(r.cls, FLARE_DB_ERR_OTHER);
    /* the portable classes, from the server's SQLSTATEs */
    ok(&x, "DROP TABLE IF EXISTS cls");
    ok(&x, "CREATE TABLE cls (id int PRIMARY KEY, name text NOT NULL, age int CHECK (age >= 0))");
    flare_db_val_t nul[] = { FLARE_DB_INT(1), FLARE_DB_NULLV };
    q(&x, &r, "INSERT INTO cls (id, name) VALUES ($1, $2)", nul, 2);
    assert_string_equal(r.sqlstate, "23502");
    assert_int_equal(r.cls, FLARE_DB_ERR_NOT_NULL);
    flare_db_val_t neg[] = { FLARE_DB_INT(1), FLARE_DB_INT(-1) };
    q(&x, &r, "INSERT INTO cls (id, name, age) VALUES ($1, 'n', $2)", neg, 2);
    assert_string_equal(r.sqlstate, "23514");
    assert_int_equal(r.cls, FLARE_DB_ERR_CHECK);
    ok(&x, "DROP TABLE cls");
    /* those a test cannot easily provoke, raised by hand with their code */
    static const struct {
        const char *sql, *state;
        flare_db_errclass_t cls;
    } raised[] = {
        { "DO $$BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40001'; END$$", "40001",
          FLARE_DB_ERR_SERIALIZATION },
        { "DO $$BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40P01'; END$$", "40P01",
          FLARE_DB_ERR_SERIALIZATION },
        { "DO $$BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '23P01'; END$$", "23P01",
          FLARE_DB_ERR_OTHER },
        { "DO $$BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '22012'; END$$", "22012",
          FLARE_DB_ERR_OTHER },
    };
    for (size_t i = 0; i < sizeof(raised) / sizeof(raised[0]); i++) {
        q(&x, &r, raised[i].sql, NULL, 0);
        assert_int_equal(r.err, FLARE_EDB);
        assert_string_equal(r.sqlstate, raised[i].state);
        assert_int_equal(r.cls, raised[i].cls);
    }
    /* the column API */
    q(&x, &r, "SELECT 1 AS one, 'two' AS two", NULL, 0);
    assert_int_equal(r.cols, 2);
    ok(&x, "DROP TABLE inj");

    /* a deferred constraint fails at the implicit commit, the pipeline's
     * Sync, after the statement itself succeeded: the caller is told */
    ok(&x, "DROP TABLE IF EXISTS dchild");
    ok(&x, "DROP TABLE IF EXISTS dparent");
    ok(&x, "CREATE TABLE dparent (id int PRIMARY KEY)");
    ok(&x, "CREATE TABLE dchild (pid int REFERENCES dparent (id) DEFERRABLE INITIALLY DEFERRED)");
    flare_db_val_t orphan = FLARE_DB_INT(42);
    q(&x, &r, "INSERT INTO dchild (pid) VALUES ($1)", &orphan, 1);
    assert_int_equal(r.err, FLARE_EDB);
    assert_string_equal(r.sqlstate, "23503");
    assert_int_equal(r.cls, FLARE_DB_ERR_FOREIGN_KEY);
    q(&x, &r, "SELECT count(*) FROM dchild", NULL, 0);
    assert_int_equal(r.i64[0], 0); /* nothing was kept */
    q(&x, &r, "INSERT INTO dparent (id) VALUES ($1)", &orphan, 1);
    assert_int_equal(r.err, 0);
    q(&x, &r, "INSERT INTO dchild (pid) VALUES ($1)", &orphan, 1);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.affected, 1);
    ok(&x, "DROP TABLE dchild");
    ok(&x, "DROP TABLE dparent");
    ctx_stop(&x);
}

/* ---- many at once ---- */

#define BATCH 20
typedef struct batch {
    ctx_t *x;
    qres_t r[64];
    atomic_int n;
    int nq;
    uint64_t bad; /* bit i: statement i runs badsql */
    const char *sql, *badsql;
    const char *sqlv[64];      /* when set, statement i's text */
    flare_db_stats_t st_after; /* read on the worker right after issuing */
} batch_t;

static void batch_got(flare_db_res_t *r, void *ud)
{
    qres_t *o = ud;
    copy_res(o, r);
    batch_t *b = (batch_t *)((char *)(o - (o->rc)) - offsetof(batch_t, r));
    atomic_fetch_add(&b->n, 1);
}

static void batch_run(void *ud)
{
    batch_t *b = ud;
    for (int i = 0; i < b->nq; i++) {
        flare_db_val_t id = FLARE_DB_INT(i);
        b->r[i].rc = i; /* the index, to find b back */
        const char *sql = b->sqlv[i] != NULL       ? b->sqlv[i]
                          : (b->bad >> i & 1) != 0 ? b->badsql
                                                   : b->sql;
        int rc = flare_db_query(b->x->db, w0(b->x), sql, &id, 1, batch_got, &b->r[i]);
        assert_int_equal(rc, 0);
    }
    flare_db_stats(b->x->db, 0, &b->st_after);
}

static void run_batch_v(ctx_t *x, batch_t *b, int n, uint64_t bad, const char *sql,
                        const char *badsql, const char *const *sqlv)
{
    memset(b, 0, sizeof(*b));
    for (int i = 0; sqlv != NULL && i < n; i++)
        b->sqlv[i] = sqlv[i];
    b->x = x;
    b->nq = n;
    b->bad = bad;
    b->sql = sql;
    b->badsql = badsql;
    assert_int_equal(flare_app_post(x->h.app, 0, batch_run, b), 0);
    wait_done(&b->n, n, 30000);
}

static void run_batch(ctx_t *x, batch_t *b, int n, uint64_t bad, const char *sql,
                      const char *badsql)
{
    run_batch_v(x, b, n, bad, sql, badsql, NULL);
}

/* Reads sent together, the ones in `bad` failing at run time: each of the
 * others completes with its own value, however many fail and wherever they
 * are (first or last of the segment on either connection). */
static void check_reads(ctx_t *x, batch_t *b, uint64_t bad)
{
    run_batch(x, b, BATCH, bad, "SELECT $1::int * 2", "SELECT 1 / ($1::int * 0)");
    for (int i = 0; i < BATCH; i++) {
        if ((bad >> i & 1) != 0) {
            assert_int_equal(b->r[i].err, FLARE_EDB);
            assert_string_equal(b->r[i].sqlstate, "22012");
        } else {
            if (b->r[i].err != 0)
                fprintf(stderr, "statement %d: %s %s\n", i, b->r[i].sqlstate, b->r[i].msg);
            assert_int_equal(b->r[i].err, 0);
            assert_int_equal(b->r[i].i64[0], 2 * i);
        }
    }
}

static void test_batch(void **state)
{
    (void)state;
    ctx_t x;
    start_default(&x);
    ok(&x, "DROP TABLE IF EXISTS bt");
    ok(&x, "CREATE TABLE bt (id int PRIMARY KEY)");
    static batch_t b;
    /* writes: one failing in the middle must not undo its neighbours */
    run_batch(&x, &b, BATCH, 1u << 10, "INSERT INTO bt VALUES ($1)",
              "INSERT INTO nosuch VALUES ($1)");
    for (int i = 0; i < BATCH; i++) {
        if (i == 10) {
            assert_int_equal(b.r[i].err, FLARE_EDB);
            assert_string_equal(b.r[i].sqlstate, "42P01");
        } else {
            assert_int_equal(b.r[i].err, 0);
            assert_int_equal(b.r[i].affected, 1);
        }
    }
    qres_t r;
    q(&x, &r, "SELECT count(*) FROM bt", NULL, 0);
    assert_int_equal(r.i64[0], BATCH - 1);
    /* reads, with a failure at run time (division by zero) in the middle */
    run_batch(&x, &b, BATCH, 1u << 7, "SELECT $1::int * 2", "SELECT 1 / ($1::int - 7)");
    for (int i = 0; i < BATCH; i++) {
        if (i == 7) {
            assert_string_equal(b.r[i].sqlstate, "22012");
        } else {
            assert_int_equal(b.r[i].err, 0);
            assert_int_equal(b.r[i].i64[0], 2 * i);
        }
    }
    /* the bad one first, last, first on both connections, several, all
     * but one */
    check_reads(&x, &b, 1u << 0);
    check_reads(&x, &b, 1u << (BATCH - 1));
    check_reads(&x, &b, 3u);
    check_reads(&x, &b, 1u | 1u << 3 | 1u << 7 | 1u << 8 | 1u << 18 | 1u << 19);
    check_reads(&x, &b, ((1u << BATCH) - 1) & ~(1u << 5));
    /* reads and writes mixed, reads failing before writes of the same
     * segment: the writes run once each (sent again), the reads give
     * their values */
    ok(&x, "DELETE FROM bt");
    const char *sqlv[BATCH] = { NULL };
    int writes = 0;
    for (int i = 0; i < BATCH; i++)
        if (i % 3 == 2) {
            sqlv[i] = "INSERT INTO bt VALUES ($1)";
            writes++;
        }
    uint64_t bad = 1u << 0 | 1u << 4 | 1u << 13;
    run_batch_v(&x, &b, BATCH, bad, "SELECT $1::int * 2", "SELECT 1 / ($1::int * 0)", sqlv);
    for (int i = 0; i < BATCH; i++) {
        if (b.sqlv[i] != NULL) {
            if (b.r[i].err != 0)
                fprintf(stderr, "write %d: %s %s\n", i, b.r[i].sqlstate, b.r[i].msg);
            assert_int_equal(b.r[i].err, 0);
            assert_int_equal(b.r[i].affected, 1);
        } else if ((bad >> i & 1) != 0) {
            assert_string_equal(b.r[i].sqlstate, "22012");
        } else {
            assert_int_equal(b.r[i].err, 0);
            assert_int_equal(b.r[i].i64[0], 2 * i);
        }
    }
    q(&x, &r, "SELECT count(*) FROM bt", NULL, 0);
    assert_int_equal(r.i64[0], writes);
    /* a statement whose Parse fails among reads: it reports the syntax
     * error, the others their values */
    run_batch(&x, &b, BATCH, 1u << 2 | 1u << 11, "SELECT $1::int * 2", "SELEC $1");
    for (int i = 0; i < BATCH; i++) {
        if (i == 2 || i == 11) {
            assert_string_equal(b.r[i].sqlstate, "42601");
        } else {
            assert_int_equal(b.r[i].err, 0);
            assert_int_equal(b.r[i].i64[0], 2 * i);
        }
    }
    ok(&x, "DROP TABLE bt");
    ctx_stop(&x);
}

static void test_queue(void **state)
{
    (void)state;
    ctx_t x;
    flare_db_config_t cfg = { .pool_size = 2, .pipeline_depth = 4 };
    ctx_start(&x, pg_url(), &cfg);
    ctx_run(&x);
    wait_up(&x);
    wait_up(&x); /* both connections, most likely */
    usleep(200000);
    static batch_t b;
    /* 40 > 2 x 4: 32 wait in the queue, all complete */
    run_batch(&x, &b, 40, 0, "SELECT pg_sleep(0.01), $1::int", NULL);
    for (int i = 0; i < 40; i++) {
        assert_int_equal(b.r[i].err, 0);
        assert_int_equal(b.r[i].i64[1], i);
    }
    assert_true(b.st_after.queue_len >= 32);
    flare_db_stats_t st;
    assert_int_equal(flare_db_stats(x.db, 0, &st), 0);
    assert_int_equal(st.queue_len, 0);
    assert_int_equal(st.conns_open, 2);
    assert_true(st.queries >= 40);
    ctx_stop(&x);

    /* queue full: depth 1, one connection, room for 2 waiting */
    flare_db_config_t small = { .pool_size = 1, .pipeline_depth = 1, .queue_max = 2 };
    ctx_start(&x, pg_url(), &small);
    ctx_run(&x);
    wait_up(&x);
    uint64_t t0 = now_ms();
    run_batch(&x, &b, 6, 0, "SELECT pg_sleep(0.2), $1::int", NULL);
    int okn = 0, full = 0;
    for (int i = 0; i < 6; i++) {
        if (b.r[i].err == 0)
            okn++;
        else if (b.r[i].err == FLARE_EUNAVAIL) {
            full++;
            assert_true(b.r[i].at - t0 < 150); /* at once, not after the deadline */
            assert_true(strstr(b.r[i].msg, "queue") != NULL);
        }
    }
    assert_int_equal(okn, 3);
    assert_int_equal(full, 3);
    assert_int_equal(flare_db_stats(x.db, 0, &st), 0);
    assert_int_equal(st.rejected, 3);
    ctx_stop(&x);

    /* the queue's deadline */
    flare_db_config_t slow = { .pool_size = 1, .pipeline_depth = 1, .queue_timeout_ms = 100 };
    ctx_start(&x, pg_url(), &slow);
    ctx_run(&x);
    wait_up(&x);
    run_batch(&x, &b, 3, 0, "SELECT pg_sleep(0.5), $1::int", NULL);
    assert_int_equal(b.r[0].err, 0);
    assert_int_equal(b.r[1].err, FLARE_EUNAVAIL);
    assert_int_equal(b.r[2].err, FLARE_EUNAVAIL);
    ctx_stop(&x);
}

static void test_timeout(void **state)
{
    (void)state;
    ctx_t x;
    flare_db_config_t cfg = { .pool_size = 1, .query_timeout_ms = 200 };
    ctx_start(&x, pg_url(), &cfg);
    ctx_run(&x);
    wait_up(&x);
    uint64_t t0 = now_ms();
    qres_t r;
    q(&x, &r, "SELECT pg_sleep(5)", NULL, 0);
    uint64_t dt = now_ms() - t0;
    assert_int_equal(r.err, FLARE_ETIMEDOUT);
    assert_string_equal(r.sqlstate, "57014");
    assert_true(dt >= 150 && dt < 2500);
    /* the same connection still works */
    q(&x, &r, "SELECT 41 + 1", NULL, 0);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.i64[0], 42);
    flare_db_stats_t st;
    assert_int_equal(flare_db_stats(x.db, UINT32_MAX, &st), 0);
    assert_int_equal(st.timeouts, 1);
    assert_int_equal(st.reconnects, 0);
    assert_int_equal(st.conns_open, 1);
    ctx_stop(&x);
}

/* ---- transactions ---- */

typedef struct txt {
    ctx_t *x;
    bool commit;
    int step_err[4];
    atomic_int done;
    flare_db_tx_t *tx;
    int rc_after;
} txt_t;

static void tx_end_cb(flare_db_res_t *r, void *ud)
{
    txt_t *t = ud;
    t->step_err[2] = flare_db_res_error(r);
    atomic_store(&t->done, 1);
}

static void tx_insert_cb(flare_db_res_t *r, void *ud)
{
    txt_t *t = ud;
    t->step_err[1] = flare_db_res_error(r);
    int rc = t->commit ? flare_db_tx_commit(t->tx, tx_end_cb, t)
                       : flare_db_tx_rollback(t->tx, tx_end_cb, t);
    assert_int_equal(rc, 0);
}

static void tx_begun_cb(flare_db_tx_t *tx, flare_db_res_t *r, void *ud)
{
    txt_t *t = ud;
    t->step_err[0] = flare_db_res_error(r);
    t->tx = tx;
    if (tx == NULL) {
        atomic_store(&t->done, 1);
        return;
    }
    flare_db_val_t v = FLARE_DB_INT(t->commit ? 1 : 2);
    assert_int_equal(flare_db_tx_query(tx, "INSERT INTO txt VALUES ($1)", &v, 1, tx_insert_cb, t),
                     0);
}

static void tx_task(void *ud)
{
    txt_t *t = ud;
    assert_int_equal(flare_db_begin(t->x->db, w0(t->x), NULL, tx_begun_cb, t), 0);
}

/* The request's handler: begins with the request as owner, inserts, and
 * answers without committing: the exchange's end rolls it back. */
static ctx_t *owner_ctx;
static atomic_int owner_rows_cb;

static void owner_insert_cb(flare_db_res_t *r, void *ud)
{
    flare_res_t *res = ud;
    atomic_store(&owner_rows_cb, flare_db_res_error(r) == 0 ? 1 : -1);
    flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("inserted, not committed"));
}

static void owner_begun_cb(flare_db_tx_t *tx, flare_db_res_t *r, void *ud)
{
    flare_res_t *res = ud;
    if (tx == NULL) {
        flare_db_send_error(res, r);
        return;
    }
    flare_db_val_t v = FLARE_DB_INT(3);
    flare_db_tx_query(tx, "INSERT INTO txt VALUES ($1)", &v, 1, owner_insert_cb, res);
}

static int h_owner(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    int rc = flare_db_begin(owner_ctx->db, flare_req_worker(req), req, owner_begun_cb, res);
    return rc == 0 ? FLARE_ASYNC : rc;
}

static void test_tx(void **state)
{
    (void)state;
    ctx_t x;
    ctx_start(&x, pg_url(), NULL);
    owner_ctx = &x;
    assert_int_equal(flare_get(x.h.app, "/owner", h_owner, NULL), 0);
    ctx_run(&x);
    wait_up(&x);
    ok(&x, "DROP TABLE IF EXISTS txt");
    ok(&x, "CREATE TABLE txt (id int PRIMARY KEY)");
    txt_t t = { .x = &x, .commit = true };
    assert_int_equal(flare_app_post(x.h.app, 0, tx_task, &t), 0);
    wait_done(&t.done, 1, 10000);
    assert_int_equal(t.step_err[0], 0);
    assert_int_equal(t.step_err[1], 0);
    assert_int_equal(t.step_err[2], 0);
    txt_t t2 = { .x = &x, .commit = false };
    assert_int_equal(flare_app_post(x.h.app, 0, tx_task, &t2), 0);
    wait_done(&t2.done, 1, 10000);
    assert_int_equal(t2.step_err[1], 0);
    assert_int_equal(t2.step_err[2], 0);
    qres_t r;
    q(&x, &r, "SELECT id FROM txt ORDER BY id", NULL, 0);
    assert_int_equal(r.rows, 1); /* 1 committed, 2 rolled back */
    assert_string_equal(r.text[0][0], "1");
    /* owner-ended: the row the request inserted is rolled back */
    char *resp =
        harness_roundtrip(&x.h, "GET /owner HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_non_null(strstr(resp, "200 OK"));
    free(resp);
    assert_int_equal(atomic_load(&owner_rows_cb), 1);
    for (int i = 0; i < 100; i++) {
        flare_db_stats_t st;
        flare_db_stats(x.db, 0, &st);
        if (st.conns_busy == 0)
            break;
        usleep(10000);
    }
    q(&x, &r, "SELECT count(*) FROM txt WHERE id = 3", NULL, 0);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.i64[0], 0);
    /* the connection went back: a plain query and another transaction run */
    txt_t t3 = { .x = &x, .commit = true };
    t3.commit = true;
    ok(&x, "DELETE FROM txt");
    assert_int_equal(flare_app_post(x.h.app, 0, tx_task, &t3), 0);
    wait_done(&t3.done, 1, 10000);
    assert_int_equal(t3.step_err[2], 0);
    ok(&x, "DROP TABLE txt");
    ctx_stop(&x);
}

/* ---- LISTEN / NOTIFY ---- */

static atomic_int notified;
static char notify_payload[64], notify_channel[64];

static void on_notify(flare_str_t channel, flare_str_t payload, void *ud)
{
    (void)ud;
    snprintf(notify_channel, sizeof(notify_channel), "%.*s", (int)channel.len, channel.ptr);
    snprintf(notify_payload, sizeof(notify_payload), "%.*s", (int)payload.len, payload.ptr);
    atomic_store(&notified, 1);
}

static void test_notify(void **state)
{
    (void)state;
    ctx_t x;
    ctx_start(&x, pg_url(), NULL);
    assert_int_equal(flare_db_listen(x.db, 0, "Flare_Chan", on_notify, NULL), 0);
    assert_int_equal(flare_db_listen(x.db, 1, "x", on_notify, NULL), FLARE_EINVAL);
    assert_int_equal(flare_db_listen(x.db, 0, "bad-name", on_notify, NULL), FLARE_EINVAL);
    ctx_run(&x);
    wait_up(&x);
    /* the LISTEN connection comes up on its own: notify until heard */
    for (int i = 0; i < 100 && atomic_load(&notified) == 0; i++) {
        flare_db_val_t p = FLARE_DB_TEXTV("hello 'there'", 13);
        qres_t r;
        q(&x, &r, "SELECT pg_notify('flare_chan', $1)", &p, 1);
        assert_int_equal(r.err, 0);
        usleep(50000);
    }
    assert_int_equal(atomic_load(&notified), 1);
    assert_string_equal(notify_channel, "flare_chan");
    assert_string_equal(notify_payload, "hello 'there'");
    ctx_stop(&x);
}

/* ---- the server going away ---- */

static int pg_ctl(const char *what)
{
    const char *ctl = getenv("FLARE_TEST_PG_CTL");
    assert_non_null(ctl);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s %s >/dev/null 2>&1", ctl, what);
    return system(cmd);
}

static void test_server_down(void **state)
{
    (void)state;
    ctx_t x;
    flare_db_config_t cfg = { .reconnect_min_ms = 50, .reconnect_max_ms = 400 };
    ctx_start(&x, pg_url(), &cfg);
    ctx_run(&x);
    wait_up(&x);
    static batch_t b;
    memset(&b, 0, sizeof(b));
    b.x = &x;
    b.nq = 20;
    b.bad = 0;
    b.sql = "SELECT pg_sleep(1), $1::int";
    assert_int_equal(flare_app_post(x.h.app, 0, batch_run, &b), 0);
    usleep(200000);
    assert_int_equal(pg_ctl("-w stop -m fast"), 0);
    wait_done(&b.n, 20, 10000);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(b.r[i].err, FLARE_EUNAVAIL);
        assert_int_equal(b.r[i].cls, FLARE_DB_ERR_CONNECTION); /* lost with its connection */
    }
    /* down: fails fast with a clear message */
    usleep(100000);
    uint64_t t0 = now_ms();
    qres_t r;
    q(&x, &r, "SELECT 1", NULL, 0);
    assert_int_equal(r.err, FLARE_EUNAVAIL);
    assert_int_equal(r.cls, FLARE_DB_ERR_CONNECTION);
    assert_true(now_ms() - t0 < 500);
    assert_true(strstr(r.msg, "database unavailable") != NULL);
    /* back */
    assert_int_equal(pg_ctl("-w start"), 0);
    bool back = false;
    for (int i = 0; i < 200 && !back; i++) {
        q(&x, &r, "SELECT 1", NULL, 0);
        back = r.err == 0;
        if (!back)
            usleep(50000);
    }
    assert_true(back);
    flare_db_stats_t st;
    assert_int_equal(flare_db_stats(x.db, 0, &st), 0);
    assert_true(st.reconnects >= 1);
    assert_true(st.rejected >= 21);
    assert_true(st.errors >= st.rejected);
    ctx_stop(&x);
}

/* ---- shutdown with work pending ---- */

static atomic_int shut_tx;

static void shut_begun(flare_db_tx_t *tx, flare_db_res_t *r, void *ud)
{
    (void)r, (void)ud;
    atomic_store(&shut_tx, tx != NULL ? 1 : -1); /* left open: shutdown rolls it back */
}

static void shut_task(void *ud)
{
    batch_t *b = ud;
    assert_int_equal(flare_db_begin(b->x->db, w0(b->x), NULL, shut_begun, NULL), 0);
    batch_run(b); /* on the other connection */
}

static void test_shutdown(void **state)
{
    (void)state;
    ctx_t x;
    start_default(&x);
    static batch_t b;
    memset(&b, 0, sizeof(b));
    b.x = &x;
    b.nq = 5;
    b.bad = 0;
    b.sql = "SELECT pg_sleep(3), $1::int";
    assert_int_equal(flare_app_post(x.h.app, 0, shut_task, &b), 0);
    for (int i = 0; i < 200 && atomic_load(&shut_tx) == 0; i++)
        usleep(10000);
    assert_int_equal(atomic_load(&shut_tx), 1);
    uint64_t t0 = now_ms();
    ctx_stop(&x); /* the callbacks run during the worker's shutdown */
    assert_true(now_ms() - t0 < 2500);
    assert_int_equal(atomic_load(&b.n), 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(b.r[i].err, FLARE_EUNAVAIL);
}

/* ---- URLs ---- */

static void test_urls(void **state)
{
    (void)state;
    const char *sock = getenv("FLARE_TEST_PG_SOCKDIR"), *port = getenv("FLARE_TEST_PG_PORT");
    assert_non_null(sock);
    assert_non_null(port);
    char url[512];
    snprintf(url, sizeof(url), "postgresql://flare@/flaretest?host=%s&port=%s", sock, port);
    ctx_t x;
    ctx_start(&x, url, NULL);
    ctx_run(&x);
    wait_up(&x);
    qres_t r;
    q(&x, &r, "SELECT inet_server_addr() IS NULL", NULL, 0); /* NULL over a unix socket */
    assert_string_equal(r.text[0][0], "t");
    ctx_stop(&x);
    /* a name: resolved on the job pool (localhost may give ::1 first: tried in turn) */
    snprintf(url, sizeof(url), "postgres://flare:flarepw@localhost:%s/flaretest", port);
    ctx_start(&x, url, NULL);
    ctx_run(&x);
    wait_up(&x);
    ctx_stop(&x);
    /* bad URLs fail at open */
    flare_app_t *app = flare_app_new(NULL);
    flare_db_t *db = NULL;
    assert_int_equal(flare_db_open(app, "postgresql://h/db?nosuchoption=1", NULL, &db),
                     FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "nosuchoption"));
    assert_int_equal(flare_db_open(app, "postgresql://a,b/db", NULL, &db), FLARE_EINVAL);
    assert_null(db);
    flare_app_free(app);
}

int main(void)
{
    pg_url();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),    cmocka_unit_test(test_injection_and_errors),
        cmocka_unit_test(test_batch),    cmocka_unit_test(test_queue),
        cmocka_unit_test(test_timeout),  cmocka_unit_test(test_tx),
        cmocka_unit_test(test_notify),   cmocka_unit_test(test_urls),
        cmocka_unit_test(test_shutdown), cmocka_unit_test(test_server_down),
    };
    /* FLARE_TEST_FILTER=test_batch runs one test (repeated runs of a flaky one) */
    const char *only = getenv("FLARE_TEST_FILTER");
    if (only != NULL && only[0] != '\0')
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
