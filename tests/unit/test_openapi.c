/* OpenAPI: schemas derived from mapping tables (every type and constraint,
 * nullable members, partial and closed bodies, nested objects and arrays),
 * parameters, components, security schemes, registration errors, and the
 * served document (ETag, 304, generated at start). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "flare/openapi.h"
#include "harness.h"

typedef struct point {
    int32_t x;
    double y;
} point_t;

typedef struct everything {
    char code[9]; /* 8 bytes */
    flare_str_t name;
    flare_str_t note;
    int8_t tiny;
    int16_t small;
    int32_t mid;
    int64_t big;
    float ratio;
    double score;
    bool flag;
    point_t where;
    point_t maybe;
    int64_t nums[5];
    size_t nnums;
    point_t pts[3];
    size_t npts;
} everything_t;

static const flare_field_t point_fields[] = {
    FLARE_FIELD_INT(point_t, x, "x", FLARE_REQUIRED),
    FLARE_FIELD_DOUBLE(point_t, y, "y"),
};

static const flare_field_t every_fields[] = {
    FLARE_FIELD_STR(everything_t, code, "code", FLARE_REQUIRED, FLARE_PATTERN("[A-Z]+")),
    FLARE_FIELD_STR(everything_t, name, "name", FLARE_REQUIRED, FLARE_LEN(2, 40),
                    FLARE_DESCRIPTION("display name")),
    FLARE_FIELD_STR(everything_t, note, "note"),
    FLARE_FIELD_INT(everything_t, tiny, "tiny", FLARE_MIN(-1000)),
    FLARE_FIELD_INT(everything_t, small, "small", FLARE_REQUIRED, FLARE_MAX(100)),
    FLARE_FIELD_INT(everything_t, mid, "mid", FLARE_REQUIRED, FLARE_MIN(1), FLARE_MAX(9)),
    FLARE_FIELD_INT(everything_t, big, "big", FLARE_REQUIRED),
    FLARE_FIELD_DOUBLE(everything_t, ratio, "ratio", FLARE_REQUIRED, FLARE_DMIN(0.0),
                       FLARE_DMAX(1.0)),
    FLARE_FIELD_DOUBLE(everything_t, score, "score", FLARE_REQUIRED, FLARE_MIN(-5)),
    FLARE_FIELD_BOOL(everything_t, flag, "flag", FLARE_REQUIRED),
    FLARE_FIELD_OBJECT(everything_t, where, "where", point_fields, FLARE_REQUIRED),
    FLARE_FIELD_OBJECT(everything_t, maybe, "maybe", point_fields),
    FLARE_FIELD_ARRAY(everything_t, nums, nnums, "nums", FLARE_REQUIRED, FLARE_ITEMS(1, 3),
                      FLARE_MIN(0)),
    FLARE_FIELD_ARRAY_OF(everything_t, pts, npts, "pts", point_fields, FLARE_REQUIRED),
};

static const flare_field_t other_fields[] = {
    FLARE_FIELD_INT(point_t, x, "other", FLARE_REQUIRED),
};

static int ok(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("ok"));
}

/* ---- JSON navigation ---- */

static flare_json_doc_t *doc_of(const flare_app_t *app)
{
    flare_json_t w;
    flare_json_init_heap(&w, 0);
    assert_int_equal(flare_openapi_write(app, &w), 0);
    assert_int_equal(flare_json_finish(&w), 0);
    flare_str_t out = flare_json_output(&w);
    flare_json_doc_t *d = NULL;
    flare_json_error_t err;
    assert_int_equal(flare_json_parse(out.ptr, out.len, &d, &err), 0);
    flare_json_dispose(&w);
    return d;
}

/* v["k1"]["k2"]..., keys given as NULL-terminated arguments; "#3" is index 3. */
static const flare_json_val_t *at(const flare_json_val_t *v, ...)
{
    va_list ap;
    va_start(ap, v);
    const char *k;
    while (v != NULL && (k = va_arg(ap, const char *)) != NULL)
        v = k[0] == '#' ? flare_json_val_at(v, (size_t)atoi(k + 1)) : flare_json_val_get(v, k);
    va_end(ap);
    return v;
}

static const char *str_of(const flare_json_val_t *v)
{
    static char buf[8][256];
    static int i;
    flare_str_t s;
    assert_non_null(v);
    assert_int_equal(flare_json_val_str(v, &s), 0);
    char *b = buf[i++ % 8];
    snprintf(b, 256, "%.*s", (int)s.len, s.ptr);
    return b;
}

static int64_t int_of(const flare_json_val_t *v)
{
    int64_t x;
    assert_non_null(v);
    assert_int_equal(flare_json_val_int(v, &x), 0);
    return x;
}

