// Runs a program under ptrace, one instruction at a time, following its forks, and writes
// to OUT (hex, one per line) the offset from the image base of every instruction address of the
// traced binary that executes, in the order each first executes. A process that execs
// another program is let go. scripts/startup-order.sh turns the output into a function
// order for the linker.
//
// Usage: startup-trace OUT PROGRAM ARGS...
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef __x86_64__
#error "startup-trace reads the x86_64 instruction pointer"
#endif

// The address range of the traced binary's mappings in the first process.
static unsigned long image_start, image_end;

static void find_image(pid_t pid) {
    char path[64], exe[4096], line[4608];
    snprintf(path, sizeof path, "/proc/%d/exe", pid);
    ssize_t n = readlink(path, exe, sizeof exe - 1);
    if (n < 0) {
        perror("readlink /proc/PID/exe");
        exit(1);
    }
    exe[n] = 0;
    snprintf(path, sizeof path, "/proc/%d/maps", pid);
    FILE *maps = fopen(path, "r");
    if (!maps) {
        perror("/proc/PID/maps");
        exit(1);
    }
    image_start = ~0UL;
    while (fgets(line, sizeof line, maps)) {
        unsigned long start, end;
        char *name = strchr(line, '/');
        if (sscanf(line, "%lx-%lx", &start, &end) != 2 || !name) continue;
        name[strcspn(name, "\n")] = 0;
        if (strcmp(name, exe) != 0) continue;
        if (start < image_start) image_start = start;
        if (end > image_end) image_end = end;
    }
    fclose(maps);
    if (image_end == 0) {
        fprintf(stderr, "startup-trace: %s is not mapped\n", exe);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: startup-trace OUT PROGRAM ARGS...\n");
        return 2;
    }
    FILE *out = fopen(argv[1], "ae");
    if (!out) {
        perror(argv[1]);
        return 1;
    }
    pid_t first = fork();
    if (first == 0) {
        ptrace(PTRACE_TRACEME, 0, 0, 0);
        execvp(argv[2], argv + 2);
        _exit(127);
    }
    int status;
    // Stopped right after exec: the image is mapped, nothing of it has run.
    waitpid(first, &status, 0);
    if (!WIFSTOPPED(status)) {
        fprintf(stderr, "startup-trace: %s did not start\n", argv[2]);
        return 1;
    }
    find_image(first);
    unsigned char *seen = calloc((image_end - image_start) / 8 + 1, 1);
    ptrace(PTRACE_SETOPTIONS, first, 0,
           PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACECLONE |
               PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL);
    ptrace(PTRACE_SINGLESTEP, first, 0, 0);
    int first_status = 1;
    for (;;) {
        pid_t pid = waitpid(-1, &status, __WALL);
        if (pid < 0) break;  // ECHILD: every traced process is gone
        if (WIFEXITED(status) || WIFSIGNALED(status)) {
            if (pid == first) first_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            continue;
        }
        if (!WIFSTOPPED(status)) continue;
        int signal = WSTOPSIG(status);
        int event = status >> 16;
        if (event == PTRACE_EVENT_EXEC) {
            // Another program now: not ours to trace.
            ptrace(PTRACE_DETACH, pid, 0, 0);
            continue;
        }
        if (event != 0 || signal == SIGTRAP || signal == SIGSTOP) {
            // A step, a fork event, or a new child's first stop.
            struct user_regs_struct regs;
            if (event == 0 && ptrace(PTRACE_GETREGS, pid, 0, &regs) == 0) {
                unsigned long ip = regs.rip;
                if (ip >= image_start && ip < image_end) {
                    unsigned long offset = ip - image_start;
                    if (!(seen[offset / 8] & (1 << (offset % 8)))) {
                        seen[offset / 8] |= 1 << (offset % 8);
                        fprintf(out, "%lx\n", offset);
                    }
                }
            }
            ptrace(PTRACE_SINGLESTEP, pid, 0, 0);
        } else {
            // A real signal: deliver it.
            ptrace(PTRACE_SINGLESTEP, pid, 0, signal);
        }
    }
    fclose(out);
    return first_status;
}
