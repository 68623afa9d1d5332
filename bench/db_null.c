/* The database's own ceiling for bench/db.sh: a "null" database client that
 * drives libpq in pipeline mode over the same number of connections as
 * Flare's pool and sends the same statements the TFB routes send, with no
 * HTTP. Its queries per second are what PostgreSQL on this machine can
 * serve that way; Flare's /db, /queries, /fortunes and /updates are quoted
 * as a ratio to it.
 *
 *   db_null --url URL [--conns 2] [--inflight 64] [--mode db|queries|fortunes|updates]
 *           [--n 20] [--duration 5]
 *
 * A "request" is what one HTTP request of that route costs the database:
 *   db        one SELECT of a random world row
 *   queries   n such SELECTs
 *   fortunes  one SELECT of every fortune
 *   updates   n SELECTs, then one batched UPDATE of the n rows (as
 *             examples/tfb does on PostgreSQL)
 * `inflight` requests are kept outstanding (wrk's connections), spread over
 * the connections; the SELECTs of the requests started in one loop turn
 * go out together, with one sync, as the driver batches reads; each UPDATE
 * is followed by a sync of its own, as the driver ends a batch with a
 * write (several UPDATEs in one implicit transaction deadlock between the
 * two connections). --sync each puts a sync after every statement (what
 * the driver did before it batched reads).
 *
 * Prints one line: mode, requests, queries, seconds, req/s, queries/s, and
 * the client's own CPU time per request (its cost is not the server's). */
#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define MAX_CONNS 64
#define MAX_N     500

enum mode { M_DB, M_QUERIES, M_FORTUNES, M_UPDATES };

static const char SQL_WORLD[] = "SELECT id, randomnumber FROM world WHERE id = $1";
static const char SQL_FORTUNE[] = "SELECT id, message FROM fortune";
static const char SQL_UPDATE[] =
    "UPDATE world AS w SET randomnumber = v.r FROM "
    "(SELECT unnest($1::int[]) AS id, unnest($2::int[]) AS r) AS v WHERE w.id = v.id";

/* what one connection waits for, in order: one entry per statement sent
 * (the request it belongs to) and -1 for each sync */
typedef struct conn {
    PGconn *pg;
    int *fifo;
    size_t head, tail, cap;
    unsigned open; /* requests in flight on it */
    bool seg;      /* statements sent since the last sync */
} conn_t;

typedef struct req {
    unsigned left;  /* statements still to come back */
    unsigned stage; /* updates: 0 selects, 1 the update */
} req_t;

static uint64_t rng = 88172645463325252ull;
static unsigned rand_id(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % 10000) + 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void die(const char *what, PGconn *pg)
{
    fprintf(stderr, "db_null: %s: %s\n", what, pg != NULL ? PQerrorMessage(pg) : strerror(errno));
    exit(1);
}

static void push(conn_t *c, int v)
{
    if (c->tail - c->head == c->cap) {
        size_t ncap = c->cap != 0 ? c->cap * 2 : 1024;
        int *nf = malloc(ncap * sizeof(int));
        if (nf == NULL)
            die("out of memory", NULL);
        for (size_t i = 0; i < c->tail - c->head; i++)
            nf[i] = c->fifo[(c->head + i) % c->cap];
        free(c->fifo);
        c->tail -= c->head;
        c->head = 0;
        c->fifo = nf;
        c->cap = ncap;
    }
    c->fifo[c->tail++ % c->cap] = v;
}

static int pop(conn_t *c)
{
    return c->fifo[c->head++ % c->cap];
}

static enum mode mode = M_DB;
static bool sync_each; /* --sync each: a sync after every statement, not per batch */
static unsigned nq = 20;
static req_t *reqs;
static unsigned *free_reqs, nfree;
static uint64_t done_reqs, done_queries;

static void sync_one(conn_t *c)
{
    if (!PQpipelineSync(c->pg))
        die("PQpipelineSync", c->pg);
    push(c, -1);
    c->seg = false;
}

static void send_world(conn_t *c, int ri)
{
    char id[12];
    snprintf(id, sizeof(id), "%u", rand_id());
    const char *v[1] = { id };
    if (!PQsendQueryPrepared(c->pg, "w", 1, v, NULL, NULL, 0))
        die("PQsendQueryPrepared", c->pg);
    push(c, ri);
    c->seg = true;
    if (sync_each)
        sync_one(c);
}

