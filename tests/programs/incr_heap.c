/* incr_heap: a heap that changes a few pages at a time, driven line by line,
 * for incremental checkpoints (tests/test_incremental.py) and mapping flags
 * (tests/test_mapping_flags.py).
 *
 *   incr_heap MIB PERCENT [KIND [FILE]]
 *
 * KIND says what the pages hold:
 *   random    pseudo-random bytes (incompressible; the default)
 *   halfzero  each page: its first half random doubles in [0,1), its second
 *             half zeros (about 2x compressible, no page all zeros)
 *   sparse    only every 16th page is touched (written); the rest was never
 *             written and reads as zeros
 *   dup       every page is one of 8 distinct random pages (deduplicable)
 * Region 0 is an anonymous private mapping of MIB MiB filled that way.
 * FILE, if given, is the file `append` and `overwrite` write.
 *
 * Commands read from stdin, one per line (I = region number, START and N in
 * pages; out-of-range arguments print "error ..." and change nothing):
 *   next            round += 1, then PERCENT % of region 0's pages, distinct
 *                   and chosen from the round number alone, get new content
 *   digest          nothing: just print the state
 *   fill I START N [STEP]  pages START..START+N-1 of region I get new
 *                   content; with STEP, pages START + k*STEP (k < N) modulo
 *                   the region's number of pages instead (STEP prime to it,
 *                   N at most it: distinct pages spread over the region)
 *   dontneed I START N  madvise(MADV_DONTNEED) of those pages (zeros now)
 *   newmap MIB [huge]  mmap a new private anonymous region of MIB MiB (the
 *                   next number) and fill it like region 0; `huge`: placed
 *                   on a 2 MiB boundary and madvise(MADV_HUGEPAGE)d before
 *                   the fill
 *   mremap I [N]    move region I to another address (mremap MREMAP_FIXED),
 *                   resized to N pages if given (new pages read as zeros)
 *   unmap I         munmap region I (it no longer counts)
 *   advise I ADVICE madvise (libc's) of all of region I, ADVICE one of
 *                   dontfork dofork wipeonfork keeponfork hugepage nohugepage
 *   rawadvise I ADVICE  the same through syscall(SYS_madvise, ...), which
 *                   an interposed madvise does not see
 *   waitsig         wait (a raw pause system call, which a checkpoint does
 *                   interrupt) until a signal handler has run, e.g. the
 *                   checkpoint's: the next command runs right after it
 *   hugekb I        print "hugekb I KB": the AnonHugePages (kB) of the
 *                   mappings of region I, from /proc/self/smaps
 *   vmflags I       print "vmflags I F..": which of dc (MADV_DONTFORK), wf
 *                   (MADV_WIPEONFORK), hg (MADV_HUGEPAGE), nh
 *                   (MADV_NOHUGEPAGE) the VmFlags of region I's mappings
 *                   show, in that order, or "-" for none
 *   vma I           print "vma I exact" when one mapping (/proc/self/smaps)
 *                   has exactly region I's bounds, "vma I merged" when the
 *                   region is part of a larger one, "vma I split" otherwise
 *   overlaps I J    print "overlaps I J yes" when the addresses region I has
 *                   (or had, if unmapped) and those of region J meet, else
 *                   "overlaps I J no"
 *   append [SUFFIX] append the line "round R digest D\n" (R 8 digits, D the
 *                   digest, hex) to FILE, or to FILE followed by SUFFIX
 *                   (O_APPEND|O_CREAT, closed again)
 *   overwrite [SUFFIX]  write that line over the first one of the file
 *                   (pwrite at offset 0, O_CREAT, no truncation)
 *   quit            exit 0 (like end of input)
 * After each command: "state ROUND DIGEST CHANGED_PAGES", DIGEST (hex) over
 * the sizes and bytes of every live region in order, CHANGED_PAGES the pages
 * the last next/fill/dontneed/newmap changed.  At end of input (or `quit`)
 * prints "bye" and exits 0.  New content depends only on the round or on how
 * many commands came before, so the output depends only on the arguments
 * and the commands, never on addresses or timing (except the lines of
 * hugekb, vmflags, vma and overlaps, which report the kernel's view; each
 * comes before the command's state line). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#define MADV_KEEPONFORK 19
#endif

#define PAGE 4096u
#define MAXREG 64
#define NDUP 8

enum { K_RANDOM, K_HALFZERO, K_SPARSE, K_DUP };

struct region { uint64_t *p; size_t pages; int live; };
static struct region reg[MAXREG];
static int nreg;
static int kind;
static uint64_t dup_pages[NDUP][PAGE / 8];

static uint64_t rng_state;
static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static void seed(uint64_t s)
{
    rng_state = s * 0x9E3779B97F4A7C15ull + 88172645463325252ull;
    if (!rng_state) rng_state = 1;
}

static void random_page(uint64_t *p)
{
    for (unsigned i = 0; i < PAGE / 8; i++) p[i] = rng();
}

/* New content for one page, by kind (sparse pages get random bytes). */
static void fill_page(uint64_t *p)
{
    switch (kind) {
    case K_HALFZERO:
        for (unsigned i = 0; i < PAGE / 16; i++) {
            double d = (double)(rng() >> 11) / 9007199254740992.0;
            memcpy(&p[i], &d, 8);
        }
        memset(p + PAGE / 16, 0, PAGE / 2);
        break;
    case K_DUP:
        memcpy(p, dup_pages[rng() % NDUP], PAGE);
        break;
    default:
        random_page(p);
    }
}

