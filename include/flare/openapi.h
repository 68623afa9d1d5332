/* Flare: OpenAPI 3.1 documents and Swagger UI.
 *
 * Routes are documented next to where they are registered; the document is
 * generated from what was registered, once, when the app starts, and served
 * as a cached body (nothing is formatted on the request path):
 *
 *     static const flare_op_param_t id_param[] = {
 *         FLARE_PARAM_INT(FLARE_IN_PATH, "id", FLARE_MIN(1), FLARE_DESCRIPTION("todo id")),
 *     };
 *     static const flare_op_response_t get_res[] = {
 *         { 200, "the todo", FLARE_OP_JSON("Todo", todo_fields) },
 *         { 404, "no such todo", FLARE_OP_JSON("Error", error_fields) },
 *     };
 *     static const char *const tags[] = { "todos", NULL };
 *     flare_get(app, "/todos/{id}", get_todo, NULL);
 *     flare_route_doc(app, FLARE_METHOD_GET, "/todos/{id}", &(flare_op_t){
 *         .summary = "Read one todo", .tags = tags, .operation_id = "getTodo",
 *         .params = id_param, .nparams = FLARE_MAP_N(id_param),
 *         .responses = get_res, .nresponses = FLARE_MAP_N(get_res),
 *         .security = "cookieAuth" });
 *     flare_openapi_cookie_auth(app, "cookieAuth", "todo_sid", "the session cookie");
 *     flare_openapi_route(app, "/openapi.json");
 *     flare_swagger_ui(app, "/docs", NULL);
 *
 * Schemas come from the struct-mapping tables (flare/mapping.h), the same
 * ones that decode and validate the bodies, so the document cannot drift
 * from what the server accepts; a body written by hand with the JSON
 * writer is described by a JSON Schema text instead (FLARE_OP_SCHEMA,
 * flare_op_content_t.schema_json), with no struct to declare. Every call
 * copies what it is given (strings, and the schemas as JSON text): nothing
 * passed in needs to outlive the call. All calls here are for setup: before
 * flare_app_run or between runs, never while the app runs (FLARE_ESTATE).
 * docs/openapi.md. */
#ifndef FLARE_OPENAPI_H
#define FLARE_OPENAPI_H

#include <stdbool.h>
#include <stddef.h>

#include "flare/flare.h"
#include "flare/json.h"
#include "flare/mapping.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where a parameter is (OpenAPI's "in"). */
typedef enum flare_param_in {
    FLARE_IN_PATH = 1,
    FLARE_IN_QUERY,
    FLARE_IN_HEADER,
    FLARE_IN_COOKIE
} flare_param_in_t;

/* A parameter: where it is and a field descriptor for its name, type
 * (STRING, INT, DOUBLE or BOOL: a scalar), constraints, required flag and
 * description, filled by the macros below with the mapping validators
 * (FLARE_REQUIRED, FLARE_MIN, FLARE_LEN, FLARE_PATTERN, FLARE_DESCRIPTION).
 * Path parameters are always required. */
typedef struct flare_op_param {
    flare_param_in_t in; /* where the parameter is */
    flare_field_t field; /* .offset and the ARRAY members are not used */
} flare_op_param_t;

/* FLARE_PARAM_STR(FLARE_IN_QUERY, "q", FLARE_LEN(1, 100), FLARE_DESCRIPTION("...")) */
#define FLARE_PARAM_STR(where, ...)                                                           \
    {                                                                                         \
        .in = (where), .field = {.type = FLARE_FIELD_STRING, .size = 0, .name = __VA_ARGS__ } \
    }
/* A 64-bit integer (format int64). */
#define FLARE_PARAM_INT(where, ...)                                                        \
    {                                                                                      \
        .in = (where), .field = {.type = FLARE_FIELD_INT, .size = 8, .name = __VA_ARGS__ } \
    }
#define FLARE_PARAM_DOUBLE(where, ...)                                                        \
    {                                                                                         \
        .in = (where), .field = {.type = FLARE_FIELD_DOUBLE, .size = 8, .name = __VA_ARGS__ } \
    }
