/* Shared by libckpt's Table 2 applications (lk_*.c, bench/libckpt_table2.py):
 * the last argument "user" turns the paper's user directives on (§6.4). */
#ifndef LK_COMMON_H
#define LK_COMMON_H
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "lazarus.h"

static int lk_user;

static inline void lk_args(int *argc, char **argv)
{
    lk_user = *argc > 1 && !strcmp(argv[*argc - 1], "user");
    if (lk_user) argv[--*argc] = NULL;
}

static inline uint64_t lk_rand(uint64_t *x)
{
    *x ^= *x << 13; *x ^= *x >> 7; *x ^= *x << 17;
    return *x * 0x2545f4914f6cdd1dull;
}

static inline double lk_unit(uint64_t *x) { return (double)(lk_rand(x) >> 11) / 9007199254740992.0; }

static inline uint64_t lk_fold(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i += 64) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#endif
