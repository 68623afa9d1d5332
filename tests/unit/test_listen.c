/* Listen addresses (src/net/listen.c): parsing, TCP and unix, with the
 * errors a user sees for a bad one; and a unix socket listener for real: the
 * file's mode, a request over it ("unix:" as the peer), a stale file
 * replaced, a live server's refused, the file removed at the end. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "net/listen.h"

#include <flare/flare.h>

static int parse(const char *addr, flare_listen_addr_t *a, char *why, size_t cap)
{
    return flare__listen_parse(addr, -1, a, why, cap);
}

static void test_parse_tcp(void **state)
{
    (void)state;
    flare_listen_addr_t a;
    char why[160];
    assert_int_equal(parse("127.0.0.1:8080", &a, why, sizeof(why)), 0);
    assert_int_equal(a.ss.ss_family, AF_INET);
    assert_int_equal(parse("[::1]:0", &a, why, sizeof(why)), 0);
    assert_int_equal(a.ss.ss_family, AF_INET6);
    assert_int_equal(parse("nonsense", &a, why, sizeof(why)), FLARE_EADDR);
    assert_non_null(strstr(why, "unix:PATH"));
}

static void test_parse_unix(void **state)
{
    (void)state;
    flare_listen_addr_t a;
    char why[160];
    const struct sockaddr_un *su = (const struct sockaddr_un *)&a.ss;
    size_t off = offsetof(struct sockaddr_un, sun_path);

    assert_int_equal(parse("unix:/run/app.sock", &a, why, sizeof(why)), 0);
    assert_int_equal(a.ss.ss_family, AF_UNIX);
    assert_string_equal(su->sun_path, "/run/app.sock");
    assert_int_equal(a.sl, off + strlen("/run/app.sock") + 1);
    assert_false(a.abstract);
    assert_int_equal(a.mode, -1);
    assert_int_equal(a.uid, (uid_t)-1);
    assert_int_equal(a.gid, (gid_t)-1);

    assert_int_equal(parse("unix:rel.sock", &a, why, sizeof(why)), 0); /* relative: allowed */
    assert_string_equal(su->sun_path, "rel.sock");

    assert_int_equal(parse("unix:/s?mode=0660&owner=root&group=0", &a, why, sizeof(why)), 0);
    assert_string_equal(su->sun_path, "/s");
    assert_int_equal(a.mode, 0660);
    assert_int_equal(a.uid, 0);
    assert_int_equal(a.gid, 0);
    assert_int_equal(parse("unix:/s?owner=1234", &a, why, sizeof(why)), 0);
    assert_int_equal(a.uid, 1234);
    assert_int_equal(a.mode, -1);

    /* abstract: the name's bytes after a leading NUL, no NUL at the end */
    assert_int_equal(parse("unix:@flare-test", &a, why, sizeof(why)), 0);
    assert_true(a.abstract);
    assert_int_equal(su->sun_path[0], '\0');
    assert_memory_equal(su->sun_path + 1, "flare-test", 10);
    assert_int_equal(a.sl, off + 1 + 10);

    /* the longest path sun_path holds, and one byte more */
    char addr[256], path[sizeof(su->sun_path) + 1];
    memset(path, 'a', sizeof(path));
    path[0] = '/';
    path[sizeof(su->sun_path) - 1] = '\0';
    snprintf(addr, sizeof(addr), "unix:%s", path);
    assert_int_equal(parse(addr, &a, why, sizeof(why)), 0);
    path[sizeof(su->sun_path) - 1] = 'a';
    path[sizeof(su->sun_path)] = '\0';
    snprintf(addr, sizeof(addr), "unix:%s", path);
    assert_int_equal(parse(addr, &a, why, sizeof(why)), FLARE_EADDR);
    assert_non_null(strstr(why, "108 bytes"));
    assert_non_null(strstr(why, "107"));
}

static void test_parse_unix_errors(void **state)
{
    (void)state;
    static const struct {
        const char *addr, *says;
    } bad[] = {
        { "unix:", "expected a socket path" },
        { "unix:@", "expected a socket path" },
        { "unix:?mode=0600", "expected a socket path" },
        { "unix:/s?mode=", "mode \"\": expected octal" },
        { "unix:/s?mode=0x1ff", "mode \"0x1ff\"" },
        { "unix:/s?mode=0999", "mode \"0999\"" },
        { "unix:/s?mode=01777", "0 to 0777" },
        { "unix:/s?mode=rw", "mode \"rw\"" },
        { "unix:/s?owner=no-such-user-flare", "owner \"no-such-user-flare\": no such user" },
        { "unix:/s?group=no-such-group-flare", "no such group" },
        { "unix:/s?owner=", "owner \"\": no such user" },
        { "unix:/s?umask=022", "unknown option \"umask=022\" (mode, owner, group)" },
        { "unix:/s?mode=0600&", "unknown option \"\"" },
        { "unix:@name?mode=0600", "an abstract socket (@name) has no file" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        flare_listen_addr_t a;
        char why[160];
        int rc = parse(bad[i].addr, &a, why, sizeof(why));
        if (rc != FLARE_EADDR || strstr(why, bad[i].says) == NULL)
            fail_msg("%s: rc %d, \"%s\" (expected \"%s\")", bad[i].addr, rc, why, bad[i].says);
    }
}

/* flare_app_listen (and so the settings and the examples' --listen) says
 * which address and what is wrong with it. */
static void test_app_listen_errors(void **state)
{
    (void)state;
    flare_app_t *app = flare_app_new(NULL);
    assert_non_null(app);
    assert_int_equal(flare_app_listen(app, "unix:", NULL), FLARE_EADDR);
    assert_non_null(strstr(flare_last_error(), "listen address \"unix:\""));
    assert_int_equal(flare_app_listen(app, "unix:/tmp/x.sock?mode=888", NULL), FLARE_EADDR);
    assert_non_null(strstr(flare_last_error(), "mode \"888\""));
    assert_int_equal(flare_app_listen(app, "unix:/tmp/x.sock?mode=0600", NULL), 0);
    assert_int_equal(flare_app_listen(app, "unix:@flare-x", NULL), 0);
    flare_app_free(app);
}

/* ---- a real unix socket listener ---- */

typedef struct run {
    flare_app_t *app;
    const char *addr;
    pthread_t thread;
    int rc;
} run_t;

static void *run_main(void *arg)
{
    run_t *r = arg;
    r->rc = flare_app_run(r->app, r->addr);
    return NULL;
}

static int peer_handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), flare_req_peer(req));
}

