/* No privilege from a store (privilege.h).
 *
 * A checkpoint records who its process was (runtime/rt_capture.c): real,
 * effective and saved uid and gid, the supplementary groups (count and
 * XXH3-64 of the gid_t array in the kernel's sorted order) and the effective,
 * permitted and inheritable capability sets.  The restorer gets its ids,
 * groups and capabilities from `lazarus restart` (cli/pidns.c execs it), so a
 * restart gives the program exactly what this process would give it, and it
 * is refused unless that is exactly what the checkpoint records.  Root
 * restarting an ordinary user's store first becomes that user for good, so it
 * can only give what the user has. */
#include "privilege.h"
#include "hash.h"
#include "store.h"
#include "tree.h"
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Capability numbers that fit the 64-bit sets (the kernel's two 32-bit
 * words); a kernel knows fewer, and says so (EINVAL) past its last. */
#define NCAPS 64
/* The kernel's overflowuid and overflowgid ("nobody") when /proc does not say. */
#define OVERFLOW_ID_DEFAULT 65534

struct caps { uint64_t eff, prm, inh; };

static int get_caps(struct caps *c)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    if (syscall(SYS_capget, &h, d) < 0) return -1;
    c->eff = (uint64_t)d[1].effective << 32 | d[0].effective;
    c->prm = (uint64_t)d[1].permitted << 32 | d[0].permitted;
    c->inh = (uint64_t)d[1].inheritable << 32 | d[0].inheritable;
    return 0;
}

static int clear_caps(void)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    return (int)syscall(SYS_capset, &h, d);
}

static int no_ambient(void)
{
    for (int c = 0; c < NCAPS; c++) {
        int r = prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, c, 0, 0);
        if (r < 0) return 1; /* past the last capability this kernel knows (or no ambient set at all) */
        if (r > 0) return 0;
    }
    return 1;
}

/* The supplementary groups the processes of the checkpoint to restart had,
 * if they all had the same and the user could have each of them now (it is
 * in their login groups): root then gives exactly those (a job started with
 * fewer groups than the user's login groups gets no more).  Else NULL: the
 * login groups, and the check of each part says what differs.  Read-only. */
static gid_t *recorded_groups(const char *dir, int have_at, uint64_t at, const char *name, gid_t g, int *count)
{
    uint64_t index;
    char why[1200], ck[LZ_PATH_MAX + 64], part[LZ_PATH_MAX + 128];
    if (lz_store_pick(dir, have_at, at, &index, why, sizeof why) < 0) return NULL;
    lz_ckpt_path(ck, sizeof ck, dir, index);
    struct lz_tree t;
    if (lz_tree_load(ck, &t, why, sizeof why) < 0) return NULL;
    gid_t *list = NULL;
    int n = -1, ok = 1;
    for (size_t k = 0; k < t.nprocs && ok; k++) {
        if (t.procs[k].state != LZ_TP_LIVE) continue;
        lz_tree_part_dir(part, sizeof part, ck, &t.procs[k]);
        struct lz_image img;
        if (lz_manifest_load(part, &img, why, sizeof why) < 0) { ok = 0; break; }
        if (n < 0) {
            n = (int)img.ngroups_listed;
            list = malloc(((size_t)n + 1) * sizeof *list);
            for (int i = 0; list && i < n; i++) list[i] = img.groups[i];
            ok = list != NULL;
        } else if ((size_t)n != img.ngroups_listed) {
            ok = 0;
        } else {
            for (int i = 0; i < n; i++) ok &= list[i] == img.groups[i];
        }
        lz_image_free(&img);
    }
    lz_tree_free(&t);
    /* each of them a group the user has now */
    int nl = 64;
    gid_t *login = NULL;
    for (int tries = 0; ok && n >= 0 && tries < 8; tries++) {
        free(login);
        login = malloc((size_t)nl * sizeof *login);
        if (!login) { ok = 0; break; }
        int have = nl;
        if (getgrouplist(name, g, login, &have) >= 0) { nl = have; break; }
        nl = have > nl ? have : nl * 2;
        if (tries == 7) ok = 0;
    }
    for (int i = 0; ok && i < n; i++) {
        int found = list[i] == g;
        for (int j = 0; j < nl && !found; j++) found = login[j] == list[i];
        ok = found;
    }
    free(login);
    if (!ok || n < 0) { free(list); return NULL; }
    *count = n;
    return list;
}

