/* /proc/PID/exe: the kernel lets a process name another executable
 * (PR_SET_MM_MAP's exe_fd, with CAP_CHECKPOINT_RESTORE) only while no
 * mapping of its current one is left.  The restorer is that executable, and
 * it has the capability only until it drops it before the program runs (an
 * ordinary user's restart: in its user namespace).  So each of its own
 * mappings of the file is replaced by an anonymous copy of itself, in place
 * (the same bytes at the same addresses, with mremap: the code running it
 * goes on unaware), after which restore_mm names the program's executable.
 * Single-threaded here: the fill threads are done, the program's threads
 * not made yet. */
#include "restorer.h"
#include "util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int restore_leave_exe(void)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return -1;
    self[n] = 0;
    size_t len;
    char *maps = lz_read_file("/proc/self/maps", &len);
    if (!maps) return -1;
    maps[len - 1] = 0;
    int rc = 0;
    for (char *l = maps; l && *l && rc == 0;) {
        char *nl = strchr(l, '\n');
        if (nl) *nl = 0;
        unsigned long a, b;
        char perm[5];
        const char *path = strchr(l, '/');
        if (path && !strcmp(path, self) && sscanf(l, "%lx-%lx %4s", &a, &b, perm) == 3) {
            int prot = (perm[0] == 'r' ? PROT_READ : 0) | (perm[1] == 'w' ? PROT_WRITE : 0) | (perm[2] == 'x' ? PROT_EXEC : 0);
            void *copy = mmap(NULL, b - a, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (copy == MAP_FAILED || !(prot & PROT_READ)) {
                rc = -1;
                if (copy != MAP_FAILED) munmap(copy, b - a);
            } else {
                memcpy(copy, (void *)a, b - a);
                if (mprotect(copy, b - a, prot) < 0 ||
                    mremap(copy, b - a, b - a, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)a) != (void *)a)
                    rc = -1; /* a failed mremap leaves the original in place */
            }
        }
        l = nl ? nl + 1 : NULL;
    }
    free(maps);
    return rc;
}
