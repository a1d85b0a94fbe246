/* lz_final_jump(ctx, fs_base): installs the program's TLS base, loads the
 * callee-saved registers that lz_save_context() stored and "returns" 1 from
 * it in the restored program.  From the arch_prctl on, the restorer's own
 * libc (its TLS) is gone: nothing here touches memory but ctx. */
#include <asm/prctl.h>
#include <sys/syscall.h>
    .text
    .globl lz_final_jump
    .type lz_final_jump, @function
lz_final_jump:
    movq %rdi, %r12
    movl $SYS_arch_prctl, %eax
    movl $ARCH_SET_FS, %edi  /* %rsi = fs_base */
    syscall
    ldmxcsr 64(%r12)
    fldcw 68(%r12)
    movq 0(%r12), %rbx
    movq 8(%r12), %rbp
    movq 24(%r12), %r13
    movq 32(%r12), %r14
    movq 40(%r12), %r15
    movq 48(%r12), %rsp
    movq 56(%r12), %rcx
    movq 16(%r12), %r12
    movl $1, %eax
    jmp *%rcx
    .size lz_final_jump, .-lz_final_jump
    .section .note.GNU-stack,"",@progbits