static double dbl_of(const flare_json_val_t *v)
{
    double x;
    assert_non_null(v);
    assert_int_equal(flare_json_val_double(v, &x), 0);
    return x;
}

/* "string" or "string|null" for a type / type array */
static const char *type_of(const flare_json_val_t *schema)
{
    static char buf[4][64];
    static int i;
    const flare_json_val_t *t = flare_json_val_get(schema, "type");
    assert_non_null(t);
    if (flare_json_val_type(t) != FLARE_JSON_ARRAY)
        return str_of(t);
    char *b = buf[i++ % 4];
    b[0] = '\0';
    for (size_t k = 0; k < flare_json_val_len(t); k++) {
        if (k)
            strcat(b, "|");
        strcat(b, str_of(flare_json_val_at(t, k)));
    }
    return b;
}

static bool has_str(const flare_json_val_t *arr, const char *s)
{
    for (size_t k = 0; arr != NULL && k < flare_json_val_len(arr); k++) {
        if (strcmp(str_of(flare_json_val_at(arr, k)), s) == 0)
            return true;
    }
    return false;
}

/* ---- schema derivation ---- */

static flare_app_t *app_with_everything(void)
{
    flare_app_t *app = flare_app_new(NULL);
    assert_non_null(app);
    assert_int_equal(flare_post(app, "/things", ok, NULL), 0);
    static const flare_op_content_t body = FLARE_OP_JSON("Everything", every_fields);
    static const flare_op_response_t res[] = {
        { 201, "made", FLARE_OP_JSON("Everything", every_fields) },
        { 400, NULL, { .content_type = "text/plain" } },
        { 0, NULL, { 0 } },
    };
    flare_op_t op = { .summary = "make", .body = &body, .responses = res, .nresponses = 3 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_POST, "/things", &op), 0);
    return app;
}

