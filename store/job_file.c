/* DIR/job, the job's settings and state (store.h): a new job's identity, its
 * reading (every line checked, the last one the XXH3 of all before it) and
 * its atomic rewrite, and when the job stopped as a restart sees it. */
#include "store.h"
#include "tree.h"
#include "store_admin.h"
#include "codec.h"
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

void lz_job_new_id(uint64_t id[2])
{
    if (getrandom(id, 2 * sizeof *id, 0) != 2 * (ssize_t)sizeof *id) {
        /* no entropy source: time, pid and address still make it unique here */
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        id[0] = (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
        id[1] = ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)id;
    }
    if (!id[0] && !id[1]) id[1] = 1; /* 0 means "none" */
}

int64_t lz_job_stop_ns(const char *dir, const struct lz_job *job)
{
    char lock[LZ_PATH_MAX + 32];
    struct stat st;
    snprintf(lock, sizeof lock, "%s/%s", dir, LZ_LOCKFILE);
    int64_t beat = stat(lock, &st) == 0 ? (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec : -1;
    /* the supervisor's own record, exact, unless a process of the job (or a
     * later supervisor of it that died) dated the lock after it */
    if (strcmp(job->state, "running") && job->stopped_ns && beat <= job->stopped_ns) return job->stopped_ns;
    return beat >= 0 ? beat + 1000000000ll : INT64_MAX;
}

/* The job file ends with "check=<XXH3-64 of every byte before this line>". */
#define JOB_CHECK "check="

int lz_job_read(const char *dir, struct lz_job *job)
{
    char path[LZ_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dir, LZ_JOBFILE);
    memset(job, 0, sizeof *job);
    job->interval = 600;
    job->keep = 3;
    job->rolling_to = -1;
    size_t len;
    char *buf = lz_read_file(path, &len);
    if (!buf) return -1;
    char *nb = realloc(buf, len + 1); /* room for the terminating NUL */
    if (!nb) { free(buf); errno = ENOMEM; return -1; }
    buf = nb;
    buf[len] = 0;
    /* the checksum first: a damaged job file must not be read as settings */
    char *ck = len > 1 ? memrchr(buf, '\n', len - 1) : NULL;
    ck = ck ? ck + 1 : buf;
    char want[32];
    snprintf(want, sizeof want, JOB_CHECK "%016" PRIx64 "\n", lz_hash(buf, (size_t)(ck - buf)));
    if (strlen(want) != len - (size_t)(ck - buf) || memcmp(ck, want, strlen(want)) || strlen(buf) != len) {
        free(buf);
        errno = EBADMSG;
        return LZ_JOB_DAMAGED;
    }
    *ck = 0;
    int have_id = 0;
    char *save, *line = strtok_r(buf, "\n", &save);
    for (; line; line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq++ = 0;
        if (!strcmp(line, "id")) have_id = lz_job_id_parse(eq, job->id) == 0;
        else if (!strcmp(line, "interval")) lz_parse_u64(eq, &job->interval);
        else if (!strcmp(line, "keep")) lz_parse_u64(eq, &job->keep);
        else if (!strcmp(line, "state")) snprintf(job->state, sizeof job->state, "%s", eq);
        else if (!strcmp(line, "exit")) job->exit_status = atoi(eq);
        else if (!strcmp(line, "durability")) job->durability = !strcmp(eq, "machine");
        else if (!strcmp(line, "stopped_ns")) job->stopped_ns = strtoll(eq, NULL, 10);
        else if (!strcmp(line, "rolling_to")) job->rolling_to = strtoll(eq, NULL, 10);
        else if (!strcmp(line, "next_index")) lz_parse_u64(eq, &job->next_index);
        else if (!strcmp(line, "compress")) snprintf(job->compress, sizeof job->compress, "%s", eq);
        else if (!strcmp(line, "stdio")) job->job_stdio = !strcmp(eq, "job");
        else if (!strcmp(line, "tcp")) job->tcp_refuse = !strcmp(eq, "refuse");
        else if (!strcmp(line, "failed_index")) lz_parse_u64(eq, &job->failed_index);
        else if (!strcmp(line, "failed_ns")) job->failed_ns = strtoll(eq, NULL, 10);
        else if (!strcmp(line, "failed_why")) snprintf(job->failed_why, sizeof job->failed_why, "%s", eq);
        else if (!strcmp(line, "command")) snprintf(job->command, sizeof job->command, "%s", eq);
        else if (!strcmp(line, "command_hash")) job->command_hash = strtoull(eq, NULL, 16);
        else if (!strcmp(line, "remote")) snprintf(job->remote, sizeof job->remote, "%s", eq);
        else if (!strcmp(line, "remote_endpoint")) snprintf(job->remote_endpoint, sizeof job->remote_endpoint, "%s", eq);
        else if (!strcmp(line, "remote_ca")) snprintf(job->remote_ca, sizeof job->remote_ca, "%s", eq);
        else if (!strcmp(line, "remote_addressing")) snprintf(job->remote_addressing, sizeof job->remote_addressing, "%s", eq);
        else if (!strcmp(line, "remote_insecure")) job->remote_insecure = atoi(eq) != 0;
        else if (!strcmp(line, "keep_remote")) lz_parse_u64(eq, &job->keep_remote);
        else if (!strcmp(line, "encrypt_key")) snprintf(job->encrypt_fp, sizeof job->encrypt_fp, "%.16s", eq);
        else if (!strcmp(line, "stream")) job->stream = atoi(eq) != 0;
        else if (!strcmp(line, "journal_dir")) snprintf(job->journal_dir, sizeof job->journal_dir, "%s", eq);
        else if (!strcmp(line, "files_only")) job->files_only = atoi(eq) != 0;
        else if (!strcmp(line, "fs")) {
            size_t have = strlen(job->fs);
            if (have + strlen(eq) + 2 < sizeof job->fs) sprintf(job->fs + have, "%s%s", have ? "\n" : "", eq);
        }
        else if (!strcmp(line, "exclude")) {
            size_t have = strlen(job->excludes);
            if (have + strlen(eq) + 2 < sizeof job->excludes)
                sprintf(job->excludes + have, "%s%s", have ? "\n" : "", eq);
        }
    }
    free(buf);
    if (!have_id) { errno = EBADMSG; return LZ_JOB_DAMAGED; }
    return 0;
}

/* A value on one line of the job file: line breaks become spaces. */
static void one_line(char *out, size_t len, const char *s)
{
    snprintf(out, len, "%s", s);
    for (char *p = out; *p; p++) if (*p == '\n' || *p == '\r') *p = ' ';
}

int lz_job_write(const char *dir, const struct lz_job *job)
{
    char path[LZ_PATH_MAX + 32], tmp[LZ_PATH_MAX + 48], buf[16384];
    char compress[sizeof job->compress], failed[sizeof job->failed_why];
    snprintf(path, sizeof path, "%s/%s", dir, LZ_JOBFILE);
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, LZ_JOBFILE);
    one_line(compress, sizeof compress, job->compress);
    one_line(failed, sizeof failed, job->failed_why);
    char id[33];
    lz_job_id_text(id, job->id);
    int n = snprintf(buf, sizeof buf, "version=%u\nid=%s\ninterval=%" PRIu64 "\nkeep=%" PRIu64 "\nstate=%s\nexit=%d\n"
                     "durability=%s\nstopped_ns=%" PRId64 "\nrolling_to=%" PRId64 "\nnext_index=%" PRIu64 "\n"
                     "compress=%s\nstdio=%s\ntcp=%s\n",
                     LZ_VERSION, id, job->interval, job->keep, job->state, job->exit_status,
                     job->durability ? "machine" : "process", job->stopped_ns, job->rolling_to, job->next_index,
                     compress, job->job_stdio ? "job" : "launcher", job->tcp_refuse ? "refuse" : "reset");
    if (job->failed_index)
        n += snprintf(buf + n, sizeof buf - (size_t)n, "failed_index=%" PRIu64 "\nfailed_ns=%" PRId64 "\nfailed_why=%s\n",
                      job->failed_index, job->failed_ns, failed);
    if (job->command_hash) {
        char command[sizeof job->command];
        one_line(command, sizeof command, job->command);
        n += snprintf(buf + n, sizeof buf - (size_t)n, "command=%s\ncommand_hash=%016" PRIx64 "\n", command, job->command_hash);
    }
    if (*job->remote) {
        char r[sizeof job->remote], e[sizeof job->remote_endpoint], ca[sizeof job->remote_ca], a[sizeof job->remote_addressing];
        one_line(r, sizeof r, job->remote);
        one_line(e, sizeof e, job->remote_endpoint);
        one_line(ca, sizeof ca, job->remote_ca);
        one_line(a, sizeof a, job->remote_addressing);
        n += snprintf(buf + n, sizeof buf - (size_t)n, "remote=%s\nremote_endpoint=%s\nremote_ca=%s\nremote_addressing=%s\n"
                      "remote_insecure=%d\nkeep_remote=%" PRIu64 "\n", r, e, ca, a, job->remote_insecure, job->keep_remote);
        if (*job->encrypt_fp) n += snprintf(buf + n, sizeof buf - (size_t)n, "encrypt_key=%.16s\n", job->encrypt_fp);
        if (job->stream) n += snprintf(buf + n, sizeof buf - (size_t)n, "stream=1\n");
    }
    if (*job->journal_dir) {
        char jd[sizeof job->journal_dir];
        one_line(jd, sizeof jd, job->journal_dir);
        n += snprintf(buf + n, sizeof buf - (size_t)n, "journal_dir=%s\n", jd);
    }
    for (const char *p = job->excludes; *p && n < (int)sizeof buf - 1;) {
        const char *q = strchr(p, '\n');
        size_t l = q ? (size_t)(q - p) : strlen(p);
        n += snprintf(buf + n, sizeof buf - (size_t)n, "exclude=%.*s\n", (int)l, p);
        p += l + (q ? 1 : 0);
    }
    for (const char *p = job->fs; *p && n < (int)sizeof buf - 1;) {
        const char *q = strchr(p, '\n');
        size_t l = q ? (size_t)(q - p) : strlen(p);
        n += snprintf(buf + n, sizeof buf - (size_t)n, "fs=%.*s\n", (int)l, p);
        p += l + (q ? 1 : 0);
    }
    if (job->files_only && n < (int)sizeof buf - 1) n += snprintf(buf + n, sizeof buf - (size_t)n, "files_only=1\n");
    if (n >= (int)sizeof buf - 40) { errno = ENAMETOOLONG; return -1; }
    n += snprintf(buf + n, sizeof buf - (size_t)n, JOB_CHECK "%016" PRIx64 "\n", lz_hash(buf, (size_t)n));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    if (lz_write_all(fd, buf, (size_t)n) < 0 || fsync(fd) < 0) { close(fd); unlink(tmp); return -1; }
    close(fd);
    if (rename(tmp, path) < 0) { unlink(tmp); return -1; }
    return lz_fsync_dir(dir);
}
