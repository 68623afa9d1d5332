/* OpenAPI and Swagger UI: the app-wide state both halves share
 * (src/web/openapi.c, src/web/swagger.c). Written only while the app is not
 * running; read-only while it runs. */
#ifndef FLARE_WEB_OPENAPI_INT_H
#define FLARE_WEB_OPENAPI_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "flare/openapi.h"

#define FLARE_OA_MAX_PATH_PARAMS 16 /* as FLARE_ROUTER_MAX_PARAMS */

typedef struct oa_content {
    const char *ref;    /* components/schemas name, or NULL */
    const char *schema; /* inline schema (JSON text) when ref is NULL; NULL: none */
    const char *ctype;  /* NULL: application/json */
    bool array;
} oa_content_t;

typedef struct oa_param {
    const char *name;
    flare_param_in_t in;
    bool required;
    const char *description;
    const char *schema; /* JSON text */
} oa_param_t;

typedef struct oa_response {
    int status; /* 0: default */
    const char *description;
    bool has_body;
    oa_content_t body;
} oa_response_t;

typedef struct oa_op {
    flare_method_t method;
    const char *pattern; /* as registered */
    const char *path;    /* OpenAPI template */
    const char *key;     /* the template with the names left out */
    const char *path_params[FLARE_OA_MAX_PATH_PARAMS];
    size_t npath;
    const char *summary, *description, *operation_id, *security;
    const char **tags;
    size_t ntags;
    oa_param_t *params;
    size_t nparams;
    bool has_body, body_required, deprecated;
    oa_content_t body;
    oa_response_t *res;
    size_t nres;
} oa_op_t;

typedef struct oa_schema {
    const char *name, *json;
} oa_schema_t;

typedef struct oa_scheme {
    const char *name, *cookie, *description;
} oa_scheme_t;

typedef struct oa_state {
    flare_app_t *app;
    struct oa_block *mem; /* every string and array above: freed with the state */
    oa_op_t *ops;
    size_t nops, capops;
    oa_schema_t *schemas;
    size_t nschemas, capschemas;
    oa_scheme_t *schemes;
    size_t nschemes, capschemes;
    const char *title, *version, *description;
    const char *route_path; /* flare_openapi_route's path, NULL until then */
    bool dirty;             /* changed since the document was made */
    /* made at start (oa_init_worker) */
    char *doc;
    size_t doc_len;
    char etag[35]; /* "\"" 32 hex digits "\"" */
    /* Swagger UI (swagger.c) */
    const char *ui_prefix; /* NULL: not served */
    const char *ui_url;    /* opts.url, or NULL: route_path */
    const char *ui_title;
    const char *ui_dir;     /* where the files are, NULL when not installed */
    const char *ui_missing; /* the 503 message when they are not */
    char *ui_page;          /* the HTML page */
    size_t ui_page_len;
    char *init_js; /* the script that starts Swagger UI */
    size_t init_js_len;
} oa_state_t;

/* The app's state, made (and the module registered) on first use; marks it
 * changed. FLARE_EINVAL (app NULL), FLARE_ESTATE (running), FLARE_ENOMEM. */
int flare__openapi_state(flare_app_t *app, oa_state_t **out);

/* A copy of s in the state's memory (freed with it); NULL for NULL or on
 * out of memory. */
char *flare__openapi_strdup(oa_state_t *st, const char *s);

/* Makes the Swagger UI page and script (at start, with the document). */
int flare__swagger_prepare(oa_state_t *st);

#endif
