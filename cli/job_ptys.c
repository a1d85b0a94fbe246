/* Pseudo-terminals across the job's processes, checked by the supervisor
 * while every process is stopped: each process said (PEER, with
 * LZ_PTY_PEER) which pty masters it holds and which terminal ends it holds
 * without their master (runtime/rt_pty.c).  Every such terminal end's
 * master must be held by a process of the job, and each master by one
 * process only (the one that records its queues and settings). */
#include "job_ckpt.h"
#include <stdio.h>

static const struct part *master_holder(const struct sv_state *st, uint64_t index, const struct part *other)
{
    for (size_t i = 0; i < st->nparts; i++)
        for (int k = 0; k < st->parts[i].npeers; k++) {
            uint64_t v = st->parts[i].peers[k].ino;
            if ((v & LZ_PTY_PEER) && (v & LZ_PTY_PEER_MASTER) && (v & ~(LZ_PTY_PEER | LZ_PTY_PEER_MASTER)) == index &&
                &st->parts[i] != other)
                return &st->parts[i];
        }
    return NULL;
}

int jc_check_ptys(struct sv_state *st)
{
    for (size_t i = 0; i < st->nparts; i++)
        for (int k = 0; k < st->parts[i].npeers; k++) {
            const struct part *p = &st->parts[i];
            uint64_t v = p->peers[k].ino, index = v & ~(LZ_PTY_PEER | LZ_PTY_PEER_MASTER);
            if (!(v & LZ_PTY_PEER)) continue;
            const struct part *m = master_holder(st, index, (v & LZ_PTY_PEER_MASTER) ? p : NULL);
            if (!(v & LZ_PTY_PEER_MASTER) && !m) {
                jc_fail(st, p, "descriptor %d (/dev/pts/%llu) is the terminal end of a pseudo-terminal whose master no "
                        "process of the job holds: Lazarus restores pseudo-terminals the job made, and the terminal it "
                        "runs on", p->peers[k].fd, (unsigned long long)index);
                return -1;
            }
            if ((v & LZ_PTY_PEER_MASTER) && m) {
                jc_fail(st, p, "descriptor %d is the master of pseudo-terminal %llu, which process %d holds too: Lazarus "
                        "restores a master held by one process (close it in the other, as script(1) does after fork)",
                        p->peers[k].fd, (unsigned long long)index, m->pid);
                return -1;
            }
        }
    return 0;
}