int privilege_become_store_owner(const char *dir, int have_at, uint64_t at, char *why, size_t whylen)
{
    if (geteuid() != 0) return 0;
    /* DIR's own owner (abs_dir resolved the path; a symlink left at the end
     * is not followed: its owner is not the store's) */
    struct stat st;
    if (lstat(dir, &st) < 0) { snprintf(why, whylen, "cannot read %s: %s", dir, strerror(errno)); return -1; }
    if (!S_ISDIR(st.st_mode)) { snprintf(why, whylen, "%s is not a directory", dir); return -1; }
    if (st.st_uid == 0) return 0;
    uid_t u = st.st_uid;
    errno = 0;
    struct passwd *pw = getpwuid(u);
    if (!pw) {
        snprintf(why, whylen, "the store %s belongs to uid %u, which is no user of this system (%s); it is not restarted as root",
                 dir, (unsigned)u, errno ? strerror(errno) : "no passwd entry");
        return -1;
    }
    gid_t g = pw->pw_gid;
    char name[256];
    snprintf(name, sizeof name, "%s", pw->pw_name);
    int ng = 0;
    gid_t *groups = recorded_groups(dir, have_at, at, name, g, &ng);
    int grc = groups ? setgroups((size_t)ng, groups) : initgroups(name, g);
    free(groups);
    if (grc < 0) {
        snprintf(why, whylen, "cannot take the groups of user %s (uid %u), who owns the store: %s", name, (unsigned)u, strerror(errno));
        return -1;
    }
    if (setresgid(g, g, g) < 0 || setresuid(u, u, u) < 0) {
        snprintf(why, whylen, "cannot become user %s (uid %u, gid %u), who owns the store: %s", name, (unsigned)u, (unsigned)g, strerror(errno));
        return -1;
    }
    /* leaving uid 0 cleared the permitted, effective and ambient sets (unless
     * SECBIT_KEEP_CAPS was set); the inheritable set stays: clear all */
    clear_caps();
    uid_t r, e, s;
    gid_t rg, eg, sg;
    struct caps c;
    if (getresuid(&r, &e, &s) < 0 || getresgid(&rg, &eg, &sg) < 0 || r != u || e != u || s != u || rg != g || eg != g ||
        sg != g || get_caps(&c) < 0 || c.eff || c.prm || c.inh || !no_ambient()) {
        snprintf(why, whylen, "cannot become user %s (uid %u, gid %u), who owns the store: ids or capabilities did not change as they must",
                 name, (unsigned)u, (unsigned)g);
        return -1;
    }
    /* Changing ids made this process non-dumpable, so its /proc files (and
     * those of the PID namespace's init it forks: cli/pidns.c writes that
     * one's uid_map and gid_map) belong to root.  It holds nothing of root's
     * now but the descriptors root handed it to give the program: it is the
     * user's process, as if the user had started it. */
    if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0) {
        snprintf(why, whylen, "cannot become user %s (uid %u): %s", name, (unsigned)u, strerror(errno));
        return -1;
    }
    return 0;
}

