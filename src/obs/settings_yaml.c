/* The settings file (YAML, through libyaml's document API, which keeps the
 * line of every node so that errors can name it) and the printout of the
 * effective settings that --check-config shows (YAML the loader reads
 * back). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "config.h"
#include "worker.h"
#include "obs/settings_int.h"

typedef struct loader {
    flare_settings_t *s;
    yaml_document_t *doc;
    const char *file;
} loader_t;

static unsigned line_of(const yaml_node_t *n)
{
    return (unsigned)n->start_mark.line + 1;
}

static settings_src_t src_at(const loader_t *ld, const yaml_node_t *n)
{
    return (settings_src_t){ .layer = LAYER_FILE, .file = ld->file, .line = line_of(n) };
}

static const char *kind_name(const yaml_node_t *n)
{
    return n->type == YAML_SEQUENCE_NODE  ? "a list"
           : n->type == YAML_MAPPING_NODE ? "a mapping"
                                          : "nothing";
}

/* An empty or null plain scalar ("", "~", "null"): the key is unset. */
static bool is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *v = (const char *)n->data.scalar.value;
    return *v == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0;
}

static const char *text(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

/* The keys of one mapping: scalars, none twice. */
static int check_keys(const loader_t *ld, const yaml_node_t *map, const char *ctx)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(ld->doc, p->key);
        settings_src_t src = src_at(ld, k);
        if (k->type != YAML_SCALAR_NODE)
            return flare__settings_fail(ld->s, &src, ctx, "a key must be a name, got %s",
                                        kind_name(k));
        for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
            yaml_node_t *k0 = yaml_document_get_node(ld->doc, q->key);
            if (k0->type == YAML_SCALAR_NODE && strcmp(text(k0), text(k)) == 0)
                return flare__settings_fail(ld->s, &src, text(k),
                                            "duplicated key (first at line %u)", line_of(k0));
        }
    }
    return 0;
}

static yaml_node_t *get(const loader_t *ld, const yaml_node_t *map, const char *key)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(ld->doc, p->key);
        if (strcmp(text(k), key) == 0)
            return yaml_document_get_node(ld->doc, p->value);
    }
    return NULL;
}

static int scalar_of(const loader_t *ld, const yaml_node_t *v, const char *key, const char *what)
{
    settings_src_t src = src_at(ld, v);
    if (v == NULL || v->type != YAML_SCALAR_NODE || is_null(v))
        return flare__settings_fail(ld->s, &src, key, "expected %s, got %s", what,
                                    v != NULL ? kind_name(v) : "nothing");
    return 0;
}

/* {tls-cert: F, tls-key: F} under sni */
static int load_sni(const loader_t *ld, flare_settings_listener_t *l, const yaml_node_t *seq)
{
    settings_src_t src = src_at(ld, seq);
    if (seq->type != YAML_SEQUENCE_NODE)
        return flare__settings_fail(ld->s, &src, "sni",
                                    "expected a list of {tls-cert: FILE, tls-key: FILE}, got %s",
                                    seq->type == YAML_SCALAR_NODE ? "a scalar" : kind_name(seq));
    for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top;
         it++) {
        yaml_node_t *e = yaml_document_get_node(ld->doc, *it);
        src = src_at(ld, e);
        if (e->type != YAML_MAPPING_NODE)
            return flare__settings_fail(ld->s, &src, "sni",
                                        "expected {tls-cert: FILE, tls-key: FILE}");
        int rc = check_keys(ld, e, "sni");
        if (rc != 0)
            return rc;
        for (yaml_node_pair_t *p = e->data.mapping.pairs.start; p < e->data.mapping.pairs.top;
             p++) {
            const char *k = text(yaml_document_get_node(ld->doc, p->key));
            if (strcmp(k, "tls-cert") != 0 && strcmp(k, "tls-key") != 0)
                return flare__settings_fail(ld->s, &src, "sni",
                                            "unknown key \"%s\" (tls-cert, tls-key)", k);
        }
        yaml_node_t *c = get(ld, e, "tls-cert"), *k = get(ld, e, "tls-key");
        if (c == NULL || k == NULL)
            return flare__settings_fail(ld->s, &src, "sni", "%s without %s",
                                        c != NULL ? "tls-cert" : "tls-key",
                                        c != NULL ? "tls-key" : "tls-cert");
        if ((rc = scalar_of(ld, c, "tls-cert", "a file name")) != 0 ||
            (rc = scalar_of(ld, k, "tls-key", "a file name")) != 0 ||
            (rc = flare__settings_add_sni(ld->s, l, text(c), text(k))) != 0)
            return rc;
    }
    return 0;
}

