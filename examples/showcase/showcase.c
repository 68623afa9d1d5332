/* The showcase: what `make run` starts. A small app to click through, with
 * one page at / that links everything:
 *
 *   /todos.html        log in with a name, add, complete, delete todos
 *                      (the JSON API under /api, in SQLite; todos.c)
 *   /chat.html         a WebSocket chat with rooms (/ws; live.c)
 *   /events.html       server-sent events: a clock and the todo feed (/events)
 *   /upload.html       a form posting files (POST /upload, multipart/form-data)
 *   /docs/             Swagger UI on /openapi.json
 *   /status, /metrics, /healthz, /readyz   the operational routes (on
 *                      --admin-listen HOST:PORT only, when given)
 *
 * The pages are plain HTML, CSS and JavaScript in examples/showcase/www,
 * served as a static site (flare/static.h).
 *
 *   showcase --listen HOST:PORT --workers N [--db URL] [--static DIR]
 *
 * --db: sqlite:PATH or postgresql://...; default sqlite:$TMPDIR/flare-showcase-UID.db
 * (created when missing: the todos survive a restart). --static DIR: the
 * site's directory (default: the source tree's www). --admin-listen
 * HOST:PORT: the operational routes there, 404 on the public listeners.
 * --session-secure auto|always|never: the session cookie's Secure [auto:
 * over TLS]. --sessions redis://HOST:PORT: the sessions in Redis [memory].
 * --rate-limit N/s [--rate-limit-redis redis://HOST:PORT]: a limit per
 * client address on every request, shared by the instances on that Redis.
 * --log, --log-level, --access-log...: the logs (docs/logging.md).
 * --ws-origin ORIGIN: another origin whose pages may open the chat
 * (repeatable). Other flags: flare/settings.h (--help lists them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <flare/db.h>
#include <flare/flare.h>
#include <flare/metrics.h>
#include <flare/multipart.h>
#include <flare/openapi.h>
#include <flare/settings.h>
#include <flare/static.h>

#include "showcase.h"

#ifndef SHOWCASE_WWW_DIR
#define SHOWCASE_WWW_DIR "examples/showcase/www"
#endif

/* ---- uploads ---- */

/* POST /upload (multipart/form-data, up to --max-body): one entry per part
 * with its field name, file name (or null), content type (or null) and
 * size. The content itself is not kept: parts above 64 KiB went to
 * temporary files, removed when the request ends. */
static int upload(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_multipart_form_t form;
    int rc = flare_multipart_parse_req(req, NULL, &form);
    if (rc == FLARE_EINVAL || rc == FLARE_ETOOBIG)
        return showcase_json_error(res, flare_multipart_err_status(form.err),
                                   flare_multipart_err_message(form.err));
    if (rc != 0)
        return rc; /* out of memory, or a temporary file failed: the 500 */
    flare_json_t *j = flare_res_json(res, 200);
    if (j == NULL)
        return FLARE_ENOMEM;
    uint64_t total = 0;
    flare_json_object_begin(j);
    flare_json_kv_array(j, "parts");
    for (size_t i = 0; i < form.count; i++) {
        const flare_multipart_field_t *f = &form.fields[i];
        flare_json_object_begin(j);
        flare_json_kv_str(j, "name", f->name);
        if (f->filename.ptr != NULL)
            flare_json_kv_str(j, "filename", f->filename);
        else
            flare_json_kv_null(j, "filename");
        if (f->content_type.ptr != NULL)
            flare_json_kv_str(j, "content_type", f->content_type);
        else
            flare_json_kv_null(j, "content_type");
        flare_json_kv_int(j, "size", (int64_t)f->size);
        flare_json_object_end(j);
        total += f->size;
    }
    flare_json_array_end(j);
    flare_json_kv_int(j, "total", (int64_t)total);
    flare_json_object_end(j);
    return flare_json_end(j);
}

static const flare_op_response_t upload_res[] = {
    { 200,
      "one entry per part: name, filename, content_type, size; and the total",
      { .content_type = "application/json" } },
    { 400, "not multipart/form-data, or malformed", { .content_type = "application/json" } },
    { 413,
      "a limit was passed (parts, sizes, --max-body)",
      { .content_type = "application/json" } },
};
static const flare_op_content_t upload_body = { .content_type = "multipart/form-data" };
static const char *const tag_upload[] = { "uploads", NULL };

/* ---- the site ---- */

/* GET /favicon.ico: where browsers look for an icon when a page names none
 * (JSON and text answers: /metrics, /healthz...): the site's SVG icon. */
static int favicon_ico(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_redirect(res, 301, FLARE_STR("/favicon.svg"));
}

/* The status page as one of the site's pages: its icon, stylesheet and
 * navigation bar (common.js), and a way back. */
static const flare_status_opts_t status_opts = {
    .back_href = "/",
    .head_html = "<link rel=\"icon\" href=\"/favicon.svg\" type=\"image/svg+xml\">"
                 "<link rel=\"stylesheet\" href=\"/style.css\">"
                 "<script src=\"/common.js\"></script>",
};