static void send_update(conn_t *c, int ri)
{
    unsigned ids[MAX_N];
    for (unsigned i = 0; i < nq; i++)
        ids[i] = rand_id();
    /* ascending, without repeats: the same order examples/tfb uses */
    for (unsigned i = 1; i < nq; i++)
        for (unsigned j = i; j > 0 && ids[j - 1] > ids[j]; j--) {
            unsigned t = ids[j];
            ids[j] = ids[j - 1];
            ids[j - 1] = t;
        }
    char a[MAX_N * 12 + 3], b[MAX_N * 12 + 3];
    size_t pa = 0, pb = 0;
    a[pa++] = '{';
    b[pb++] = '{';
    for (unsigned i = 0; i < nq; i++) {
        if (i > 0 && ids[i] == ids[i - 1])
            continue;
        pa += (size_t)snprintf(a + pa, sizeof(a) - pa, "%s%u", pa > 1 ? "," : "", ids[i]);
        pb += (size_t)snprintf(b + pb, sizeof(b) - pb, "%s%u", pb > 1 ? "," : "", rand_id());
    }
    a[pa++] = '}';
    a[pa] = '\0';
    b[pb++] = '}';
    b[pb] = '\0';
    const char *v[2] = { a, b };
    if (!PQsendQueryPrepared(c->pg, "u", 2, v, NULL, NULL, 0))
        die("PQsendQueryPrepared", c->pg);
    push(c, ri);
    /* a write ends its segment, as the driver's do: two UPDATEs in one
     * implicit transaction hold their row locks together and deadlock with
     * the other connection's */
    sync_one(c);
}

static void start_req(conn_t *c)
{
    int ri = (int)free_reqs[--nfree];
    req_t *r = &reqs[ri];
    r->stage = 0;
    switch (mode) {
    case M_DB:
        r->left = 1;
        send_world(c, ri);
        break;
    case M_QUERIES:
    case M_UPDATES:
        r->left = nq;
        for (unsigned i = 0; i < nq; i++)
            send_world(c, ri);
        break;
    case M_FORTUNES:
        r->left = 1;
        if (!PQsendQueryPrepared(c->pg, "f", 0, NULL, NULL, NULL, 0))
            die("PQsendQueryPrepared", c->pg);
        push(c, ri);
        c->seg = true;
        if (sync_each)
            sync_one(c);
        break;
    }
    c->open++;
}

/* One statement of request ri came back. */
static void statement_done(conn_t *c, int ri, bool *sent)
{
    req_t *r = &reqs[ri];
    done_queries++;
    if (--r->left > 0)
        return;
    if (mode == M_UPDATES && r->stage == 0) {
        r->stage = 1;
        r->left = 1;
        send_update(c, ri);
        *sent = true;
        return;
    }
    done_reqs++;
    c->open--;
    free_reqs[nfree++] = (unsigned)ri;
}

static void prepare(conn_t *c)
{
    if (PQsetnonblocking(c->pg, 1) != 0)
        die("PQsetnonblocking", c->pg);
    /* prepared before the pipeline starts, as the driver prepares on first use */
    PGresult *res = PQprepare(c->pg, "w", SQL_WORLD, 1, NULL);
    if (PQresultStatus(res) != PGRES_COMMAND_OK)
        die("prepare world", c->pg);
    PQclear(res);
    res = PQprepare(c->pg, "f", SQL_FORTUNE, 0, NULL);
    if (PQresultStatus(res) != PGRES_COMMAND_OK)
        die("prepare fortune", c->pg);
    PQclear(res);
    res = PQprepare(c->pg, "u", SQL_UPDATE, 2, NULL);
    if (PQresultStatus(res) != PGRES_COMMAND_OK)
        die("prepare update", c->pg);
    PQclear(res);
    if (!PQenterPipelineMode(c->pg))
        die("PQenterPipelineMode", c->pg);
}

