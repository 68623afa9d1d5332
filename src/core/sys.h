/* Raw system calls for the hot path.
 *
 * glibc wraps read/write/epoll_wait as pthread cancellation points: in a
 * multi-threaded process every call pays __pthread_enable_asynccancel and
 * __pthread_disable_asynccancel, about 93 instructions per keep-alive request
 * measured with callgrind (1,797 -> ~1,700). Flare never cancels threads, so
 * the worker calls the kernel directly. Each returns the result or -errno;
 * errno is not touched. Other architectures use libc. The poller's wait
 * (epoll_wait) is made with flare__syscall4 inside its backend,
 * src/loop/epoll.c, so no poller type leaks out of src/loop/. */
#ifndef FLARE_SYS_H
#define FLARE_SYS_H

#include <errno.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#if defined(__x86_64__)
static inline long flare__syscall3(long n, long a, long b, long c)
{
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return ret;
}

static inline long flare__syscall4(long n, long a, long b, long c, long d)
{
    long ret;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10)
                     : "rcx", "r11", "memory");
    return ret;
}

static inline ssize_t flare__read(int fd, void *buf, size_t n)
{
    return flare__syscall3(SYS_read, fd, (long)buf, (long)n);
}

static inline ssize_t flare__write(int fd, const void *buf, size_t n)
{
    return flare__syscall3(SYS_write, fd, (long)buf, (long)n);
}

static inline ssize_t flare__writev(int fd, const struct iovec *iov, int n)
{
    return flare__syscall3(SYS_writev, fd, (long)iov, n);
}

#else
static inline ssize_t flare__read(int fd, void *buf, size_t n)
{
    ssize_t r = read(fd, buf, n);
    return r < 0 ? -errno : r;
}

static inline ssize_t flare__write(int fd, const void *buf, size_t n)
{
    ssize_t r = write(fd, buf, n);
    return r < 0 ? -errno : r;
}

static inline ssize_t flare__writev(int fd, const struct iovec *iov, int n)
{
    ssize_t r = writev(fd, iov, n);
    return r < 0 ? -errno : r;
}

#endif

#endif
