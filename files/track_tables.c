/* The interval's hash tables: paths already recorded, and the inodes
 * changed (track_internal.h). */
#include "track_internal.h"
#include <string.h>

/* ---------------------------------------------------------------- tables */

static uint64_t mix(uint64_t a, uint64_t b) { uint64_t x = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull); x ^= x >> 29; x *= 0xbf58476d1ce4e5b9ull; return x ^ (x >> 32); }

int trk_path_seen(struct interval *v, uint64_t h, int add)
{
    if (add && (v->path_n + 1) * 2 > v->path_cap) {
        uint32_t nc = v->path_cap ? v->path_cap * 2 : 4096;
        uint64_t *np = iv_alloc(v, nc * sizeof *np);
        if (!np) return 0;
        memset(np, 0, nc * sizeof *np);
        for (uint32_t i = 0; i < v->path_cap; i++)
            if (v->paths[i]) { uint32_t s = (uint32_t)(v->paths[i] & (nc - 1)); while (np[s]) s = (s + 1) & (nc - 1); np[s] = v->paths[i]; }
        v->paths = np;
        v->path_cap = nc;
    }
    if (!v->path_cap) return 0;
    if (!h) h = 1;
    uint32_t s = (uint32_t)(h & (v->path_cap - 1));
    while (v->paths[s]) {
        if (v->paths[s] == h) return 1;
        s = (s + 1) & (v->path_cap - 1);
    }
    if (add) { v->paths[s] = h; v->path_n++; }
    return 0;
}

struct fj_ino *trk_ino_find(struct interval *v, uint64_t dev, uint64_t ino, int add)
{
    if (!v->inos) {
        if (!add) return NULL;
        v->inos = iv_alloc(v, (size_t)MAX_INOS * sizeof *v->inos);
        if (!v->inos) return NULL;
    }
    if (add && (v->ino_n + 1) * 2 > v->ihash_cap) {
        uint32_t nc = v->ihash_cap ? v->ihash_cap * 2 : 1024;
        uint32_t *nh = iv_alloc(v, nc * sizeof *nh);
        if (!nh) return NULL;
        memset(nh, 0, nc * sizeof *nh);
        for (uint32_t i = 0; i < v->ino_n; i++) {
            uint32_t s = (uint32_t)(mix(v->inos[i].dev, v->inos[i].ino) & (nc - 1));
            while (nh[s]) s = (s + 1) & (nc - 1);
            nh[s] = i + 1;
        }
        v->ihash = nh;
        v->ihash_cap = nc;
    }
    if (!v->ihash_cap) return NULL;
    uint32_t s = (uint32_t)(mix(dev, ino) & (v->ihash_cap - 1));
    while (v->ihash[s]) {
        struct fj_ino *e = &v->inos[v->ihash[s] - 1];
        if (e->dev == dev && e->ino == ino) return e;
        s = (s + 1) & (v->ihash_cap - 1);
    }
    if (!add || v->ino_n >= MAX_INOS) return NULL;
    struct fj_ino *e = &v->inos[v->ino_n];
    memset(e, 0, sizeof *e);
    e->used = 1; e->dev = dev; e->ino = ino; e->rfd = -1;
    v->ihash[s] = ++v->ino_n;
    return e;
}
