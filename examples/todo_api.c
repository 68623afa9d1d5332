/* A small JSON REST service: sessions, route groups, CORS, validation and
 * middleware, with the todos in a database (flare/db.h).
 *
 *   todo_api --listen HOST:PORT --workers N [--db URL] [--sessions redis://HOST:PORT]
 *
 * --db: sqlite:PATH (default sqlite:todo.db in the working directory) or
 * postgresql://user:pass@host:port/dbname; the table is created when
 * missing, so the todos survive a restart. A database that is down or
 * slow answers 503, a query error 500, both as {"error": ...}.
 * --sessions: sessions in Redis (they survive a restart, and instances on
 * the same Redis share them); while Redis is down a login answers 503
 * rather than handing out a session that was never stored.
 *
 *   POST   /api/session      {"user":"alice","password":"wonderland"} -> 200 + cookie; else 401
 *   DELETE /api/session      logs out (204)
 *   GET    /api/todos        list (401 without a session)
 *   POST   /api/todos        {"title": 1-200 chars, "done": bool} -> 201 + Location; 400 + errors
 *   GET    /api/todos/{id}   200 / 404
 *   PATCH  /api/todos/{id}   partial update -> 200 / 400 / 404
 *   DELETE /api/todos/{id}   204 / 404
 *
 *   GET    /openapi.json     the OpenAPI 3.1 document of all of the above
 *   GET    /docs/            Swagger UI on that document (flare/openapi.h)
 *
 * CORS allows http://localhost:3000 with credentials. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flare/db.h>
#include <flare/flare.h>
#include <flare/openapi.h>
#include <flare/settings.h>

/* ---- the store: a database (flare/db.h), asked asynchronously ---- */

static flare_db_t *db;

/* What a query's callback needs to answer. In the request's arena: valid
 * until the answer is sent, also when the client has gone meanwhile. */
typedef struct call {
    flare_req_t *req;
    flare_res_t *res;
    int status; /* of the answer on success */
} call_t;

static call_t *call_new(flare_req_t *req, flare_res_t *res, int status)
{
    call_t *c = flare_req_alloc(req, sizeof(*c));
    if (c != NULL)
        *c = (call_t){ req, res, status };
    return c;
}

/* Every statement answers with these columns, in this order. */
#define TODO_COLS "id, title, done"

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

/* ---- response bodies, described for the OpenAPI document ---- */

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

typedef struct user_out {
    flare_str_t user;
} user_out_t;

static const flare_field_t user_fields[] = {
    FLARE_FIELD_STR(user_out_t, user, "user", FLARE_REQUIRED, FLARE_LEN(1, 64)),
};

typedef struct error_out {
    flare_str_t error;
} error_out_t;

static const flare_field_t error_fields[] = {
    FLARE_FIELD_STR(error_out_t, error, "error", FLARE_REQUIRED,
                    FLARE_DESCRIPTION("what went wrong")),
};

/* flare_req_bind's 400, written by the library with the JSON writer:
 * {"errors":[{"field":..,"reason":..}]} when fields fail validation,
 * {"error":"invalid JSON","line":..,"column":..,"position":..,"reason":..}
 * when the body is not JSON. No struct holds it, so its schema is written
 * by hand (flare_op_content_t.schema_json) rather than by a mapping table. */
