/* `lazarus verify` and the restart's checks of a checkpoint's own pieces
 * (store.h): every part's manifest, its frames (each pack there, each frame
 * read, expanded and checked), and the data of its pipes and sockets. */
#include "store.h"
#include "tree.h"
#include "store_admin.h"
#include "codec.h"
#include "image_read.h"
#include "hash.h"
#include "util.h"
#include "journal_layout.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

/* A pack as the user knows it, DIR/packs/pack.N, rather than ckpt.M/../packs/pack.N. */
static void pack_shown(char *buf, size_t len, const char *dir, const char *ck, const char *rel)
{
    if (!strncmp(rel, "../", 3) && !strstr(rel + 3, "../")) snprintf(buf, len, "%s/%s", dir, rel + 3);
    else if (!strncmp(rel, "../../", 6) && !strstr(rel + 6, "../")) snprintf(buf, len, "%s/%s", dir, rel + 6); /* proc.PID/ */
    else snprintf(buf, len, "%s/%s", ck, rel);
}

static int frame_cmp(const void *a, const void *b, void *frames)
{
    const struct lz_frame *x = (const struct lz_frame *)frames + *(const uint32_t *)a;
    const struct lz_frame *y = (const struct lz_frame *)frames + *(const uint32_t *)b;
    if (x->pack != y->pack) return x->pack < y->pack ? -1 : 1;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->stored != y->stored) return x->stored < y->stored ? -1 : 1;
    return x->codec != y->codec ? (x->codec < y->codec ? -1 : 1) : (x->xxh3 > y->xxh3) - (x->xxh3 < y->xxh3);
}

static int same_frame(const struct lz_frame *x, const struct lz_frame *y)
{
    return x->pack == y->pack && x->offset == y->offset && x->stored == y->stored && x->codec == y->codec &&
           x->raw == y->raw && x->xxh3 == y->xxh3;
}

static int verify_part(const char *dir, uint64_t index, const char *ck, char *why, size_t whylen);

int lz_verify_ckpt(const char *dir, uint64_t index, char *why, size_t whylen)
{
    char ck[LZ_PATH_MAX + 64], part[LZ_PATH_MAX + 128], inner[1024];
    lz_ckpt_path(ck, sizeof ck, dir, index);
    uint64_t when;
    if (lz_ckpt_files_only(ck, &when)) return 0; /* no process image: its journals are checked with the others */
    struct lz_tree t;
    if (lz_tree_load(ck, &t, inner, sizeof inner) < 0) {
        snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: %s", index, inner);
        return -1;
    }
    int rc = 0;
    for (size_t k = 0; k < t.nprocs && rc == 0; k++) {
        if (t.procs[k].state != LZ_TP_LIVE) continue;
        lz_tree_part_dir(part, sizeof part, ck, &t.procs[k]);
        rc = verify_part(dir, index, part, why, whylen);
        if (rc < 0 && k > 0) { /* name the process */
            char w[1200];
            snprintf(w, sizeof w, "%s", why);
            const char *d = strstr(w, " is damaged: ");
            if (d) snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: process %d (%s): %s", index, t.procs[k].pid, t.procs[k].comm, d + 13);
        }
    }
    lz_tree_free(&t);
    return rc;
}

/* One process's part of checkpoint `index`: its manifest, every frame it
 * references, the data of its pipes and sockets. */
