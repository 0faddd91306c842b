/* The command the whole-process handoff benchmark (scripts/bench) runs under each lock: it
 * stamps CLOCK_MONOTONIC on entry, holds for HOLD_US microseconds, stamps again and appends
 * "entry_ns exit_ns" to LOG in one write (O_APPEND: lines from many processes never mix).
 * A shell `date` or an interpreter would cost more than the handoff it measures.
 * Usage: stamp LOG HOLD_US */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
    long long entry = now_ns();
    if (argc != 3) {
        fprintf(stderr, "usage: stamp LOG HOLD_US\n");
        return 2;
    }
    long hold = atol(argv[2]);
    struct timespec h = {hold / 1000000, (hold % 1000000) * 1000};
    nanosleep(&h, NULL);
    long long leave = now_ns();
    char line[64];
    int n = snprintf(line, sizeof line, "%lld %lld\n", entry, leave);
    int fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0 || write(fd, line, n) != n) {
        perror(argv[1]);
        return 1;
    }
    return 0;
}