static void test_schema_every_type(void **state)
{
    (void)state;
    flare_app_t *app = app_with_everything();
    flare_json_doc_t *d = doc_of(app);
    const flare_json_val_t *root = flare_json_doc_root(d);
    assert_string_equal(str_of(at(root, "openapi", NULL)), "3.1.0");
    assert_string_equal(str_of(at(root, "info", "title", NULL)), "Flare API");
    assert_string_equal(str_of(at(root, "info", "version", NULL)), "0.1.0");
    const flare_json_val_t *s = at(root, "components", "schemas", "Everything", NULL);
    assert_non_null(s);
    assert_string_equal(type_of(s), "object");
    const flare_json_val_t *p = at(s, "properties", NULL);
    /* strings: char[9] bounds the length at 8, pattern anchored */
    const flare_json_val_t *f = at(p, "code", NULL);
    assert_string_equal(type_of(f), "string");
    assert_int_equal(int_of(at(f, "maxLength", NULL)), 8);
    assert_string_equal(str_of(at(f, "pattern", NULL)), "^([A-Z]+)$");
    f = at(p, "name", NULL);
    assert_int_equal(int_of(at(f, "minLength", NULL)), 2);
    assert_int_equal(int_of(at(f, "maxLength", NULL)), 40);
    assert_string_equal(str_of(at(f, "description", NULL)), "display name");
    /* optional: null is accepted (counts as absent), a 3.1 type array */
    f = at(p, "note", NULL);
    assert_string_equal(type_of(f), "string|null");
    assert_null(at(f, "maxLength", NULL));
    /* integers: formats, explicit bounds, bounds implied by narrow members */
    f = at(p, "tiny", NULL);
    assert_string_equal(type_of(f), "integer|null");
    assert_string_equal(str_of(at(f, "format", NULL)), "int32");
    assert_int_equal(int_of(at(f, "minimum", NULL)), -128); /* MIN(-1000) cannot be reached */
    assert_int_equal(int_of(at(f, "maximum", NULL)), 127);
    f = at(p, "small", NULL);
    assert_string_equal(type_of(f), "integer");
    assert_int_equal(int_of(at(f, "minimum", NULL)), -32768);
    assert_int_equal(int_of(at(f, "maximum", NULL)), 100);
    f = at(p, "mid", NULL);
    assert_string_equal(str_of(at(f, "format", NULL)), "int32");
    assert_int_equal(int_of(at(f, "minimum", NULL)), 1);
    assert_int_equal(int_of(at(f, "maximum", NULL)), 9);
    f = at(p, "big", NULL);
    assert_string_equal(str_of(at(f, "format", NULL)), "int64");
    assert_null(at(f, "minimum", NULL));
    assert_null(at(f, "maximum", NULL));
    /* numbers */
    f = at(p, "ratio", NULL);
    assert_string_equal(type_of(f), "number");
    assert_string_equal(str_of(at(f, "format", NULL)), "float");
    assert_true(dbl_of(at(f, "minimum", NULL)) == 0.0);
    assert_true(dbl_of(at(f, "maximum", NULL)) == 1.0);
    f = at(p, "score", NULL);
    assert_string_equal(str_of(at(f, "format", NULL)), "double");
    assert_int_equal(int_of(at(f, "minimum", NULL)), -5);
    assert_string_equal(type_of(at(p, "flag", NULL)), "boolean");
    /* nested objects: required one plain, optional one nullable, each with
     * its own required list */
    f = at(p, "where", NULL);
    assert_string_equal(type_of(f), "object");
    assert_string_equal(type_of(at(f, "properties", "x", NULL)), "integer");
    assert_string_equal(type_of(at(f, "properties", "y", NULL)), "number|null");
    assert_true(has_str(at(f, "required", NULL), "x"));
    assert_false(has_str(at(f, "required", NULL), "y"));
    assert_string_equal(type_of(at(p, "maybe", NULL)), "object|null");
    /* arrays: items and their constraints, counts, arrays of objects */
    f = at(p, "nums", NULL);
    assert_string_equal(type_of(f), "array");
    assert_int_equal(int_of(at(f, "minItems", NULL)), 1);
    assert_int_equal(int_of(at(f, "maxItems", NULL)), 3);
    assert_string_equal(type_of(at(f, "items", NULL)), "integer");
    assert_int_equal(int_of(at(f, "items", "minimum", NULL)), 0);
    f = at(p, "pts", NULL);
    assert_int_equal(int_of(at(f, "maxItems", NULL)), 3); /* the member's capacity */
    assert_string_equal(type_of(at(f, "items", NULL)), "object");
    assert_true(has_str(at(f, "items", "required", NULL), "x"));
    /* required at the top: exactly the required fields */
    const flare_json_val_t *req = at(s, "required", NULL);
    assert_int_equal(flare_json_val_len(req), 11);
    assert_true(has_str(req, "code") && has_str(req, "pts") && has_str(req, "where"));
    assert_false(has_str(req, "note") || has_str(req, "tiny") || has_str(req, "maybe"));
    assert_null(at(s, "additionalProperties", NULL));
    /* the operation refers to the component, responses get descriptions */
    const flare_json_val_t *op = at(root, "paths", "/things", "post", NULL);
    assert_string_equal(
        str_of(at(op, "requestBody", "content", "application/json", "schema", "$ref", NULL)),
        "#/components/schemas/Everything");
    assert_true(at(op, "requestBody", "required", NULL) != NULL);
    assert_string_equal(str_of(at(op, "responses", "201", "description", NULL)), "made");
    assert_string_equal(str_of(at(op, "responses", "400", "description", NULL)), "Bad Request");
    assert_non_null(at(op, "responses", "400", "content", "text/plain", NULL));
    assert_null(at(op, "responses", "400", "content", "text/plain", "schema", NULL));
    assert_non_null(at(op, "responses", "default", "description", NULL));
    flare_json_doc_free(d);
    flare_app_free(app);
}

static void test_partial_closed_inline_array(void **state)
{
    (void)state;
    flare_app_t *app = flare_app_new(NULL);
    assert_int_equal(flare_patch(app, "/p/{id}", ok, NULL), 0);
    assert_int_equal(flare_get(app, "/p", ok, NULL), 0);
    static const flare_op_content_t patch = {
        .fields = point_fields, .nfields = 2, .partial = true, .closed = true
    };
    static const flare_op_response_t res[] = { { 204, "done", { 0 } } };
    flare_op_t op = { .body = &patch, .body_optional = true, .responses = res, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_PATCH, "/p/{id}", &op), 0);
    static const flare_op_response_t list[] = {
        { 200, "all", FLARE_OP_JSON_ARRAY("Point", point_fields) },
    };
    flare_op_t op2 = { .responses = list, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/p", &op2), 0);
    flare_json_doc_t *d = doc_of(app);
    const flare_json_val_t *root = flare_json_doc_root(d);
    const flare_json_val_t *rb = at(root, "paths", "/p/{id}", "patch", "requestBody", NULL);
    bool b = true;
    assert_int_equal(flare_json_val_bool(at(rb, "required", NULL), &b), 0);
    assert_false(b);
    const flare_json_val_t *s = at(rb, "content", "application/json", "schema", NULL);
    /* inline, nothing required at the top, both members nullable, closed */
    assert_null(at(s, "$ref", NULL));
    assert_null(at(s, "required", NULL));
    assert_string_equal(type_of(at(s, "properties", "x", NULL)), "integer|null");
    assert_int_equal(flare_json_val_bool(at(s, "additionalProperties", NULL), &b), 0);
    assert_false(b);
    /* the undescribed path parameter is declared as a required string */
    const flare_json_val_t *par = at(root, "paths", "/p/{id}", "patch", "parameters", "#0", NULL);
    assert_string_equal(str_of(at(par, "name", NULL)), "id");
    assert_string_equal(str_of(at(par, "in", NULL)), "path");
    assert_string_equal(type_of(at(par, "schema", NULL)), "string");
    /* an array of components */
    s = at(root, "paths", "/p", "get", "responses", "200", "content", "application/json", "schema",
           NULL);
    assert_string_equal(type_of(s), "array");
    assert_string_equal(str_of(at(s, "items", "$ref", NULL)), "#/components/schemas/Point");
    assert_non_null(at(root, "components", "schemas", "Point", NULL));
    flare_json_doc_free(d);
    flare_app_free(app);
}

