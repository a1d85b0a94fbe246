/* `lazarus show`: the sections read from the store rather than the
 * checkpoint's manifests (show.h): the file journal a rollback to the
 * checkpoint applies, and the packs with the part of them still in use. */
#include "show.h"
#include "cli.h"
#include "journal_read.h"
#include "rollback.h"
#include "store_admin.h"
#include "util.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct change { const char *kind; char *path; uint64_t saved; };
struct changes { struct change *v; size_t n, cap; };

static void add_change(const char *kind, const char *path, void *arg)
{
    struct changes *c = arg;
    if (c->n == c->cap) { c->cap = c->cap ? c->cap * 2 : 64; c->v = lz_xrealloc(c->v, c->cap * sizeof *c->v); }
    c->v[c->n++] = (struct change){kind, lz_xstrdup(path), 0};
}

static int change_cmp(const void *key, const void *elem)
{
    return strcmp(key, ((const struct change *)elem)->path);
}

/* An inode of the plan and the changed path its INODE record names. */
struct ino_of { uint64_t dev, ino; size_t change; };
static int ino_cmp(const void *a, const void *b)
{
    const struct ino_of *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    return (x->ino > y->ino) - (x->ino < y->ino);
}

/* The bytes of old content the journals keep for each changed path (DATA
 * records of the inode its INODE records name). */
static void saved_bytes(const struct fj_plan *p, struct changes *c)
{
    size_t n = 0, cap = 64;
    struct ino_of *v = lz_xmalloc(cap * sizeof *v);
    for (size_t i = 0; i < p->n; i++)
        for (size_t j = 0; j < p->s[i].n; j++) {
            const struct rec *r = &p->s[i].r[j];
            if (r->type != FJ_INODE) continue;
            const struct change *ch = bsearch(inode_path(r), c->v, c->n, sizeof *c->v, change_cmp);
            if (!ch) continue;
            if (n == cap) { cap *= 2; v = lz_xrealloc(v, cap * sizeof *v); }
            v[n++] = (struct ino_of){INODE(r)->dev, INODE(r)->ino, (size_t)(ch - c->v)};
        }
    qsort(v, n, sizeof *v, ino_cmp);
    for (size_t i = 0; i < p->n; i++)
        for (size_t j = 0; j < p->s[i].n; j++) {
            const struct rec *r = &p->s[i].r[j];
            if (r->type != FJ_DATA) continue;
            const struct fj_data *d = (const struct fj_data *)r->p;
            struct ino_of key = {d->dev, d->ino, 0};
            const struct ino_of *hit = bsearch(&key, v, n, sizeof *v, ino_cmp);
            if (hit) c->v[hit->change].saved += d->length;
        }
    free(v);
}

int show_journal(struct show *s)
{
    char why[LZ_PATH_MAX + 512];
    /* exactly what `diff` reads: when the job stopped tells what is gone since */
    int64_t stop = rollback_stop_ns(s->dir);
    int damaged;
    struct fj_plan *plan = rollback_plan_load(s->dir, s->index, stop, &damaged, why, sizeof why);
    if (!plan) { lz_err("%s", why); return damaged ? -2 : -1; }
    struct changes c = {0};
    fj_plan_changes(plan, stop, add_change, &c);
    saved_bytes(plan, &c);
    if (s->json) {
        jw_obj(&s->w, "journal");
        jw_u64(&s->w, "target", s->index);
        jw_arr(&s->w, "intervals");
    } else {
        printf("\nFILE JOURNAL (what a rollback to checkpoint %" PRIu64 " undoes)\n", s->index);
        printf("%9s %-6s %9s %9s %10s\n", "INTERVAL", "FAILED", "JOURNALS", "RECORDS", "UNDO");
    }
    for (size_t i = plan->n; i-- > 0;) { /* oldest first */
        const struct seg *g = &plan->s[i];
        uint64_t undo = 0, records = 0;
        for (size_t j = 0; j < g->nj; j++) { undo += g->j[j].data_end; records += g->j[j].nundo; }
        int failed = strstr(g->ckdir, "/jrnl.") != NULL;
        if (s->json) {
            jw_obj(&s->w, NULL);
            jw_u64(&s->w, "index", g->index);
            jw_bool(&s->w, "failed", failed);
            jw_u64(&s->w, "journals", g->nj);
            jw_u64(&s->w, "records", records);
            jw_u64(&s->w, "saved_bytes", undo);
            jw_end_obj(&s->w);
        } else {
            char ub[32];
            human_bytes(ub, sizeof ub, undo);
            printf("%9" PRIu64 " %-6s %9zu %9" PRIu64 " %10s\n", g->index, failed ? "yes" : "no", g->nj, records, ub);
        }
    }
    if (s->json) jw_end_arr(&s->w), jw_arr(&s->w, "files");
    else printf("%-8s %10s  %s\n", "CHANGE", "SAVED", "PATH");
    for (size_t i = 0; i < c.n; i++) {
        if (s->json) {
            jw_obj(&s->w, NULL);
            jw_str(&s->w, "path", c.v[i].path);
            jw_str(&s->w, "change", c.v[i].kind);
            jw_u64(&s->w, "saved_bytes", c.v[i].saved);
            jw_end_obj(&s->w);
        } else {
            char sb[32];
            human_bytes(sb, sizeof sb, c.v[i].saved);
            printf("%-8s %10s  %s\n", c.v[i].kind, sb, c.v[i].path);
        }
        free(c.v[i].path);
    }
    if (s->json) jw_end_arr(&s->w), jw_end_obj(&s->w);
    else if (!c.n) printf("(no file changes since checkpoint %" PRIu64 ")\n", s->index);
    free(c.v);
    fj_plan_free(plan);
    return 0;
}

