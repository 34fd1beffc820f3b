/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tpx_test.h - the one assertion style of the tpx C tests, with the
 * deadline and loopback-port helpers every test area needs.
 *
 * Two strengths of the same checks, each reporting
 * "[tag pid] FAIL file:line: CHECK(expression): message" on stderr:
 *
 *   CHECK(cond[, fmt, ...])  fatal: report, then `return 1` from the
 *   CHECK_EQ(a, b)           enclosing int function (a role, a case, a
 *   CHECK_OK(call)           helper whose caller TRYs it). CHECK_EQ prints
 *   CHECK_RC(call)           both values; CHECK_OK wants TPX_OK and prints
 *   FAIL(fmt, ...)           the status; CHECK_RC wants 0 and prints the rc.
 *   TRY(call)                a helper that failed has already said why.
 *
 *   EXPECT(cond[, fmt, ...]) non-fatal: report, count and go on; the test
 *   EXPECT_EQ(a, b)          ends with TEST_DONE(), which fails it if any
 *   ADD_FAILURE(fmt, ...)    check of this process failed ("ok" otherwise).
 *   TEST_DONE()
 *
 *   REQUIRE(cond[, fmt,...]) fatal for the process: report, exit(1); for
 *   REQUIRE_OK(call)         set-up inside helpers that cannot return an
 *                            error (void, or returning a value).
 *
 * Every failed check, fatal or not, is counted (test_failed()), per
 * process: a forked child counts its own. Messages are printf formats and
 * must be string literals. The tag (test_set_tag(); the program's name by
 * default) says which role of a multi-process test spoke.
 *
 * Header-only: the state below is a weak definition shared by every
 * translation unit of one test program. Area fixtures (harness.h,
 * transport_test.h, bs_test.h, ...) include this and add their own set-up.
 */
#ifndef TPX_TESTS_TPX_TEST_H
#define TPX_TESTS_TPX_TEST_H

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- state (one per process) ------------------------------------------------- */

__attribute__((weak)) int test_failures_; /* failed checks, fatal or not */
__attribute__((weak)) char test_tag_[96]; /* "" = the program's name */

static inline int test_failed(void)
{
    return __atomic_load_n(&test_failures_, __ATOMIC_RELAXED);
}

static inline void test_set_tag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void test_set_tag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(test_tag_, sizeof(test_tag_), fmt, ap);
    va_end(ap);
}

/* ---- reporting --------------------------------------------------------------- */

static inline void test_vsay_(const char *prefix, const char *fmt, va_list ap)
{
    char msg[2048];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    fprintf(stderr, "[%s %d] %s%s\n", test_tag_[0] ? test_tag_ : program_invocation_short_name,
            (int)getpid(), prefix, msg);
}

/* "[tag pid] message" on stderr. */
static inline void test_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void test_say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    test_vsay_("", fmt, ap);
    va_end(ap);
}

/* Count one failure and say where. `what` is the check (NULL for FAIL);
 * fmt starts with one '-' (the macros put it there so that a check
 * without a message still has a literal format), the rest is the message. */
