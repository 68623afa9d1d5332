/* A small JSON REST service: sessions, route groups, CORS, validation and
 * middleware, in memory.
 *
 *   todo_api --listen HOST:PORT --workers N
 *
 *   POST   /api/session      {"user":"alice","password":"wonderland"} -> 200 + cookie; else 401
 *   DELETE /api/session      logs out (204)
 *   GET    /api/todos        list (401 without a session)
 *   POST   /api/todos        {"title": 1-200 chars, "done": bool} -> 201 + Location; 400 + errors
 *   GET    /api/todos/{id}   200 / 404
 *   PATCH  /api/todos/{id}   partial update -> 200 / 400 / 404
 *   DELETE /api/todos/{id}   204 / 404
 *
 * CORS allows http://localhost:3000 with credentials. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flare/flare.h>

/* ---- the store: shared by all workers, so behind a mutex ---- */

typedef struct todo {
    struct todo *next;
    int64_t id;
    bool done;
    size_t title_len;
    char title[]; /* title_len bytes */
} todo_t;

static struct {
    pthread_mutex_t mu;
    todo_t *head; /* newest last: kept in creation order */
    int64_t next_id;
} store = { PTHREAD_MUTEX_INITIALIZER, NULL, 1 };

/* ---- request bodies, described once ---- */

typedef struct todo_in {
    flare_str_t title;
    bool done;
} todo_in_t;

static const flare_field_t todo_fields[] = {
    FLARE_FIELD_STR(todo_in_t, title, "title", FLARE_REQUIRED, FLARE_LEN(1, 200)),
    FLARE_FIELD_BOOL(todo_in_t, done, "done", FLARE_REQUIRED),
};

typedef struct login_in {
    flare_str_t user;
    flare_str_t password;
} login_in_t;

static const flare_field_t login_fields[] = {
    FLARE_FIELD_STR(login_in_t, user, "user", FLARE_REQUIRED, FLARE_LEN(1, 64)),
    FLARE_FIELD_STR(login_in_t, password, "password", FLARE_REQUIRED, FLARE_LEN(1, 256)),
};

/* ---- helpers ---- */

static int json_error(flare_res_t *res, int status, const char *msg)
{
    flare_json_t *j = flare_res_json(res, status);
    if (j == NULL)
        return FLARE_ENOMEM;
    flare_json_object_begin(j);
    flare_json_kv_cstr(j, "error", msg);
    flare_json_object_end(j);
    return flare_json_end(j);
}

static void write_todo(flare_json_t *j, const todo_t *t)
{
    flare_json_object_begin(j);
    flare_json_kv_int(j, "id", t->id);
    flare_json_kv_str(j, "title", (flare_str_t){ t->title, t->title_len });
    flare_json_kv_bool(j, "done", t->done);
    flare_json_object_end(j);
}

static bool parse_id(flare_req_t *req, int64_t *id)
{
    flare_str_t s = flare_req_param(req, "id");
    if (s.len == 0 || s.len > 18)
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < s.len; i++) {
        if (s.ptr[i] < '0' || s.ptr[i] > '9')
            return false;
        v = v * 10 + (s.ptr[i] - '0');
    }
    *id = v;
    return true;
}

/* under store.mu */
static todo_t **find(int64_t id)
{
    todo_t **pp = &store.head;
    while (*pp != NULL && (*pp)->id != id)
        pp = &(*pp)->next;
    return pp;
}

static todo_t *todo_new(int64_t id, flare_str_t title, bool done)
{
    todo_t *t = malloc(sizeof(*t) + title.len);
    if (t == NULL)
        return NULL;
    t->next = NULL;
    t->id = id;
    t->done = done;
    t->title_len = title.len;
    memcpy(t->title, title.ptr, title.len);
    return t;
}

/* ---- middleware: the todo routes need a logged-in user ---- */

static int require_login(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    if (flare_session_get(req, "user").ptr == NULL)
        return json_error(res, 401, "login required");
    return 0;
}

/* ---- handlers ---- */

