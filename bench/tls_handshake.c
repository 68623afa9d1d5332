/*
 * tls_handshake: new TLS connections, one after another, for bench/tls.sh.
 *
 *   tls_handshake --connect HOST:PORT --cafile FILE [--servername NAME] [--duration SECONDS]
 *                 [--count N] [--resume] [--tls12] [--path /plaintext] [--expect BODY]
 *
 * Each connection: TCP connect, the handshake (the server's certificate verified against
 * FILE for NAME, default "localhost"; ALPN http/1.1 offered), one request
 * "GET PATH HTTP/1.1" with "Connection: close", the response read to the server's close
 * (status 200 and, with --expect, exactly BODY), our close_notify, close. Reading the
 * response also reads the TLS 1.3 session tickets, which come after the handshake.
 *
 * --resume offers the session of the previous connection (the newest ticket, as browsers
 * do); every connection after the first must resume (SSL_session_reused), or the run
 * fails. Without it every handshake is a full one (no session offered).
 * --count N stops after N connections instead of after the duration (for exact counts under
 * strace or callgrind: N handshakes, whatever the time they take).
 * --tls12 pins TLS 1.2 (default: TLS 1.3 only, so that every server is measured on the
 * same protocol).
 *
 * Prints one line: "connections=N resumed=R failed=F seconds=S per_second=X" and exits 1
 * when any connection failed or, with --resume, did not resume.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

static const char *opt_connect, *opt_cafile, *opt_servername = "localhost";
static const char *opt_path = "/plaintext", *opt_expect;
static double opt_duration = 5.0;
static long opt_count;
static int opt_resume, opt_tls12;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s --connect HOST:PORT --cafile FILE [--servername NAME]\n"
            "          [--duration SECONDS | --count N] [--resume] [--tls12] [--path P] [--expect "
            "BODY]\n",
            argv0);
}

static int resolve(const char *hostport, struct sockaddr_storage *out, socklen_t *len)
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (colon == NULL || (size_t)(colon - hostport) >= sizeof(host))
        return -1;
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = '\0';
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
    struct addrinfo *res;
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0)
        return -1;
    memcpy(out, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static void report_ssl(const char *what)
{
    unsigned long e = ERR_get_error();
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    fprintf(stderr, "tls_handshake: %s: %s\n", what, e ? buf : strerror(errno));
    ERR_clear_error();
}

/* One connection; 0 on success. *sess: in, the session to offer (or NULL); out, the new
 * one (the caller frees). *reused: whether the server resumed. */
static int one(SSL_CTX *ctx, const struct sockaddr_storage *sa, socklen_t salen,
               const char *request, size_t reqlen, SSL_SESSION **sess, int *reused)
{
    int rc = -1;
    int fd = socket(sa->ss_family, SOCK_STREAM, 0);
    if (fd < 0) {
        perror("tls_handshake: socket");
        return -1;
    }
    int one_ = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one_, sizeof(one_));
    SSL *ssl = NULL;
    char *resp = NULL;
    if (connect(fd, (const struct sockaddr *)sa, salen) != 0) {
        perror("tls_handshake: connect");
        goto out;
    }
    ssl = SSL_new(ctx);
    if (ssl == NULL || !SSL_set_fd(ssl, fd) || !SSL_set_tlsext_host_name(ssl, opt_servername) ||
        !SSL_set1_host(ssl, opt_servername)) {
        report_ssl("SSL_new");
        goto out;
    }
    if (*sess != NULL)
        SSL_set_session(ssl, *sess);
    if (SSL_connect(ssl) != 1) {
        report_ssl("handshake");
        goto out;
    }
    *reused = SSL_session_reused(ssl);
    if (SSL_write(ssl, request, (int)reqlen) != (int)reqlen) {
        report_ssl("write");
        goto out;
    }
    size_t cap = 65536, n = 0;
    resp = malloc(cap);
    if (resp == NULL)
        goto out;
    for (;;) {
        if (n == cap) {
            char *p = realloc(resp, cap * 2);
            if (p == NULL)
                goto out;
            resp = p;
            cap *= 2;
        }
        int r = SSL_read(ssl, resp + n, (int)(cap - n));
        if (r > 0) {
            n += (size_t)r;
            continue;
        }
        int err = SSL_get_error(ssl, r);
        if (err == SSL_ERROR_ZERO_RETURN)
            break; /* the server's close_notify */
        report_ssl("read (no close_notify before EOF?)");
        goto out;
    }
    if (n < 12 || memcmp(resp, "HTTP/1.1 200", 12) != 0) {
        fprintf(stderr, "tls_handshake: not a 200: %.*s\n", (int)(n < 80 ? n : 80), resp);
        goto out;
    }
    if (opt_expect != NULL) {
        const char *body = NULL;
        for (size_t i = 0; i + 4 <= n; i++) {
            if (memcmp(resp + i, "\r\n\r\n", 4) == 0) {
                body = resp + i + 4;
                break;
            }
        }
        size_t blen = body ? (size_t)(resp + n - body) : 0;
        if (body == NULL || blen != strlen(opt_expect) || memcmp(body, opt_expect, blen) != 0) {
            fprintf(stderr, "tls_handshake: unexpected body: %.*s\n", (int)(n < 200 ? n : 200),
                    resp);
            goto out;
        }
    }
    SSL_SESSION *s = SSL_get1_session(ssl);
    if (*sess != NULL)
        SSL_SESSION_free(*sess);
    *sess = s;
    SSL_shutdown(ssl); /* our close_notify (the server's came already) */
    rc = 0;