static inline void test_fail_at(const char *file, int line, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline void test_fail_at(const char *file, int line, const char *what, const char *fmt, ...)
{
    __atomic_add_fetch(&test_failures_, 1, __ATOMIC_RELAXED);
    char head[512];
    snprintf(head, sizeof(head), "FAIL %s:%d: %s%s", file, line, what ? what : "",
             what && fmt[1] ? ": " : "");
    va_list ap;
    va_start(ap, fmt);
    test_vsay_(head, fmt + 1, ap);
    va_end(ap);
}

#define TEST_FAIL_(what, ...) test_fail_at(__FILE__, __LINE__, what, "-" __VA_ARGS__)

/* ---- fatal checks: return 1 from the enclosing function ------------------------ */

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        TEST_FAIL_(NULL, __VA_ARGS__);                                                             \
        return 1;                                                                                  \
    } while (0)
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            TEST_FAIL_("CHECK(" #cond ")", __VA_ARGS__);                                           \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        if (va_ != vb_) {                                                                          \
            TEST_FAIL_("CHECK_EQ(" #a ", " #b ")", "%lld != %lld", va_, vb_);                      \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
/* A tpx_status_t call that must return TPX_OK (needs tpx/tpx.h). */
#define CHECK_OK(call)                                                                             \
    do {                                                                                           \
        tpx_status_t st_ = (call);                                                                 \
        if (st_ != TPX_OK) {                                                                       \
            TEST_FAIL_("CHECK_OK(" #call ")", "%s (%d)", tpx_status_string(st_), (int)st_);             \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
/* An int call that must return 0. */
#define CHECK_RC(call)                                                                             \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != 0) {                                                                            \
            TEST_FAIL_("CHECK_RC(" #call ")", "rc %d", rc_);                                       \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
/* A helper that failed has already said why. */
#define TRY(call)                                                                                  \
    do {                                                                                           \
        if ((call) != 0)                                                                           \
            return 1;                                                                              \
    } while (0)

/* ---- non-fatal checks: count and go on; TEST_DONE() ends the test -------------- */

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            TEST_FAIL_("EXPECT(" #cond ")", __VA_ARGS__);                                          \
    } while (0)
#define EXPECT_EQ(a, b)                                                                            \
    do {                                                                                           \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        if (va_ != vb_)                                                                            \
            TEST_FAIL_("EXPECT_EQ(" #a ", " #b ")", "%lld != %lld", va_, vb_);                     \
    } while (0)
#define ADD_FAILURE(...) TEST_FAIL_(NULL, __VA_ARGS__)
#define TEST_DONE()                                                                                \
    do {                                                                                           \
        if (test_failed()) {                                                                       \
            test_say("%d check(s) failed", test_failed());                                         \
            return 1;                                                                              \
        }                                                                                          \
        printf("ok\n");                                                                            \
        return 0;                                                                                  \
    } while (0)

/* ---- fatal for the process: exit(1) --------------------------------------------- */

#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            TEST_FAIL_("REQUIRE(" #cond ")", __VA_ARGS__);                                         \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define REQUIRE_OK(call)                                                                           \
    do {                                                                                           \
        tpx_status_t st_ = (call);                                                                 \
        if (st_ != TPX_OK) {                                                                       \
            TEST_FAIL_("REQUIRE_OK(" #call ")", "%s (%d)", tpx_status_string(st_), (int)st_);           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* ---- deadlines (CLOCK_MONOTONIC) --------------------------------------------------- */

static inline uint64_t test_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
/* The deadline `ms` from now. */
static inline uint64_t test_deadline_ms(int64_t ms)
{
    return test_now_ns() + (uint64_t)ms * 1000000ull;
}
/* Milliseconds left until `deadline` (rounded up), 0 once it passed. */
static inline int test_ms_left(uint64_t deadline)
{
    uint64_t now = test_now_ns();
    if (now >= deadline)
        return 0;
    uint64_t ms = (deadline - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}
static inline double test_secs_since(uint64_t t0_ns)
{
    return (double)(test_now_ns() - t0_ns) / 1e9;
}
static inline double test_ms_since(uint64_t t0_ns)
{
    return (double)(test_now_ns() - t0_ns) / 1e6;
}

/* ---- resources and pseudo-random numbers ------------------------------------------ */

/* Entries of a directory other than . and .. (/proc/self/fd, /proc/self/task);
 * -1 if it cannot be read. */
static inline int test_count_dir(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}
/* Open fds of this process, without the one that counts them. */
static inline int test_fd_count(void)
{
    int n = test_count_dir("/proc/self/fd");
    return n < 0 ? -1 : n - 1;
}
static inline int test_thread_count(void)
{
    return test_count_dir("/proc/self/task");
}

/* xorshift64 (Marsaglia 13/7/17); *state must not be 0. */
static inline uint64_t test_xorshift64(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}
/* xorshift64* (12/25/27, then the multiplier); *state must not be 0. */
static inline uint64_t test_xorshift64s(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* ---- loopback ports -------------------------------------------------------------- */

/* A 127.0.0.1 TCP port that is free now and stays free for a while: one
 * below the kernel's ephemeral range, so that no connect() is given it as
 * its source port before the test binds it (a port from bind(0) can be),
 * with the next `extra` ports free too. -1 if none was found. */
static inline int test_free_ports(int extra)
{
    int lo = 32768;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f != NULL) {
        if (fscanf(f, "%d", &lo) != 1)
            lo = 32768;
        fclose(f);
    }
    unsigned seed = (unsigned)getpid() ^ (unsigned)test_now_ns();
    for (int i = 0; i < 1000 && lo > 21024 + extra; i++) {
        int p = 21000 + (int)(rand_r(&seed) % (unsigned)(lo - 21000 - extra));
        int ok = 1;
        for (int q = p; ok && q <= p + extra; q++) {
            int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            struct sockaddr_in a = {.sin_family = AF_INET,
                                    .sin_port = htons((uint16_t)q),
                                    .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
            ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
            if (fd >= 0)
                close(fd);
        }
        if (ok)
            return p;
    }
    return -1;
}
static inline int test_free_port(void)
{
    return test_free_ports(0);
}

#endif
