/* `lazarus show threads` (show.h): every thread with two sets of registers.
 *
 * A thread is stopped inside the runtime's checkpoint handler.  lz_thread.ctx
 * is where it resumes there (lz_save_context(): the callee-saved set, with
 * fs/gs base and the handler's signal mask): "registers" in the document.
 * The program's own registers where the checkpoint signal interrupted it are
 * in the kernel's signal frame (ucontext_t) the handler got, on the thread's
 * stack or alternate signal stack, which is memory the checkpoint holds;
 * lz_thread.ucontext says where.  Those bytes are read from the image as the
 * restorer reads memory (store/image_read.c) and decoded as x86_64's
 * ucontext_t: "program" in the document.  An older image did not record the
 * address; memory the program excluded is not there: then "program" is null
 * and "program_reason" says why. */
#include "show.h"
#include "cli.h"
#include "image_read.h"
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>

/* the kernel's signal frame up to and with the first 64 signals of uc_sigmask
 * (glibc's ucontext_t has the kernel's layout up to there; its sigset is longer) */
#define FRAME_BYTES (offsetof(ucontext_t, uc_sigmask) + sizeof(uint64_t))

static const struct { const char *name; int reg; } gregs[] = {
    {"rip", REG_RIP}, {"rsp", REG_RSP}, {"rbp", REG_RBP}, {"rax", REG_RAX}, {"rbx", REG_RBX}, {"rcx", REG_RCX},
    {"rdx", REG_RDX}, {"rsi", REG_RSI}, {"rdi", REG_RDI}, {"r8", REG_R8}, {"r9", REG_R9}, {"r10", REG_R10},
    {"r11", REG_R11}, {"r12", REG_R12}, {"r13", REG_R13}, {"r14", REG_R14}, {"r15", REG_R15}, {"rflags", REG_EFL},
};
#define NGREGS (sizeof gregs / sizeof *gregs)

/* The program's registers of thread t: 0 with them in uc, or -1 with why. */
static int program_regs(const char *part, const struct lz_image *img, const struct lz_thread *t, ucontext_t *uc,
                        char *why, size_t whylen)
{
    memset(uc, 0, sizeof *uc);
    if (!t->ucontext) {
        snprintf(why, whylen, "not recorded (an image written before Lazarus recorded where the signal frame is)");
        return -1;
    }
    char inner[LZ_PATH_MAX + 800];
    int rc = lz_image_read(part, img, t->ucontext, uc, FRAME_BYTES, inner, sizeof inner);
    if (rc == 0) return 0;
    snprintf(why, whylen, "%s: its signal frame at 0x%" PRIx64 " %s%s", rc == LZ_NOT_HELD ? "not in the checkpoint" : "unreadable",
             t->ucontext, rc == LZ_NOT_HELD ? "is not held: " : "cannot be read: ", inner);
    return -1;
}

static uint64_t sigmask_of(const ucontext_t *uc)
{
    uint64_t m;
    memcpy(&m, &uc->uc_sigmask, sizeof m);
    return m;
}

static void json_thread(struct show *s, const struct lz_image *img, const struct lz_thread *t, const ucontext_t *uc,
                        const char *why)
{
    char name[17];
    snprintf(name, sizeof name, "%.16s", t->comm);
    jw_obj(&s->w, NULL);
    jw_i64(&s->w, "pid", img->proc->pid);
    jw_i64(&s->w, "tid", t->tid);
    jw_str(&s->w, "name", name);
    jw_bool(&s->w, "checkpointing", !!(t->flags & LZ_TH_CKPT));
    jw_u64(&s->w, "fs_base", t->fs_base);
    jw_u64(&s->w, "gs_base", t->gs_base);
    jw_u64(&s->w, "signal_mask", t->handler_sigmask);
    jw_obj(&s->w, "registers"); /* the handler's resume point */
    jw_u64(&s->w, "rip", t->ctx.rip);
    jw_u64(&s->w, "rsp", t->ctx.rsp);
    jw_u64(&s->w, "rbp", t->ctx.rbp);
    jw_u64(&s->w, "rbx", t->ctx.rbx);
    jw_u64(&s->w, "r12", t->ctx.r12);
    jw_u64(&s->w, "r13", t->ctx.r13);
    jw_u64(&s->w, "r14", t->ctx.r14);
    jw_u64(&s->w, "r15", t->ctx.r15);
    jw_u64(&s->w, "mxcsr", t->ctx.mxcsr);
    jw_u64(&s->w, "fpucw", t->ctx.fpucw);
    jw_end_obj(&s->w);
    if (why) {
        jw_null(&s->w, "program");
    } else {
        jw_obj(&s->w, "program");
        for (size_t i = 0; i < NGREGS; i++) jw_u64(&s->w, gregs[i].name, (uint64_t)uc->uc_mcontext.gregs[gregs[i].reg]);
        jw_u64(&s->w, "signal_mask", sigmask_of(uc));
        jw_u64(&s->w, "frame", t->ucontext);
        jw_end_obj(&s->w);
    }
    jw_str(&s->w, "program_reason", why);
    jw_end_obj(&s->w);
}

static void text_thread(const struct lz_image *img, const struct lz_thread *t, const ucontext_t *uc, const char *why)
{
    char name[17];
    snprintf(name, sizeof name, "%.16s", t->comm);
    printf("%7d %7d  %-16s 0x%016" PRIx64 " 0x%016" PRIx64 " 0x%016" PRIx64 " 0x%016" PRIx64 "  %s\n", img->proc->pid, t->tid,
           name, t->ctx.rip, t->ctx.rsp, t->ctx.rbp, t->fs_base, t->flags & LZ_TH_CKPT ? "(checkpointing)" : "");
    if (why) {
        printf("%17s program registers: %s\n", "", why);
        return;
    }
    printf("%17s program registers (signal frame at 0x%" PRIx64 "):\n", "", t->ucontext);
    for (size_t i = 0; i < NGREGS; i++)
        printf("%s%-6s 0x%016" PRIx64 "%s", i % 4 ? "  " : "                   ", gregs[i].name,
               (uint64_t)uc->uc_mcontext.gregs[gregs[i].reg], i % 4 == 3 ? "\n" : "");
    printf("  %-6s 0x%016" PRIx64 "\n", "sigmask", sigmask_of(uc));
}

void show_threads(struct show *s)
{
    show_heading(s, "THREADS (RIP, RSP, RBP: where each resumes in the runtime's checkpoint handler; below, the\n"
                    "program's own registers where the checkpoint signal interrupted it, from the signal frame)");
    if (s->json) jw_arr(&s->w, "threads");
    else printf("%7s %7s  %-16s %18s %18s %18s %18s  %s\n", "PID", "TID", "NAME", "RIP", "RSP", "RBP", "FS_BASE", "");
    EACH_LIVE(s, k, img) {
        char part[LZ_PATH_MAX + 128];
        lz_tree_part_dir(part, sizeof part, s->ckpt, &s->tree.procs[k]);
        for (size_t i = 0; i < img->nthreads; i++) {
            const struct lz_thread *t = &img->threads[i];
            ucontext_t uc;
            char why[LZ_PATH_MAX + 1024];
            int ok = program_regs(part, img, t, &uc, why, sizeof why) == 0;
            if (s->json) json_thread(s, img, t, &uc, ok ? NULL : why);
            else text_thread(img, t, &uc, ok ? NULL : why);
        }
    }
    if (s->json) jw_end_arr(&s->w);
}