#define FLARE_PARAM_BOOL(where, ...)  \
    {                                 \
        .in = (where), .field = {     \
            .type = FLARE_FIELD_BOOL, \
            .size = sizeof(bool),     \
            .name = __VA_ARGS__       \
        }                             \
    }

/* A body (request or response): a JSON object described by a mapping table,
 * or an array of them, or content of another type without a schema. */
typedef struct flare_op_content {
    /* The schema's name under components/schemas ("Todo"), referenced with
     * $ref; NULL: the schema is written inline. One name, one schema: using
     * it again with a different table (or partial flag) is FLARE_EEXIST. */
    const char *name;
    const flare_field_t *fields; /* NULL: no schema (see content_type) */
    size_t nfields;
    bool array;   /* the body is a JSON array of such objects */
    bool partial; /* decoded with FLARE_MAP_PARTIAL: no top-level field is required */
    bool closed;  /* decoded with FLARE_MAP_REJECT_UNKNOWN: additionalProperties false */
    /* [application/json when fields is set]; e.g. "text/plain" without
     * fields describes a body of that type with no schema */
    const char *content_type;
    /* A JSON Schema written by hand, in place of fields: for a body a
     * handler writes (or reads) with the flare_json writer (or parser)
     * rather than through a mapping table. It must parse as JSON and be an
     * object or a boolean (FLARE_EINVAL otherwise, flare_last_error() says
     * why); it is copied, re-serialised compactly and emitted as the
     * schema (under components/schemas when name is set; array wraps it
     * as with fields). Not with fields, partial or closed (FLARE_EINVAL).
     * NULL: none. */
    const char *schema_json;
} flare_op_content_t;

/* { .name = "Todo", .fields = table, .nfields = FLARE_MAP_N(table) } */
#define FLARE_OP_JSON(schema_name, table)                                       \
    {                                                                           \
        .name = (schema_name), .fields = (table), .nfields = FLARE_MAP_N(table) \
    }
#define FLARE_OP_JSON_ARRAY(schema_name, table)                                                \
    {                                                                                          \
        .name = (schema_name), .fields = (table), .nfields = FLARE_MAP_N(table), .array = true \
    }

/* { .name = "Stats", .schema_json = "{\"type\":\"object\",...}" }: a body
 * described by a JSON Schema text rather than a mapping table
 * (flare_op_content_t.schema_json); name may be NULL (inline). */
#define FLARE_OP_SCHEMA(schema_name, json)           \
    {                                                \
        .name = (schema_name), .schema_json = (json) \
    }

/* One response of an operation. */
typedef struct flare_op_response {
    int status;              /* 100..599; 0 is OpenAPI's "default" */
    const char *description; /* NULL: the status's reason phrase */
    flare_op_content_t body; /* zeroed: no body (204, 304, ...) */
} flare_op_response_t;

/* An operation: one method of one route. Zero fields are left out of the
 * document. */
typedef struct flare_op {
    const char *summary;                  /* a one-line summary */
    const char *description;              /* longer text */
    const char *operation_id;             /* unique in the app (FLARE_EEXIST) */
    const char *const *tags;              /* NULL-terminated, or NULL */
    const flare_op_param_t *params;       /* path parameters not listed here are
                                             documented as required strings */
    size_t nparams;                       /* entries in params[] */
    const flare_op_content_t *body;       /* request body, or NULL */
    bool body_optional;                   /* requestBody.required is true unless set */
    const flare_op_response_t *responses; /* at least one (OpenAPI requires it) */
    size_t nresponses;                    /* entries in responses[] */
    /* The name of a scheme from flare_openapi_cookie_auth the operation
     * needs, or NULL for none. */
    const char *security;
    bool deprecated;
} flare_op_t;

/* Documents the route already registered for method and pattern (the full
 * pattern, a group's prefix included: "/api/todos/{id}"). *op and all it
 * points to are copied. A second call for the same route replaces the
 * first. Returns 0 or:
 *   FLARE_ENOTFOUND  no such route (register the route first);
 *   FLARE_EINVAL    a malformed op: no response, a status outside 100..599,
 *                   a parameter without a name or not a scalar, a path
 *                   parameter that is not in the pattern, a parameter listed
 *                   twice, a body table that flare_map_check refuses, a
 *                   body's schema_json that is not JSON or not an object
 *                   or boolean (or given with fields, partial or closed),
 *                   a method OpenAPI cannot express (CONNECT);
 *   FLARE_EEXIST    operation_id already used, or a schema name already
 *                   used for a different schema;
 *   FLARE_ESTATE    the app is running;
 *   FLARE_ENOMEM.
 * flare_last_error() names the problem. */