/* What the restarted program will see of ids and groups, and hold of
 * capabilities, when this process starts the restorer (cli/pidns.c).
 *
 * Root: the restorer is exec'd as uid 0 in root's own user namespace (with
 * clone3(set_tid), or in a new PID namespace only), so it has root's ids and
 * groups and, from the exec, permitted = effective = the bounding set plus
 * the inheritable set (the kernel's rule for uid 0), inheritable unchanged.
 *
 * An ordinary user: the restorer runs in a new user namespace owned by the
 * user that maps only the user's effective uid and gid to themselves, so ids
 * read there are the same numbers, and any other id (a real or saved id that
 * differs, a supplementary group other than the effective gid) reads as the
 * overflow id (/proc/sys/kernel/overflow[ug]id).  The kernel still holds the
 * user's real groups (setgroups is denied there, they cannot change), so a
 * checkpoint taken outside the namespace (real numbers) or inside one of an
 * earlier restart (overflow ids) describes the same credentials: either view
 * is accepted.  Capabilities: in that namespace the restorer holds
 * CAP_SYS_ADMIN (over the namespace only, to give the threads their TIDs) and
 * drops every capability before the program runs again (LAZARUS_DROP_CAPS,
 * restorer/restore_threads.c); measured from outside (/proc/PID/status) the
 * restarted program has CapEff = CapPrm = CapInh = CapAmb = 0 (CapBnd stays
 * full: the bounding set only limits what an exec of a file with capabilities
 * gains, as before the checkpoint).  So for an ordinary user "the same
 * capabilities" means all three sets empty: a checkpoint recording any
 * capability (a program with file capabilities, an ambient set) cannot be
 * restarted by that user and is refused.  (Were no PID namespace possible,
 * the restorer would run in the user's namespace and keep only ambient
 * capabilities the user had; an ordinary user has none as a rule.) */
struct creds {
    uint32_t uid, euid, suid, gid, egid, sgid;
    uint32_t ngroups;
    uint64_t groups_xxh3;
};

static uint32_t overflow_id(const char *path)
{
    FILE *f = fopen(path, "re");
    unsigned v = OVERFLOW_ID_DEFAULT;
    if (f) {
        if (fscanf(f, "%u", &v) != 1) v = OVERFLOW_ID_DEFAULT;
        fclose(f);
    }
    return v;
}

static uint64_t groups_hash(const gid_t *g, int n)
{
    uint32_t none = 0;
    return XXH3_64bits(n > 0 ? (const void *)g : &none, (size_t)n * sizeof *g);
}

static int own_creds(struct creds *real, struct creds *inns, char *why, size_t whylen)
{
    uid_t r, e, s;
    gid_t rg, eg, sg;
    if (getresuid(&r, &e, &s) < 0 || getresgid(&rg, &eg, &sg) < 0) {
        snprintf(why, whylen, "cannot read this process's ids: %s", strerror(errno));
        return -1;
    }
    int n = getgroups(0, NULL);
    gid_t *g = n > 0 ? malloc((size_t)n * sizeof *g) : NULL;
    if (n > 0 && g) n = getgroups(n, g);
    if (n < 0 || (n > 0 && !g)) {
        snprintf(why, whylen, "cannot read this process's groups: %s", strerror(errno));
        free(g);
        return -1;
    }
    *real = (struct creds){r, e, s, rg, eg, sg, (uint32_t)n, groups_hash(g, n)};
    uint32_t ou = overflow_id("/proc/sys/kernel/overflowuid"), og = overflow_id("/proc/sys/kernel/overflowgid");
#define U(x) ((x) == e ? (x) : ou)
#define G(x) ((x) == eg ? (x) : og)
    *inns = (struct creds){U(r), e, U(s), G(rg), eg, G(sg), (uint32_t)n, 0};
#undef U
    for (int i = 0; i < n; i++) g[i] = G(g[i]);
#undef G
    inns->groups_xxh3 = groups_hash(g, n);
    free(g);
    return 0;
}

static int same_ids(const struct creds *a, const struct creds *b)
{
    return a->uid == b->uid && a->euid == b->euid && a->suid == b->suid && a->gid == b->gid && a->egid == b->egid &&
           a->sgid == b->sgid;
}

static int same_groups(const struct creds *a, const struct creds *b)
{
    return a->ngroups == b->ngroups && a->groups_xxh3 == b->groups_xxh3;
}

/* The capabilities the exec'd restorer (and so the program) will hold. */
static int restart_caps(struct caps *c)
{
    if (geteuid() != 0) { memset(c, 0, sizeof *c); return 0; }
    struct caps own;
    if (get_caps(&own) < 0) return -1;
    int sec = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
    if (sec > 0 && (sec & SECBIT_NOROOT)) {
        /* uid 0 is not special here: the exec keeps the ambient set only */
        uint64_t amb = 0;
        for (int i = 0; i < NCAPS; i++) {
            int r = prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, i, 0, 0);
            if (r < 0) break;
            if (r > 0) amb |= 1ull << i;
        }
        *c = (struct caps){amb, amb, own.inh};
        return 0;
    }
    uint64_t bset = 0;
    for (int i = 0; i < NCAPS; i++) {
        int r = prctl(PR_CAPBSET_READ, i, 0, 0, 0);
        if (r < 0) break;
        if (r > 0) bset |= 1ull << i;
    }
    *c = (struct caps){bset | own.inh, bset | own.inh, own.inh};
    return 0;
}

