/* A process between vfork and exec for long: the child runs on its
 * parent's memory until TRIG.1 exists, then execs /bin/true; the parent,
 * after reaping it, prints "reaped" and waits for TRIG.2.
 * Prints "ready" first.  Usage: vfork_wait TRIG */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    static char t1[4096], t2[4096];
    snprintf(t1, sizeof t1, "%s.1", argv[1]);
    snprintf(t2, sizeof t2, "%s.2", argv[1]);
    printf("ready\n");
    fflush(stdout);
    pid_t pid = vfork();
    if (pid == 0) {
        while (access(t1, F_OK) != 0) usleep(20000);
        execl("/bin/true", "true", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 1;
    printf("reaped\n");
    fflush(stdout);
    while (access(t2, F_OK) != 0) usleep(20000);
    return 0;
}