out:
    free(resp);
    if (ssl != NULL)
        SSL_free(ssl);
    close(fd);
    return rc;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--resume") == 0) {
            opt_resume = 1;
            continue;
        }
        if (strcmp(a, "--tls12") == 0) {
            opt_tls12 = 1;
            continue;
        }
        if (v == NULL) {
            usage(argv[0]);
            return 2;
        }
        i++;
        if (strcmp(a, "--connect") == 0)
            opt_connect = v;
        else if (strcmp(a, "--cafile") == 0)
            opt_cafile = v;
        else if (strcmp(a, "--servername") == 0)
            opt_servername = v;
        else if (strcmp(a, "--duration") == 0)
            opt_duration = atof(v);
        else if (strcmp(a, "--count") == 0)
            opt_count = atol(v);
        else if (strcmp(a, "--path") == 0)
            opt_path = v;
        else if (strcmp(a, "--expect") == 0)
            opt_expect = v;
        else {
            usage(argv[0]);
            return 2;
        }
    }
    if (opt_connect == NULL || opt_cafile == NULL || opt_duration <= 0 || opt_count < 0) {
        usage(argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sockaddr_storage sa;
    socklen_t salen;
    if (resolve(opt_connect, &sa, &salen) != 0) {
        fprintf(stderr, "tls_handshake: cannot resolve %s\n", opt_connect);
        return 2;
    }
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL || SSL_CTX_load_verify_locations(ctx, opt_cafile, NULL) != 1) {
        report_ssl(opt_cafile);
        return 2;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    int v = opt_tls12 ? TLS1_2_VERSION : TLS1_3_VERSION;
    SSL_CTX_set_min_proto_version(ctx, v);
    SSL_CTX_set_max_proto_version(ctx, v);
    static const unsigned char alpn[] = "\x08http/1.1";
    SSL_CTX_set_alpn_protos(ctx, alpn, sizeof(alpn) - 1);
    /* the client keeps its own session (SSL_get1_session), no client cache */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);

    char request[1024];
    int reqlen = snprintf(request, sizeof(request),
                          "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", opt_path,
                          opt_servername);
    if (reqlen <= 0 || (size_t)reqlen >= sizeof(request))
        return 2;

    long conns = 0, resumed = 0, failed = 0, not_resumed = 0;
    SSL_SESSION *sess = NULL;
    double t0 = now(), t = t0;
    while (opt_count > 0 ? conns + failed < opt_count : t - t0 < opt_duration) {
        SSL_SESSION *offer = opt_resume ? sess : NULL;
        int reused = 0;
        if (!opt_resume && sess != NULL) {
            SSL_SESSION_free(sess);
            sess = NULL;
        }
        int had_offer = offer != NULL;
        SSL_SESSION *io = offer;
        if (one(ctx, &sa, salen, request, (size_t)reqlen, &io, &reused) != 0) {
            failed++;
            if (failed > 10 && failed > conns / 100)
                break;
        } else {
            conns++;
            resumed += reused;
            if (had_offer && !reused)
                not_resumed++;
        }
        sess = io;
        t = now();
    }
    if (sess != NULL)
        SSL_SESSION_free(sess);
    SSL_CTX_free(ctx);
    double secs = t - t0;
    printf("connections=%ld resumed=%ld failed=%ld not_resumed=%ld seconds=%.3f per_second=%.1f\n",
           conns, resumed, failed, not_resumed, secs, secs > 0 ? (double)conns / secs : 0.0);
    return failed > 0 || not_resumed > 0 || conns == 0 ? 1 : 0;
}