static const char bad_request_schema[] =
    "{\"oneOf\": ["
    "  {\"type\": \"object\", \"description\": \"fields that failed validation\","
    "   \"properties\": {"
    "     \"errors\": {\"type\": \"array\", \"minItems\": 1,"
    "                \"description\": \"every field that failed\","
    "                \"items\": {\"type\": \"object\","
    "                          \"properties\": {"
    "                            \"field\": {\"type\": \"string\", \"description\":"
    "                              \"path of the member: title, tags[2]; empty: the body\"},"
    "                            \"reason\": {\"type\": \"string\"},"
    "                            \"pattern\": {\"type\": \"string\", \"description\":"
    "                                        \"the pattern the string did not match\"}},"
    "                          \"required\": [\"field\", \"reason\"],"
    "                          \"additionalProperties\": false}},"
    "     \"more\": {\"type\": \"integer\", \"minimum\": 1,"
    "              \"description\": \"failures left out of the list\"}},"
    "   \"required\": [\"errors\"], \"additionalProperties\": false},"
    "  {\"type\": \"object\", \"description\": \"the body is not JSON\","
    "   \"properties\": {"
    "     \"error\": {\"type\": \"string\", \"const\": \"invalid JSON\"},"
    "     \"line\": {\"type\": \"integer\", \"minimum\": 1},"
    "     \"column\": {\"type\": \"integer\", \"minimum\": 1},"
    "     \"position\": {\"type\": \"integer\", \"minimum\": 0},"
    "     \"reason\": {\"type\": \"string\"}},"
    "   \"required\": [\"error\"], \"additionalProperties\": false}"
    "]}";

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

static void write_todo(flare_json_t *j, const flare_db_res_t *r, size_t row)
{
    flare_json_object_begin(j);
    flare_json_kv_int(j, "id", flare_db_get_int64(r, row, 0));
    flare_json_kv_str(j, "title", flare_db_get_text(r, row, 1));
    flare_json_kv_bool(j, "done", flare_db_get_int64(r, row, 2) != 0);
    flare_json_object_end(j);
}