static int setup(flare_app_t *app, flare_db_t *db, flare_settings_t *st)
{
    int rc;
    flare_middleware_t m;
    if ((rc = flare_request_id(app, &m)) != 0 || (rc = flare_use(app, &m)) != 0)
        return rc;
    /* the todo API and its sessions, the live feed, the chat */
    if ((rc = showcase_todos(app, db, st)) != 0 || (rc = showcase_events(app, st)) != 0 ||
        (rc = showcase_chat(app, st)) != 0)
        return rc;
    if ((rc = flare_post(app, "/upload", upload, NULL)) != 0 ||
        (rc = flare_route_doc(app, FLARE_METHOD_POST, "/upload",
                              &(flare_op_t){ .summary = "Upload files",
                                             .operation_id = "upload",
                                             .tags = tag_upload,
                                             .body = &upload_body,
                                             .responses = upload_res,
                                             .nresponses = FLARE_MAP_N(upload_res) })) != 0)
        return rc;
    /* the operational routes: on every listener, or only on --admin-listen
     * (flare_settings_app_new added it) */
    if ((rc = flare_metrics_route(app, "/metrics")) != 0 || (rc = flare_metrics_db(app, db)) != 0 ||
        (rc = flare_health_routes(app, NULL, NULL)) != 0 ||
        (rc = flare_status_route_opts(app, "/status", &status_opts)) != 0 ||
        (rc = flare_get(app, "/favicon.ico", favicon_ico, NULL)) != 0)
        return rc;
    /* the API's description and Swagger UI on it */
    flare_openapi_info_t info = {
        .title = "Flare showcase",
        .version = "1.0.0",
        .description = "The JSON API behind the showcase's pages: a session (log in with "
                       "a name), the user's todos, uploads.",
    };
    if ((rc = flare_openapi_info(app, &info)) != 0 ||
        (rc = flare_openapi_route(app, "/openapi.json")) != 0 ||
        (rc = flare_swagger_ui(app, "/docs", NULL)) != 0)
        return rc;
    return 0;
}

/* Everything else is the static site: /, /todos.html, /style.css... */
static int mount_site(flare_app_t *app, const char *www)
{
    flare_static_opts_t so;
    flare_static_opts_init(&so);
    so.cache_control = "no-cache"; /* revalidate each time: the ETag makes it a 304 */
    return flare_static(app, "/", www, &so);
}

/* sqlite:$TMPDIR/flare-showcase-UID.db: nothing to install, nothing left in
 * the working directory, one database per user of the machine. */
static const char *default_db(char *buf, size_t cap)
{
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || tmp[0] == '\0')
        tmp = "/tmp";
    snprintf(buf, cap, "sqlite:%s/flare-showcase-%u.db", tmp, (unsigned)getuid());
    return buf;
}

/* url for messages: the user and password of scheme://user:pass@host...
 * replaced by "***". */
static const char *redacted(const char *url, char *buf, size_t cap)
{
    const char *scheme = strstr(url, "://"), *at = strrchr(url, '@');
    if (scheme == NULL || at == NULL || at < scheme)
        return url;
    snprintf(buf, cap, "%.*s://***%s", (int)(scheme - url), url, at);
    return buf;
}

int main(int argc, char **argv)
{
    /* --config FILE, FLARE_*, then the flags (flare/settings.h) */
    flare_settings_t st;
    int rc;
    if (flare_settings_main(&st, argc, argv, NULL, 0, &rc) != 0)
        return rc;
    char dbbuf[512];
    const char *url = st.db != NULL ? st.db : default_db(dbbuf, sizeof(dbbuf));
    const char *www = st.nstatics > 0 ? st.statics[0] : SHOWCASE_WWW_DIR;
    /* the app with the logs, the listeners (the site is mounted below, with
     * its own options), --admin-listen, --sessions, SIGHUP */
    flare_app_t *app;
    if ((rc = flare_settings_app_new(&st, &(flare_settings_setup_opts_t){ .no_static = true },
                                     &app)) != 0) {
        fprintf(stderr, "showcase: %s\n", flare_settings_error(&st));
        flare_settings_free(&st);
        return 1;
    }
    flare_db_t *db;
    rc = flare_db_open(app, url, NULL, &db);
    if (rc != 0) {
        char shown[512];
        fprintf(stderr, "showcase: --db %s: %s: %s\n", redacted(url, shown, sizeof(shown)),
                flare_strerror(rc), flare_last_error());
        goto out;
    }
    if ((rc = setup(app, db, &st)) != 0) {
        fprintf(stderr, "showcase: %s: %s\n", flare_strerror(rc), flare_last_error());
        goto out;
    }
    if ((rc = mount_site(app, www)) != 0) {
        fprintf(stderr, "showcase: --static %s: %s (the directory of the site's pages)\n", www,
                flare_strerror(rc));
        goto out;
    }
    char shown[512];
    fprintf(stderr, "showcase: open http%s://%s/ (site: %s, database: %s)\n",
            st.listeners[0].tls_cert != NULL ? "s" : "", st.listeners[0].addr, www,
            redacted(url, shown, sizeof(shown)));
    if (st.admin_listen != NULL)
        fprintf(stderr, "showcase: /metrics, /status, /healthz, /readyz on http://%s/ only\n",
                st.admin_listen);
    if ((rc = flare_app_run(app, NULL)) != 0)
        fprintf(stderr, "showcase: %s: %s\n", flare_strerror(rc), flare_last_error());
out:
    flare_app_free(app);
    flare_settings_free(&st);
    return rc != 0;
}
