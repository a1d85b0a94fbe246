/* long lz_clone3_call(struct clone_args *args, size_t size, void (*fn)(void *), void *arg)
 * clone3(2) of a thread onto the stack the args name; the child calls fn(arg),
 * which never returns (it jumps into the restored program).  Returns the
 * child's TID (or -errno) in the caller.  fn and arg travel in callee-saved
 * registers: a clone3 child starts with the caller's registers. */
#include <sys/syscall.h>
    .text
    .globl lz_clone3_call
    .type lz_clone3_call, @function
lz_clone3_call:
    push %r12
    push %r13
    mov %rdx, %r12
    mov %rcx, %r13
    mov $SYS_clone3, %eax   /* args, size */
    syscall
    test %rax, %rax
    jnz 1f
    xor %ebp, %ebp          /* the child, on its own stack (16-aligned top) */
    mov %r13, %rdi
    call *%r12
    ud2
1:  pop %r13
    pop %r12
    ret
    .size lz_clone3_call, .-lz_clone3_call
    .section .note.GNU-stack,"",@progbits