static void test_params_security_info(void **state)
{
    (void)state;
    flare_app_t *app = flare_app_new(NULL);
    assert_int_equal(flare_get(app, "/files/{dir}/{*rest}", ok, NULL), 0);
    assert_int_equal(flare_delete(app, "/files/{dir}/{*rest}", ok, NULL), 0);
    static const flare_op_param_t params[] = {
        FLARE_PARAM_STR(FLARE_IN_PATH, "dir", FLARE_LEN(1, 10), FLARE_PATTERN("[a-z]+")),
        FLARE_PARAM_INT(FLARE_IN_QUERY, "limit", FLARE_MIN(1), FLARE_MAX(50),
                        FLARE_DESCRIPTION("how many")),
        FLARE_PARAM_DOUBLE(FLARE_IN_HEADER, "X-Scale", FLARE_REQUIRED, FLARE_DMAX(2.5)),
        FLARE_PARAM_BOOL(FLARE_IN_COOKIE, "beta"),
    };
    static const char *const tags[] = { "files", "admin", NULL };
    static const flare_op_response_t res[] = { { 200, "ok", { .content_type = "text/plain" } } };
    flare_op_t op = { .summary = "get a file",
                      .description = "long text",
                      .operation_id = "getFile",
                      .tags = tags,
                      .params = params,
                      .nparams = 4,
                      .responses = res,
                      .nresponses = 1,
                      .security = "cookie",
                      .deprecated = true };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/files/{dir}/{*rest}", &op), 0);
    flare_op_t del = { .operation_id = "delFile", .responses = res, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_DELETE, "/files/{dir}/{*rest}", &del), 0);
    /* a security scheme named but not declared: the document is refused */
    flare_json_t w;
    flare_json_init_heap(&w, 0);
    assert_int_equal(flare_openapi_write(app, &w), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "cookie"));
    flare_json_dispose(&w);
    assert_int_equal(flare_openapi_cookie_auth(app, "cookie", "sid", "the session"), 0);
    assert_int_equal(flare_openapi_cookie_auth(app, "cookie", "sid", NULL), FLARE_EEXIST);
    assert_int_equal(flare_openapi_cookie_auth(app, "", "sid", NULL), FLARE_EINVAL);
    flare_openapi_info_t info = { .title = "T", .version = "2.0", .description = "D" };
    assert_int_equal(flare_openapi_info(app, &info), 0);
    flare_json_doc_t *d = doc_of(app);
    const flare_json_val_t *root = flare_json_doc_root(d);
    assert_string_equal(str_of(at(root, "info", "title", NULL)), "T");
    assert_string_equal(str_of(at(root, "info", "version", NULL)), "2.0");
    assert_string_equal(str_of(at(root, "info", "description", NULL)), "D");
    /* {*rest} becomes {rest}; both methods under one path item */
    const flare_json_val_t *item = at(root, "paths", "/files/{dir}/{rest}", NULL);
    assert_non_null(item);
    assert_string_equal(str_of(at(item, "delete", "operationId", NULL)), "delFile");
    const flare_json_val_t *g = at(item, "get", NULL);
    assert_string_equal(str_of(at(g, "summary", NULL)), "get a file");
    assert_string_equal(str_of(at(g, "description", NULL)), "long text");
    assert_string_equal(str_of(at(g, "tags", "#1", NULL)), "admin");
    bool b = false;
    assert_int_equal(flare_json_val_bool(at(g, "deprecated", NULL), &b), 0);
    assert_true(b);
    assert_non_null(at(g, "security", "#0", "cookie", NULL));
    const flare_json_val_t *ps = at(g, "parameters", NULL);
    assert_int_equal(flare_json_val_len(ps), 5); /* four + the undescribed {rest} */
    const flare_json_val_t *p = flare_json_val_at(ps, 0);
    assert_string_equal(str_of(at(p, "in", NULL)), "path");
    assert_int_equal(flare_json_val_bool(at(p, "required", NULL), &b), 0);
    assert_true(b); /* path parameters always are */
    assert_int_equal(int_of(at(p, "schema", "maxLength", NULL)), 10);
    assert_string_equal(str_of(at(p, "schema", "pattern", NULL)), "^([a-z]+)$");
    p = flare_json_val_at(ps, 1);
    assert_string_equal(str_of(at(p, "in", NULL)), "query");
    assert_string_equal(str_of(at(p, "description", NULL)), "how many");
    assert_int_equal(flare_json_val_bool(at(p, "required", NULL), &b), 0);
    assert_false(b);
    assert_string_equal(type_of(at(p, "schema", NULL)), "integer");
    assert_string_equal(str_of(at(p, "schema", "format", NULL)), "int64");
    assert_int_equal(int_of(at(p, "schema", "maximum", NULL)), 50);
    p = flare_json_val_at(ps, 2);
    assert_string_equal(str_of(at(p, "in", NULL)), "header");
    assert_string_equal(type_of(at(p, "schema", NULL)), "number");
    assert_true(dbl_of(at(p, "schema", "maximum", NULL)) == 2.5);
    p = flare_json_val_at(ps, 3);
    assert_string_equal(str_of(at(p, "in", NULL)), "cookie");
    assert_string_equal(type_of(at(p, "schema", NULL)), "boolean");
    p = flare_json_val_at(ps, 4);
    assert_string_equal(str_of(at(p, "name", NULL)), "rest");
    const flare_json_val_t *sc = at(root, "components", "securitySchemes", "cookie", NULL);
    assert_string_equal(str_of(at(sc, "type", NULL)), "apiKey");
    assert_string_equal(str_of(at(sc, "in", NULL)), "cookie");
    assert_string_equal(str_of(at(sc, "name", NULL)), "sid");
    assert_string_equal(str_of(at(sc, "description", NULL)), "the session");
    flare_json_doc_free(d);
    flare_app_free(app);
}

