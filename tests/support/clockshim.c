// A clock that can step: adds an offset, read from the file that
// QUORLOCK_CLOCK_OFFSET_FILE names (milliseconds, may be negative), to the
// wall clock (gettimeofday, time, clock_gettime of the CLOCK_REALTIME
// clocks); the monotonic clocks are untouched. The real clock is read by
// the system call itself, and the file with raw system calls, so nothing
// here calls back into a hooked function (libfaketime recurses inside
// redis-server 7.0 and kills it at start).
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_ns;
static long long read_at_ns;

static long long monotonic_ns(void) {
    struct timespec now;
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

// Reads the offset file again at most every millisecond.
static long long offset(void) {
    long long now = monotonic_ns();
    long long last = __atomic_load_n(&read_at_ns, __ATOMIC_RELAXED);
    if (last != 0 && now - last < 1000000LL) {
        return __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&read_at_ns, now, __ATOMIC_RELAXED);
    const char *path = getenv("QUORLOCK_CLOCK_OFFSET_FILE");
    if (path == NULL) {
        return 0;
    }
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY);
    if (fd < 0) {
        return __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
    }
    char text[32];
    long n = syscall(SYS_read, fd, text, sizeof text - 1);
    syscall(SYS_close, fd);
    if (n <= 0) {
        return __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
    }
    text[n] = 0;
    long long ms = 0;
    int negative = 0, i = 0;
    if (text[0] == '-') {
        negative = 1;
        i = 1;
    }
    for (; text[i] >= '0' && text[i] <= '9'; i++) {
        ms = ms * 10 + (text[i] - '0');
    }
    long long value = (negative ? -ms : ms) * 1000000LL;
    __atomic_store_n(&offset_ns, value, __ATOMIC_RELAXED);
    return value;
}

int clock_gettime(clockid_t clock, struct timespec *tp) {
    int result = (int)syscall(SYS_clock_gettime, clock, tp);
    if (result == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        long long ns = (long long)tp->tv_sec * 1000000000LL + tp->tv_nsec + offset();
        tp->tv_sec = ns / 1000000000LL;
        tp->tv_nsec = ns % 1000000000LL;
    }
    return result;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (tv != NULL) {
        tv->tv_sec = now.tv_sec;
        tv->tv_usec = now.tv_nsec / 1000;
    }
    return 0;
}

time_t time(time_t *out) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (out != NULL) {
        *out = now.tv_sec;
    }
    return now.tv_sec;
}