static int login(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    login_in_t in;
    if (flare_req_bind(req, res, login_fields, FLARE_MAP_N(login_fields), &in, 0, NULL) != 0)
        return 0; /* the 400 is sent */
    if (!flare_str_eq(in.user, FLARE_STR("alice")) ||
        !flare_str_eq(in.password, FLARE_STR("wonderland")))
        return json_error(res, 401, "invalid user or password");
    int rc = flare_session_regenerate(req); /* privilege change: new id */
    if (rc == 0)
        rc = flare_session_set(req, "user", in.user);
    if (rc != 0)
        return rc;
    flare_json_t *j = flare_res_json(res, 200);
    flare_json_object_begin(j);
    flare_json_kv_str(j, "user", in.user);
    flare_json_object_end(j);
    return flare_json_end(j);
}

static int logout(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_session_destroy(req);
    return flare_res_send(res, 204, FLARE_STR_NULL, FLARE_STR_NULL);
}

static int list_todos(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    flare_json_t *j = flare_res_json(res, 200);
    if (j == NULL)
        return FLARE_ENOMEM;
    flare_json_array_begin(j);
    pthread_mutex_lock(&store.mu);
    for (todo_t *t = store.head; t != NULL; t = t->next)
        write_todo(j, t);
    pthread_mutex_unlock(&store.mu);
    flare_json_array_end(j);
    return flare_json_end(j);
}

static int create_todo(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    todo_in_t in = { FLARE_STR_NULL, false };
    if (flare_req_bind(req, res, todo_fields, FLARE_MAP_N(todo_fields), &in,
                       FLARE_MAP_REJECT_UNKNOWN, NULL) != 0)
        return 0;
    pthread_mutex_lock(&store.mu);
    todo_t *t = todo_new(store.next_id, in.title, in.done);
    if (t != NULL) {
        store.next_id++;
        *find(-1) = t; /* append: find(-1) is the tail's next pointer */
    }
    pthread_mutex_unlock(&store.mu);
    if (t == NULL)
        return FLARE_ENOMEM;
    char loc[48];
    int n = snprintf(loc, sizeof(loc), "/api/todos/%lld", (long long)t->id);
    flare_res_header(res, FLARE_STR("Location"), (flare_str_t){ loc, (size_t)n });
    flare_json_t *j = flare_res_json(res, 201);
    if (j == NULL)
        return FLARE_ENOMEM;
    pthread_mutex_lock(&store.mu);
    write_todo(j, t);
    pthread_mutex_unlock(&store.mu);
    return flare_json_end(j);
}

static int get_todo(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    int64_t id;
    if (!parse_id(req, &id))
        return json_error(res, 404, "no such todo");
    flare_json_t *j = flare_res_json(res, 200);
    if (j == NULL)
        return FLARE_ENOMEM;
    pthread_mutex_lock(&store.mu);
    todo_t *t = *find(id);
    if (t != NULL)
        write_todo(j, t);
    pthread_mutex_unlock(&store.mu);
    if (t == NULL)
        return json_error(res, 404, "no such todo");
    return flare_json_end(j);
}

static int patch_todo(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    int64_t id;
    if (!parse_id(req, &id))
        return json_error(res, 404, "no such todo");
    todo_in_t in = { FLARE_STR_NULL, false };
    uint64_t present = 0;
    /* PATCH: only what is present is validated and applied */
    if (flare_req_bind(req, res, todo_fields, FLARE_MAP_N(todo_fields), &in,
                       FLARE_MAP_PARTIAL | FLARE_MAP_REJECT_UNKNOWN, &present) != 0)
        return 0;
    flare_json_t *j = flare_res_json(res, 200);
    if (j == NULL)
        return FLARE_ENOMEM;
    int status = 200;
    pthread_mutex_lock(&store.mu);
    todo_t **pp = find(id);
    if (*pp == NULL) {
        status = 404;
    } else {
        todo_t *t = *pp;
        if (present & 1u) { /* title */
            todo_t *n = todo_new(t->id, in.title, t->done);
            if (n == NULL) {
                status = 500;
            } else {
                n->next = t->next;
                *pp = n;
                free(t);
                t = n;
            }
        }
        if (present & 2u) /* done */
            t->done = in.done;
        if (status == 200)
            write_todo(j, t);
    }
    pthread_mutex_unlock(&store.mu);
    if (status == 404)
        return json_error(res, 404, "no such todo");
    if (status == 500)
        return FLARE_ENOMEM;
    return flare_json_end(j);
}

