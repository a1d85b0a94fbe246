/* Before a restart: the files the program had mapped must be the very same
 * (content hash of each mapped range), the CPU must offer the register state
 * the image holds, and the kernel's vDSO must be the same build. */
#include "cli.h"
#include "privilege.h"
#include "hash.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
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

static int hash_range(const char *path, uint64_t off, uint64_t len, uint64_t *out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    size_t bufsz = 1 << 20;
    char *buf = lz_xmalloc(bufsz);
    int rc = 0;
    while (len) {
        ssize_t n = pread(fd, buf, len < bufsz ? len : bufsz, (off_t)off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) { rc = -1; break; }
        if (n == 0) break; /* mapping extends past EOF, as at checkpoint time */
        XXH3_64bits_update(&st, buf, (size_t)n);
        off += (uint64_t)n;
        len -= (uint64_t)n;
    }
    free(buf);
    close(fd);
    *out = XXH3_64bits_digest(&st);
    return rc;
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
    for (size_t i = 0; i < img->nregions; i++) {
        const struct lz_region *r = &img->regions[i];
        if (r->kind != LZ_R_FILE_PRIVATE && r->kind != LZ_R_FILE_SHARED) continue;
        const char *path = lz_str(img, r->path);
        if (access(path, R_OK) < 0) {
            snprintf(why, whylen, "%s, mapped by the program, is missing or unreadable: %s", path, strerror(errno));
            return -1;
        }
        if (r->kind != LZ_R_FILE_PRIVATE) continue;
        uint64_t h;
        if (hash_range(path, r->file_offset, r->end - r->start, &h) < 0 || h != r->file_hash) {
            snprintf(why, whylen, "%s has changed since the checkpoint; the program cannot resume against a different %s",
                     path, (r->prot & 4) ? "executable or library" : "file");
            return -1;
        }
    }
    return 0;
}