FLARE_API int flare_route_doc(flare_app_t *app, flare_method_t method, const char *pattern,
                              const flare_op_t *op);

/* The document's info object. All strings copied; NULL keeps the default. */
typedef struct flare_openapi_info {
    const char *title;       /* ["Flare API"] */
    const char *version;     /* of the API, not of OpenAPI ["0.1.0"] */
    const char *description; /* Markdown, as OpenAPI allows */
} flare_openapi_info_t;

/* Sets info.title, info.version and info.description. 0, FLARE_EINVAL
 * (info NULL), FLARE_ESTATE or FLARE_ENOMEM. */
FLARE_API int flare_openapi_info(flare_app_t *app, const flare_openapi_info_t *info);

/* Declares a security scheme `name` (components/securitySchemes): an API key
 * carried in the cookie `cookie` (type apiKey, in cookie), the way
 * flare_sessions' cookie authenticates; description is its text (copied, may be
 * NULL). Operations name it in flare_op_t.security. 0, FLARE_EINVAL, FLARE_EEXIST, FLARE_ESTATE or
 * FLARE_ENOMEM. */
FLARE_API int flare_openapi_cookie_auth(flare_app_t *app, const char *name, const char *cookie,
                                        const char *description);

/* Writes the OpenAPI 3.1.0 document of everything documented so far into w
 * (one JSON object; paths in registration order). Returns the writer's
 * state, or FLARE_EINVAL when an operation names a security scheme that was
 * never declared (flare_last_error() says which). */
FLARE_API int flare_openapi_write(const flare_app_t *app, flare_json_t *w);

/* Serves the document at GET `path` (HEAD too) as application/json. It is
 * generated when the app starts running (so routes documented after this
 * call are in it) and kept: a request copies nothing; a strong ETag (a
 * digest of the body) answers If-None-Match with 304; Cache-Control:
 * no-cache. 0, or what flare_get and generation fail with (a failed
 * generation fails flare_app_run with FLARE_EINVAL; flare_openapi_write
 * then says why in flare_last_error()). */
FLARE_API int flare_openapi_route(flare_app_t *app, const char *path);

/* Swagger UI options; a zeroed struct (or NULL) means the defaults. */
typedef struct flare_swagger_opts {
    /* The directory of the npm package swagger-ui-dist (the one holding
     * swagger-ui-bundle.js). [the environment variable
     * FLARE_SWAGGER_UI_DIR, else the first that holds the files of: the
     * install's share/flare/swagger-ui found from where libflare.so was
     * loaded (a moved prefix included), the configured install directory,
     * the build tree's copy for the build's own programs; docs/openapi.md] */
    const char *dir;
    /* The URL of the document the page shows [the path given to
     * flare_openapi_route, else "/openapi.json"]. */
    const char *url;
    const char *title; /* the page's <title> ["API documentation"] */
} flare_swagger_opts_t;

/* Serves Swagger UI under prefix ("/docs"): GET prefix redirects to
 * prefix/, GET prefix/ is a page of ours that loads swagger-ui-bundle.js
 * and swagger-ui.css from prefix/ (nothing from elsewhere: it works
 * offline; no inline script) and shows the
 * document; prefix/<file> are the package's files (flare_static). When the
 * files are not there (npm was missing at build time, or a directory given
 * in opts.dir or FLARE_SWAGGER_UI_DIR lacks them) every one of these
 * URLs answers 503 with a plain-text message saying so and where they were
 * looked for, and the call still returns 0. Returns 0 or FLARE_EINVAL (bad
 * prefix), FLARE_EEXIST (routes taken), FLARE_ESTATE, FLARE_ENOMEM. */
FLARE_API int flare_swagger_ui(flare_app_t *app, const char *prefix,
                               const flare_swagger_opts_t *opts);

#ifdef __cplusplus
}
#endif
#endif
