/* Swagger UI: a page of ours over the files of the npm package
 * swagger-ui-dist, which the build fetches and `cmake --install` copies to
 * DATADIR/flare/swagger-ui (cmake/swagger_ui.cmake), and flare_static
 * serves. The package's own index.html and
 * swagger-initializer.js point at a demo document on the Internet, so the
 * page and the script that starts the UI are ours, served from memory; no
 * inline script (a script-src policy without 'unsafe-inline' allows the
 * page's own scripts; whether the bundle itself needs more is not tested). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "flare/openapi.h"
#include "flare/static.h"
#include "web/openapi_int.h"

/* The install's copy: DATADIR/flare/swagger-ui as configured, and the same
 * place as a path from LIBDIR ("../share/flare/swagger-ui"), which finds it
 * from wherever this library was loaded: an install made with
 * `cmake --install --prefix P`, or moved, serves its own files. */
#ifndef FLARE_SWAGGER_UI_INSTALL_DIR
#define FLARE_SWAGGER_UI_INSTALL_DIR ""
#endif
#ifndef FLARE_SWAGGER_UI_FROM_LIBDIR
#define FLARE_SWAGGER_UI_FROM_LIBDIR ""
#endif

/* Where the build tree keeps the files (BUILD/npm/...). Defined only in the
 * binaries the build links for itself (examples, tests: the object
 * flare_build_paths), never in the installed libraries, which must not
 * depend on a tree that may be gone or rebuilt: unresolved, it is NULL. */
extern const char flare__swagger_ui_build_dir[] __attribute__((weak, visibility("hidden")));

#define INIT_JS "flare-swagger-init.js"

/* HTML-escapes s into a growing heap buffer. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf_t;

static void sb_add(sbuf_t *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_cstr(sbuf_t *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

static void sb_html(sbuf_t *b, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&':
            sb_cstr(b, "&amp;");
            break;
        case '<':
            sb_cstr(b, "&lt;");
            break;
        case '>':
            sb_cstr(b, "&gt;");
            break;
        case '"':
            sb_cstr(b, "&quot;");
            break;
        case '\'':
            sb_cstr(b, "&#39;");
            break;
        default:
            sb_add(b, s, 1);
        }
    }
}

static int make_page(oa_state_t *st)
{
    sbuf_t b = { 0 };
    const char *p = st->ui_prefix;
    sb_cstr(&b, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>");
    sb_html(&b, st->ui_title);
    sb_cstr(&b, "</title>\n<meta name=\"viewport\" content=\"width=device-width, "
                "initial-scale=1\">\n<link rel=\"stylesheet\" href=\"");
    sb_html(&b, p);
    sb_cstr(&b, "/swagger-ui.css\">\n</head><body>\n<div id=\"swagger-ui\"></div>\n"
                "<script src=\"");
    sb_html(&b, p);
    sb_cstr(&b, "/swagger-ui-bundle.js\"></script>\n<script src=\"");
    sb_html(&b, p);
    sb_cstr(&b, "/" INIT_JS "\"></script>\n</body></html>\n");
    if (b.oom) {
        free(b.p);
        return FLARE_ENOMEM;
    }
    free(st->ui_page);
    st->ui_page = b.p;
    st->ui_page_len = b.len;
    return 0;
}

int flare__swagger_prepare(oa_state_t *st)
{
    if (st->ui_prefix == NULL || st->ui_dir == NULL)
        return 0;
    const char *url = st->ui_url != NULL       ? st->ui_url
                      : st->route_path != NULL ? st->route_path
                                               : "/openapi.json";
    flare_json_t j;
    flare_json_init_heap(&j, 256);
    flare_json_str(&j, flare_str(url)); /* a JavaScript string literal too */
    int rc = flare_json_finish(&j);
    if (rc != 0) {
        flare_json_dispose(&j);
        return rc;
    }
    flare_str_t lit = flare_json_output(&j);
    sbuf_t b = { 0 };
    sb_cstr(&b, "'use strict';\n/* made by flare_swagger_ui: the document at ");
    sb_add(&b, lit.ptr, lit.len);
    sb_cstr(&b, " */\nwindow.ui = SwaggerUIBundle({\n  url: ");
    sb_add(&b, lit.ptr, lit.len);
    sb_cstr(&b, ",\n  dom_id: '#swagger-ui',\n  deepLinking: true,\n  withCredentials: true,\n"
                "  presets: [SwaggerUIBundle.presets.apis],\n  layout: 'BaseLayout'\n});\n");
    flare_json_dispose(&j);
    if (b.oom) {
        free(b.p);
        return FLARE_ENOMEM;
    }
    free(st->init_js);
    st->init_js = b.p;
    st->init_js_len = b.len;
    return 0;
}

