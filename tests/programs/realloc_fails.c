/* realloc_fails.so: LD_PRELOAD shim for tests/test_s3_client.py.  realloc
 * of exactly LZ_REALLOC_FAILS bytes fails (NULL, ENOMEM), as out of memory
 * would; every other call goes to libc's.  Lets a test reach an
 * out-of-memory path of one growing array (a listing's) and no other. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>

void *realloc(void *p, size_t n)
{
    static void *(*real)(void *, size_t);
    static size_t fail;
    if (!real) {
        real = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
        const char *e = getenv("LZ_REALLOC_FAILS");
        fail = e ? strtoull(e, NULL, 10) : 0;
    }
    if (fail && n == fail) {
        errno = ENOMEM;
        return NULL;
    }
    return real(p, n);
}
