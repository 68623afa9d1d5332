/* The showcase's todo list: log in with a name (a session, no password: a
 * demo), then each user adds, lists, completes and deletes their own todos,
 * kept in the database (SQLite by default). Every change is also published
 * on the live feed (live.c), so an open /events page sees it.
 *
 *   POST   /api/session      {"user":"alice"} -> 200 {"user":"alice"} + cookie
 *   GET    /api/session      200 {"user":..} / 401
 *   DELETE /api/session      204
 *   GET    /api/todos        the user's todos, by id
 *   POST   /api/todos        {"title": 1-200 chars, not all blank} -> 201 + Location
 *   PATCH  /api/todos/{id}   {"done": bool} -> 200 / 404
 *   DELETE /api/todos/{id}   204 / 404
 *
 * Another user's todo is a 404, as if it did not exist. */
#include <stdio.h>
#include <string.h>

#include <flare/db.h>
#include <flare/flare.h>
#include <flare/openapi.h>

#include "showcase.h"

#define COLS "id, title, done"

static flare_db_t *db;
static flare_app_t *the_app;

/* ---- bodies, described once: they decode, validate and document ---- */

typedef struct login_in {
    flare_str_t user;
} login_in_t;

static const flare_field_t login_fields[] = {
    FLARE_FIELD_STR(login_in_t, user, "user", FLARE_REQUIRED, FLARE_LEN(1, 32),
                    FLARE_PATTERN("^[A-Za-z0-9_.-]+$"),
                    FLARE_DESCRIPTION("a name: letters, digits, '.', '_' or '-'"),
                    /* what the login form shows under the field */
                    FLARE_MESSAGE("use 1 to 32 letters, digits, '.', '_' or '-'")),
};

typedef struct title_in {
    flare_str_t title;
} title_in_t;

static const flare_field_t title_fields[] = {
    FLARE_FIELD_STR(title_in_t, title, "title", FLARE_REQUIRED, FLARE_LEN(1, 200),
                    FLARE_DESCRIPTION("1 to 200 characters, not only spaces")),
};

typedef struct done_in {
    bool done;
} done_in_t;

static const flare_field_t done_fields[] = {
    FLARE_FIELD_BOOL(done_in_t, done, "done", FLARE_REQUIRED),
};

typedef struct todo_out {
    int64_t id;
    flare_str_t title;
    bool done;
} todo_out_t;

static const flare_field_t todo_out_fields[] = {
    FLARE_FIELD_INT(todo_out_t, id, "id", FLARE_REQUIRED, FLARE_MIN(1)),
    FLARE_FIELD_STR(todo_out_t, title, "title", FLARE_REQUIRED, FLARE_LEN(1, 200)),
    FLARE_FIELD_BOOL(todo_out_t, done, "done", FLARE_REQUIRED),
};

typedef struct error_out {
    flare_str_t error;
} error_out_t;

static const flare_field_t error_fields[] = {
    FLARE_FIELD_STR(error_out_t, error, "error", FLARE_REQUIRED),
};

/* ---- a query in flight ---- */

/* What a query's callback needs to answer; in the request's arena (valid
 * until the answer is sent). */
typedef struct call {
    flare_res_t *res;
    flare_str_t user;   /* the session's, valid as long as the request */
    int status;         /* of the answer on success */
    const char *action; /* published on the feed when not NULL */
} call_t;

static void write_todo(flare_json_t *j, const flare_db_res_t *r, size_t row)
{
    flare_json_object_begin(j);
    flare_json_kv_int(j, "id", flare_db_get_int64(r, row, 0));
    flare_json_kv_str(j, "title", flare_db_get_text(r, row, 1));
    flare_json_kv_bool(j, "done", flare_db_get_int64(r, row, 2) != 0);
    flare_json_object_end(j);
}

