/* Starts processes Lazarus cannot checkpoint (yet), for tests/test_job_processes.py.
 *   spawner child GOFILE        fork a child that waits for GOFILE, reap it, wait for GOFILE.2
 *   spawner exec STATIC GOFILE  print "ready", wait for GOFILE, exec STATIC (replaces the program)
 *   spawner noenv PROG          posix_spawn PROG with an empty environment, reap it
 *   spawner rawclone GOFILE     like child, but the child is made by the clone system call
 *                               itself (not fork(): no atfork handler runs in it)
 * Every mode prints "ready" when the state to test is in place, and "done" at the end. */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void wait_for(const char *path)
{
    while (access(path, F_OK) != 0) usleep(20000);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc == 3 && !strcmp(argv[1], "child")) {
        pid_t p = fork();
        if (p == 0) { wait_for(argv[2]); _exit(7); }
        printf("ready %d\n", p);
        int st;
        waitpid(p, &st, 0);
        printf("child exit %d\n", WEXITSTATUS(st));
        char again[4096];
        snprintf(again, sizeof again, "%s.2", argv[2]);
        wait_for(again);
    } else if (argc == 3 && !strcmp(argv[1], "rawclone")) {
        pid_t p = (pid_t)syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, 0);
        if (p == 0) { wait_for(argv[2]); _exit(7); }
        printf("ready %d\n", p);
        int st;
        waitpid(p, &st, 0);
        printf("child exit %d\n", WEXITSTATUS(st));
    } else if (argc == 4 && !strcmp(argv[1], "exec")) {
        printf("ready\n");
        wait_for(argv[3]);
        execl(argv[2], argv[2], (char *)0);
        perror("exec");
        return 1;
    } else if (argc == 3 && !strcmp(argv[1], "noenv")) {
        char *args[] = {argv[2], NULL}, *env[] = {NULL};
        pid_t p;
        if (posix_spawn(&p, argv[2], NULL, NULL, args, env) != 0) return 1;
        printf("ready\n");
        int st;
        waitpid(p, &st, 0);
    } else if (argc == 4 && !strcmp(argv[1], "forkexec")) {
        /* a child that execs PROG ARG with an empty environment */
        pid_t p = fork();
        if (p == 0) {
            char *args[] = {argv[2], argv[3], NULL}, *env[] = {NULL};
            execve(argv[2], args, env);
            _exit(127);
        }
        printf("ready %d\n", p);
        int st;
        waitpid(p, &st, 0);
        printf("child exit %d\n", WEXITSTATUS(st));
    } else {
        fprintf(stderr, "usage: spawner child GOFILE | rawclone GOFILE | exec STATIC GOFILE | noenv PROG | forkexec PROG ARG\n");
        return 2;
    }
    printf("done\n");
    return 0;
}