/* A failed query: 503 (unavailable, timed out) or 500, as JSON. */
static void db_error(flare_res_t *res, const flare_db_res_t *r)
{
    int status = flare_db_res_http_status(r);
    json_error(res, status, status == 503 ? "database unavailable" : "database error");
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

/* The answer to a statement that returns todos: the list (status 0 in the
 * call), or the first row with the call's status, 404 without one. */
static void answer_list(flare_db_res_t *r, void *ud)
{
    call_t *c = ud;
    if (flare_db_res_error(r) != 0) {
        db_error(c->res, r);
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

static void answer_one(flare_db_res_t *r, void *ud)
{
    call_t *c = ud;
    if (flare_db_res_error(r) != 0) {
        db_error(c->res, r);
        return;
    }
    if (flare_db_res_rows(r) == 0) {
        json_error(c->res, 404, "no such todo");
        return;
    }
    if (c->status == 201) {
        char loc[48];
        int n =
            snprintf(loc, sizeof(loc), "/api/todos/%lld", (long long)flare_db_get_int64(r, 0, 0));
        flare_res_header(c->res, FLARE_STR("Location"), (flare_str_t){ loc, (size_t)n });
    }
    flare_json_t *j = flare_res_json(c->res, c->status);
    if (j == NULL)
        return;
    write_todo(j, r, 0);
    flare_json_end(j);
}

static void answer_deleted(flare_db_res_t *r, void *ud)
{
    call_t *c = ud;
    if (flare_db_res_error(r) != 0)
        db_error(c->res, r);
    else if (flare_db_res_affected(r) == 0)
        json_error(c->res, 404, "no such todo");
    else
        flare_res_send(c->res, 204, FLARE_STR_NULL, FLARE_STR_NULL);
}

/* Runs sql and answers through done: FLARE_ASYNC, or an error before any
 * query left (the handler's 500). */
static int ask(flare_req_t *req, flare_res_t *res, int status, const char *sql,
               const flare_db_val_t *p, size_t n, flare_db_fn done)
{
    call_t *c = call_new(req, res, status);
    if (c == NULL)
        return FLARE_ENOMEM;
    int rc = flare_db_query(db, flare_req_worker(req), sql, p, n, done, c);
    return rc == 0 ? FLARE_ASYNC : rc;
}

static int list_todos(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    return ask(req, res, 200, "SELECT " TODO_COLS " FROM todos ORDER BY id", NULL, 0, answer_list);
}

static int create_todo(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    todo_in_t in = { FLARE_STR_NULL, false };
    if (flare_req_bind(req, res, todo_fields, FLARE_MAP_N(todo_fields), &in,
                       FLARE_MAP_REJECT_UNKNOWN, NULL) != 0)
        return 0;
    flare_db_val_t p[2] = { FLARE_DB_TEXTV(in.title.ptr, in.title.len), FLARE_DB_INT(in.done) };
    return ask(req, res, 201,
               "INSERT INTO todos (title, done) VALUES ($1, $2) RETURNING " TODO_COLS, p, 2,
               answer_one);
}

static int get_todo(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    int64_t id;
    if (!parse_id(req, &id))
        return json_error(res, 404, "no such todo");
    flare_db_val_t p = FLARE_DB_INT(id);
    return ask(req, res, 200, "SELECT " TODO_COLS " FROM todos WHERE id = $1", &p, 1, answer_one);
}

static int patch_todo(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    int64_t id;
    if (!parse_id(req, &id))
        return json_error(res, 404, "no such todo");
    todo_in_t in = { FLARE_STR_NULL, false };
    uint64_t present = 0;
    /* PATCH: only what is present is validated and applied (NULL keeps the
     * column as it is) */
    if (flare_req_bind(req, res, todo_fields, FLARE_MAP_N(todo_fields), &in,
                       FLARE_MAP_PARTIAL | FLARE_MAP_REJECT_UNKNOWN, &present) != 0)
        return 0;
    flare_db_val_t p[3] = {
        (present & 1u) ? FLARE_DB_TEXTV(in.title.ptr, in.title.len) : FLARE_DB_NULLV,
        (present & 2u) ? FLARE_DB_INT(in.done) : FLARE_DB_NULLV,
        FLARE_DB_INT(id),
    };
    return ask(req, res, 200,
               "UPDATE todos SET title = COALESCE($1, title), done = COALESCE($2, done) "
               "WHERE id = $3 RETURNING " TODO_COLS,
               p, 3, answer_one);
}

static int delete_todo(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    int64_t id;
    if (!parse_id(req, &id))
        return json_error(res, 404, "no such todo");
    flare_db_val_t p = FLARE_DB_INT(id);
    return ask(req, res, 204, "DELETE FROM todos WHERE id = $1", &p, 1, answer_deleted);
}

/* ---- the OpenAPI document: every route, next to what it answers ---- */

#define R_ERROR(code, text)                                  \
    {                                                        \
        (code), (text), FLARE_OP_JSON("Error", error_fields) \
    }
#define R_INVALID                                                                       \
    {                                                                                   \
        400,                                                                            \
            "the fields that failed validation (every one of them), or where the body " \
            "is not JSON",                                                              \
            FLARE_OP_SCHEMA("BadRequest", bad_request_schema)                           \
    }
#define R_NOT_JSON \
    R_ERROR(415, "the body is not labelled JSON (Content-Type application/json or +json)")
#define R_NEED_LOGIN R_ERROR(401, "no session: log in first (POST /api/session)")
#define R_DB_DOWN    R_ERROR(503, "the database is unavailable or timed out")

static const char *const tag_session[] = { "session", NULL };
static const char *const tag_todos[] = { "todos", NULL };
static const char *const tag_meta[] = { "meta", NULL };

static const flare_op_param_t id_param[] = {
    FLARE_PARAM_INT(FLARE_IN_PATH, "id", FLARE_MIN(1), FLARE_DESCRIPTION("the todo's id")),
};

static const flare_op_content_t login_body = FLARE_OP_JSON("Login", login_fields);
static const flare_op_content_t todo_body = {
    .name = "TodoIn", .fields = todo_fields, .nfields = FLARE_MAP_N(todo_fields), .closed = true
};
static const flare_op_content_t todo_patch_body = { .name = "TodoPatch",
                                                    .fields = todo_fields,
                                                    .nfields = FLARE_MAP_N(todo_fields),
                                                    .partial = true,
                                                    .closed = true };

static const flare_op_response_t login_res[] = {
    { 200, "logged in; the session cookie todo_sid is set", FLARE_OP_JSON("User", user_fields) },
    R_INVALID,
    R_NOT_JSON,
    R_ERROR(401, "invalid user or password"),
    R_ERROR(503, "the session store is unavailable"),
};
static const flare_op_response_t logout_res[] = {
    { 204, "logged out; the session cookie is cleared", { 0 } },
};
static const flare_op_response_t list_res[] = {
    { 200, "every todo, by id", FLARE_OP_JSON_ARRAY("Todo", todo_out_fields) },
    R_NEED_LOGIN,
    R_DB_DOWN,
};
static const flare_op_response_t create_res[] = {
    { 201, "created; Location names it", FLARE_OP_JSON("Todo", todo_out_fields) },
    R_INVALID,
    R_NOT_JSON,
    R_NEED_LOGIN,
    R_DB_DOWN,
};
static const flare_op_response_t get_res[] = {
    { 200, "the todo", FLARE_OP_JSON("Todo", todo_out_fields) },
    R_NEED_LOGIN,
    R_ERROR(404, "no such todo"),
    R_DB_DOWN,
};
static const flare_op_response_t patch_res[] = {
    { 200, "the todo as updated", FLARE_OP_JSON("Todo", todo_out_fields) },
    R_INVALID,
    R_NOT_JSON,
    R_NEED_LOGIN,
    R_ERROR(404, "no such todo"),
    R_DB_DOWN,
};
static const flare_op_response_t delete_res[] = {
    { 204, "deleted", { 0 } },
    R_NEED_LOGIN,
    R_ERROR(404, "no such todo"),
    R_DB_DOWN,
};
static const flare_op_response_t doc_res[] = {
    { 200, "this document", { .content_type = "application/json" } },
    { 304, "not modified (If-None-Match matched the ETag)", { 0 } },
};

#define OPS(a) .responses = (a), .nresponses = FLARE_MAP_N(a)
#define ID     .params = id_param, .nparams = FLARE_MAP_N(id_param)

static int document(flare_app_t *app)
{
    static const struct {
        flare_method_t method;
        const char *pattern;
        flare_op_t op;
    } docs[] = {
        { FLARE_METHOD_POST,
          "/api/session",
          { .summary = "Log in",
            .description = "Checks the user and password (alice / wonderland), starts a new "
                           "session and sets its cookie.",
            .operation_id = "login",
            .tags = tag_session,
            .body = &login_body,
            OPS(login_res) } },
        { FLARE_METHOD_DELETE,
          "/api/session",
          { .summary = "Log out",
            .description = "Ends the session the cookie names, if any (204 either way).",
            .operation_id = "logout",
            .tags = tag_session,
            OPS(logout_res) } },
        { FLARE_METHOD_GET,
          "/api/todos",
          { .summary = "List the todos",
            .operation_id = "listTodos",
            .tags = tag_todos,
            OPS(list_res),
            .security = "sessionCookie" } },
        { FLARE_METHOD_POST,
          "/api/todos",
          { .summary = "Create a todo",
            .operation_id = "createTodo",
            .tags = tag_todos,
            .body = &todo_body,
            OPS(create_res),
            .security = "sessionCookie" } },
        { FLARE_METHOD_GET,
          "/api/todos/{id}",
          { .summary = "Read one todo",
            .operation_id = "getTodo",
            .tags = tag_todos,
            ID,
            OPS(get_res),
            .security = "sessionCookie" } },
        { FLARE_METHOD_PATCH,
          "/api/todos/{id}",
          { .summary = "Update a todo",
            .description = "Only the members present are validated and changed.",
            .operation_id = "updateTodo",
            .tags = tag_todos,
            ID,
            .body = &todo_patch_body,
            OPS(patch_res),
            .security = "sessionCookie" } },
        { FLARE_METHOD_DELETE,
          "/api/todos/{id}",
          { .summary = "Delete a todo",
            .operation_id = "deleteTodo",
            .tags = tag_todos,
            ID,
            OPS(delete_res),
            .security = "sessionCookie" } },
        { FLARE_METHOD_GET,
          "/openapi.json",
          { .summary = "This OpenAPI document",
            .operation_id = "openapi",
            .tags = tag_meta,
            OPS(doc_res) } },
    };
    int rc;
    flare_openapi_info_t info = {
        .title = "Flare todo API",
        .version = "1.0.0",
        .description = "The todo list of examples/todo_api.c: log in, then manage todos.",
    };
    if ((rc = flare_openapi_info(app, &info)) != 0 ||
        (rc = flare_openapi_cookie_auth(app, "sessionCookie", "todo_sid",
                                        "the session cookie set by POST /api/session")) != 0 ||
        (rc = flare_openapi_route(app, "/openapi.json")) != 0)
        return rc;
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        if ((rc = flare_route_doc(app, docs[i].method, docs[i].pattern, &docs[i].op)) != 0)
            return rc;
    }
    return flare_swagger_ui(app, "/docs", NULL);
}

/* ---- main ---- */

static int setup(flare_app_t *app, flare_settings_t *st)
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
    /* --session-secure; --sessions redis://: sessions in Redis, they survive
     * a restart and are shared by every instance on that Redis; while it is
     * down a login answers 503 [in memory, lost at exit] */
    flare_session_config_t sc = { .cookie_name = "todo_sid" };
    if ((rc = flare_settings_sessions(st, app, &sc, "todo:sess:", &m)) != 0 ||
        (rc = flare_group_use(api, &m)) != 0)
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
    return document(app);
}

/* The table, made when missing (so todos survive a restart). The id is
 * never reused after a delete: SQLite's AUTOINCREMENT, PostgreSQL's
 * identity column. */
static const char SCHEMA_SQLITE[] = "CREATE TABLE IF NOT EXISTS todos ("
                                    "id INTEGER PRIMARY KEY AUTOINCREMENT, "
                                    "title TEXT NOT NULL, done INTEGER NOT NULL)";
static const char SCHEMA_PG[] = "CREATE TABLE IF NOT EXISTS todos ("
                                "id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, "
                                "title TEXT NOT NULL, done INTEGER NOT NULL)";

int main(int argc, char **argv)
{
    /* --config FILE, FLARE_*, then the flags (flare/settings.h): --listen,
     * --workers, --db URL [sqlite:todo.db, in the working directory:
     * sqlite:PATH or postgresql://user:pass@host:port/dbname], --sessions
     * redis://HOST:PORT [in memory, lost at exit]... (--help lists them) */
    flare_settings_t st;
    int rc;
    if (flare_settings_main(&st, argc, argv, NULL, 0, &rc) != 0)
        return rc;
    const char *url = st.db != NULL ? st.db : "sqlite:todo.db";
    /* the app with the logs, the listeners, --sessions' Redis, SIGHUP */
    flare_app_t *app;
    if ((rc = flare_settings_app_new(&st, NULL, &app)) != 0) {
        fprintf(stderr, "todo_api: %s\n", flare_settings_error(&st));
        flare_settings_free(&st);
        return 1;
    }
    rc = flare_db_open(app, url, NULL, &db);
    if (rc == 0) {
        bool pg = strcmp(flare_db_driver(db), "postgresql") == 0;
        rc = flare_db_exec_setup(db, pg ? SCHEMA_PG : SCHEMA_SQLITE);
    }
    if (rc != 0) {
        fprintf(stderr, "todo_api: --db: %s: %s\n", flare_strerror(rc), flare_last_error());
        flare_app_free(app);
        flare_settings_free(&st);
        return 1;
    }
    if ((rc = setup(app, &st)) != 0)
        fprintf(stderr, "todo_api: %s: %s\n", flare_strerror(rc), flare_last_error());
    else if ((rc = flare_app_run(app, NULL)) != 0)
        fprintf(stderr, "todo_api: %s: %s\n", flare_strerror(rc), flare_last_error());
    flare_app_free(app);
    flare_settings_free(&st);
    return rc != 0;
}