static size_t add(char *why, size_t whylen, size_t at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static size_t add(char *why, size_t whylen, size_t at, const char *fmt, ...)
{
    if (at >= whylen) return at;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(why + at, whylen - at, fmt, ap);
    va_end(ap);
    return n < 0 ? at : at + (size_t)n;
}

int privilege_check_image(const struct lz_image *img, char *why, size_t whylen)
{
    const struct lz_proc *p = img->proc;
    struct creds real, inns;
    if (own_creds(&real, &inns, why, whylen) < 0) return -1;
    int userns = geteuid() != 0; /* cli/pidns.c: an ordinary user's restart is in a user namespace */
    struct creds ck = {p->uid, p->euid, p->suid, p->gid, p->egid, p->sgid, p->ngroups, p->groups_xxh3};
    struct caps have, want = {p->cap_eff, p->cap_prm, p->cap_inh};
    if (restart_caps(&have) < 0) {
        snprintf(why, whylen, "cannot read this process's capabilities: %s", strerror(errno));
        return -1;
    }
    int ids_ok = same_ids(&ck, &real) || (userns && same_ids(&ck, &inns));
    int groups_ok = same_groups(&ck, &real) || (userns && same_groups(&ck, &inns));
    int caps_ok = want.eff == have.eff && want.prm == have.prm && want.inh == have.inh;
    if (ids_ok && groups_ok && caps_ok) return 0;
    size_t at = add(why, whylen, 0, "the checkpoint's process %d ", p->pid);
    const char *sep = "";
    if (!ids_ok && (ck.uid != real.uid || ck.euid != real.euid || ck.suid != real.suid)) {
        at = add(why, whylen, at, "ran as uid %u (euid %u, suid %u), this restart would run it as uid %u (euid %u, suid %u)",
                 ck.uid, ck.euid, ck.suid, real.uid, real.euid, real.suid);
        sep = "; it ";
    }
    if (!ids_ok && (ck.gid != real.gid || ck.egid != real.egid || ck.sgid != real.sgid)) {
        at = add(why, whylen, at, "%sran with gid %u (egid %u, sgid %u), this restart would give it gid %u (egid %u, sgid %u)", sep,
                 ck.gid, ck.egid, ck.sgid, real.gid, real.egid, real.sgid);
        sep = "; it ";
    }
    if (!ids_ok && !*sep) { /* the real ids agree, only the namespace's view differed: say it as ids */
        at = add(why, whylen, at, "ran as uid %u (euid %u, suid %u) gid %u (egid %u, sgid %u), which this restart cannot give", ck.uid,
                 ck.euid, ck.suid, ck.gid, ck.egid, ck.sgid);
        sep = "; it ";
    }
    if (!groups_ok) {
        at = add(why, whylen, at, "%shad %u supplementary group%s (XXH3 %016llx), this restart would give it %u (XXH3 %016llx)", sep,
                 ck.ngroups, ck.ngroups == 1 ? "" : "s", (unsigned long long)ck.groups_xxh3, real.ngroups,
                 (unsigned long long)real.groups_xxh3);
        sep = "; it ";
    }
    if (!caps_ok) {
        at = add(why, whylen, at,
                 "%shad capabilities effective %#llx permitted %#llx inheritable %#llx, this restart would give it %#llx %#llx %#llx", sep,
                 (unsigned long long)want.eff, (unsigned long long)want.prm, (unsigned long long)want.inh,
                 (unsigned long long)have.eff, (unsigned long long)have.prm, (unsigned long long)have.inh);
    }
    add(why, whylen, at, "; refused (restart it as the user it ran as, with the same groups and capabilities)");
    return -1;
}