int main(int argc, char **argv)
{
    const char *url = NULL;
    unsigned nconns = 2, inflight = 64;
    double duration = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (strcmp(k, "--url") == 0)
            url = v;
        else if (strcmp(k, "--conns") == 0)
            nconns = (unsigned)atoi(v);
        else if (strcmp(k, "--inflight") == 0)
            inflight = (unsigned)atoi(v);
        else if (strcmp(k, "--n") == 0)
            nq = (unsigned)atoi(v);
        else if (strcmp(k, "--duration") == 0)
            duration = atof(v);
        else if (strcmp(k, "--sync") == 0)
            sync_each = strcmp(v, "each") == 0;
        else if (strcmp(k, "--mode") == 0) {
            if (strcmp(v, "db") == 0)
                mode = M_DB;
            else if (strcmp(v, "queries") == 0)
                mode = M_QUERIES;
            else if (strcmp(v, "fortunes") == 0)
                mode = M_FORTUNES;
            else if (strcmp(v, "updates") == 0)
                mode = M_UPDATES;
            else {
                fprintf(stderr, "db_null: unknown mode %s\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "db_null: unknown option %s\n", k);
            return 2;
        }
    }
    if (url == NULL || nconns == 0 || nconns > MAX_CONNS || inflight == 0 || nq == 0 ||
        nq > MAX_N || duration <= 0) {
        fprintf(stderr,
                "usage: db_null --url URL [--conns 1..%d] [--inflight N] "
                "[--mode db|queries|fortunes|updates] [--n 1..%d] [--duration S]\n",
                MAX_CONNS, MAX_N);
        return 2;
    }
    conn_t conns[MAX_CONNS] = { { 0 } };
    for (unsigned i = 0; i < nconns; i++) {
        conns[i].pg = PQconnectdb(url);
        if (PQstatus(conns[i].pg) != CONNECTION_OK)
            die("connect", conns[i].pg);
        prepare(&conns[i]);
    }
    reqs = calloc(inflight, sizeof(*reqs));
    free_reqs = calloc(inflight, sizeof(*free_reqs));
    if (reqs == NULL || free_reqs == NULL)
        die("out of memory", NULL);
    for (unsigned i = 0; i < inflight; i++)
        free_reqs[nfree++] = inflight - 1 - i;
    unsigned per_conn = (inflight + nconns - 1) / nconns;
    double t0 = now_s(), c0 = cpu_s(), end = t0 + duration;
    struct pollfd pfd[MAX_CONNS];
    while (now_s() < end) {
        for (unsigned i = 0; i < nconns; i++) {
            conn_t *c = &conns[i];
            bool sent = false;
            while (c->open < per_conn && nfree > 0) {
                start_req(c);
                sent = true;
            }
            if (sent && c->seg)
                sync_one(c);
            pfd[i].fd = PQsocket(c->pg);
            pfd[i].events = POLLIN | (PQflush(c->pg) == 1 ? POLLOUT : 0);
        }
        if (poll(pfd, nconns, 100) < 0 && errno != EINTR)
            die("poll", NULL);
        for (unsigned i = 0; i < nconns; i++) {
            conn_t *c = &conns[i];
            if (pfd[i].revents & POLLOUT)
                PQflush(c->pg);
            if (!(pfd[i].revents & (POLLIN | POLLERR | POLLHUP)))
                continue;
            if (!PQconsumeInput(c->pg))
                die("PQconsumeInput", c->pg);
            bool sent = false;
            while (c->head != c->tail && !PQisBusy(c->pg)) {
                PGresult *res = PQgetResult(c->pg);
                if (res == NULL)
                    continue; /* the end of one statement's results */
                ExecStatusType st = PQresultStatus(res);
                int who = pop(c);
                if (who == -1) {
                    if (st != PGRES_PIPELINE_SYNC)
                        die("expected a sync", c->pg);
                } else if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
                    fprintf(stderr, "db_null: statement failed: %s", PQresultErrorMessage(res));
                    return 1;
                } else {
                    statement_done(c, who, &sent);
                }
                PQclear(res);
            }
            if (sent && c->seg)
                sync_one(c);
        }
    }
    double secs = now_s() - t0, cpu = cpu_s() - c0;
    static const char *const names[] = { "db", "queries", "fortunes", "updates" };
    printf("mode=%s requests=%" PRIu64 " queries=%" PRIu64 " seconds=%.3f req_s=%.0f "
           "queries_s=%.0f client_cpu_us_per_req=%.2f\n",
           names[mode], done_reqs, done_queries, secs, (double)done_reqs / secs,
           (double)done_queries / secs, done_reqs > 0 ? cpu * 1e6 / (double)done_reqs : 0.0);
    for (unsigned i = 0; i < nconns; i++) {
        PQfinish(conns[i].pg);
        free(conns[i].fifo);
    }
    free(reqs);
    free(free_reqs);
    return 0;
}