static void fill_region(struct region *r)
{
    for (size_t pg = 0; pg < r->pages; pg++) {
        if (kind == K_SPARSE && pg % 16) continue;
        fill_page(r->p + pg * (PAGE / 8));
    }
}

static uint64_t digest(void)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < nreg; i++) {
        if (!reg[i].live) continue;
        h = (h ^ (uint64_t)i) * 0x100000001b3ull + (h >> 31);
        h = (h ^ reg[i].pages) * 0x100000001b3ull + (h >> 31);
        const uint64_t *p = reg[i].p;
        for (size_t k = 0, n = reg[i].pages * (PAGE / 8); k < n; k++) h = (h ^ p[k]) * 0x100000001b3ull + (h >> 31);
    }
    return h;
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b) { uint64_t t = a % b; a = b; b = t; }
    return a;
}

#define HUGE (2ul << 20)

/* huge: on a 2 MiB boundary (a larger mapping trimmed), MADV_HUGEPAGE */
static int new_region(size_t pages, int huge)
{
    if (nreg == MAXREG) return -1;
    size_t len = pages * PAGE, extra = huge ? HUGE : 0;
    char *p = mmap(NULL, len + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(1); }
    if (huge) {
        char *a = (char *)(((uintptr_t)p + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
        if (a > p) munmap(p, (size_t)(a - p));
        if (a + len < p + len + extra) munmap(a + len, (size_t)(p + len + extra - (a + len)));
        p = a;
        if (madvise(p, len, MADV_HUGEPAGE)) { perror("madvise"); exit(1); }
    }
    reg[nreg] = (struct region){(uint64_t *)p, pages, 1};
    return nreg++;
}

static int advice_arg(const char *s)
{
    static const struct { const char *name; int advice; } tab[] = {
        {"dontfork", MADV_DONTFORK}, {"dofork", MADV_DOFORK}, {"wipeonfork", MADV_WIPEONFORK},
        {"keeponfork", MADV_KEEPONFORK}, {"hugepage", MADV_HUGEPAGE}, {"nohugepage", MADV_NOHUGEPAGE}};
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(s, tab[i].name)) return tab[i].advice;
    return -1;
}

/* The mappings of /proc/self/smaps that overlap region r: how many, whether
 * one has exactly its bounds or holds it, their AnonHugePages (kB), and the
 * union of the VmFlags this program reports (dc wf hg nh, bits 0-3). */
struct vmainfo { int n, exact, inside; uint64_t huge_kb; unsigned flags; };

static struct vmainfo vma_info(const struct region *r)
{
    struct vmainfo v = {0, 0, 0, 0, 0};
    uint64_t a = (uint64_t)r->p, b = a + r->pages * PAGE;
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) { perror("/proc/self/smaps"); exit(1); }
    char line[1024];
    int in = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long s, e;
        char c;
        if (sscanf(line, "%llx-%llx %c", &s, &e, &c) == 3 && strchr(line, '-') < strchr(line, ' ')) {
            in = s < b && e > a;
            if (in) {
                v.n++;
                if (s == a && e == b) v.exact = 1;
                else if (s <= a && e >= b) v.inside = 1;
            }
            continue;
        }
        if (!in) continue;
        unsigned long long kb;
        if (sscanf(line, "AnonHugePages: %llu kB", &kb) == 1) v.huge_kb += kb;
        if (!strncmp(line, "VmFlags:", 8)) {
            static const char *names[] = {" dc", " wf", " hg", " nh"};
            for (int k = 0; k < 4; k++) {
                const char *t = line + 8;
                size_t l = strlen(names[k]);
                while ((t = strstr(t, names[k])) && t[l] != ' ' && t[l] != '\n') t += l;
                if (t) v.flags |= 1u << k;
            }
        }
    }
    fclose(f);
    return v;
}