static int serve_page(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    const oa_state_t *st = ud;
    flare_res_header(res, FLARE_STR("Cache-Control"), FLARE_STR("no-cache"));
    return flare_res_send_ref(res, 200, FLARE_STR("text/html; charset=utf-8"),
                              (flare_str_t){ st->ui_page, st->ui_page_len }, NULL, NULL);
}

static int serve_init(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    const oa_state_t *st = ud;
    if (st->init_js == NULL)
        return FLARE_ESTATE;
    flare_res_header(res, FLARE_STR("Cache-Control"), FLARE_STR("no-cache"));
    return flare_res_send_ref(res, 200, FLARE_STR("text/javascript; charset=utf-8"),
                              (flare_str_t){ st->init_js, st->init_js_len }, NULL, NULL);
}

static int serve_missing(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    const oa_state_t *st = ud;
    return flare_res_send_ref(res, 503, FLARE_STR("text/plain; charset=utf-8"),
                              flare_str(st->ui_missing), NULL, NULL);
}

static bool installed(const char *dir)
{
    static const char *const need[] = { "swagger-ui-bundle.js", "swagger-ui.css" };
    char path[4096];
    for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
        int n = snprintf(path, sizeof(path), "%s/%s", dir, need[i]);
        if (n < 0 || (size_t)n >= sizeof(path) || access(path, R_OK) != 0)
            return false;
    }
    return true;
}

/* dirname(path of the object this library was loaded from) + "/" + rel: the
 * shared library's own directory, or the executable's when linked
 * statically. The loader gives the path it was asked for, relative to the
 * working directory when the command line or LD_LIBRARY_PATH was: such a
 * path is made absolute now (it must exist for that), so the files stay
 * reachable after a chdir. false when there is no such path or it does not
 * fit. */
static bool beside_object(const char *rel, char *out, size_t size)
{
    static const char anchor = 0; /* any address inside this object */
    Dl_info info;
    if (rel[0] == '\0' || dladdr(&anchor, &info) == 0 || info.dli_fname == NULL)
        return false;
    const char *slash = strrchr(info.dli_fname, '/');
    if (slash == NULL)
        return false;
    int n = snprintf(out, size, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname, rel);
    if (n <= 0 || (size_t)n >= size)
        return false;
    if (out[0] != '/') {
        char *real = realpath(out, NULL);
        if (real == NULL || strlen(real) >= size) {
            free(real);
            return false;
        }
        strcpy(out, real);
        free(real);
    }
    return true;
}

/* Where Swagger UI's files are when neither opts.dir nor the environment
 * says: the first of (the install beside this library, the configured
 * install directory, the build tree) that holds them, in buf; NULL when none
 * does, with the places looked at listed in tried. */
static const char *find_dir(char *buf, size_t size, char *tried, size_t tried_size)
{
    const char *where[3];
    size_t n = 0;
    if (beside_object(FLARE_SWAGGER_UI_FROM_LIBDIR, buf, size))
        where[n++] = buf;
    if (FLARE_SWAGGER_UI_INSTALL_DIR[0] != '\0')
        where[n++] = FLARE_SWAGGER_UI_INSTALL_DIR;
    if (flare__swagger_ui_build_dir != NULL && flare__swagger_ui_build_dir[0] != '\0')
        where[n++] = flare__swagger_ui_build_dir;
    size_t used = 0;
    tried[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (installed(where[i])) {
            if (where[i] != buf)
                snprintf(buf, size, "%s", where[i]);
            return buf;
        }
        int k = snprintf(tried + used, tried_size - used, "%s\"%s\"",
                         i == 0 ? "" : (i + 1 < n ? ", " : " or "), where[i]);
        if (k < 0 || (size_t)k >= tried_size - used)
            break;
        used += (size_t)k;
    }
    return NULL;
}