/* One entry of `listen`: "HOST:PORT" or {listen, tls-cert, tls-key, sni} */
static int load_listener(const loader_t *ld, const yaml_node_t *e)
{
    settings_src_t src = src_at(ld, e);
    if (e->type == YAML_SCALAR_NODE) {
        int rc = scalar_of(ld, e, "listen", "HOST:PORT");
        return rc != 0                                                            ? rc
               : flare__settings_add_listener(ld->s, text(e), &src, true) != NULL ? 0
                                                                                  : FLARE_ENOMEM;
    }
    if (e->type != YAML_MAPPING_NODE)
        return flare__settings_fail(ld->s, &src, "listen",
                                    "expected HOST:PORT or {listen: HOST:PORT, tls-cert: FILE, "
                                    "tls-key: FILE}, got %s",
                                    kind_name(e));
    int rc = check_keys(ld, e, "listen");
    if (rc != 0)
        return rc;
    static const char *const known[] = { "listen", "tls-cert", "tls-key", "sni" };
    for (yaml_node_pair_t *p = e->data.mapping.pairs.start; p < e->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(ld->doc, p->key);
        bool ok = false;
        for (size_t i = 0; i < 4; i++)
            ok |= strcmp(text(kn), known[i]) == 0;
        if (!ok) {
            settings_src_t ks = src_at(ld, kn);
            return flare__settings_fail(ld->s, &ks, "listen",
                                        "unknown key \"%s\" in a listener entry (listen, "
                                        "tls-cert, tls-key, sni)",
                                        text(kn));
        }
    }
    yaml_node_t *a = get(ld, e, "listen");
    if (a == NULL)
        return flare__settings_fail(ld->s, &src, "listen",
                                    "entry without an address (listen: HOST:PORT)");
    if ((rc = scalar_of(ld, a, "listen", "HOST:PORT")) != 0)
        return rc;
    flare_settings_listener_t *l = flare__settings_add_listener(ld->s, text(a), &src, true);
    if (l == NULL)
        return FLARE_ENOMEM;
    yaml_node_t *c = get(ld, e, "tls-cert"), *k = get(ld, e, "tls-key"), *sni = get(ld, e, "sni");
    if (c != NULL && ((rc = scalar_of(ld, c, "tls-cert", "a file name")) != 0 ||
                      (rc = flare__settings_strset(ld->s, &l->tls_cert, text(c))) != 0))
        return rc;
    if (k != NULL && ((rc = scalar_of(ld, k, "tls-key", "a file name")) != 0 ||
                      (rc = flare__settings_strset(ld->s, &l->tls_key, text(k))) != 0))
        return rc;
    if (sni != NULL && (rc = load_sni(ld, l, sni)) != 0)
        return rc;
    return 0;
}

