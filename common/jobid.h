/* The job's identity: 128 random bits made by `lazarus run`, kept in DIR/job
 * (`id=`, 32 hex digits) and written into every manifest, tree and journal,
 * so that a piece of another job's store is recognised.  Inline: the runtime
 * and the restorer link no helpers of the CLI. */
#ifndef LZ_JOBID_H
#define LZ_JOBID_H
#include <stdint.h>

static inline void lz_job_id_text(char out[33], const uint64_t id[2])
{
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) out[i] = hx[(id[i / 16] >> (4 * (15 - i % 16))) & 15];
    out[32] = 0;
}

/* 0, or -1 if s is not 32 lower-case hex digits naming a job (not all zero) */
static inline int lz_job_id_parse(const char *s, uint64_t id[2])
{
    id[0] = id[1] = 0;
    for (int i = 0; i < 32; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        id[i / 16] = id[i / 16] << 4 | (uint64_t)d;
    }
    return s[32] == 0 && (id[0] || id[1]) ? 0 : -1;
}
#endif
