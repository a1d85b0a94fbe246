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

/* long rt_clone_call(unsigned long flags, void *stack_top, void (*fn)(void *), void *arg)
 * clone(2) onto a new stack, the child calling fn(arg) and then _exit(0);
 * returns the child's pid (or -errno) in the caller.  For a writer sharing
 * the program's memory (CLONE_VM): it needs a stack of its own. */
#include <sys/syscall.h>
	.text
	.globl rt_clone_call
	.hidden rt_clone_call
	.type rt_clone_call, @function
rt_clone_call:
	and $-16, %rsi
	sub $16, %rsi
	mov %rdx, (%rsi)
	mov %rcx, 8(%rsi)
	mov $SYS_clone, %eax    /* flags, newsp, parent_tid, child_tid, tls */
	xor %edx, %edx
	xor %r10d, %r10d
	xor %r8d, %r8d
	syscall
	test %rax, %rax
	jnz 1f
	pop %rax                /* the child, on its own stack */
	pop %rdi
	xor %ebp, %ebp
	call *%rax
	mov $SYS_exit, %eax
	xor %edi, %edi
	syscall
	hlt
1:	ret
	.size rt_clone_call, .-rt_clone_call
