/* Before a restart: the ids the program ran with must be ones the restarting
 * user may give (privilege.c), the CPU must offer the register state the
 * image holds, and the kernel's vDSO must be the same build.  (The files it
 * had mapped: restart_paths.c, which knows what the rollback brings back.) */
#include "cli.h"
#include "privilege.h"
#include "hash.h"
#include "util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static uint64_t own_vdso_hash(void)
{
    size_t len;
    char *maps = lz_read_file("/proc/self/maps", &len);
    uint64_t h = 0;
    if (!maps) return 0;
    maps[len ? len - 1 : 0] = 0;
    for (char *l = maps; l && *l;) {
        char *nl = strchr(l, '\n');
        if (nl) *nl = 0;
        unsigned long a, b;
        if (strstr(l, "[vdso]") && sscanf(l, "%lx-%lx", &a, &b) == 2) h = lz_hash((void *)a, b - a);
        l = nl ? nl + 1 : NULL;
    }
    free(maps);
    return h;
}

int check_identity(const struct lz_image *img, char *why, size_t whylen)
{
    const struct lz_proc *p = img->proc;
    /* who it ran as, before what it ran on */
    if (privilege_check_image(img, why, whylen) < 0) return -1;
    uint64_t have = xgetbv0();
    if (p->xcr0 & ~have) {
        snprintf(why, whylen, "this CPU lacks register state the program used (XCR0 0x%llx, here 0x%llx); restart on the same kind of machine",
                 (unsigned long long)p->xcr0, (unsigned long long)have);
        return -1;
    }
    if (own_vdso_hash() != p->vdso_hash) {
        snprintf(why, whylen, "this kernel's vDSO differs from the one the program was checkpointed with (another kernel build); restart on the same kernel");
        return -1;
    }
    return 0;
}
