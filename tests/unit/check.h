/* check.h - minimal assertions for tpx unit tests (one process per test). */
#ifndef TPX_TEST_CHECK_H
#define TPX_TEST_CHECK_H
#include <stdio.h>
#include <stdlib.h>

static int check_failures;
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)
#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        if (va_ != vb_) {                                                                          \
            fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld != %lld)\n", __FILE__, __LINE__,  \
                    #a, #b, va_, vb_);                                                             \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)
#define CHECK_DONE()                                                                               \
    do {                                                                                           \
        if (check_failures) {                                                                      \
            fprintf(stderr, "%d check(s) failed\n", check_failures);                               \
            return 1;                                                                              \
        }                                                                                          \
        printf("ok\n");                                                                            \
        return 0;                                                                                  \
    } while (0)
#endif