static void answer_list(flare_db_res_t *r, void *ud)
{
    call_t *c = ud;
    if (flare_db_res_error(r) != 0) {
        flare_db_send_error(c->res, r);
        return;
    }
    flare_json_t *j = flare_res_json(c->res, 200);
    if (j == NULL)
        return;
    flare_json_array_begin(j);
    for (size_t i = 0; i < flare_db_res_rows(r); i++)
        write_todo(j, r, i);
    flare_json_array_end(j);
    flare_json_end(j);
}

/* One todo back (RETURNING): answered with the call's status, published. */
static void answer_one(flare_db_res_t *r, void *ud)
{
    call_t *c = ud;
    if (flare_db_res_error(r) != 0) {
        flare_db_send_error(c->res, r);
        return;
    }
    if (flare_db_res_rows(r) == 0) {
        showcase_json_error(c->res, 404, "no such todo");
        return;
    }
    int64_t id = flare_db_get_int64(r, 0, 0);
    if (c->status == 201) {
        char loc[48];
        int n = snprintf(loc, sizeof(loc), "/api/todos/%lld", (long long)id);
        flare_res_header(c->res, FLARE_STR("Location"), (flare_str_t){ loc, (size_t)n });
    }
    if (c->action != NULL)
        showcase_feed_publish(the_app, c->action, c->user, id, flare_db_get_text(r, 0, 1),
                              flare_db_get_int64(r, 0, 2) != 0);
    flare_json_t *j = flare_res_json(c->res, c->status);
    if (j == NULL)
        return;
    write_todo(j, r, 0);
    flare_json_end(j);
}

static void answer_deleted(flare_db_res_t *r, void *ud)
{
    call_t *c = ud;
    if (flare_db_res_error(r) != 0) {
        flare_db_send_error(c->res, r);
    } else if (flare_db_res_rows(r) == 0) {
        showcase_json_error(c->res, 404, "no such todo");
    } else {
        showcase_feed_publish(the_app, "deleted", c->user, flare_db_get_int64(r, 0, 0),
                              flare_db_get_text(r, 0, 1), flare_db_get_int64(r, 0, 2) != 0);
        flare_res_send(c->res, 204, FLARE_STR_NULL, FLARE_STR_NULL);
    }
}

/* Runs sql for the logged-in user and answers through done: FLARE_ASYNC, or
 * an error before any query left (the handler's 500). */
static int ask(flare_req_t *req, flare_res_t *res, int status, const char *action, const char *sql,
               const flare_db_val_t *p, size_t n, flare_db_fn done)
{
    call_t *c = flare_req_alloc(req, sizeof(*c));
    if (c == NULL)
        return FLARE_ENOMEM;
    *c = (call_t){ res, flare_session_get(req, "user"), status, action };
    int rc = flare_db_query(db, flare_req_worker(req), sql, p, n, done, c);
    return rc == 0 ? FLARE_ASYNC : rc;
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
    return v > 0;
}

/* ---- the session ---- */

static int require_login(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    if (flare_session_get(req, "user").ptr == NULL)
        return showcase_json_error(res, 401, "log in first (POST /api/session)");
    return 0;
}

static int send_user(flare_res_t *res, flare_str_t user)
{
    flare_json_t *j = flare_res_json(res, 200);
    if (j == NULL)
        return FLARE_ENOMEM;
    flare_json_object_begin(j);
    flare_json_kv_str(j, "user", user);
    flare_json_object_end(j);
    return flare_json_end(j);
}

static int login(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    login_in_t in;
    if (flare_req_bind(req, res, login_fields, FLARE_MAP_N(login_fields), &in,
                       FLARE_MAP_REJECT_UNKNOWN, NULL) != 0)
        return 0;                           /* the 400 is sent */
    int rc = flare_session_regenerate(req); /* a new identity: a new session id */
    if (rc == 0)
        rc = flare_session_set(req, "user", in.user);
    return rc != 0 ? rc : send_user(res, in.user);
}

static int whoami(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t user = flare_session_get(req, "user");
    if (user.ptr == NULL)
        return showcase_json_error(res, 401, "not logged in");
    return send_user(res, user);
}

