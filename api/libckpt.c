/* libckpt.so / libckpt.a: libckpt's interface (include/libckpt.h) on the
 * Lazarus C API, and the main() that brings a plainly started program under
 * Lazarus.
 *
 * How: main() execs `lazarus run -d DIR/PROG.lazarus -- PROG ARGS` (or, with
 * =recover, `lazarus restart -d ...`), and the same executable started again
 * under the supervisor, the runtime preloaded, calls ckpt_target.  A
 * checkpointer inside the process alone cannot be Lazarus: the runtime must
 * be loaded before the program's first instruction (its interposed libc
 * calls, the file journal from the start), and a supervisor outside the
 * process commits each checkpoint and outlives the program to report and to
 * restart.  exec keeps the PID, the terminal and the descriptors, so a
 * shell or batch script sees the same process and exit status. */
#include "libckpt.h"
#include "lazarus.h"
#include "ckptrc.h"
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

extern int ckpt_target(int argc, char **argv);

API void checkpoint_here(void) { lazarus_checkpoint_here(NULL); }

API void exclude_bytes(char *addr, int size, int usage)
{
    if (size <= 0) return;
    if (usage != CKPT_DEAD && usage != CKPT_READONLY) {
        fprintf(stderr, "libckpt: exclude_bytes: usage %d is neither CKPT_DEAD nor CKPT_READONLY; ignored\n", usage);
        return;
    }
    if (lazarus_exclude(addr, (size_t)size, usage == CKPT_DEAD ? LAZARUS_DEAD : LAZARUS_READONLY) < 0)
        fprintf(stderr, "libckpt: exclude_bytes(%p, %d): %s\n", (void *)addr, size, strerror(errno));
}

API void include_bytes(char *addr, int size)
{
    if (size <= 0) return;
    if (lazarus_include(addr, (size_t)size) < 0) fprintf(stderr, "libckpt: include_bytes(%p, %d): %s\n", (void *)addr, size, strerror(errno));
}

/* `lazarus`: $LAZARUS_BIN, next to this library (lib/../bin), the build's,
 * or the one in PATH. */
static const char *lazarus_path(void)
{
    static char path[PATH_MAX + 32];
    const char *env = getenv("LAZARUS_BIN");
    if (env && *env) return env;
    Dl_info info;
    if (dladdr((void *)lazarus_path, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash && strstr(info.dli_fname, "libckpt.so")) {
            snprintf(path, sizeof path, "%.*s/../bin/lazarus", (int)(slash - info.dli_fname), info.dli_fname);
            if (access(path, X_OK) == 0) return path;
        }
    }
#ifdef LZ_DEFAULT_BIN
    if (access(LZ_DEFAULT_BIN, X_OK) == 0) return LZ_DEFAULT_BIN;
#endif
    return "lazarus";
}

/* DIR holds checkpoints of a run that did not finish. */
static int unfinished(const char *store)
{
    DIR *d = opendir(store);
    if (!d) return 0;
    int ckpts = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "ckpt.", 5)) ckpts++;
    closedir(d);
    if (!ckpts) return 0;
    char job[2 * PATH_MAX + 400], buf[4096];
    snprintf(job, sizeof job, "%s/job", store);
    FILE *f = fopen(job, "r");
    if (!f) return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return !strstr(buf, "\nstate=finished\n");
}

API int main(int argc, char **argv)
{
    /* =recover comes out of the arguments the program sees */
    int recover = 0, n = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && !strcmp(argv[i], "=recover")) { recover = 1; continue; }
        argv[n++] = argv[i];
    }
    argv[n] = NULL;
    /* under Lazarus already (started, or restarted, by the supervisor) */
    if (getenv("LAZARUS_DIR") && dlsym(RTLD_DEFAULT, "lazarus_rt_checkpoint")) return ckpt_target(n, argv);
    struct lz_ckptrc rc;
    char why[600];
    if (lz_ckptrc_read(".ckptrc", &rc, why, sizeof why) < 0) {
        fprintf(stderr, "libckpt: %s\n", why);
        return 2;
    }
    if (rc.have_checkpointing && !rc.checkpointing) {
        if (recover) { fprintf(stderr, "libckpt: =recover: .ckptrc says checkpointing off\n"); return 2; }
        return ckpt_target(n, argv);
    }
    char exe[PATH_MAX], store[2 * PATH_MAX + 300];
    ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (l <= 0) { fprintf(stderr, "libckpt: cannot find the program's file: %s\n", strerror(errno)); return 1; }
    exe[l] = 0;
    const char *base = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
    snprintf(store, sizeof store, "%s/%s.lazarus", rc.have_dir ? rc.dir : ".", base);
    const char *lz = lazarus_path();
    if (recover) {
        char *args[] = {(char *)lz, "restart", "-d", store, NULL};
        execvp(lz, args);
    } else {
        if (unfinished(store)) {
            fprintf(stderr, "libckpt: %s holds checkpoints of a run that did not finish: `%s =recover` resumes it "
                            "(remove %s to start anew)\n", store, argv[0], store);
            return 1;
        }
        char **args = calloc((size_t)n + 8, sizeof *args);
        if (!args) return 1;
        int k = 0;
        args[k++] = (char *)lz; args[k++] = "run"; args[k++] = "-d"; args[k++] = store; args[k++] = "--";
        args[k++] = exe;
        for (int i = 1; i < n; i++) args[k++] = argv[i];
        args[k] = NULL;
        execvp(lz, args);
    }
    fprintf(stderr, "libckpt: cannot run %s (set LAZARUS_BIN to the lazarus program): %s\n", lz, strerror(errno));
    return 127;
}
