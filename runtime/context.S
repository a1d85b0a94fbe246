/* lz_save_context(struct lz_jmpctx *c): like setjmp, returns 0 when saving.
 * The restorer loads these registers and "returns" 1 from here in the
 * restored process (restorer/final_jump.S).  Layout: struct lz_jmpctx. */
    .text
    .globl lz_save_context
    .hidden lz_save_context
    .type lz_save_context, @function
lz_save_context:
    movq %rbx, 0(%rdi)
    movq %rbp, 8(%rdi)
    movq %r12, 16(%rdi)
    movq %r13, 24(%rdi)
    movq %r14, 32(%rdi)
    movq %r15, 40(%rdi)
    leaq 8(%rsp), %rax      /* rsp after our return */
    movq %rax, 48(%rdi)
    movq (%rsp), %rax       /* return address */
    movq %rax, 56(%rdi)
    stmxcsr 64(%rdi)
    fnstcw 68(%rdi)
    xorl %eax, %eax
    ret
    .size lz_save_context, .-lz_save_context
    .section .note.GNU-stack,"",@progbits
