/* The showcase's todo API, tested in process with flare/test.h: the app is
 * built from the same parts main() uses (todos.c, live.c) over a private
 * SQLite file, run on a loopback port, and driven as a client would drive
 * it: log in (the session cookie is kept by the test client), add, list,
 * complete, delete, and what a client gets wrong (no session, bad bodies,
 * someone else's todo).
 *
 * Plain C: CHECK reports the line and exits 1 (assert() would vanish under
 * NDEBUG in optimized builds). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <flare/db.h>
#include <flare/flare.h>
#include <flare/json.h>
#include <flare/settings.h>
#include <flare/test.h>

#include "../showcase.h"

#define CHECK(x)                                                                      \
    do {                                                                              \
        if (!(x)) {                                                                   \
            fprintf(stderr, "%s:%d: CHECK(%s) failed (%s)\n", __FILE__, __LINE__, #x, \
                    flare_test_error(t));                                             \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static flare_test_t *t;

/* The "id" of a todo in a JSON answer. */
static int64_t todo_id(const flare_test_res_t *res)
{
    flare_json_doc_t *doc;
    CHECK(flare_test_res_json(res, &doc) == 0);
    int64_t id = 0;
    CHECK(flare_json_val_int(flare_json_val_get(flare_json_doc_root(doc), "id"), &id) == 0);
    flare_json_doc_free(doc);
    return id;
}

/* How many todos GET /api/todos lists. */
static size_t count_todos(void)
{
    flare_test_res_t res;
    CHECK(flare_test_get(t, "/api/todos", &res) == 0);
    CHECK(res.status == 200);
    flare_json_doc_t *doc;
    CHECK(flare_test_res_json(&res, &doc) == 0);
    size_t n = flare_json_val_len(flare_json_doc_root(doc));
    flare_json_doc_free(doc);
    flare_test_res_free(&res);
    return n;
}

static void login(const char *user)
{
    char body[128];
    snprintf(body, sizeof(body), "{\"user\":\"%s\"}", user);
    flare_test_res_t res;
    CHECK(flare_test_json(t, "POST", "/api/session", body, NULL, &res) == 0);
    CHECK(res.status == 200);
    CHECK(strstr(flare_test_cookies(t), "showcase_sid=") != NULL);
    flare_test_res_free(&res);
}

int main(void)
{
    char path[] = "/tmp/showcase-test-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 1;
    close(fd);
    char url[64];
    snprintf(url, sizeof(url), "sqlite:%s", path);

    flare_settings_t st;
    flare_settings_init(&st);
    flare_app_t *app = flare_app_new(NULL);
    flare_db_t *db;
    if (app == NULL || flare_db_open(app, url, NULL, &db) != 0 ||
        showcase_todos(app, db, &st) != 0 || showcase_events(app, &st) != 0) {
        fprintf(stderr, "setup: %s\n", flare_last_error());
        return 1;
    }
    if (flare_test_start(app, NULL, &t) != 0) {
        fprintf(stderr, "start: %s\n", flare_last_error());
        return 1;
    }
    flare_test_res_t res;

    /* no session yet */
    CHECK(flare_test_get(t, "/api/todos", &res) == 0);
    CHECK(res.status == 401);
    flare_test_res_free(&res);

    /* a bad login body */
    CHECK(flare_test_json(t, "POST", "/api/session", "{\"user\":\"\"}", NULL, &res) == 0);
    CHECK(res.status == 400);
    flare_test_res_free(&res);
    CHECK(flare_test_json(t, "POST", "/api/session", "{not json", NULL, &res) == 0);
    CHECK(res.status == 400);
    flare_test_res_free(&res);

    login("alice");
    CHECK(flare_test_get(t, "/api/session", &res) == 0);
    CHECK(res.status == 200 && strstr(res.body, "\"alice\"") != NULL);
    flare_test_res_free(&res);
    CHECK(count_todos() == 0);

    /* add two */
    CHECK(flare_test_json(t, "POST", "/api/todos", "{\"title\":\"write tests\"}", NULL, &res) == 0);
    CHECK(res.status == 201);
    int64_t first = todo_id(&res);
    char where[64];
    snprintf(where, sizeof(where), "/api/todos/%lld", (long long)first);
    CHECK(flare_test_res_header(&res, "location") != NULL);
    CHECK(strcmp(flare_test_res_header(&res, "location"), where) == 0);
    flare_test_res_free(&res);
    CHECK(flare_test_json(t, "POST", "/api/todos", "{\"title\":\"ship\"}", NULL, &res) == 0);
    CHECK(res.status == 201);
    int64_t second = todo_id(&res);
    flare_test_res_free(&res);
    CHECK(second != first);
    CHECK(count_todos() == 2);

    /* what does not validate */
    CHECK(flare_test_json(t, "POST", "/api/todos", "{\"title\":\"\"}", NULL, &res) == 0);
    CHECK(res.status == 400);
    flare_test_res_free(&res);
    CHECK(flare_test_json(t, "POST", "/api/todos", "{\"title\":\"x\",\"extra\":1}", NULL, &res) ==
          0);
    CHECK(res.status == 400);
    flare_test_res_free(&res);

    /* complete the first */
    CHECK(flare_test_json(t, "PATCH", where, "{\"done\":true}", NULL, &res) == 0);
    CHECK(res.status == 200);
    CHECK(strstr(res.body, "\"done\":true") != NULL);
    flare_test_res_free(&res);

    /* bob cannot see or touch alice's todos */
    flare_test_clear_cookies(t);
    login("bob");
    CHECK(count_todos() == 0);
    CHECK(flare_test_request(t, &(flare_test_req_t){ .method = "DELETE", .path = where }, &res) ==
          0);
    CHECK(res.status == 404);
    flare_test_res_free(&res);

    /* back to alice: delete it */
    flare_test_clear_cookies(t);
    login("alice");
    CHECK(flare_test_request(t, &(flare_test_req_t){ .method = "DELETE", .path = where }, &res) ==
          0);
    CHECK(res.status == 204);
    flare_test_res_free(&res);
    CHECK(count_todos() == 1);
    CHECK(flare_test_request(t, &(flare_test_req_t){ .method = "DELETE", .path = where }, &res) ==
          0);
    CHECK(res.status == 404);
    flare_test_res_free(&res);

    /* log out: the session is gone */
    CHECK(flare_test_request(t, &(flare_test_req_t){ .method = "DELETE", .path = "/api/session" },
                             &res) == 0);
    CHECK(res.status == 204);
    flare_test_res_free(&res);
    CHECK(flare_test_get(t, "/api/todos", &res) == 0);
    CHECK(res.status == 401);
    flare_test_res_free(&res);

    CHECK(flare_test_stop(t) == 0);
    t = NULL;
    flare_app_free(app);
    flare_settings_free(&st);
    unlink(path);
    printf("showcase todo API: all checks passed\n");
    return 0;
}
