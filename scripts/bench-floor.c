/* The least a launcher of chitti's shape can cost on this machine, for scripts/bench.sh.
 *
 * Built like chitti (a static, position-independent musl binary), it runs a command with
 * nothing enforced and no policy worked out, in one of two shapes:
 *
 *   bench-floor wrapper CMD...     fork (vfork), exec CMD, wait: any wrapper's floor.
 *   bench-floor supervised CMD...  fork a supervisor (a subreaper, as chitti's is), which
 *                                  vforks CMD in a new session, waits for it and anything
 *                                  it left, reports the status on a pipe and exits; the
 *                                  launcher reads the report and reaps the supervisor.
 *
 * The difference between the two is what a supervisor that outlives a killed launcher
 * costs by itself; between `supervised` and `chitti --backend none`, chitti's own work. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static int exit_code(int status) {
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* A wait status: the command's, or that of an exit 125 when it could not be started. */
static int run(char **argv, int new_session) {
    pid_t child = vfork();
    if (child < 0)
        return 125 << 8;
    if (child == 0) {
        if (new_session)
            setsid();
        execvp(argv[0], argv);
        _exit(127);
    }
    int status;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
}

int main(int argc, char **argv) {
    if (argc < 3 || (strcmp(argv[1], "wrapper") && strcmp(argv[1], "supervised")))
        return 2;
    if (!strcmp(argv[1], "wrapper"))
        return exit_code(run(argv + 2, 0));

    int report[2];
    if (pipe(report) < 0)
        return 125;
    pid_t supervisor = fork();
    if (supervisor < 0)
        return 125;
    if (supervisor == 0) {
        close(report[0]);
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        int status = run(argv + 2, 1);
        while (waitpid(-1, NULL, WNOHANG) > 0) {
        }
        (void)!write(report[1], &status, sizeof status);
        _exit(0);
    }
    close(report[1]);
    int status = 0;
    if (read(report[0], &status, sizeof status) != sizeof status)
        status = 125 << 8;
    waitpid(supervisor, NULL, 0);
    return exit_code(status);
}