static int load_pair(const loader_t *ld, const yaml_node_t *kn, const yaml_node_t *v,
                     bool listen_pass)
{
    flare_settings_t *s = ld->s;
    const char *key = text(kn);
    settings_src_t ks = src_at(ld, kn), vs = src_at(ld, v);
    int idx = flare__settings_find(s, key, strlen(key));
    bool std = idx >= 0 && (size_t)idx < flare__settings_nkeys;
    if (idx < 0 || (std && !flare__settings_keys[idx].file))
        return flare__settings_fail(s, &ks, key, "unknown key");
    settings_kind_t kind = std ? flare__settings_keys[idx].kind : K_STR;
    bool is_listen = kind == K_LISTEN || kind == K_LISTEN_PLAIN;
    if (is_listen != listen_pass)
        return 0;
    bool list = kind == K_LISTEN || kind == K_LISTEN_PLAIN || kind == K_LIST;
    if (is_null(v) && (kind == K_STR || kind == K_ENUM || kind == K_RATE || !std))
        return 0; /* unset: the default stays */
    if (list && v->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
             it++) {
            yaml_node_t *e = yaml_document_get_node(ld->doc, *it);
            int rc;
            if (kind == K_LISTEN) {
                rc = load_listener(ld, e);
            } else {
                settings_src_t es = src_at(ld, e);
                rc = scalar_of(ld, e, key, "a scalar");
                if (rc == 0)
                    rc = flare__settings_set(s, idx, text(e), &es);
            }
            if (rc != 0)
                return rc;
        }
        return 0;
    }
    if (kind == K_LISTEN)
        return load_listener(ld, v);
    if (v->type != YAML_SCALAR_NODE || is_null(v)) {
        /* the message the key gives for a bad value, with what came instead */
        int rc = flare__settings_set(s, idx, "", &vs);
        char *e = s->priv->error, *got = strstr(e, "got \"\"");
        if (rc != 0 && got != NULL)
            snprintf(got, sizeof(s->priv->error) - (size_t)(got - e), "got %s", kind_name(v));
        else if (rc == 0)
            rc = flare__settings_fail(s, &vs, key, "expected a value, got %s", kind_name(v));
        return rc;
    }
    return flare__settings_set(s, idx, text(v), &vs);
}

int flare__settings_load_file(flare_settings_t *s, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return flare__settings_fail(s, NULL, NULL, "%s: cannot open: %s", path, strerror(errno));
    yaml_parser_t parser;
    yaml_document_t doc;
    int rc = 0;
    if (!yaml_parser_initialize(&parser)) {
        fclose(f);
        return flare__settings_nomem(s);
    }
    yaml_parser_set_input_file(&parser, f);
    if (!yaml_parser_load(&parser, &doc)) {
        settings_src_t src = { .layer = LAYER_FILE,
                               .file = path,
                               .line = (unsigned)parser.problem_mark.line + 1 };
        rc = parser.error == YAML_MEMORY_ERROR
                 ? flare__settings_nomem(s)
                 : flare__settings_fail(s, &src, NULL, "YAML syntax error: %s%s%s",
                                        parser.problem != NULL ? parser.problem : "bad input",
                                        parser.context != NULL ? " " : "",
                                        parser.context != NULL ? parser.context : "");
        yaml_parser_delete(&parser);
        fclose(f);
        return rc;
    }
    loader_t ld = { s, &doc, path };
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root == NULL || is_null(root)) {
        /* an empty file: nothing set */
    } else if (root->type != YAML_MAPPING_NODE) {
        settings_src_t src = src_at(&ld, root);
        rc = flare__settings_fail(s, &src, NULL,
                                  "expected a mapping of keys (workers: 4 ...), "
                                  "got %s",
                                  root->type == YAML_SCALAR_NODE ? "a scalar" : kind_name(root));
    } else if ((rc = check_keys(&ld, root, "(top)")) == 0) {
        /* listen first, so a top-level tls-cert goes to its first listener
         * wherever it is written */
        for (int pass = 1; pass >= 0 && rc == 0; pass--) {
            for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
                 rc == 0 && p < root->data.mapping.pairs.top; p++)
                rc = load_pair(&ld, yaml_document_get_node(&doc, p->key),
                               yaml_document_get_node(&doc, p->value), pass == 1);
        }
    }
    /* one document only: a second one is a mistake worth naming */
    if (rc == 0 && root != NULL) {
        yaml_document_t more;
        if (yaml_parser_load(&parser, &more)) {
            yaml_node_t *r2 = yaml_document_get_root_node(&more);
            if (r2 != NULL) {
                settings_src_t src = src_at(&ld, r2);
                rc = flare__settings_fail(s, &src, NULL, "a second YAML document (one expected)");
            }
            yaml_document_delete(&more);
        }
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    fclose(f);
    return rc;
}

/* ---- the printout ---- */

static void quoted(FILE *out, const char *v)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)v; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\x%02x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