static int logout(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_session_destroy(req);
    return flare_res_send(res, 204, FLARE_STR_NULL, FLARE_STR_NULL);
}

/* ---- the todos ---- */

static flare_db_val_t user_val(flare_req_t *req)
{
    flare_str_t u = flare_session_get(req, "user");
    return FLARE_DB_TEXTV(u.ptr, u.len);
}

static int list_todos(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_db_val_t p = user_val(req);
    return ask(req, res, 200, NULL, "SELECT " COLS " FROM todos WHERE owner = $1 ORDER BY id", &p,
               1, answer_list);
}

/* The length of the white space (ASCII, and the Unicode spaces a browser's
 * trim() removes) at the start of s, in bytes; 0 when s starts with
 * anything else. s is valid UTF-8 (the JSON decoder checked it). */
static size_t space_len(const unsigned char *s, size_t n)
{
    if (n >= 1 && (s[0] == ' ' || (s[0] >= '\t' && s[0] <= '\r')))
        return 1;
    if (n >= 2 && s[0] == 0xc2 && s[1] == 0xa0) /* U+00A0 */
        return 2;
    if (n < 3 || (s[0] & 0xf0) != 0xe0)
        return 0;
    unsigned cp = ((s[0] & 0x0fu) << 12) | ((s[1] & 0x3fu) << 6) | (s[2] & 0x3fu);
    bool space = cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
                 cp == 0x202f || cp == 0x205f || cp == 0x3000 || cp == 0xfeff;
    return space ? 3 : 0;
}

static bool blank(flare_str_t s)
{
    const unsigned char *p = (const unsigned char *)s.ptr;
    for (size_t i = 0, k; i < s.len; i += k)
        if ((k = space_len(p + i, s.len - i)) == 0)
            return false;
    return true;
}

/* 400 {"errors":[{"field":..,"reason":..}]}: the shape of the API's other
 * validation errors (flare_req_bind). */
static int field_error(flare_res_t *res, const char *field, const char *reason)
{
    flare_json_t *j = flare_res_json(res, 400);
    if (j == NULL)
        return FLARE_ENOMEM;
    flare_json_object_begin(j);
    flare_json_kv_array(j, "errors");
    flare_json_object_begin(j);
    flare_json_kv_cstr(j, "field", field);
    flare_json_kv_cstr(j, "reason", reason);
    flare_json_object_end(j);
    flare_json_array_end(j);
    flare_json_object_end(j);
    return flare_json_end(j);
}

static int create_todo(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    title_in_t in;
    if (flare_req_bind(req, res, title_fields, FLARE_MAP_N(title_fields), &in,
                       FLARE_MAP_REJECT_UNKNOWN, NULL) != 0)
        return 0;
    if (blank(in.title))
        return field_error(res, "title", "must not be blank (only spaces)");
    flare_db_val_t p[2] = { user_val(req), FLARE_DB_TEXTV(in.title.ptr, in.title.len) };
    return ask(req, res, 201, "added",
               "INSERT INTO todos (owner, title, done) VALUES ($1, $2, 0) RETURNING " COLS, p, 2,
               answer_one);
}

static int complete_todo(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    int64_t id;
    if (!parse_id(req, &id))
        return showcase_json_error(res, 404, "no such todo");
    done_in_t in;
    if (flare_req_bind(req, res, done_fields, FLARE_MAP_N(done_fields), &in,
                       FLARE_MAP_REJECT_UNKNOWN, NULL) != 0)
        return 0;
    flare_db_val_t p[3] = { FLARE_DB_INT(in.done), FLARE_DB_INT(id), user_val(req) };
    return ask(req, res, 200, in.done ? "completed" : "reopened",
               "UPDATE todos SET done = $1 WHERE id = $2 AND owner = $3 RETURNING " COLS, p, 3,
               answer_one);
}

static int delete_todo(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    int64_t id;
    if (!parse_id(req, &id))
        return showcase_json_error(res, 404, "no such todo");
    flare_db_val_t p[2] = { FLARE_DB_INT(id), user_val(req) };
    return ask(req, res, 204, NULL,
               "DELETE FROM todos WHERE id = $1 AND owner = $2 RETURNING " COLS, p, 2,
               answer_deleted);
}