static void test_registration_errors(void **state)
{
    (void)state;
    flare_app_t *app = flare_app_new(NULL);
    assert_int_equal(flare_get(app, "/a/{id}", ok, NULL), 0);
    assert_int_equal(flare_post(app, "/a/{key}", ok, NULL), 0);
    assert_int_equal(flare_get(app, "/b", ok, NULL), 0);
    static const flare_op_response_t res[] = { { 200, "ok", FLARE_OP_JSON("P", point_fields) } };
    flare_op_t op = { .operation_id = "a", .responses = res, .nresponses = 1 };
    /* no such route; not a method OpenAPI knows */
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/nope", &op), FLARE_ENOTFOUND);
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_PUT, "/b", &op), FLARE_ENOTFOUND);
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_CONNECT, "/b", &op), FLARE_EINVAL);
    assert_int_equal(flare_route_doc(NULL, FLARE_METHOD_GET, "/b", &op), FLARE_EINVAL);
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/b", NULL), FLARE_EINVAL);
    /* no responses, a bad status, a status twice */
    flare_op_t bad = { .responses = res, .nresponses = 0 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/b", &bad), FLARE_EINVAL);
    static const flare_op_response_t r600[] = { { 600, "no", { 0 } } };
    bad = (flare_op_t){ .responses = r600, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/b", &bad), FLARE_EINVAL);
    static const flare_op_response_t twice[] = { { 200, "a", { 0 } }, { 200, "b", { 0 } } };
    bad = (flare_op_t){ .responses = twice, .nresponses = 2 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/b", &bad), FLARE_EINVAL);
    /* parameters: not in the pattern, twice, not a scalar, broken pattern */
    static const flare_op_param_t notin[] = { FLARE_PARAM_INT(FLARE_IN_PATH, "key") };
    bad = (flare_op_t){ .params = notin, .nparams = 1, .responses = res, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/a/{id}", &bad), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "\"key\" is not in the pattern"));
    static const flare_op_param_t dup[] = { FLARE_PARAM_INT(FLARE_IN_QUERY, "q"),
                                            FLARE_PARAM_STR(FLARE_IN_QUERY, "q") };
    bad = (flare_op_t){ .params = dup, .nparams = 2, .responses = res, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/b", &bad), FLARE_EINVAL);
    static const flare_op_param_t obj[] = { { FLARE_IN_QUERY,
                                              { .name = "o", .type = FLARE_FIELD_OBJECT } } };
    bad = (flare_op_t){ .params = obj, .nparams = 1, .responses = res, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/b", &bad), FLARE_EINVAL);
    static const flare_op_param_t re[] = { FLARE_PARAM_STR(FLARE_IN_QUERY, "q",
                                                           FLARE_PATTERN("([a-")) };
    bad = (flare_op_t){ .params = re, .nparams = 1, .responses = res, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/b", &bad), FLARE_EPATTERN);
    static const flare_op_param_t noname[] = { FLARE_PARAM_STR(FLARE_IN_QUERY, NULL) };
    bad = (flare_op_t){ .params = noname, .nparams = 1, .responses = res, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/b", &bad), FLARE_EINVAL);
    /* a body table that flare_map_check refuses; fields-less content without a type */
    static const flare_field_t broken[] = { { .name = "x", .type = FLARE_FIELD_INT, .size = 3 } };
    static const flare_op_content_t bb = { .fields = broken, .nfields = 1 };
    bad = (flare_op_t){ .body = &bb, .responses = res, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/b", &bad), FLARE_EINVAL);
    static const flare_op_content_t nothing = { .name = "N" };
    bad = (flare_op_t){ .body = &nothing, .responses = res, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/b", &bad), FLARE_EINVAL);
    static const flare_op_content_t badname = { .name = "a b",
                                                .fields = point_fields,
                                                .nfields = 2 };
    bad = (flare_op_t){ .body = &badname, .responses = res, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/b", &bad), FLARE_EINVAL);
    /* success; then a schema name reused for another table, an operationId twice */
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/b", &op), 0);
    static const flare_op_response_t other[] = { { 200, "ok", FLARE_OP_JSON("P", other_fields) } };
    bad = (flare_op_t){ .responses = other, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/a/{id}", &bad), FLARE_EEXIST);
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/a/{id}", &op), FLARE_EEXIST);
    /* the same name for the same table is one component */
    flare_op_t same = { .operation_id = "a2", .responses = res, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/a/{id}", &same), 0);
    /* /a/{key} is /a/{id} to OpenAPI: one template per path */
    flare_op_t post = { .responses = res, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_POST, "/a/{key}", &post), FLARE_EINVAL);
    /* documenting a route again replaces the first description */
    flare_op_t again = {
        .operation_id = "b2", .summary = "second", .responses = res, .nresponses = 1
    };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/b", &again), 0);
    flare_json_doc_t *d = doc_of(app);
    const flare_json_val_t *root = flare_json_doc_root(d);
    assert_string_equal(str_of(at(root, "paths", "/b", "get", "summary", NULL)), "second");
    assert_int_equal(flare_json_val_len(at(root, "paths", NULL)), 2);
    assert_int_equal(flare_json_val_len(at(root, "components", "schemas", NULL)), 1);
    flare_json_doc_free(d);
    /* other calls' argument checks */
    assert_int_equal(flare_openapi_info(app, NULL), FLARE_EINVAL);
    assert_int_equal(flare_openapi_route(app, NULL), FLARE_EINVAL);
    assert_int_equal(flare_swagger_ui(app, "docs", NULL), FLARE_EINVAL);
    assert_int_equal(flare_swagger_ui(app, "/docs/", NULL), FLARE_EINVAL);
    assert_int_equal(flare_swagger_ui(app, "/", NULL), FLARE_EINVAL);
    assert_int_equal(flare_openapi_write(NULL, NULL), FLARE_EINVAL);
    flare_app_free(app);
}

/* ---- serving ---- */

static void test_served_with_etag(void **state)
{
    (void)state;
    flare_app_t *app = flare_app_new(&(flare_config_t){ .workers = 2 });
    assert_int_equal(flare_openapi_route(app, "/openapi.json"), 0);
    assert_int_equal(flare_openapi_route(app, "/again.json"), FLARE_EEXIST);
    /* documented after the route: still in the document, made at start */
    assert_int_equal(flare_get(app, "/late", ok, NULL), 0);
    static const flare_op_response_t res[] = { { 200, "late", { 0 } } };
    flare_op_t op = { .summary = "documented late", .responses = res, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/late", &op), 0);
    /* Swagger UI from a directory that does not hold it: 503 saying so */
    flare_swagger_opts_t so = { .dir = "/nonexistent/swagger-ui-dist" };
    assert_int_equal(flare_swagger_ui(app, "/docs", &so), 0);
    assert_int_equal(flare_swagger_ui(app, "/docs2", &so), FLARE_EEXIST);
    harness_t h = { .app = app };
    assert_int_equal(harness_start(&h), 0);
    /* registration is refused while running */
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/late", &op), FLARE_ESTATE);
    char *r = harness_roundtrip(&h, "GET /openapi.json HTTP/1.1\r\nHost: x\r\n"
                                    "Connection: close\r\n\r\n");
    assert_non_null(r);
    assert_non_null(strstr(r, "HTTP/1.1 200 "));
    assert_non_null(strstr(r, "Content-Type: application/json"));
    assert_non_null(strstr(r, "Cache-Control: no-cache"));
    assert_non_null(strstr(r, "\"summary\":\"documented late\""));
    const char *e = strstr(r, "ETag: \"");
    assert_non_null(e);
    char etag[64];
    assert_int_equal(sscanf(e, "ETag: %63s", etag), 1);
    assert_int_equal(strlen(etag), 34);
    free(r);
    char req[256];
    snprintf(req, sizeof(req),
             "GET /openapi.json HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"x\", W/%s\r\n"
             "Connection: close\r\n\r\n",
             etag);
    r = harness_roundtrip(&h, req);
    assert_non_null(strstr(r, "HTTP/1.1 304 "));
    assert_null(strstr(r, "openapi"));
    free(r);
    r = harness_roundtrip(&h, "GET /openapi.json HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"x\"\r\n"
                              "Connection: close\r\n\r\n");
    assert_non_null(strstr(r, "HTTP/1.1 200 "));
    free(r);
    r = harness_roundtrip(&h,
                          "HEAD /openapi.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_non_null(strstr(r, "HTTP/1.1 200 "));
    assert_null(strstr(r, "\"openapi\""));
    free(r);
    static const char *const docs[] = { "/docs", "/docs/", "/docs/swagger-ui-bundle.js" };
    for (size_t i = 0; i < 3; i++) {
        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 docs[i]);
        r = harness_roundtrip(&h, req);
        assert_non_null(strstr(r, "HTTP/1.1 503 "));
        assert_non_null(strstr(r, "Swagger UI is not installed"));
        assert_non_null(strstr(r, "/nonexistent/swagger-ui-dist"));
        free(r);
    }
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(app);
}

/* Bodies written by hand with the JSON writer: a JSON Schema text, no
 * struct; checked at registration, copied, re-serialised compactly. */
static void test_hand_written_schema(void **state)
{
    (void)state;
    flare_app_t *app = flare_app_new(&(flare_config_t){ .workers = 1 });
    assert_int_equal(flare_openapi_route(app, "/openapi.json"), 0);
    assert_int_equal(flare_get(app, "/stats", ok, NULL), 0);
    assert_int_equal(flare_post(app, "/tags", ok, NULL), 0);
    /* the caller's buffer: overwritten after the call, the copy stays */
    char stats[] = "{ \"type\": \"object\",\n"
                   "  \"properties\": { \"n\": { \"type\": \"integer\", \"minimum\": 0 },\n"
                   "                  \"ratio\": { \"type\": [\"number\", \"null\"] } },\n"
                   "  \"required\": [ \"n\" ], \"additionalProperties\": false }";
    flare_op_response_t res[] = {
        { 200, "counts", FLARE_OP_SCHEMA("Stats", stats) },
        { 0, "anything", { .schema_json = "true" } },
    };
    flare_op_t op = { .responses = res, .nresponses = 2 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/stats", &op), 0);
    memset(stats, ' ', sizeof(stats) - 1);
    /* a request body too, inline, as an array of them */
    static const flare_op_content_t tags = { .schema_json =
                                                 "{\"type\":\"string\",\"maxLength\":32}",
                                             .array = true };
    /* the same name for the same schema, spelled with other spaces: one component */
    static const flare_op_response_t tres[] = {
        { 201, "counts after",
          FLARE_OP_SCHEMA("Stats", "{\"type\":\"object\",\"properties\":"
                                   "{\"n\":{\"type\":\"integer\",\"minimum\":0},"
                                   "\"ratio\":{\"type\":[\"number\",\"null\"]}},"
                                   "\"required\":[\"n\"],"
                                   "\"additionalProperties\":false}") },
    };
    flare_op_t top = { .body = &tags, .responses = tres, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_POST, "/tags", &top), 0);

    flare_json_doc_t *d = doc_of(app);
    const flare_json_val_t *root = flare_json_doc_root(d);
    const flare_json_val_t *s = at(root, "paths", "/stats", "get", "responses", "200", "content",
                                   "application/json", "schema", NULL);
    assert_string_equal(str_of(at(s, "$ref", NULL)), "#/components/schemas/Stats");
    const flare_json_val_t *c = at(root, "components", "schemas", "Stats", NULL);
    assert_string_equal(type_of(c), "object");
    assert_int_equal(int_of(at(c, "properties", "n", "minimum", NULL)), 0);
    assert_string_equal(type_of(at(c, "properties", "ratio", NULL)), "number|null");
    assert_string_equal(str_of(at(c, "required", "#0", NULL)), "n");
    assert_int_equal(flare_json_val_len(at(root, "components", "schemas", NULL)), 1);
    bool b = false;
    s = at(root, "paths", "/stats", "get", "responses", "default", "content", "application/json",
           "schema", NULL);
    assert_int_equal(flare_json_val_bool(s, &b), 0);
    assert_true(b);
    s = at(root, "paths", "/tags", "post", "requestBody", "content", "application/json", "schema",
           NULL);
    assert_string_equal(type_of(s), "array");
    assert_int_equal(int_of(at(s, "items", "maxLength", NULL)), 32);
    assert_string_equal(str_of(at(root, "paths", "/tags", "post", "responses", "201", "content",
                                  "application/json", "schema", "$ref", NULL)),
                        "#/components/schemas/Stats");
    flare_json_doc_free(d);

    /* refused, saying why: not JSON, not an object or boolean, with
     * fields, a name taken by another schema */
    static const flare_op_response_t broken[] = {
        { 200, "x", { .schema_json = "{\"type\": \"object\",}" } },
    };
    flare_op_t bad = { .responses = broken, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/stats", &bad), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "schema_json is not JSON (line 1"));
    static const flare_op_response_t arr[] = { { 200, "x", { .schema_json = "[1]" } } };
    bad = (flare_op_t){ .responses = arr, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/stats", &bad), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "schema_json is an array, not a JSON Schema"));
    static const flare_op_content_t num = { .schema_json = "42" };
    bad = (flare_op_t){ .body = &num, .responses = tres, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_POST, "/tags", &bad), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "not a JSON Schema"));
    static const flare_op_response_t both[] = {
        { 200, "x", { .fields = point_fields, .nfields = 2, .schema_json = "{}" } },
    };
    bad = (flare_op_t){ .responses = both, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/stats", &bad), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "schema_json with fields"));
    static const flare_op_response_t other[] = {
        { 200, "x", FLARE_OP_SCHEMA("Stats", "{\"type\":\"object\"}") },
    };
    bad = (flare_op_t){ .responses = other, .nresponses = 1 };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/stats", &bad), FLARE_EEXIST);
    assert_non_null(strstr(flare_last_error(), "\"Stats\" is already used"));

    /* served as written: compact, in the cached /openapi.json */
    harness_t h = { .app = app };
    assert_int_equal(harness_start(&h), 0);
    char *r = harness_roundtrip(&h, "GET /openapi.json HTTP/1.1\r\nHost: x\r\n"
                                    "Connection: close\r\n\r\n");
    assert_non_null(r);
    assert_non_null(strstr(r, "HTTP/1.1 200 "));
    assert_non_null(strstr(r, "\"Stats\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":"
                              "\"integer\",\"minimum\":0},\"ratio\":{\"type\":[\"number\","
                              "\"null\"]}},\"required\":[\"n\"],\"additionalProperties\":false}"));
    assert_non_null(strstr(r, "\"default\":{\"description\":\"anything\",\"content\":{"
                              "\"application/json\":{\"schema\":true}}}"));
    free(r);
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(app);
}

/* A document that cannot be written fails the run, saying why. */
static void test_undeclared_scheme_fails_the_run(void **state)
{
    (void)state;
    flare_app_t *app = flare_app_new(&(flare_config_t){ .workers = 1 });
    assert_int_equal(flare_get(app, "/x", ok, NULL), 0);
    static const flare_op_response_t res[] = { { 200, "ok", { 0 } } };
    flare_op_t op = { .responses = res, .nresponses = 1, .security = "nobody" };
    assert_int_equal(flare_route_doc(app, FLARE_METHOD_GET, "/x", &op), 0);
    assert_int_equal(flare_openapi_route(app, "/openapi.json"), 0);
    assert_int_equal(flare_app_run(app, "127.0.0.1:0"), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "module openapi"));
    /* the detail, from the generator itself */
    flare_json_t w;
    flare_json_init_heap(&w, 0);
    assert_int_equal(flare_openapi_write(app, &w), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "\"nobody\""));
    flare_json_dispose(&w);
    flare_app_free(app);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schema_every_type),
        cmocka_unit_test(test_partial_closed_inline_array),
        cmocka_unit_test(test_params_security_info),
        cmocka_unit_test(test_registration_errors),
        cmocka_unit_test(test_served_with_etag),
        cmocka_unit_test(test_hand_written_schema),
        cmocka_unit_test(test_undeclared_scheme_fails_the_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
