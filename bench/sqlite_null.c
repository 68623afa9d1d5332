/* The SQLite ceiling for bench/db.sh: THREADS threads, each with its own
 * read-only connection to the TFB database, running the statement a TFB
 * route runs, as fast as they can, with no HTTP and no hand-off between
 * threads. Flare's SQLite /db and /fortunes are quoted against it (its
 * pool has the same number of threads).
 *
 *   sqlite_null --path FILE [--threads 4] [--mode db|fortunes] [--duration 5]
 *
 * Prints: mode, statements, seconds, statements/s. */
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *path;
static bool fortunes;
static double duration = 5;
static _Atomic uint64_t total;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *run(void *arg)
{
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)arg;
    sqlite3 *db;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        fprintf(stderr, "sqlite_null: %s: %s\n", path, sqlite3_errmsg(db));
        exit(1);
    }
    sqlite3_stmt *st;
    const char *sql = fortunes ? "SELECT id, message FROM fortune"
                               : "SELECT id, randomnumber FROM world WHERE id = $1";
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "sqlite_null: prepare: %s\n", sqlite3_errmsg(db));
        exit(1);
    }
    uint64_t n = 0, sink = 0;
    double end = now_s() + duration;
    while ((n & 255) != 0 || now_s() < end) {
        if (!fortunes) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            sqlite3_bind_int64(st, 1, (sqlite3_int64)(rng % 10000) + 1);
        }
        int rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            /* read every cell, as the driver materialises them */
            sink += (uint64_t)sqlite3_column_int64(st, 0);
            sink += (uint64_t)sqlite3_column_bytes(st, 1);
            (void)sqlite3_column_text(st, 1);
        }
        if (rc != SQLITE_DONE) {
            fprintf(stderr, "sqlite_null: step: %s\n", sqlite3_errmsg(db));
            exit(1);
        }
        sqlite3_reset(st);
        n++;
    }
    atomic_fetch_add(&total, n);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return (void *)(uintptr_t)(sink & 1);
}

int main(int argc, char **argv)
{
    unsigned threads = 4;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--path") == 0)
            path = argv[i + 1];
        else if (strcmp(argv[i], "--threads") == 0)
            threads = (unsigned)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--duration") == 0)
            duration = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--mode") == 0)
            fortunes = strcmp(argv[i + 1], "fortunes") == 0;
    }
    if (path == NULL || threads == 0 || threads > 64 || duration <= 0) {
        fprintf(stderr, "usage: sqlite_null --path FILE [--threads 1..64] [--mode db|fortunes] "
                        "[--duration S]\n");
        return 2;
    }
    pthread_t t[64];
    double t0 = now_s();
    for (unsigned i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, run, (void *)(uintptr_t)(i + 1));
    for (unsigned i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    double secs = now_s() - t0;
    uint64_t n = atomic_load(&total);
    printf("mode=%s statements=%llu seconds=%.3f statements_s=%.0f\n", fortunes ? "fortunes" : "db",
           (unsigned long long)n, secs, (double)n / secs);
    return 0;
}