/* ---- the OpenAPI description (served at /openapi.json, shown at /docs) ---- */

static const char *const tag_session[] = { "session", NULL };
static const char *const tag_todos[] = { "todos", NULL };

static const flare_op_param_t id_param[] = {
    FLARE_PARAM_INT(FLARE_IN_PATH, "id", FLARE_MIN(1), FLARE_DESCRIPTION("the todo's id")),
};

static const flare_op_content_t login_body = {
    .name = "Login", .fields = login_fields, .nfields = FLARE_MAP_N(login_fields), .closed = true
};
static const flare_op_content_t title_body = {
    .name = "NewTodo", .fields = title_fields, .nfields = FLARE_MAP_N(title_fields), .closed = true
};
static const flare_op_content_t done_body = {
    .name = "TodoDone", .fields = done_fields, .nfields = FLARE_MAP_N(done_fields), .closed = true
};

#define R_ERR(code, what)                                \
    {                                                    \
        code, what, FLARE_OP_JSON("Error", error_fields) \
    }
#define R_BAD                                  \
    {                                          \
        400, "the body does not validate",     \
        {                                      \
            .content_type = "application/json" \
        }                                      \
    }
#define R_LOGIN R_ERR(401, "not logged in")
#define R_DB    R_ERR(503, "the database is unavailable")
#define USER_OK                                                              \
    {                                                                        \
        200, "the user of this session", FLARE_OP_JSON("User", login_fields) \
    }
#define TODO(code, what)                                   \
    {                                                      \
        code, what, FLARE_OP_JSON("Todo", todo_out_fields) \
    }

static const flare_op_response_t login_res[] = { USER_OK, R_BAD };
static const flare_op_response_t whoami_res[] = { USER_OK, R_LOGIN };
static const flare_op_response_t logout_res[] = { { 204, "logged out", { 0 } } };
static const flare_op_response_t list_res[] = {
    { 200, "this user's todos, by id", FLARE_OP_JSON_ARRAY("Todo", todo_out_fields) },
    R_LOGIN,
    R_DB,
};
static const flare_op_response_t create_res[] = { TODO(201, "created; Location names it"), R_BAD,
                                                  R_LOGIN, R_DB };
static const flare_op_response_t patch_res[] = { TODO(200, "the todo as updated"), R_BAD, R_LOGIN,
                                                 R_ERR(404, "no such todo (of this user)"), R_DB };
static const flare_op_response_t delete_res[] = {
    { 204, "deleted", { 0 } }, R_LOGIN, R_ERR(404, "no such todo (of this user)"), R_DB
};

#define OPS(a) .responses = (a), .nresponses = FLARE_MAP_N(a)
#define ID     .params = id_param, .nparams = FLARE_MAP_N(id_param)
#define AUTH   .security = "sessionCookie"

