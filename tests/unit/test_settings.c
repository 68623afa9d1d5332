/* flare/settings.h: the file, the environment and the flags, every error
 * message, the precedence, listeners with their own certificates, the
 * extension options, the reload diff; and flare_app_on_reload (SIGHUP);
 * flare_settings_main (exit codes, --help, --check-config) and
 * flare_settings_setup (the logs, the sessions, the rate limit, the
 * listeners). */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <fcntl.h>

#include <flare/log.h>
#include <flare/settings.h>

#include "harness.h"

static char dir[64];

static int setup_dir(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/flare-settings-XXXXXX");
    return mkdtemp(dir) != NULL ? 0 : -1;
}

static int remove_dir(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Writes text to dir/name; returns the path (static buffer per call site
 * is not needed: each test uses one file at a time). */
static const char *write_file(const char *name, const char *text)
{
    static char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* Parses argv given as strings, NULL-terminated, after "prog". */
static int parse(flare_settings_t *s, const flare_settings_option_t *extra, size_t nextra, ...)
{
    char *argv[32] = { "prog" };
    int argc = 1;
    va_list ap;
    va_start(ap, nextra);
    for (char *a; (a = va_arg(ap, char *)) != NULL && argc < 31;)
        argv[argc++] = a;
    va_end(ap);
    flare_settings_init(s);
    return flare_settings_parse_args(s, argc, argv, extra, nextra);
}

/* The file's error, as main would print it. */
static void expect_file_error(const char *text, const char *expected)
{
    const char *path = write_file("t.yaml", text);
    char want[512];
    /* errors of one line start with the file's name; those of the whole do not */
    snprintf(want, sizeof(want), "%s%s", expected[0] == ':' ? path : "", expected);
    flare_settings_t s;
    int rc = parse(&s, NULL, 0, "--config", path, NULL);
    assert_int_equal(rc, FLARE_EINVAL);
    assert_string_equal(flare_settings_error(&s), want);
    flare_settings_free(&s);
}

static void test_file_errors(void **state)
{
    (void)state;
    expect_file_error("workers: 2\nlisten: [oops\n",
                      ":3: YAML syntax error: did not find expected ',' or ']' while parsing a "
                      "flow sequence");
    expect_file_error("workers: 2\nbogus: 1\n", ":2: bogus: unknown key");
    expect_file_error("workers: 2\ntls-sni-cert: x\n", ":2: tls-sni-cert: unknown key");
    expect_file_error("\n\n\n\n\n\nworkers: many\n",
                      ":7: workers: expected an integer 0..1024, got \"many\"");
    expect_file_error("workers: [1, 2]\n", ":1: workers: expected an integer 0..1024, got a list");
    expect_file_error("workers:\n", ":1: workers: expected an integer 0..1024, got nothing");
    expect_file_error("workers: 2000\n", ":1: workers: expected an integer 0..1024, got \"2000\"");
    expect_file_error("workers: -1\n", ":1: workers: expected an integer 0..1024, got \"-1\"");
    expect_file_error("workers: 1\nidle-timeout: 3s\nworkers: 2\n",
                      ":3: workers: duplicated key (first at line 1)");
    expect_file_error("idle-timeout: 5x\n",
                      ":1: idle-timeout: expected a duration (30, 500ms, 30s, 2m, 1h), got \"5x\"");
    expect_file_error("idle-timeout: 0\n",
                      ":1: idle-timeout: 0 is out of range (1ms..2147483647ms)");
    expect_file_error("max-body: 1t\n",
                      ":1: max-body: expected a size (1048576, 64k, 1m), got \"1t\"");
    expect_file_error("max-body: 2048g\n",
                      ":1: max-body: 2048g is out of range (0..1099511627776 bytes)");
    expect_file_error("mw-stats: maybe\n", ":1: mw-stats: expected true or false, got \"maybe\"");
    expect_file_error("log-level: loud\n",
                      ":1: log-level: expected error|warn|info|debug, got \"loud\"");
    expect_file_error("access-log-format: xml\n",
                      ":1: access-log-format: expected combined|json, got \"xml\"");
    expect_file_error("listen:\n  - 127.0.0.1:1\n  - tls-cert: a.pem\n    tls-key: a.key\n",
                      ":3: listen: entry without an address (listen: HOST:PORT)");
    expect_file_error("listen:\n  - listen: 127.0.0.1:1\n    tls-cert: a.pem\n",
                      ":2: listen 127.0.0.1:1: tls-cert without tls-key");
    expect_file_error("listen:\n  - listen: 127.0.0.1:1\n    tls-key: a.key\n",
                      ":2: listen 127.0.0.1:1: tls-key without tls-cert");
    expect_file_error("listen:\n  - listen: 127.0.0.1:1\n    tls-crt: a.pem\n",
                      ":3: listen: unknown key \"tls-crt\" in a listener entry (listen, "
                      "tls-cert, tls-key, sni)");
    expect_file_error("listen:\n  - listen: 127.0.0.1:1\n    listen: 127.0.0.1:2\n",
                      ":3: listen: duplicated key (first at line 2)");
    expect_file_error("listen: 127.0.0.1:1\ntls-cert: a.pem\n",
                      ":2: listen 127.0.0.1:1: tls-cert without tls-key");
    expect_file_error("- workers\n", ":1: expected a mapping of keys (workers: 4 ...), got a list");
    expect_file_error("workers: 1\n---\nworkers: 2\n", ":3: a second YAML document (one expected)");
    expect_file_error("tls-handshake-timeout: 5s\n",
                      "tls-handshake-timeout: no listener has tls-cert");

    /* a missing file names it and the system's reason */
    flare_settings_t s;
    char missing[128];
    snprintf(missing, sizeof(missing), "%s/nope.yaml", dir);
    assert_int_equal(parse(&s, NULL, 0, "--config", missing, NULL), FLARE_EINVAL);
    char want[256];
    snprintf(want, sizeof(want), "%s: cannot open: No such file or directory", missing);
    assert_string_equal(flare_settings_error(&s), want);
    flare_settings_free(&s);
}

static void test_values(void **state)
{
    (void)state;
    const char *path = write_file("v.yaml", "# a comment\n"
                                            "workers: 3\n"
                                            "idle-timeout: 500ms\n"
                                            "header-timeout: 2m\n"
                                            "body-timeout: 7\n"
                                            "max-body: 64k\n"
                                            "max-conn-body: 512k\n"
                                            "max-head: 1m\n"
                                            "max-headers: 50\n"
                                            "backlog: 128\n"
                                            "mw-stats: yes\n"
                                            "static: [/srv/a, /img=/srv/b]\n"
                                            "log: /var/log/flare.log\n"
                                            "log-level: debug\n"
                                            "log-format: json\n"
                                            "access-log: \"-\"\n"
                                            "access-log-format: json\n"
                                            "db: sqlite:x.db\n"
                                            "sessions: redis://127.0.0.1:6379\n"
                                            "session-secure: always\n"
                                            "json-any-content-type: true\n"
                                            "io: uring\n"
                                            "admin-listen: 127.0.0.1:9100\n"
                                            "ws-origin: [https://a.example, \"*\"]\n");
    flare_settings_t s;
    assert_int_equal(parse(&s, NULL, 0, "--config", path, NULL), 0);
    assert_int_equal(s.app.workers, 3);
    assert_int_equal(s.app.idle_timeout_ms, 500);
    assert_int_equal(s.app.header_timeout_ms, 120000);
    assert_int_equal(s.app.body_timeout_ms, 7000);
    assert_int_equal(s.app.max_body, 65536);
    assert_int_equal(s.app.max_conn_body, 524288);
    assert_int_equal(s.app.max_head, 1048576);
    assert_int_equal(s.app.max_headers, 50);
    assert_int_equal(s.app.backlog, 128);
    assert_true(s.app.mw_stats);
    assert_int_equal(s.nstatics, 2);
    assert_string_equal(s.statics[1], "/img=/srv/b");
    assert_string_equal(s.log, "/var/log/flare.log");
    assert_string_equal(s.log_level, "debug");
    assert_string_equal(s.log_format, "json");
    assert_string_equal(s.access_log, "-");
    assert_string_equal(s.access_log_format, "json");
    assert_string_equal(s.db, "sqlite:x.db");
    assert_string_equal(s.sessions, "redis://127.0.0.1:6379");
    /* the safer defaults' options (json-any-content-type, session-secure,
     * admin-listen, ws-origin), and the calls that hand them over */
    assert_true(s.app.json_any_content_type);
    assert_string_equal(s.io, "uring");
    assert_int_equal(s.app.io, FLARE_IO_URING);
    assert_string_equal(s.admin_listen, "127.0.0.1:9100");
    flare_session_config_t sc = { 0 };
    flare_settings_session_config(&s, &sc);
    assert_int_equal(sc.secure, FLARE_SESSION_SECURE_ALWAYS);
    flare_ws_config_t wc = { 0 };
    flare_settings_ws_config(&s, &wc);
    assert_non_null(wc.origins);
    assert_string_equal(wc.origins[0], "https://a.example");
    assert_string_equal(wc.origins[1], "*");
    assert_null(wc.origins[2]);
    /* no listen anywhere: the one default */
    assert_int_equal(s.nlisteners, 1);
    assert_string_equal(s.listeners[0].addr, "127.0.0.1:8080");
    assert_null(s.listeners[0].tls_cert);
    flare_config_t c;
    flare_settings_app_config(&s, &c);
    assert_int_equal(c.workers, 3);
    assert_int_equal(c.max_body, 65536);
    assert_int_equal(c.max_conn_body, 524288);
    assert_true(c.json_any_content_type);
    assert_int_equal(c.io, FLARE_IO_URING);

    /* what --check-config prints reads back to the same settings */
    char out[128];
    snprintf(out, sizeof(out), "%s/printed.yaml", dir);
    FILE *f = fopen(out, "w");
    assert_non_null(f);
    assert_int_equal(flare_settings_print(&s, f), 0);
    fclose(f);
    flare_settings_t back;
    assert_int_equal(parse(&back, NULL, 0, "--config", out, NULL), 0);
    const char *keys[8];
    assert_int_equal(flare_settings_diff(&s, &back, keys, 8), 0);
    flare_settings_free(&back);
    flare_settings_free(&s);

    /* an empty file sets nothing */
    path = write_file("empty.yaml", "");
    assert_int_equal(parse(&s, NULL, 0, "--config", path, NULL), 0);
    assert_int_equal(s.app.workers, 0);
    flare_settings_free(&s);
}

static void test_precedence(void **state)
{
    (void)state;
    const char *path = write_file("p.yaml", "workers: 2\nidle-timeout: 10\nmax-body: 1k\n"
                                            "listen: 127.0.0.1:1111\nlog-level: warn\n");
    flare_settings_t s;
    /* file only */
    assert_int_equal(parse(&s, NULL, 0, "--config", path, NULL), 0);
    assert_int_equal(s.app.workers, 2);
    assert_string_equal(s.listeners[0].addr, "127.0.0.1:1111");
    flare_settings_free(&s);
    /* env over file, flags over env */
    setenv("FLARE_WORKERS", "4", 1);
    setenv("FLARE_IDLE_TIMEOUT", "20s", 1);
    setenv("FLARE_LOG_LEVEL", "error", 1);
    setenv("FLARE_LISTEN", "127.0.0.1:2222,127.0.0.1:3333", 1);
    assert_int_equal(
        parse(&s, NULL, 0, "--config", path, "--workers", "6", "--listen=127.0.0.1:4444", NULL), 0);
    assert_int_equal(s.app.workers, 6);             /* flag */
    assert_int_equal(s.app.idle_timeout_ms, 20000); /* env */
    assert_int_equal(s.app.max_body, 1024);         /* file */
    assert_string_equal(s.log_level, "error");      /* env */
    assert_int_equal(s.nlisteners, 1);              /* the flag's list replaces the env's */
    assert_string_equal(s.listeners[0].addr, "127.0.0.1:4444");
    flare_settings_free(&s);
    assert_int_equal(parse(&s, NULL, 0, "--config", path, NULL), 0);
    assert_int_equal(s.nlisteners, 2); /* the env's list replaces the file's */
    assert_string_equal(s.listeners[1].addr, "127.0.0.1:3333");
    flare_settings_free(&s);
    /* FLARE_CONFIG names the file when --config does not */
    unsetenv("FLARE_LISTEN");
    setenv("FLARE_CONFIG", path, 1);
    assert_int_equal(parse(&s, NULL, 0, NULL), 0);
    assert_string_equal(s.config_file, path);
    assert_string_equal(s.listeners[0].addr, "127.0.0.1:1111");
    flare_settings_free(&s);
    /* an env error names the variable */
    setenv("FLARE_WORKERS", "lots", 1);
    assert_int_equal(parse(&s, NULL, 0, NULL), FLARE_EINVAL);
    assert_string_equal(flare_settings_error(&s),
                        "FLARE_WORKERS: expected an integer 0..1024, got \"lots\"");
    flare_settings_free(&s);
    unsetenv("FLARE_CONFIG");
    unsetenv("FLARE_WORKERS");
    unsetenv("FLARE_IDLE_TIMEOUT");
    unsetenv("FLARE_LOG_LEVEL");
}

static void test_flag_errors(void **state)
{
    (void)state;
    flare_settings_t s;
    struct {
        const char *a, *b, *want;
    } cases[] = {
        { "--workers", "many", "--workers: expected an integer 0..1024, got \"many\"" },
        { "--bogus", "1", "--bogus: unknown option (see --help)" },
        { "stray", NULL, "unexpected argument \"stray\" (see --help)" },
        { "--workers", NULL, "--workers: missing value" },
        { "--config", NULL, "--config: missing value" },
        { "--max-body", "12q", "--max-body: expected a size (1048576, 64k, 1m), got \"12q\"" },
        { "--tls-cert", "c.pem", "--tls-cert: listen 127.0.0.1:8080: tls-cert without tls-key" },
        { "--tls-sni-cert", "c.pem",
          "--tls-sni-cert: listen 127.0.0.1:8080: SNI certificate 1 needs tls-cert and tls-key" },
        { "--log-level", "trace", "--log-level: expected error|warn|info|debug, got \"trace\"" },
        { "--check-config=1", NULL, "--check-config: takes no value" },
        { "--session-secure", "yes", "--session-secure: expected auto|always|never, got \"yes\"" },
        { "--ws-origin", "", "--ws-origin: expected a value, got \"\"" },
        { "--io", "kqueue", "--io: expected auto|uring|epoll, got \"kqueue\"" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(parse(&s, NULL, 0, cases[i].a, cases[i].b, NULL), FLARE_EINVAL);
        assert_string_equal(flare_settings_error(&s), cases[i].want);
        flare_settings_free(&s);
    }
    /* the flags of the safer defaults' options; repeated --ws-origin add up */
    assert_int_equal(parse(&s, NULL, 0, "--ws-origin", "https://a.example", "--ws-origin=https://b",
                           "--session-secure", "never", "--json-any-content-type", "--admin-listen",
                           "127.0.0.1:0", "--io", "epoll", NULL),
                     0);
    assert_int_equal(s.app.io, FLARE_IO_EPOLL);
    assert_int_equal(s.nws_origins, 2);
    assert_string_equal(s.ws_origins[1], "https://b");
    assert_null(s.ws_origins[2]);
    assert_true(s.app.json_any_content_type);
    assert_string_equal(s.admin_listen, "127.0.0.1:0");
    flare_session_config_t sc = { .secure = FLARE_SESSION_SECURE_ALWAYS };
    flare_settings_session_config(&s, &sc);
    assert_int_equal(sc.secure, FLARE_SESSION_SECURE_NEVER);
    flare_settings_free(&s);
    /* nothing given: the structures keep what the app set */
    assert_int_equal(parse(&s, NULL, 0, NULL), 0);
    flare_ws_config_t wc = { 0 };
    flare_settings_ws_config(&s, &wc);
    assert_null(wc.origins);
    flare_settings_session_config(&s, &sc);
    assert_int_equal(sc.secure, FLARE_SESSION_SECURE_NEVER);
    assert_null(s.admin_listen);
    flare_settings_free(&s);
    /* a bad admin-listen address fails where the listeners are added */
    assert_int_equal(parse(&s, NULL, 0, "--admin-listen", "nowhere", NULL), 0);
    flare_app_t *app = flare_app_new(NULL);
    assert_non_null(app);
    assert_int_equal(flare_settings_listen(&s, app), FLARE_EADDR);
    assert_non_null(strstr(flare_settings_error(&s), "admin-listen nowhere"));
    flare_app_free(app);
    flare_settings_free(&s);
    /* a limit the app refuses, named as flare_app_new names it */
    assert_int_equal(parse(&s, NULL, 0, "--max-conns", "0", NULL), FLARE_EINVAL);
    assert_string_equal(flare_settings_error(&s),
                        "--max-conns: expected an integer 1..4294967295, got \"0\"");
    flare_settings_free(&s);
    /* --help is done: the caller exits 0 */
    fflush(stdout);
    assert_int_equal(parse(&s, NULL, 0, "--help", NULL), FLARE_SETTINGS_EXIT);
    flare_settings_free(&s);
}

static void test_listeners(void **state)
{
    (void)state;
    const char *path = write_file("l.yaml", "listen:\n"
                                            "  - 127.0.0.1:80\n"
                                            "  - listen: 127.0.0.1:443\n"
                                            "    tls-cert: /c/a.pem\n"
                                            "    tls-key: /c/a.key\n"
                                            "    sni:\n"
                                            "      - {tls-cert: /c/b.pem, tls-key: /c/b.key}\n"
                                            "  - {listen: '[::1]:8443', tls-cert: /c/d.pem, "
                                            "tls-key: /c/d.key}\n"
                                            "tls-handshake-timeout: 3s\n");
    flare_settings_t s;
    assert_int_equal(parse(&s, NULL, 0, "--config", path, NULL), 0);
    assert_int_equal(s.nlisteners, 3);
    assert_string_equal(s.listeners[0].addr, "127.0.0.1:80");
    assert_null(s.listeners[0].tls_cert);
    assert_string_equal(s.listeners[1].addr, "127.0.0.1:443");
    assert_string_equal(s.listeners[1].tls_cert, "/c/a.pem");
    assert_string_equal(s.listeners[1].tls_key, "/c/a.key");
    assert_int_equal(s.listeners[1].nsni, 1);
    assert_string_equal(s.listeners[1].sni[0].cert, "/c/b.pem");
    assert_string_equal(s.listeners[2].addr, "[::1]:8443");
    assert_string_equal(s.listeners[2].tls_key, "/c/d.key");
    assert_int_equal(s.tls_handshake_timeout_ms, 3000);
    flare_settings_free(&s);

    /* hello's flags: --tls-cert before --listen still goes to it, SNI pairs
     * in order, --listen-plain after */
    assert_int_equal(parse(&s, NULL, 0, "--tls-cert", "a.pem", "--tls-key", "a.key", "--listen",
                           "127.0.0.1:9443", "--tls-sni-cert", "b.pem", "--tls-sni-cert", "c.pem",
                           "--tls-sni-key", "b.key", "--tls-sni-key", "c.key", "--listen-plain",
                           "127.0.0.1:9080", NULL),
                     0);
    assert_int_equal(s.nlisteners, 2);
    assert_string_equal(s.listeners[0].addr, "127.0.0.1:9443");
    assert_string_equal(s.listeners[0].tls_cert, "a.pem");
    assert_int_equal(s.listeners[0].nsni, 2);
    assert_string_equal(s.listeners[0].sni[1].cert, "c.pem");
    assert_string_equal(s.listeners[0].sni[1].key, "c.key");
    assert_string_equal(s.listeners[1].addr, "127.0.0.1:9080");
    assert_null(s.listeners[1].tls_cert);
    flare_settings_free(&s);

    /* a top-level tls-cert goes to the first listener, wherever it is written */
    path = write_file("l2.yaml", "tls-cert: a.pem\ntls-key: a.key\nlisten: 127.0.0.1:7443\n");
    assert_int_equal(parse(&s, NULL, 0, "--config", path, NULL), 0);
    assert_int_equal(s.nlisteners, 1);
    assert_string_equal(s.listeners[0].tls_cert, "a.pem");
    flare_settings_free(&s);

    /* sni entries need both files */
    expect_file_error("listen:\n  - listen: 127.0.0.1:1\n    tls-cert: a\n    tls-key: b\n"
                      "    sni:\n      - {tls-cert: c}\n",
                      ":6: sni: tls-cert without tls-key");
}

static void test_extra_options(void **state)
{
    (void)state;
    unsigned pool = 5, grace = 0;
    const char *name = "default";
    bool fast = false;
    size_t chunk = 0;
    const flare_settings_option_t extra[] = {
        { "pool", FLARE_SETTING_UINT, "connections", &pool, 1, 64 },
        { "name", FLARE_SETTING_STRING, "a name", &name, 0, 0 },
        { "fast", FLARE_SETTING_BOOL, "go fast", &fast, 0, 0 },
        { "grace", FLARE_SETTING_DURATION, "grace", &grace, 0, 0 },
        { "chunk", FLARE_SETTING_SIZE, "chunk", &chunk, 0, 0 },
    };
    flare_settings_t s;
    /* defaults stay what `where` held */
    assert_int_equal(parse(&s, extra, 5, NULL), 0);
    assert_int_equal(pool, 5);
    assert_string_equal(name, "default");
    flare_settings_free(&s);
    name = "default";

    const char *path = write_file("x.yaml", "pool: 8\nname: file\ngrace: 250ms\nchunk: 4k\n");
    setenv("FLARE_NAME", "env", 1);
    assert_int_equal(parse(&s, extra, 5, "--config", path, "--fast", "--pool", "9", NULL), 0);
    assert_int_equal(pool, 9);
    assert_string_equal(name, "env");
    assert_true(fast);
    assert_int_equal(grace, 250);
    assert_int_equal(chunk, 4096);
    flare_settings_free(&s);
    unsetenv("FLARE_NAME");
    name = "default";

    /* their errors are the standard keys' errors */
    expect_file_error("workers: 1\npools: 8\n", ":2: pools: unknown key");
    path = write_file("x.yaml", "pool: 100\n");
    assert_int_equal(parse(&s, extra, 5, "--config", path, NULL), FLARE_EINVAL);
    char want[256];
    snprintf(want, sizeof(want), "%s:1: pool: expected an integer 1..64, got \"100\"", path);
    assert_string_equal(flare_settings_error(&s), want);
    flare_settings_free(&s);
    assert_int_equal(parse(&s, extra, 5, "--fast=sometimes", NULL), FLARE_EINVAL);
    assert_string_equal(flare_settings_error(&s),
                        "--fast: expected true or false, got \"sometimes\"");
    flare_settings_free(&s);
    /* a name that is already a key is refused */
    const flare_settings_option_t clash[] = { { "workers", FLARE_SETTING_UINT, "", NULL, 0, 0 } };
    assert_int_equal(parse(&s, clash, 1, NULL), FLARE_EINVAL);
    flare_settings_free(&s);
}

static void test_reload_diff(void **state)
{
    (void)state;
    unsigned pool = 1;
    const flare_settings_option_t extra[] = {
        { "pool", FLARE_SETTING_UINT, "connections", &pool, 1, 64 },
    };
    const char *path = write_file("r.yaml", "workers: 2\nlog-level: info\npool: 3\n"
                                            "listen:\n  - listen: 127.0.0.1:1\n"
                                            "    tls-cert: a.pem\n    tls-key: a.key\n");
    flare_settings_t s, next;
    assert_int_equal(parse(&s, extra, 1, "--config", path, "--max-body", "2k", NULL), 0);
    assert_int_equal(flare_settings_reload(&s, &next), 0);
    const char *keys[16];
    assert_int_equal(flare_settings_diff(&s, &next, keys, 16), 0);
    flare_settings_free(&next);

    write_file("r.yaml", "workers: 4\nlog-level: debug\npool: 5\nmax-body: 1m\n"
                         "listen:\n  - listen: 127.0.0.1:1\n"
                         "    tls-cert: b.pem\n    tls-key: a.key\n");
    assert_int_equal(flare_settings_reload(&s, &next), 0);
    size_t n = flare_settings_diff(&s, &next, keys, 16);
    assert_int_equal(n, 4);
    assert_string_equal(keys[0], "tls-cert");
    assert_string_equal(keys[1], "workers");
    assert_string_equal(keys[2], "log-level");
    assert_string_equal(keys[3], "pool");
    /* the flags still win on reload: max-body stays the flag's */
    assert_int_equal(next.app.max_body, 2048);
    assert_int_equal(pool, 3); /* a reload does not write `where` */
    assert_int_equal(flare_settings_diff(&s, &next, keys, 1), 4);
    flare_settings_free(&next);

    /* a broken file: the error, nothing else */
    write_file("r.yaml", "workers: 4\nworkers: 5\n");
    assert_int_equal(flare_settings_reload(&s, &next), FLARE_EINVAL);
    char want[256];
    snprintf(want, sizeof(want), "%s:2: workers: duplicated key (first at line 1)", path);
    assert_string_equal(flare_settings_error(&next), want);
    flare_settings_free(&next);
    flare_settings_free(&s);
}

/* ---- flare_app_on_reload ---- */

static atomic_int hooks_ran;
static int order[4];

static void hook_a(void *ud)
{
    /* hooks run on one thread: write, then publish */
    int i = atomic_load(&hooks_ran);
    if (i < 4)
        order[i] = (int)(intptr_t)ud;
    atomic_store(&hooks_ran, i + 1);
}

static void test_on_reload(void **state)
{
    (void)state;
    atomic_store(&hooks_ran, 0);
    flare_app_t *app = flare_app_new(&(flare_config_t){ .workers = 1 });
    assert_non_null(app);
    assert_int_equal(flare_app_on_reload(app, NULL, NULL), FLARE_EINVAL);
    assert_int_equal(flare_app_on_reload(app, hook_a, (void *)1), 0);
    assert_int_equal(flare_app_on_reload(app, hook_a, (void *)2), 0);
    harness_t h = { .app = app };
    assert_int_equal(harness_start(&h), 0);
    assert_int_equal(flare_app_on_reload(app, hook_a, (void *)3), FLARE_ESTATE);
    /* process-directed: this thread does not block SIGHUP, so the handler
     * the run installed takes it (the run's thread reads the signalfd) */
    kill(getpid(), SIGHUP);
    for (int i = 0; i < 500 && atomic_load(&hooks_ran) < 2; i++)
        usleep(10000);
    assert_int_equal(atomic_load(&hooks_ran), 2);
    assert_int_equal(order[0], 1);
    assert_int_equal(order[1], 2);
    /* still serving */
    char *r =
        harness_roundtrip(&h, "GET /nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_non_null(r);
    assert_non_null(strstr(r, "404"));
    free(r);
    assert_int_equal(harness_stop(&h), 0);
    /* the disposition is given back */
    struct sigaction sa;
    sigaction(SIGHUP, NULL, &sa);
    assert_true(sa.sa_handler == SIG_DFL);
    flare_app_free(app);
}

/* flare_settings_watch: SIGHUP re-reads the file, the log callback sees the
 * new logging keys, what needs an upgrade keeps its value */
static atomic_int log_calls;
static char seen_level[16];

static void on_log(const flare_settings_t *s, void *ud)
{
    (void)ud;
    snprintf(seen_level, sizeof(seen_level), "%s", s->log_level != NULL ? s->log_level : "");
    atomic_fetch_add(&log_calls, 1);
}

static void test_watch(void **state)
{
    (void)state;
    atomic_store(&log_calls, 0);
    const char *path = write_file("w.yaml", "workers: 1\nlog-level: info\n");
    char file[128];
    snprintf(file, sizeof(file), "%s", path);
    flare_settings_t s;
    assert_int_equal(parse(&s, NULL, 0, "--config", file, NULL), 0);
    flare_config_t cfg;
    flare_settings_app_config(&s, &cfg);
    flare_app_t *app = flare_app_new(&cfg);
    assert_non_null(app);
    assert_int_equal(flare_settings_watch(&s, app), 0);
    flare_settings_on_log(&s, on_log, NULL);
    harness_t h = { .app = app };
    assert_int_equal(harness_start(&h), 0);

    write_file("w.yaml", "workers: 2\nlog-level: debug\n");
    kill(getpid(), SIGHUP);
    for (int i = 0; i < 500 && atomic_load(&log_calls) < 1; i++)
        usleep(10000);
    assert_int_equal(atomic_load(&log_calls), 1);
    assert_string_equal(seen_level, "debug");

    /* broken: no callback, nothing changes */
    write_file("w.yaml", "workers: 2\nlog-level: warn\nlog-level: error\n");
    kill(getpid(), SIGHUP);
    usleep(200000);
    assert_int_equal(atomic_load(&log_calls), 1);
    assert_int_equal(harness_stop(&h), 0);
    assert_string_equal(s.log_level, "debug");
    assert_int_equal(s.app.workers, 1); /* needs an upgrade: kept */
    flare_app_free(app);
    flare_settings_free(&s);
}

/* A task that keeps worker 0's loop busy: a reload cannot park it. */
static _Atomic int blocked;
static void block_worker(void *ud)
{
    (void)ud;
    atomic_store(&blocked, 1);
    usleep(2600 * 1000); /* past the reload's 2 s wait */
    atomic_store(&blocked, 2);
}

static bool post_413(const harness_t *h)
{
    char *r = harness_roundtrip(h, "POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n"
                                   "Connection: close\r\n\r\n"
                                   "01234567890123456789012345678901234567890123456789");
    bool is413 = strncmp(r, "HTTP/1.1 413 ", 13) == 0;
    bool is404 = strncmp(r, "HTTP/1.1 404 ", 13) == 0;
    assert_true(is413 || is404);
    free(r);
    return is413;
}

/* Limits change in place on SIGHUP once every worker has parked; a worker
 * whose loop is busy past the wait cancels the change (nothing written,
 * the late worker still runs its part and lets go of the shared block). */
static void test_watch_limits(void **state)
{
    (void)state;
    const char *path = write_file("l.yaml", "workers: 1\nmax-body: 10\n");
    char file[128];
    snprintf(file, sizeof(file), "%s", path);
    flare_settings_t s;
    assert_int_equal(parse(&s, NULL, 0, "--config", file, NULL), 0);
    flare_config_t cfg;
    flare_settings_app_config(&s, &cfg);
    flare_app_t *app = flare_app_new(&cfg);
    assert_non_null(app);
    assert_int_equal(flare_settings_watch(&s, app), 0);
    harness_t h = { .app = app };
    assert_int_equal(harness_start(&h), 0);
    assert_true(post_413(&h));

    /* the worker busy: the reload gives up, max-body stays 10 */
    atomic_store(&blocked, 0);
    assert_int_equal(flare_app_post(app, 0, block_worker, NULL), 0);
    for (int i = 0; i < 500 && atomic_load(&blocked) == 0; i++)
        usleep(1000);
    write_file("l.yaml", "workers: 1\nmax-body: 100\n");
    kill(getpid(), SIGHUP);
    for (int i = 0; i < 500 && atomic_load(&blocked) != 2; i++)
        usleep(10000);
    assert_int_equal(atomic_load(&blocked), 2);
    usleep(100000);
    assert_true(post_413(&h));

    /* the worker free: applied */
    kill(getpid(), SIGHUP);
    bool applied = false;
    for (int i = 0; i < 300 && !applied; i++) {
        applied = !post_413(&h);
        if (!applied)
            usleep(10000);
    }
    assert_true(applied);
    assert_int_equal(harness_stop(&h), 0);
    assert_int_equal(s.app.max_body, 100);
    flare_app_free(app);
    flare_settings_free(&s);
}

/* ---- flare_settings_main ---- */

/* Runs flare_settings_main on argv (NULL-terminated, argv[0] included) with
 * stdout and stderr going to files, read back into out/err (4 KiB each). */
static int run_main(flare_settings_t *s, int *code, char *out, char *err, const char *const *args)
{
    char *argv[32];
    int argc = 0;
    for (; args[argc] != NULL && argc < 31; argc++)
        argv[argc] = (char *)args[argc];
    argv[argc] = NULL;
    char opath[128], epath[128];
    snprintf(opath, sizeof(opath), "%s/main.out", dir);
    snprintf(epath, sizeof(epath), "%s/main.err", dir);
    fflush(stdout);
    fflush(stderr);
    int o = dup(1), e = dup(2);
    int fo = open(opath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int fe = open(epath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(o >= 0 && e >= 0 && fo >= 0 && fe >= 0);
    dup2(fo, 1);
    dup2(fe, 2);
    static const flare_settings_option_t extra[] = {
        { "pool", FLARE_SETTING_UINT, "connections per worker", NULL, 1, 64 },
    };
    *code = -1;
    int rc = flare_settings_main(s, argc, argv, extra, 1, code);
    fflush(stdout);
    fflush(stderr);
    dup2(o, 1);
    dup2(e, 2);
    close(o);
    close(e);
    close(fo);
    close(fe);
    char *bufs[2] = { out, err };
    const char *paths[2] = { opath, epath };
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(paths[i], "r");
        assert_non_null(f);
        size_t n = fread(bufs[i], 1, 8191, f);
        bufs[i][n] = '\0';
        fclose(f);
    }
    return rc;
}

static void test_main(void **state)
{
    (void)state;
    static char out[8192], err[8192];
    flare_settings_t s;
    int code;

    /* run: 0, the settings filled, nothing printed */
    assert_int_equal(
        run_main(&s, &code, out, err, (const char *[]){ "/usr/bin/prog", "--workers", "3", NULL }),
        0);
    assert_int_equal(s.app.workers, 3);
    assert_string_equal(out, "");
    assert_string_equal(err, "");
    flare_settings_free(&s);

    /* --help: the flags (the extra ones too) on stdout, exit 0 */
    assert_int_equal(
        run_main(&s, &code, out, err,
                 (const char *[]){ "/usr/bin/prog", "--help", "--workers", "x", NULL }),
        FLARE_SETTINGS_EXIT);
    assert_int_equal(code, 0);
    assert_non_null(strstr(out, "usage: /usr/bin/prog "));
    assert_non_null(strstr(out, "--log-level"));
    assert_non_null(strstr(out, "--pool"));
    assert_string_equal(err, "");
    assert_null(s.priv); /* freed */

    /* a bad value, an unknown flag, a stray argument: the message, exit 2 */
    const char *const bad[][3] = {
        { "--workers", "many", "prog: --workers: expected an integer 0..1024, got \"many\"\n" },
        { "--bogus", NULL, "prog: --bogus: unknown option (see --help)\n" },
        { "--pool", "99", "prog: --pool: " },
        { "--sessions", "mongodb://x", "prog: sessions: expected memory or redis://HOST:PORT" },
        { "--cluster", "http://x", "prog: cluster: expected redis://HOST:PORT[/DB]" },
        { "--cluster-history", "0", "prog: --cluster-history: " },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(run_main(&s, &code, out, err,
                                  (const char *[]){ "/usr/bin/prog", bad[i][0], bad[i][1], NULL }),
                         FLARE_SETTINGS_EXIT);
        assert_int_equal(code, 2);
        assert_string_equal(out, "");
        if (strstr(err, bad[i][2]) != err)
            fail_msg("%s: got \"%s\"", bad[i][0], err);
        assert_null(s.priv);
    }

    /* --check-config: the configuration as YAML on stdout, exit 0 */
    assert_int_equal(run_main(&s, &code, out, err,
                              (const char *[]){ "prog", "--check-config", "--workers", "3",
                                                "--listen", "127.0.0.1:0", NULL }),
                     FLARE_SETTINGS_EXIT);
    assert_int_equal(code, 0);
    assert_non_null(strstr(out, "workers: 3\n"));
    assert_non_null(strstr(out, "log-level: \"error\"\n")); /* the logger's default */
    assert_string_equal(err, "");

    /* --check-config that fails (a static directory that does not open, a
     * bad value): the message on stderr, exit 1 */
    char missing[128];
    snprintf(missing, sizeof(missing), "%s/no-such-dir", dir);
    assert_int_equal(run_main(&s, &code, out, err,
                              (const char *[]){ "prog", "--check-config", "--listen", "127.0.0.1:0",
                                                "--static", missing, NULL }),
                     FLARE_SETTINGS_EXIT);
    assert_int_equal(code, 1);
    assert_string_equal(out, "");
    assert_non_null(strstr(err, "prog: --static "));
    assert_int_equal(run_main(&s, &code, out, err,
                              (const char *[]){ "prog", "--check-config", "--workers", "x", NULL }),
                     FLARE_SETTINGS_EXIT);
    assert_int_equal(code, 1);
    assert_non_null(strstr(err, "prog: --workers: "));
}

/* ---- flare_settings_setup ---- */

static size_t count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return (size_t)-1;
    size_t n = 0;
    for (int c; (c = fgetc(f)) != EOF;)
        n += c == '\n';
    fclose(f);
    return n;
}

static int ok(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("ok"));
}

/* The logs from the settings: the access log gets a line per request in
 * its format, the level is the one given; a bad path fails the setup. */
static void test_setup_logs(void **state)
{
    (void)state;
    char elog[128], alog[128];
    snprintf(elog, sizeof(elog), "%s/error.log", dir);
    snprintf(alog, sizeof(alog), "%s/access.log", dir);
    flare_settings_t s;
    assert_int_equal(parse(&s, NULL, 0, "--listen", "127.0.0.1:0", "--workers", "1", "--log", elog,
                           "--log-level", "warn", "--access-log", alog, "--access-log-format",
                           "json", NULL),
                     0);
    flare_app_t *app;
    assert_int_equal(flare_settings_app_new(&s, NULL, &app), 0);
    assert_int_equal(flare_log_get_level(app), FLARE_LOG_WARN);
    assert_int_equal(flare_settings_watch(&s, app), 0); /* again: nothing more */
    assert_int_equal(flare_get(app, "/ok", ok, NULL), 0);
    harness_t h = { .app = app };
    assert_int_equal(harness_start(&h), 0);
    for (int i = 0; i < 2; i++) {
        char *r = harness_roundtrip(&h, "GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert_true(strncmp(r, "HTTP/1.1 200 ", 13) == 0);
        free(r);
    }
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(app);
    flare_settings_free(&s);
    assert_int_equal(count_lines(alog), 2);
    FILE *f = fopen(alog, "r");
    assert_non_null(f);
    assert_int_equal(fgetc(f), '{');
    fclose(f);
    assert_int_equal(count_lines(elog), 0);

    /* without the logging keys: a logger all the same (stderr, level error) */
    assert_int_equal(parse(&s, NULL, 0, "--listen", "127.0.0.1:0", NULL), 0);
    assert_int_equal(flare_settings_app_new(&s, NULL, &app), 0);
    assert_int_equal(flare_log_get_level(app), FLARE_LOG_ERROR);
    flare_app_free(app);
    flare_settings_free(&s);

    /* a log that cannot be opened: an error naming it, no app */
    snprintf(elog, sizeof(elog), "%s/no/such/dir.log", dir);
    assert_int_equal(parse(&s, NULL, 0, "--listen", "127.0.0.1:0", "--log", elog, NULL), 0);
    app = (flare_app_t *)&s;
    assert_int_equal(flare_settings_app_new(&s, NULL, &app), FLARE_ESYS);
    assert_null(app);
    assert_non_null(strstr(flare_settings_error(&s), "cannot open"));
    assert_non_null(strstr(flare_settings_error(&s), "no/such/dir.log"));
    flare_settings_free(&s);
}

static int rl_ok(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("ok\n"));
}

/* Starts the app the settings (argv, NULL-terminated, after "prog") make,
 * with GET /x, and returns the statuses of n requests in a string
 * ("200 200 429 "); *retry: the last Retry-After (-1: none). */
static void rl_statuses(int n, char *out, size_t cap, int *retry, ...)
{
    char *argv[16] = { "prog" };
    int argc = 1;
    va_list ap;
    va_start(ap, retry);
    for (char *a; (a = va_arg(ap, char *)) != NULL && argc < 15;)
        argv[argc++] = a;
    va_end(ap);
    flare_settings_t s;
    flare_settings_init(&s);
    assert_int_equal(flare_settings_parse_args(&s, argc, argv, NULL, 0), 0);
    flare_app_t *app;
    assert_int_equal(flare_settings_app_new(&s, NULL, &app), 0);
    assert_int_equal(flare_get(app, "/x", rl_ok, NULL), 0);
    harness_t h = { .app = app };
    assert_int_equal(harness_start(&h), 0);
    size_t len = 0;
    out[0] = '\0';
    *retry = -1;
    for (int i = 0; i < n; i++) {
        char *r = harness_roundtrip(&h, "GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        int status = 0;
        sscanf(r, "HTTP/1.1 %d", &status);
        const char *p = strstr(r, "\r\nRetry-After: ");
        if (p != NULL)
            *retry = atoi(p + 15);
        len += (size_t)snprintf(out + len, cap - len, "%d ", status);
        free(r);
    }
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(app);
    flare_settings_free(&s);
}

/* rate-limit and its keys: checked as they are read, the limiter put on
 * every request by setup; in this process, or in a Redis (here one that
 * does not answer: fail open lets requests through, fail closed is 503). */
static void test_setup_rate_limit(void **state)
{
    (void)state;
    flare_settings_t s;
    struct {
        const char *a, *b, *c, *d, *want;
    } cases[] = {
        { "--rate-limit", "fast", NULL, NULL,
          "--rate-limit: expected a rate (10, 10/s, 5/m, 100/h), got \"fast\"" },
        { "--rate-limit", "0", NULL, NULL,
          "--rate-limit: expected a rate (10, 10/s, 5/m, 100/h), got \"0\"" },
        { "--rate-limit", "5/d", NULL, NULL,
          "--rate-limit: expected a rate (10, 10/s, 5/m, 100/h), got \"5/d\"" },
        { "--rate-limit-redis", "redis://127.0.0.1:1", NULL, NULL,
          "rate-limit-redis: needs rate-limit (N[/s|/m|/h])" },
        { "--rate-limit-burst", "3", NULL, NULL,
          "rate-limit-burst: needs rate-limit (N[/s|/m|/h])" },
        { "--rate-limit", "5/m", "--rate-limit-redis", "mongodb://x",
          "rate-limit-redis: expected redis://HOST:PORT[/DB], got \"mongodb://x\"" },
        { "--rate-limit", "5/m", "--rate-limit-fail", "maybe",
          "--rate-limit-fail: expected open|closed, got \"maybe\"" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(parse(&s, NULL, 0, cases[i].a, cases[i].b, cases[i].c, cases[i].d, NULL),
                         FLARE_EINVAL);
        assert_string_equal(flare_settings_error(&s), cases[i].want);
        flare_settings_free(&s);
    }
    /* the file and the printout */
    const char *path = write_file("rl.yaml", "rate-limit: 2.5/m\nrate-limit-burst: 4\n"
                                             "rate-limit-redis: redis://127.0.0.1:1/2\n"
                                             "rate-limit-fail: closed\nrate-limit-timeout: 80ms\n");
    char file[128];
    snprintf(file, sizeof(file), "%s", path);
    assert_int_equal(parse(&s, NULL, 0, "--config", file, NULL), 0);
    assert_string_equal(s.rate_limit, "2.5/m");
    assert_int_equal(s.rate_limit_burst, 4);
    assert_int_equal(s.rate_limit_timeout_ms, 80);
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    assert_int_equal(flare_settings_print(&s, f), 0);
    fclose(f);
    assert_non_null(strstr(text, "\nrate-limit: \"2.5/m\"\nrate-limit-burst: 4\n"
                                 "rate-limit-redis: \"redis://127.0.0.1:1/2\"\n"
                                 "rate-limit-fail: \"closed\"\nrate-limit-timeout: 80ms\n"));
    free(text);
    flare_settings_free(&s);

    char got[128];
    int retry;
    /* in this process: 2 an hour, the default burst (one second's worth, at
     * least 1); the wait is 30 minutes */
    rl_statuses(3, got, sizeof(got), &retry, "--listen", "127.0.0.1:0", "--workers", "2",
                "--rate-limit", "2/h", NULL);
    assert_string_equal(got, "200 429 429 ");
    assert_int_equal(retry, 1800);
    rl_statuses(4, got, sizeof(got), &retry, "--listen", "127.0.0.1:0", "--rate-limit", "1/h",
                "--rate-limit-burst", "3", NULL);
    assert_string_equal(got, "200 200 200 429 ");
    /* Redis unreachable: through (fail open, the default), or 503 */
    rl_statuses(3, got, sizeof(got), &retry, "--listen", "127.0.0.1:0", "--rate-limit", "1/h",
                "--rate-limit-redis", "redis://127.0.0.1:1", NULL);
    assert_string_equal(got, "200 200 200 ");
    rl_statuses(2, got, sizeof(got), &retry, "--listen", "127.0.0.1:0", "--rate-limit", "1/h",
                "--rate-limit-redis", "redis://127.0.0.1:1", "--rate-limit-fail", "closed", NULL);
    assert_string_equal(got, "503 503 ");
    assert_int_equal(retry, 1);
}

/* sessions: memory, or a Redis URL checked at setup (no connection made:
 * the workers connect when they start); a bad URL fails there. */
static void test_setup_sessions(void **state)
{
    (void)state;
    flare_settings_t s;
    flare_app_t *app;
    flare_middleware_t m;
    const char *const urls[] = { "memory", "redis://127.0.0.1:1" };
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(parse(&s, NULL, 0, "--listen", "127.0.0.1:0", "--sessions", urls[i],
                               "--session-secure", "always", NULL),
                         0);
        assert_int_equal(flare_settings_app_new(&s, NULL, &app), 0);
        flare_session_config_t sc = { .cookie_name = "sid" };
        memset(&m, 0, sizeof(m));
        assert_int_equal(flare_settings_sessions(&s, app, &sc, "t:sess:", &m), 0);
        assert_string_equal(m.name, "session");
        assert_int_equal(flare_settings_sessions(&s, app, NULL, NULL, &m), 0); /* a second one */
        flare_app_free(app);
        flare_settings_free(&s);
    }
    assert_int_equal(parse(&s, NULL, 0, "--listen", "127.0.0.1:0", "--sessions", "redis://", NULL),
                     0);
    assert_int_not_equal(flare_settings_app_new(&s, NULL, &app), 0);
    assert_non_null(strstr(flare_settings_error(&s), "sessions: redis://: "));
    flare_settings_free(&s);
}

/* cluster: a Redis URL and its history and presence settings, handed to
 * flare_app_cluster at setup (no connection made then); a bad URL fails
 * there, naming the key. */
static void test_setup_cluster(void **state)
{
    (void)state;
    flare_settings_t s;
    flare_app_t *app;
    const char *path = write_file("cl.yaml", "cluster: redis://127.0.0.1:1/2\n"
                                             "cluster-history: 50\n"
                                             "cluster-history-age: 90s\n"
                                             "cluster-presence-ttl: 3s\n");
    assert_int_equal(parse(&s, NULL, 0, "--config", path, "--listen", "127.0.0.1:0", NULL), 0);
    assert_string_equal(s.cluster, "redis://127.0.0.1:1/2");
    assert_int_equal(s.cluster_history, 50);
    assert_int_equal(s.cluster_history_age_ms, 90000);
    assert_int_equal(s.cluster_presence_ttl_ms, 3000);
    assert_int_equal(flare_settings_app_new(&s, NULL, &app), 0);
    flare_cluster_stats_t st;
    assert_int_equal(flare_cluster_stats(app, &st), 0); /* the app has its cluster */
    flare_app_free(app);
    flare_settings_free(&s);
    assert_int_equal(parse(&s, NULL, 0, "--listen", "127.0.0.1:0", "--cluster", "redis://", NULL),
                     0);
    assert_int_not_equal(flare_settings_app_new(&s, NULL, &app), 0);
    assert_non_null(strstr(flare_settings_error(&s), "cluster: redis://: "));
    flare_settings_free(&s);
    /* without it: no cluster */
    assert_int_equal(parse(&s, NULL, 0, "--listen", "127.0.0.1:0", NULL), 0);
    assert_int_equal(flare_settings_app_new(&s, NULL, &app), 0);
    assert_int_equal(flare_cluster_stats(app, &st), FLARE_ESTATE);
    flare_app_free(app);
    flare_settings_free(&s);
}

/* SIGHUP with the logger made by setup (a logging key is set: without one
 * setup makes no logger): a new log-level is set, new formats are not
 * applied (they keep their values: an upgrade takes them) */
static void test_watch_logger(void **state)
{
    (void)state;
    const char *path = write_file("g.yaml", "listen: 127.0.0.1:0\nworkers: 1\nlog-level: error\n");
    char file[128];
    snprintf(file, sizeof(file), "%s", path);
    flare_settings_t s;
    assert_int_equal(parse(&s, NULL, 0, "--config", file, NULL), 0);
    flare_app_t *app;
    assert_int_equal(flare_settings_app_new(&s, NULL, &app), 0);
    harness_t h = { .app = app };
    assert_int_equal(harness_start(&h), 0);
    write_file("g.yaml", "listen: 127.0.0.1:0\nworkers: 1\nlog-level: debug\nlog-format: json\n");
    kill(getpid(), SIGHUP);
    for (int i = 0; i < 500 && flare_log_get_level(app) != FLARE_LOG_DEBUG; i++)
        usleep(10000);
    assert_int_equal(flare_log_get_level(app), FLARE_LOG_DEBUG);
    assert_int_equal(harness_stop(&h), 0);
    assert_string_equal(s.log_level, "debug");
    assert_null(s.log_format); /* not applied */
    flare_app_free(app);
    flare_settings_free(&s);
}

int main(void)
{
    unsetenv("FLARE_IO"); /* CI runs the suite with it set: these tests expect their own */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_flag_errors),
        cmocka_unit_test(test_listeners),
        cmocka_unit_test(test_extra_options),
        cmocka_unit_test(test_reload_diff),
        cmocka_unit_test(test_on_reload),
        cmocka_unit_test(test_watch),
        cmocka_unit_test(test_watch_limits),
        cmocka_unit_test(test_main),
        cmocka_unit_test(test_setup_logs),
        cmocka_unit_test(test_setup_sessions),
        cmocka_unit_test(test_watch_logger),
        cmocka_unit_test(test_setup_rate_limit),
        cmocka_unit_test(test_setup_cluster),
    };
    return cmocka_run_group_tests(tests, setup_dir, remove_dir);
}
