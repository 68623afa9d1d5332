/* Finding a static file on disk: opening a checked relative path beneath
 * the directory's root (openat2 RESOLVE_BENEATH, or a walk that follows no
 * symlink where openat2 is missing), and the precompressed sibling
 * ("x.js.br", "x.js.gz") the client prefers. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "flare/compress.h"
#include "web/static_int.h"
#include "web/static_parse.h"

#define OPEN_FLAGS (O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)

/* Without openat2 (kernels before 5.6, valgrind, some seccomp filters):
 * one openat per component with O_NOFOLLOW, so no symlink is followed at
 * all (rel has no "..", "." or empty segment: flare__static_path). */
static int open_walk(int root, const char *rel)
{
    char comp[NAME_MAX + 1];
    int dir = root;
    for (;;) {
        const char *slash = strchr(rel, '/');
        size_t n = slash != NULL ? (size_t)(slash - rel) : strlen(rel);
        if (n > NAME_MAX) {
            if (dir != root)
                close(dir);
            return -ENAMETOOLONG;
        }
        memcpy(comp, rel, n);
        comp[n] = '\0';
        int fd = slash != NULL ? openat(dir, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                               : openat(dir, comp, OPEN_FLAGS | O_NOFOLLOW);
        int err = errno;
        if (dir != root)
            close(dir);
        if (fd < 0)
            return -err;
        if (slash == NULL)
            return fd;
        dir = fd;
        rel = slash + 1;
    }
}

static _Atomic bool no_openat2;

void flare__static_no_openat2(bool on)
{
    atomic_store(&no_openat2, on);
}

/* openat2 RESOLVE_BENEATH: no "..", absolute or symlinked way out of the
 * root. Returns the fd or -errno. */
int flare__static_open(int root, const char *rel)
{
    if (*rel == '\0')
        rel = ".";
    if (!atomic_load_explicit(&no_openat2, memory_order_relaxed)) {
        struct open_how how = {
            .flags = OPEN_FLAGS,
            .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
        };
        long fd = syscall(SYS_openat2, root, rel, &how, sizeof(how));
        if (fd >= 0)
            return (int)fd;
        if (errno != ENOSYS)
            return -errno;
        atomic_store_explicit(&no_openat2, true, memory_order_relaxed);
    }
    return open_walk(root, rel);
}

/* Precompressed siblings: which the client takes, in the order it prefers
 * them (flare_accept_encoding's q-values, ties to br). A malformed
 * Accept-Encoding keeps the lenient gzip-only reading it always had. */
uint8_t flare__static_want(flare_str_t ae)
{
    const unsigned both = FLARE_CODING_GZIP_BIT | FLARE_CODING_BR_BIT;
    int first = flare_accept_encoding(ae, both);
    if (first < 0)
        return flare__accepts_gzip(ae) ? WANT_GZ : WANT_NONE;
    if (first == FLARE_CODING_BR)
        return flare_accept_encoding(ae, FLARE_CODING_GZIP_BIT) == FLARE_CODING_GZIP ? WANT_BR_GZ
                                                                                     : WANT_BR;
    if (first == FLARE_CODING_GZIP)
        return flare_accept_encoding(ae, FLARE_CODING_BR_BIT) == FLARE_CODING_BR ? WANT_GZ_BR
                                                                                 : WANT_GZ;
    return WANT_NONE;
}

/* The k-th sibling to try (0: none left). */
static int want_sibling(uint8_t want, int k)
{
    static const uint8_t order[][2] = {
        [WANT_NONE] = { 0, 0 },
        [WANT_GZ] = { FLARE_CODING_GZIP, 0 },
        [WANT_BR] = { FLARE_CODING_BR, 0 },
        [WANT_BR_GZ] = { FLARE_CODING_BR, FLARE_CODING_GZIP },
        [WANT_GZ_BR] = { FLARE_CODING_GZIP, FLARE_CODING_BR },
    };
    return order[want][k];
}

uint8_t flare__static_sibling(int root, char *rel, size_t rlen, uint8_t want, int *fd,
                              struct stat *st)
{
    uint8_t gz = 0;
    for (int k = 0; k < 2 && want != WANT_NONE && gz == 0; k++) {
        int coding = want_sibling(want, k);
        if (coding == 0)
            break;
        memcpy(rel + rlen, coding == FLARE_CODING_BR ? ".br" : ".gz", 4);
        int gfd = flare__static_open(root, rel);
        rel[rlen] = '\0';
        struct stat gst;
        if (gfd >= 0 && fstat(gfd, &gst) == 0 && S_ISREG(gst.st_mode)) {
            close(*fd);
            *fd = gfd;
            *st = gst;
            gz = (uint8_t)coding;
        } else if (gfd >= 0) {
            close(gfd);
        }
    }
    return gz;
}