static void duration(FILE *out, uint64_t ms)
{
    if (ms % 1000 != 0)
        fprintf(out, "%llums", (unsigned long long)ms);
    else
        fprintf(out, "%llus", (unsigned long long)(ms / 1000));
}

static void size(FILE *out, uint64_t z)
{
    static const char sfx[] = "gmk";
    for (int i = 0; i < 3; i++) {
        uint64_t unit = (uint64_t)1 << (10 * (3 - i));
        if (z != 0 && z % unit == 0) {
            fprintf(out, "%llu%c", (unsigned long long)(z / unit), sfx[i]);
            return;
        }
    }
    fprintf(out, "%llu", (unsigned long long)z);
}

static void str_or_null(FILE *out, const char *v, const char *def)
{
    if (v == NULL)
        v = def;
    if (v == NULL)
        fputs("~", out);
    else
        quoted(out, v);
}

int flare_settings_print(const flare_settings_t *s, FILE *out)
{
    flare_config_t c;
    if (flare__config_resolve(&c, &s->app) != 0)
        c = s->app;
    fprintf(out, "# the effective configuration%s%s\n", s->config_file ? ": " : "",
            s->config_file ? s->config_file : "");
    fputs("listen:\n", out);
    for (size_t i = 0; i < s->nlisteners; i++) {
        const flare_settings_listener_t *l = &s->listeners[i];
        fputs("  - listen: ", out);
        quoted(out, l->addr);
        fputc('\n', out);
        if (l->tls_cert != NULL) {
            fputs("    tls-cert: ", out);
            quoted(out, l->tls_cert);
            fputs("\n    tls-key: ", out);
            quoted(out, l->tls_key != NULL ? l->tls_key : "");
            fputc('\n', out);
        }
        if (l->nsni > 0)
            fputs("    sni:\n", out);
        for (size_t j = 0; j < l->nsni; j++) {
            fputs("      - tls-cert: ", out);
            quoted(out, l->sni[j].cert != NULL ? l->sni[j].cert : "");
            fputs("\n        tls-key: ", out);
            quoted(out, l->sni[j].key != NULL ? l->sni[j].key : "");
            fputc('\n', out);
        }
    }
    fputs("admin-listen: ", out);
    str_or_null(out, s->admin_listen, NULL);
    fputs(s->admin_listen == NULL ? " # none: the operational routes on every listener\n" : "\n",
          out);
    if (s->tls_handshake_timeout_ms != 0) {
        fputs("tls-handshake-timeout: ", out);
        duration(out, s->tls_handshake_timeout_ms);
        fputc('\n', out);
    }
    fprintf(out, "workers: %u%s\n", c.workers, c.workers == 0 ? " # one per CPU" : "");
    fprintf(out, "max-conns: %u\n", c.max_conns);
    const struct {
        const char *name;
        unsigned ms;
    } t[] = { { "header-timeout", c.header_timeout_ms },
              { "body-timeout", c.body_timeout_ms },
              { "idle-timeout", c.idle_timeout_ms },
              { "write-timeout", c.write_timeout_ms },
              { "drain-timeout", c.drain_timeout_ms } };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        fprintf(out, "%s: ", t[i].name);
        duration(out, t[i].ms);
        fputc('\n', out);
    }
    const struct {
        const char *name;
        size_t v;
    } z[] = { { "max-request-line", c.max_request_line },
              { "max-head", c.max_head },
              { "max-body", c.max_body },
              { "max-conn-body", c.max_conn_body } };
    for (size_t i = 0; i < sizeof(z) / sizeof(z[0]); i++) {
        fprintf(out, "%s: ", z[i].name);
        size(out, z[i].v);
        fputc('\n', out);
    }
    fprintf(out, "max-headers: %zu\njob-threads: %u\nbacklog: %d\nmw-stats: %s\n", c.max_headers,
            c.job_threads, c.backlog, c.mw_stats ? "true" : "false");
    fprintf(out, "json-any-content-type: %s\n", c.json_any_content_type ? "true" : "false");
    fputs("io: ", out);
    str_or_null(out, s->io, "auto");
    fputc('\n', out);
    fputs("static:", out);
    if (s->nstatics == 0)
        fputs(" []", out);
    for (size_t i = 0; i < s->nstatics; i++) {
        fputs("\n  - ", out);
        quoted(out, s->statics[i]);
    }
    fputs("\nlog: ", out);
    str_or_null(out, s->log, "-");
    fputs("\nlog-level: ", out);
    str_or_null(out, s->log_level, "error");
    fputs("\nlog-format: ", out);
    str_or_null(out, s->log_format, "text");
    fputs("\naccess-log: ", out);
    str_or_null(out, s->access_log, NULL);
    fputs(s->access_log == NULL ? " # off" : "", out);
    fputs("\naccess-log-format: ", out);
    str_or_null(out, s->access_log_format, "combined");
    fputs("\ndb: ", out);
    str_or_null(out, s->db, NULL);
    fputs("\nsessions: ", out);
    str_or_null(out, s->sessions, NULL);
    fputs("\ncluster: ", out);
    str_or_null(out, s->cluster, NULL);
    fputs(s->cluster == NULL ? " # off: channels in this process only" : "", out);
    /* the three below only when set: their defaults are the cluster's */
    if (s->cluster_history != 0)
        fprintf(out, "\ncluster-history: %u", s->cluster_history);
    if (s->cluster_history_age_ms != 0) {
        fputs("\ncluster-history-age: ", out);
        duration(out, s->cluster_history_age_ms);
    }
    if (s->cluster_presence_ttl_ms != 0) {
        fputs("\ncluster-presence-ttl: ", out);
        duration(out, s->cluster_presence_ttl_ms);
    }
    fputs("\nsession-secure: ", out);
    str_or_null(out, s->session_secure, "auto");
    fputs("\nws-origin:", out);
    if (s->nws_origins == 0)
        fputs(" [] # the page's own origin only", out);
    for (size_t i = 0; i < s->nws_origins; i++) {
        fputs("\n  - ", out);
        quoted(out, s->ws_origins[i]);
    }
    fputs("\nupstream:", out);
    if (s->nupstreams == 0)
        fputs(" [] # none", out);
    for (size_t i = 0; i < s->nupstreams; i++) {
        fputs("\n  - ", out);
        quoted(out, s->upstreams[i]);
    }
    fputs("\nrate-limit: ", out);
    str_or_null(out, s->rate_limit, NULL);
    if (s->rate_limit == NULL) {
        fputs(" # none", out);
    } else {
        if (s->rate_limit_burst != 0)
            fprintf(out, "\nrate-limit-burst: %u", s->rate_limit_burst);
        fputs("\nrate-limit-redis: ", out);
        str_or_null(out, s->rate_limit_redis, NULL);
        fputs(s->rate_limit_redis == NULL ? " # in this process" : "", out);
        if (s->rate_limit_redis != NULL) {
            fputs("\nrate-limit-fail: ", out);
            str_or_null(out, s->rate_limit_fail, "open");
            fputs("\nrate-limit-timeout: ", out);
            duration(out, s->rate_limit_timeout_ms != 0 ? s->rate_limit_timeout_ms
                                                        : FLARE__RATE_LIMIT_TIMEOUT_MS);
        }
    }
    fputc('\n', out);
    for (size_t j = 0; s->priv != NULL && j < s->priv->nextra; j++) {
        const flare_settings_option_t *o = &s->priv->extra[j];
        settings_value_t v = s->priv->ext[j];
        fprintf(out, "%s: ", o->name);
        switch (o->type) {
        case FLARE_SETTING_STRING:
            str_or_null(out, v.s, NULL);
            break;
        case FLARE_SETTING_BOOL:
            fputs(v.b ? "true" : "false", out);
            break;
        case FLARE_SETTING_UINT:
            fprintf(out, "%u", v.u);
            break;
        case FLARE_SETTING_DURATION:
            duration(out, v.u);
            break;
        case FLARE_SETTING_SIZE:
            size(out, v.z);
            break;
        }
        fputc('\n', out);
    }
    return ferror(out) ? FLARE_EIO : 0;
}
