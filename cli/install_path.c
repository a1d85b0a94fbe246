/* Where the CLI finds the programs and the library it starts: relative to
 * its own executable (/proc/self/exe), so that a tree works wherever it is
 * put and for every user.  Two layouts:
 *   installed (`make install`, mk/install.mk): PREFIX/bin/lazarus,
 *     PREFIX/libexec/lazarus/lazarus-restore (and lazarus-fsd), PREFIX/lib/lazarus/liblazarus-rt.so
 *   the build tree: build/bin/lazarus, build/bin/lazarus-restore,
 *     build/lib/liblazarus-rt.so
 * Callers name the build tree's path; the installed one wins where it exists. */
#include "cli.h"
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const struct {
    const char *build, *installed;
} moved[] = {
    {"bin/lazarus-restore", "libexec/lazarus/lazarus-restore"},
    {"bin/lazarus-fsd", "libexec/lazarus/lazarus-fsd"}, /* the file system daemon (run --fs) */
    {"lib/" LZ_RUNTIME_LIB, "lib/lazarus/" LZ_RUNTIME_LIB},
};

const char *install_path(const char *rel)
{
    static char buf[8][PATH_MAX];
    static int slot;
    char prefix[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", prefix, sizeof prefix - 1);
    if (n < 0) return rel;
    prefix[n] = 0;
    for (int up = 0; up < 2; up++) { /* PREFIX/bin/lazarus -> PREFIX */
        char *slash = strrchr(prefix, '/');
        if (slash) *slash = 0;
    }
    char *b = buf[slot++ % 8];
    for (size_t i = 0; i < sizeof moved / sizeof moved[0]; i++) {
        if (strcmp(rel, moved[i].build)) continue;
        if (snprintf(b, PATH_MAX, "%s/%s", prefix, moved[i].installed) < PATH_MAX && access(b, F_OK) == 0) return b;
    }
    if (snprintf(b, PATH_MAX, "%s/%s", prefix, rel) >= PATH_MAX) return rel;
    return b;
}