static int delete_todo(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    int64_t id;
    if (!parse_id(req, &id))
        return json_error(res, 404, "no such todo");
    pthread_mutex_lock(&store.mu);
    todo_t **pp = find(id), *t = *pp;
    if (t != NULL)
        *pp = t->next;
    pthread_mutex_unlock(&store.mu);
    if (t == NULL)
        return json_error(res, 404, "no such todo");
    free(t);
    return flare_res_send(res, 204, FLARE_STR_NULL, FLARE_STR_NULL);
}

/* ---- main ---- */

static int setup(flare_app_t *app)
{
    flare_middleware_t m;
    int rc;
    if ((rc = flare_request_id(app, &m)) != 0 || (rc = flare_use(app, &m)) != 0)
        return rc;
    if ((rc = flare_security_headers(app, NULL, &m)) != 0 || (rc = flare_use(app, &m)) != 0)
        return rc;
    flare_group_t *api = flare_group_new(app, "/api");
    if (api == NULL)
        return FLARE_ENOMEM;
    static const char *const origins[] = { "http://localhost:3000", NULL };
    flare_cors_config_t cors = {
        .origins = origins, .headers = "Content-Type", .credentials = true, .max_age = 600
    };
    if ((rc = flare_cors(app, &cors, &m)) != 0 || (rc = flare_group_use(api, &m)) != 0)
        return rc;
    flare_session_config_t sc = { .cookie_name = "todo_sid" };
    if ((rc = flare_sessions(app, &sc, &m)) != 0 || (rc = flare_group_use(api, &m)) != 0)
        return rc;
    if ((rc = flare_group_route(api, FLARE_METHOD_POST, "/session", login, NULL)) != 0 ||
        (rc = flare_group_route(api, FLARE_METHOD_DELETE, "/session", logout, NULL)) != 0)
        return rc;
    flare_group_t *todos = flare_group_sub(api, "/todos");
    if (todos == NULL)
        return FLARE_ENOMEM;
    flare_middleware_t auth = { "require-login", require_login, NULL, NULL };
    if ((rc = flare_group_use(todos, &auth)) != 0)
        return rc;
    if ((rc = flare_group_route(todos, FLARE_METHOD_GET, "/", list_todos, NULL)) != 0 ||
        (rc = flare_group_route(todos, FLARE_METHOD_POST, "/", create_todo, NULL)) != 0 ||
        (rc = flare_group_route(todos, FLARE_METHOD_GET, "/{id}", get_todo, NULL)) != 0 ||
        (rc = flare_group_route(todos, FLARE_METHOD_PATCH, "/{id}", patch_todo, NULL)) != 0 ||
        (rc = flare_group_route(todos, FLARE_METHOD_DELETE, "/{id}", delete_todo, NULL)) != 0)
        return rc;
    return 0;
}

int main(int argc, char **argv)
{
    const char *listen = "127.0.0.1:8080";
    flare_config_t cfg;
    flare_config_init(&cfg);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--listen") == 0) {
            listen = argv[i + 1];
        } else if (strcmp(argv[i], "--workers") == 0) {
            char *end;
            errno = 0;
            long v = strtol(argv[i + 1], &end, 10);
            if (errno != 0 || *end != '\0' || v < 0 || v > 1024) {
                fprintf(stderr, "todo_api: invalid --workers %s\n", argv[i + 1]);
                return 2;
            }
            cfg.workers = (unsigned)v;
        } else {
            fprintf(stderr, "usage: %s --listen HOST:PORT --workers N\n", argv[0]);
            return 2;
        }
    }
    if (argc % 2 == 0) {
        fprintf(stderr, "usage: %s --listen HOST:PORT --workers N\n", argv[0]);
        return 2;
    }
    flare_app_t *app = flare_app_new(&cfg);
    if (app == NULL) {
        fprintf(stderr, "flare: %s\n", flare_last_error());
        return 1;
    }
    int rc = setup(app);
    if (rc == 0)
        rc = flare_app_run(app, listen);
    if (rc != 0)
        fprintf(stderr, "todo_api: %s\n", flare_strerror(rc));
    flare_app_free(app);
    while (store.head != NULL) {
        todo_t *t = store.head;
        store.head = t->next;
        free(t);
    }
    return rc != 0;
}