/* GET prefix + suffix -> fn(st). */
static int route(flare_app_t *app, const char *prefix, const char *suffix, flare_handler_fn fn,
                 oa_state_t *st)
{
    char pat[1024];
    int n = snprintf(pat, sizeof(pat), "%s%s", prefix, suffix);
    if (n < 0 || (size_t)n >= sizeof(pat))
        return FLARE_EINVAL;
    return flare_get(app, pat, fn, st);
}

int flare_swagger_ui(flare_app_t *app, const char *prefix, const flare_swagger_opts_t *opts)
{
    static const flare_swagger_opts_t defaults;
    if (opts == NULL)
        opts = &defaults;
    size_t plen = prefix != NULL ? strlen(prefix) : 0;
    if (plen < 2 || prefix[0] != '/' || prefix[plen - 1] == '/' || plen > 512)
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_swagger_ui: prefix must look like \"/docs\" (no trailing /)");
    oa_state_t *st;
    int rc = flare__openapi_state(app, &st);
    if (rc != 0)
        return rc;
    if (st->ui_prefix != NULL)
        return flare__fail(FLARE_EEXIST, 0, "flare_swagger_ui: already served at %s",
                           st->ui_prefix);
    /* An explicit directory is the only one looked at: a wrong one answers
     * 503 naming it rather than quietly serving another copy. */
    char found[4096], tried[2048] = "";
    const char *dir = opts->dir;
    if (dir == NULL || dir[0] == '\0')
        dir = getenv("FLARE_SWAGGER_UI_DIR");
    if (dir == NULL || dir[0] == '\0') {
        dir = find_dir(found, sizeof(found), tried, sizeof(tried));
        if (dir == NULL)
            dir = "";
    } else {
        snprintf(tried, sizeof(tried), "\"%s\"", dir);
    }
    const char *pre = flare__openapi_strdup(st, prefix);
    const char *title = flare__openapi_strdup(st, opts->title ? opts->title : "API documentation");
    const char *url = flare__openapi_strdup(st, opts->url);
    if (pre == NULL || title == NULL || (opts->url != NULL && url == NULL))
        return FLARE_ENOMEM;
    st->ui_prefix = pre;
    st->ui_title = title;
    st->ui_url = url;
    if (dir[0] != '\0' && installed(dir)) {
        if ((st->ui_dir = flare__openapi_strdup(st, dir)) == NULL || make_page(st) != 0)
            goto nomem;
        /* exact routes beat flare_static's {*path}: the package's own
         * index.html would load the demo document */
        flare_static_opts_t so;
        flare_static_opts_init(&so);
        so.index = "";
        if ((rc = route(app, prefix, "/", serve_page, st)) != 0 ||
            (rc = route(app, prefix, "/index.html", serve_page, st)) != 0 ||
            (rc = route(app, prefix, "/" INIT_JS, serve_init, st)) != 0 ||
            (rc = flare_static(app, prefix, dir, &so)) != 0)
            goto fail;
        return 0;
    }
    char msg[3072];
    snprintf(msg, sizeof(msg),
             "503 Swagger UI is not installed: no swagger-ui-bundle.js in %s. It comes from the "
             "npm package swagger-ui-dist, fetched when Flare is built with npm present "
             "(tools/deps.sh build installs npm) and copied to share/flare/swagger-ui by "
             "`cmake --install`; or set FLARE_SWAGGER_UI_DIR to a swagger-ui-dist directory.\n",
             tried[0] != '\0' ? tried : "(no directory known to this build)");
    if ((st->ui_missing = flare__openapi_strdup(st, msg)) == NULL)
        goto nomem;
    if ((rc = route(app, prefix, "", serve_missing, st)) != 0 ||
        (rc = route(app, prefix, "/", serve_missing, st)) != 0 ||
        (rc = route(app, prefix, "/{*path}", serve_missing, st)) != 0)
        goto fail;
    return 0;
nomem:
    rc = FLARE_ENOMEM;
fail:
    st->ui_prefix = NULL; /* routes made so far stay (the app cannot remove routes) */
    st->ui_dir = NULL;
    return rc;
}