static int document(flare_app_t *app)
{
    static const struct {
        flare_method_t method;
        const char *pattern;
        flare_op_t op;
    } docs[] = {
        { FLARE_METHOD_POST,
          "/api/session",
          { .summary = "Log in with a name",
            .operation_id = "login",
            .tags = tag_session,
            .body = &login_body,
            OPS(login_res) } },
        { FLARE_METHOD_GET,
          "/api/session",
          { .summary = "Who is logged in",
            .operation_id = "whoami",
            .tags = tag_session,
            OPS(whoami_res),
            AUTH } },
        { FLARE_METHOD_DELETE,
          "/api/session",
          { .summary = "Log out",
            .operation_id = "logout",
            .tags = tag_session,
            OPS(logout_res),
            AUTH } },
        { FLARE_METHOD_GET,
          "/api/todos",
          { .summary = "List my todos",
            .operation_id = "listTodos",
            .tags = tag_todos,
            OPS(list_res),
            AUTH } },
        { FLARE_METHOD_POST,
          "/api/todos",
          { .summary = "Add a todo",
            .operation_id = "addTodo",
            .tags = tag_todos,
            .body = &title_body,
            OPS(create_res),
            AUTH } },
        { FLARE_METHOD_PATCH,
          "/api/todos/{id}",
          { .summary = "Complete (or reopen) a todo",
            .operation_id = "completeTodo",
            .tags = tag_todos,
            ID,
            .body = &done_body,
            OPS(patch_res),
            AUTH } },
        { FLARE_METHOD_DELETE,
          "/api/todos/{id}",
          { .summary = "Delete a todo",
            .operation_id = "deleteTodo",
            .tags = tag_todos,
            ID,
            OPS(delete_res),
            AUTH } },
    };
    int rc = flare_openapi_cookie_auth(app, "sessionCookie", "showcase_sid",
                                       "the session cookie set by POST /api/session");
    for (size_t i = 0; rc == 0 && i < sizeof(docs) / sizeof(docs[0]); i++)
        rc = flare_route_doc(app, docs[i].method, docs[i].pattern, &docs[i].op);
    return rc;
}

/* ---- setup ---- */

/* The table, made when missing: the todos survive a restart. AUTOINCREMENT:
 * an id is never reused after a delete. */
static const char SCHEMA_SQLITE[] = "CREATE TABLE IF NOT EXISTS todos ("
                                    "id INTEGER PRIMARY KEY AUTOINCREMENT, owner TEXT NOT NULL, "
                                    "title TEXT NOT NULL, done INTEGER NOT NULL);"
                                    "CREATE INDEX IF NOT EXISTS todos_owner ON todos (owner, id)";
static const char SCHEMA_PG[] = "CREATE TABLE IF NOT EXISTS todos ("
                                "id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, "
                                "owner TEXT NOT NULL, title TEXT NOT NULL, done INTEGER NOT NULL);"
                                "CREATE INDEX IF NOT EXISTS todos_owner ON todos (owner, id)";

int showcase_todos(flare_app_t *app, flare_db_t *d, flare_settings_t *st)
{
    db = d;
    the_app = app;
    bool pg = strcmp(flare_db_driver(db), "postgresql") == 0;
    int rc = flare_db_exec_setup(db, pg ? SCHEMA_PG : SCHEMA_SQLITE);
    if (rc != 0)
        return rc;
    flare_group_t *api = flare_group_new(app, "/api");
    if (api == NULL)
        return FLARE_ENOMEM;
    flare_middleware_t m;
    /* --session-secure, --sessions (memory or redis://) */
    flare_session_config_t sc = { .cookie_name = "showcase_sid" };
    if ((rc = flare_settings_sessions(st, app, &sc, "showcase:sess:", &m)) != 0 ||
        (rc = flare_group_use(api, &m)) != 0)
        return rc;
    if ((rc = flare_group_route(api, FLARE_METHOD_POST, "/session", login, NULL)) != 0 ||
        (rc = flare_group_route(api, FLARE_METHOD_GET, "/session", whoami, NULL)) != 0 ||
        (rc = flare_group_route(api, FLARE_METHOD_DELETE, "/session", logout, NULL)) != 0)
        return rc;
    flare_group_t *todos = flare_group_sub(api, "/todos");
    if (todos == NULL)
        return FLARE_ENOMEM;
    flare_middleware_t auth = { "require-login", require_login, NULL, NULL };
    if ((rc = flare_group_use(todos, &auth)) != 0 ||
        (rc = flare_group_route(todos, FLARE_METHOD_GET, "/", list_todos, NULL)) != 0 ||
        (rc = flare_group_route(todos, FLARE_METHOD_POST, "/", create_todo, NULL)) != 0 ||
        (rc = flare_group_route(todos, FLARE_METHOD_PATCH, "/{id}", complete_todo, NULL)) != 0 ||
        (rc = flare_group_route(todos, FLARE_METHOD_DELETE, "/{id}", delete_todo, NULL)) != 0)
        return rc;
    return document(app);
}
