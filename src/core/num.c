#include <errno.h>
#include <unistd.h>

#include "core/core.h"

const char flare__digits2[201] = "00010203040506070809"
                                 "10111213141516171819"
                                 "20212223242526272829"
                                 "30313233343536373839"
                                 "40414243444546474849"
                                 "50515253545556575859"
                                 "60616263646566676869"
                                 "70717273747576777879"
                                 "80818283848586878889"
                                 "90919293949596979899";

size_t flare__u64tohex(char *p, uint64_t v)
{
    static const char hex[] = "0123456789abcdef";
    char tmp[16];
    size_t n = sizeof(tmp);
    do {
        tmp[--n] = hex[v & 15];
        v >>= 4;
    } while (v != 0);
    memcpy(p, tmp + n, sizeof(tmp) - n);
    return sizeof(tmp) - n;
}

int flare__pread_all(int fd, char *dst, uint64_t off, size_t len)
{
    while (len > 0) {
        ssize_t n = pread(fd, dst, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return FLARE_EIO;
        dst += n;
        off += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}