static flare_app_t *peer_app(void)
{
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = 2;
    cfg.job_threads = 1;
    flare_app_t *app = flare_app_new(&cfg);
    assert_non_null(app);
    assert_int_equal(flare_get(app, "/", peer_handler, NULL), 0);
    return app;
}

static int unix_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* GET / over the socket: the body (the peer the server saw), or "" */
static void get(const char *path, char *body, size_t cap)
{
    body[0] = '\0';
    int fd = unix_connect(path);
    if (fd < 0)
        return;
    const char *rq = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_int_equal(write(fd, rq, strlen(rq)), (ssize_t)strlen(rq));
    char buf[2048];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof(buf) - 1 && (r = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
    close(fd);
    const char *b = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.1 200", 12) == 0 && b != NULL)
        snprintf(body, cap, "%s", b + 4);
}

static void wait_up(const char *path)
{
    for (int i = 0; i < 500; i++) {
        int fd = unix_connect(path);
        if (fd >= 0) {
            close(fd);
            return;
        }
        usleep(10000);
    }
    fail_msg("nothing listens on %s", path);
}

static void test_unix_run(void **state)
{
    (void)state;
    char dir[] = "/tmp/flare-listen-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[96], addr[160]; /* path fits sun_path (108) */
    snprintf(path, sizeof(path), "%s/app.sock", dir);
    snprintf(addr, sizeof(addr), "unix:%s?mode=0600", path);

    /* a stale file: a socket nobody listens on any more */
    int stale = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    assert_int_equal(bind(stale, (struct sockaddr *)&sa, sizeof(sa)), 0);
    close(stale);

    run_t r = { peer_app(), addr, 0, -1 };
    assert_int_equal(pthread_create(&r.thread, NULL, run_main, &r), 0);
    wait_up(path);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0600);
    char body[256];
    for (int i = 0; i < 8; i++) { /* both workers serve the one socket */
        get(path, body, sizeof(body));
        assert_string_equal(body, "unix:");
    }
    assert_int_equal(flare_app_port(r.app), 0);

    /* a second server on the same path is refused; the first goes on */
    flare_app_t *two = peer_app();
    assert_int_equal(flare_app_run(two, addr), FLARE_EBIND);
    assert_int_equal(flare_last_errno(), EADDRINUSE);
    assert_non_null(strstr(flare_last_error(), "a server answers"));
    flare_app_free(two);
    get(path, body, sizeof(body));
    assert_string_equal(body, "unix:");

    flare_app_stop(r.app);
    pthread_join(r.thread, NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(lstat(path, &st), -1); /* removed at the end */
    assert_int_equal(errno, ENOENT);
    flare_app_free(r.app);

    /* a file that is not a socket is never removed */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    flare_app_t *three = peer_app();
    assert_int_equal(flare_app_run(three, addr), FLARE_EBIND);
    assert_non_null(strstr(flare_last_error(), "is not a socket"));
    flare_app_free(three);
    assert_int_equal(unlink(path), 0);
    rmdir(dir);
}

static void test_unix_abstract(void **state)
{
    (void)state;
    char name[64], addr[80];
    snprintf(name, sizeof(name), "flare-test-%ld", (long)getpid());
    snprintf(addr, sizeof(addr), "unix:@%s", name);
    run_t r = { peer_app(), addr, 0, -1 };
    assert_int_equal(pthread_create(&r.thread, NULL, run_main, &r), 0);
    int fd = -1;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    memcpy(sa.sun_path + 1, name, strlen(name));
    socklen_t sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
    for (int i = 0; i < 500; i++) {
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(fd, (struct sockaddr *)&sa, sl) == 0)
            break;
        close(fd);
        fd = -1;
        usleep(10000);
    }
    assert_true(fd >= 0);
    const char *rq = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_int_equal(write(fd, rq, strlen(rq)), (ssize_t)strlen(rq));
    char buf[1024];
    size_t n = 0;
    ssize_t got;
    while (n < sizeof(buf) - 1 && (got = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0)
        n += (size_t)got;
    buf[n] = '\0';
    close(fd);
    assert_non_null(strstr(buf, "\r\n\r\nunix:"));
    /* a live abstract name is taken: refused */
    flare_app_t *two = peer_app();
    assert_int_equal(flare_app_run(two, addr), FLARE_EBIND);
    assert_int_equal(flare_last_errno(), EADDRINUSE);
    flare_app_free(two);
    flare_app_stop(r.app);
    pthread_join(r.thread, NULL);
    assert_int_equal(r.rc, 0);
    flare_app_free(r.app);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_tcp),         cmocka_unit_test(test_parse_unix),
        cmocka_unit_test(test_parse_unix_errors), cmocka_unit_test(test_app_listen_errors),
        cmocka_unit_test(test_unix_run),          cmocka_unit_test(test_unix_abstract),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