static struct region *region_arg(const char *s)
{
    char *end;
    long i = strtol(s, &end, 10);
    if (end == s || i < 0 || i >= nreg || !reg[i].live) return NULL;
    return &reg[i];
}

int main(int argc, char **argv)
{
    if (argc < 3) { fprintf(stderr, "usage: incr_heap MIB PERCENT [random|halfzero|sparse|dup [FILE]]\n"); return 2; }
    size_t mib = strtoull(argv[1], NULL, 10);
    double percent = strtod(argv[2], NULL);
    const char *k = argc > 3 ? argv[3] : "random";
    const char *file = argc > 4 ? argv[4] : NULL;
    if (!strcmp(k, "random")) kind = K_RANDOM;
    else if (!strcmp(k, "halfzero")) kind = K_HALFZERO;
    else if (!strcmp(k, "sparse")) kind = K_SPARSE;
    else if (!strcmp(k, "dup")) kind = K_DUP;
    else { fprintf(stderr, "incr_heap: unknown kind %s\n", k); return 2; }
    if (!mib) { fprintf(stderr, "incr_heap: MIB must be at least 1\n"); return 2; }
    seed(0);
    for (int i = 0; i < NDUP; i++) random_page(dup_pages[i]);
    struct region *heap = &reg[new_region((mib << 20) / PAGE, 0)];
    fill_region(heap);

    uint64_t round = 0, ops = 0, changed = 0;
    char line[256];
    printf("state %" PRIu64 " %016" PRIx64 " %" PRIu64 "\n", round, digest(), changed);
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        char cmd[32] = "", a1[32] = "", a2[32] = "", a3[32] = "";
        int nargs = sscanf(line, "%31s %31s %31s %31s", cmd, a1, a2, a3);
        ops++;
        if (nargs < 1) continue;
        if (!strcmp(cmd, "next")) {
            round++;
            seed(round);
            size_t pages = heap->pages;
            changed = heap->live ? (size_t)((double)pages * percent / 100.0) : 0;
            if (changed > pages) changed = pages;
            /* distinct pages: START + i*STEP mod pages, STEP prime to pages */
            uint64_t start = rng() % pages, step = rng() % pages;
            if (!step) step = 1;
            while (gcd(step, pages) != 1) step++;
            for (size_t i = 0; i < changed; i++)
                fill_page(heap->p + ((start + (uint64_t)i * step) % pages) * (PAGE / 8));
        } else if (!strcmp(cmd, "digest")) {
        } else if (!strcmp(cmd, "fill") || !strcmp(cmd, "dontneed")) {
            char a4[32] = "";
            int stepped = cmd[0] == 'f' && sscanf(line, "%*s %*s %*s %*s %31s", a4) == 1;
            struct region *r = nargs == 4 ? region_arg(a1) : NULL;
            uint64_t s = strtoull(a2, NULL, 10), n = strtoull(a3, NULL, 10), step = stepped ? strtoull(a4, NULL, 10) : 1;
            if (!r || (!stepped && (s > r->pages || n > r->pages - s)) ||
                (stepped && (s >= r->pages || n > r->pages || !step || gcd(step, r->pages) != 1))) {
                printf("error %s\n", line);
                fflush(stdout);
                continue;
            }
            if (cmd[0] == 'f') {
                seed(1000000 + ops);
                for (uint64_t k = 0; k < n; k++) fill_page(r->p + ((s + k * step) % r->pages) * (PAGE / 8));
            } else if (n && madvise(r->p + s * (PAGE / 8), n * PAGE, MADV_DONTNEED)) {
                perror("madvise");
                return 1;
            }
            changed = n;
        } else if (!strcmp(cmd, "newmap")) {
            uint64_t m = strtoull(a1, NULL, 10);
            int huge = nargs == 3 && !strcmp(a2, "huge");
            int i = (nargs == 2 || huge) && m ? new_region((m << 20) / PAGE, huge) : -1;
            if (i < 0) { printf("error %s\n", line); fflush(stdout); continue; }
            seed(1000000 + ops);
            fill_region(&reg[i]);
            changed = reg[i].pages;
        } else if (!strcmp(cmd, "mremap")) {
            struct region *r = nargs >= 2 ? region_arg(a1) : NULL;
            uint64_t n = nargs >= 3 ? strtoull(a2, NULL, 10) : r ? r->pages : 0;
            if (!r || !n) { printf("error %s\n", line); fflush(stdout); continue; }
            /* a free place of the new size, away from the old one */
            void *to = mmap(NULL, n * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (to == MAP_FAILED) { perror("mmap"); return 1; }
            void *p = mremap(r->p, r->pages * PAGE, n * PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, to);
            if (p == MAP_FAILED) { perror("mremap"); return 1; }
            r->p = p;
            r->pages = n;
        } else if (!strcmp(cmd, "unmap")) {
            struct region *r = nargs == 2 ? region_arg(a1) : NULL;
            if (!r) { printf("error %s\n", line); fflush(stdout); continue; }
            munmap(r->p, r->pages * PAGE);
            r->live = 0;
        } else if (!strcmp(cmd, "advise") || !strcmp(cmd, "rawadvise")) {
            struct region *r = nargs == 3 ? region_arg(a1) : NULL;
            int advice = advice_arg(a2);
            if (!r || advice < 0) { printf("error %s\n", line); fflush(stdout); continue; }
            int rc = cmd[0] == 'a' ? madvise(r->p, r->pages * PAGE, advice)
                                   : (int)syscall(SYS_madvise, r->p, r->pages * PAGE, advice);
            if (rc) { perror("madvise"); return 1; }
        } else if (!strcmp(cmd, "waitsig")) {
            syscall(SYS_pause); /* raw: the runtime's pause() goes on through a checkpoint */
        } else if (!strcmp(cmd, "hugekb") || !strcmp(cmd, "vmflags") || !strcmp(cmd, "vma")) {
            struct region *r = nargs == 2 ? region_arg(a1) : NULL;
            if (!r) { printf("error %s\n", line); fflush(stdout); continue; }
            struct vmainfo v = vma_info(r);
            if (cmd[0] == 'h') {
                printf("hugekb %s %" PRIu64 "\n", a1, v.huge_kb);
            } else if (!strcmp(cmd, "vmflags")) {
                static const char *names[] = {"dc", "wf", "hg", "nh"};
                printf("vmflags %s", a1);
                for (int k = 0; k < 4; k++) if (v.flags >> k & 1) printf(" %s", names[k]);
                printf("%s\n", v.flags ? "" : " -");
            } else {
                printf("vma %s %s\n", a1, v.n == 1 && v.exact ? "exact" : v.n == 1 && v.inside ? "merged" : "split");
            }
        } else if (!strcmp(cmd, "overlaps")) {
            long i = strtol(a1, NULL, 10), j = strtol(a2, NULL, 10);
            if (nargs != 3 || i < 0 || j < 0 || i >= nreg || j >= nreg) { printf("error %s\n", line); fflush(stdout); continue; }
            uint64_t ia = (uint64_t)reg[i].p, ib = ia + reg[i].pages * PAGE, ja = (uint64_t)reg[j].p, jb = ja + reg[j].pages * PAGE;
            printf("overlaps %ld %ld %s\n", i, j, ia < jb && ja < ib ? "yes" : "no");
        } else if (!strcmp(cmd, "append") || !strcmp(cmd, "overwrite")) {
            if (!file) { printf("error no FILE to write\n"); fflush(stdout); continue; }
            char path[4096], buf[96];
            snprintf(path, sizeof path, "%s%s", file, nargs >= 2 ? a1 : "");
            int len = snprintf(buf, sizeof buf, "round %08" PRIu64 " digest %016" PRIx64 "\n", round, digest());
            int app = cmd[0] == 'a';
            int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (app ? O_APPEND : 0), 0644);
            if (fd < 0 || (app ? write(fd, buf, (size_t)len) : pwrite(fd, buf, (size_t)len, 0)) != len) { perror(path); return 1; }
            close(fd);
        } else if (!strcmp(cmd, "quit")) {
            break;
        } else {
            printf("error unknown command %s\n", cmd);
            fflush(stdout);
            continue;
        }
        printf("state %" PRIu64 " %016" PRIx64 " %" PRIu64 "\n", round, digest(), changed);
        fflush(stdout);
    }
    printf("bye\n");
    return 0;
}