static int verify_part(const char *dir, uint64_t index, const char *ck, char *why, size_t whylen)
{
    char path[LZ_PATH_MAX + 600], shown[LZ_PATH_MAX + 600], inner[1024];
    struct lz_image img;
    int mrc = lz_manifest_load(ck, &img, inner, sizeof inner);
    if (mrc < 0) { /* intact but of another Lazarus, or damaged */
        snprintf(why, whylen, "checkpoint %" PRIu64 " %s: %s", index,
                 mrc == LZ_UNREADABLE ? "cannot be read by this build" : "is damaged", inner);
        return -1;
    }
    int rc = 0;
    int *fds = malloc((img.npacks ? img.npacks : 1) * sizeof *fds);
    uint32_t *order = malloc((img.nframes ? img.nframes : 1) * sizeof *order);
    size_t cap = 0;
    char *work = malloc(lz_dctx_size()), *raw = malloc(LZ_FRAME_MAX), *buf = NULL;
    if (!fds || !order || !work || !raw) { snprintf(why, whylen, "out of memory"); rc = -1; }
    for (size_t i = 0; fds && i < img.npacks; i++) fds[i] = -1;
    for (size_t i = 0; i < img.npacks && rc == 0; i++) {
        const char *rel = lz_str(&img, img.packs[i].path);
        snprintf(path, sizeof path, "%s/%s", ck, rel);
        pack_shown(shown, sizeof shown, dir, ck, rel);
        struct stat st;
        fds[i] = open(path, O_RDONLY | O_CLOEXEC);
        if (fds[i] < 0) {
            snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: cannot open %s: %s", index, shown, strerror(errno));
            rc = -1;
        } else if (fstat(fds[i], &st) == 0 && (uint64_t)st.st_size != img.packs[i].size) {
            snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: %s has %lld bytes, expected %" PRIu64, index,
                     shown, (long long)st.st_size, img.packs[i].size);
            rc = -1;
        }
    }
    /* each frame once (later checkpoints share them), in pack order: the disk reads ahead */
    for (size_t i = 0; rc == 0 && i < img.nframes; i++) order[i] = (uint32_t)i;
    if (rc == 0) qsort_r(order, img.nframes, sizeof *order, frame_cmp, (void *)img.frames);
    for (size_t k = 0; rc == 0 && k < img.nframes; k++) {
        const struct lz_frame *f = &img.frames[order[k]];
        if (k && same_frame(f, &img.frames[order[k - 1]])) continue;
        if (f->stored > cap) {
            char *nb = realloc(buf, f->stored);
            if (!nb) { snprintf(why, whylen, "out of memory"); rc = -1; break; }
            buf = nb;
            cap = f->stored;
        }
        /* the stored bytes checked too, as the restart of several processes checks them
         * (frames_check.c): changed so that they still expand to the same page is damage */
        const char *what = lz_frame_load(fds[f->pack], f, buf, raw, work, 1);
        if (!what) continue;
        int err = !strcmp(what, "cannot be read") ? errno : 0;
        /* name memory that holds it, as the user sees a checkpoint */
        uint64_t addr = 0;
        for (size_t e = 0; e < img.nextents && !addr; e++)
            if (img.extents[e].frame == order[k]) addr = img.extents[e].addr;
        char at[64] = "";
        if (addr) snprintf(at, sizeof at, " at 0x%" PRIx64, addr);
        pack_shown(shown, sizeof shown, dir, ck, lz_str(&img, img.packs[f->pack].path));
        snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: page data%s %s%s%s (%u bytes, %s, at offset %" PRIu64 " of %s)",
                 index, at, what, err ? ": " : "", err ? (err == ENODATA ? "the pack is shorter" : strerror(err)) : "",
                 f->stored, lz_codec_name((int)f->codec), f->offset, shown);
        rc = -1;
    }
    if (rc == 0) rc = lz_check_chans(ck, &img, index, why, whylen);
    free(buf);
    free(raw);
    free(work);
    free(order);
    for (size_t i = 0; fds && i < img.npacks; i++) if (fds[i] >= 0) close(fds[i]);
    free(fds);
    lz_image_free(&img);
    return rc;
}

int lz_check_chans(const char *ckpt_dir, const struct lz_image *img, uint64_t index, char *why, size_t whylen)
{
    char inner[LZ_PATH_MAX + 512];
    for (size_t i = 0; i < img->nchans; i++) {
        void *data;
        if (lz_chan_data(ckpt_dir, img, &img->chans[i], &data, inner, sizeof inner) < 0) {
            snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: %s", index, inner);
            return -1;
        }
        free(data);
    }
    for (size_t i = 0; i < img->nusocks; i++) {
        void *data;
        if (lz_chan_data(ckpt_dir, img, &img->usocks[i].q, &data, inner, sizeof inner) < 0) {
            snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: %s", index, inner);
            return -1;
        }
        free(data);
        if (lz_usock_senders(ckpt_dir, img, &img->usocks[i], &data, inner, sizeof inner) < 0) {
            snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: %s", index, inner);
            return -1;
        }
        free(data);
    }
    for (size_t i = 0; i < img->nfds; i++) {
        const struct lz_fd *f = &img->fds[i];
        if (f->kind != LZ_FD_GHOST) continue;
        const char *name = lz_str(img, f->path);
        char path[LZ_PATH_MAX + 600];
        snprintf(path, sizeof path, "%s/%s", ckpt_dir, name);
        size_t len;
        void *data = strchr(name, '/') ? NULL : lz_read_file(path, &len);
        if (!data) {
            snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: the content of descriptor %d (%s) cannot be read: %s",
                     index, f->fd, name, strerror(errno));
            return -1;
        }
        uint64_t h = lz_hash(data, len);
        free(data);
        if (h != f->xxh3) {
            snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: the content of descriptor %d (%s) fails its checksum",
                     index, f->fd, name);
            return -1;
        }
    }
    return lz_check_inet_data(ckpt_dir, img, index, why, whylen);
}
