/* The --encrypt-key of this process (remote_key.c): loaded once from the
 * option, held in one page of its own (locked, left out of core dumps,
 * wiped in a forked child), never written anywhere; only its fingerprint
 * goes to the job file and each commit object. */
#ifndef LZ_REMOTE_KEY_H
#define LZ_REMOTE_KEY_H
#include "s3_crypt.h"
#include "store.h"

/* --encrypt-key FILE: 0, or -1 having said why on one line ("CMD: ..."). */
int remote_key_load(const char *path, const char *cmd);
/* The key given, or NULL. */
const struct s3_key *remote_key(void);
/* Whether the key given fits a job (its job file's fingerprint, "" = a job
 * that does not encrypt): 0, or -1 with why.  `where` names the job's
 * checkpoints in the message ("the job in DIR", "s3://b/p"). */
int remote_key_fits(const char *fp, const char *where, char *why, size_t whylen);
#endif