int show_packs(struct show *s)
{
    char why[LZ_PATH_MAX + 600];
    struct lz_pack_usage *u;
    size_t n;
    if (lz_store_pack_usage(s->dir, &u, &n, why, sizeof why) < 0) { lz_err("%s", why); return -1; }
    /* the packs this checkpoint reads */
    uint64_t total = 0, live = 0;
    if (s->json) jw_arr(&s->w, "packs");
    else printf("\nPACKS (LIVE: the bytes retained checkpoints use; USED: by checkpoint %" PRIu64 ")\n%-24s %7s %10s %10s %10s %6s  %s\n",
                s->index, "NAME", "PID", "SIZE", "ON DISK", "LIVE", "LIVE%", "USED");
    for (size_t i = 0; i < n; i++) {
        int used = 0;
        for (size_t k = 0; k < s->tree.nprocs && !used; k++)
            for (size_t p = 0; s->tree.procs[k].state == LZ_TP_LIVE && p < s->imgs[k].npacks && !used; p++) {
                const char *path = lz_str(&s->imgs[k], s->imgs[k].packs[p].path), *base = strrchr(path, '/');
                used = !strcmp(base ? base + 1 : path, u[i].name);
            }
        double frac = u[i].size ? (double)u[i].live_bytes / (double)u[i].size : 0;
        total += u[i].size;
        live += u[i].live_bytes;
        if (s->json) {
            jw_obj(&s->w, NULL);
            jw_str(&s->w, "name", u[i].name);
            jw_u64(&s->w, "index", u[i].index);
            if (u[i].pid) jw_i64(&s->w, "pid", u[i].pid); else jw_null(&s->w, "pid");
            jw_u64(&s->w, "size", u[i].size);
            jw_u64(&s->w, "disk_bytes", u[i].disk_bytes);
            jw_u64(&s->w, "live_bytes", u[i].live_bytes);
            jw_dbl(&s->w, "live_fraction", frac);
            jw_bool(&s->w, "used", used);
            jw_end_obj(&s->w);
        } else {
            char sz[32], dk[32], lv[32], pid[16] = "-";
            human_bytes(sz, sizeof sz, u[i].size);
            human_bytes(dk, sizeof dk, u[i].disk_bytes);
            human_bytes(lv, sizeof lv, u[i].live_bytes);
            if (u[i].pid) snprintf(pid, sizeof pid, "%d", u[i].pid);
            printf("%-24s %7s %10s %10s %10s %5.1f%%  %s\n", u[i].name, pid, sz, dk, lv, 100 * frac, used ? "yes" : "no");
        }
    }
    if (s->json) jw_end_arr(&s->w);
    else {
        char t[32], l[32];
        human_bytes(t, sizeof t, total);
        human_bytes(l, sizeof l, live);
        printf("%zu pack(s), %s, %s live (%.1f%%)\n", n, t, l, total ? 100.0 * (double)live / (double)total : 0.0);
    }
    free(u);
    return 0;
}
