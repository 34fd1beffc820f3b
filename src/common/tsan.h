/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tsan.h - orderings that travel through sockets, told to ThreadSanitizer.
 *
 * When both ends of a TCP connection live in one process (loopback tests,
 * tools), a byte sent by one thread and received by another orders the two
 * threads: whatever the sender did before send() happened before whatever
 * the receiver does after recv(). The kernel carries that order, so TSan
 * cannot see it and reports the receiver's later use of memory the sender
 * read (a buffer refilled after the peer confirmed it has the bytes) as a
 * race. Each connection direction is one synchronisation object here: the
 * sender releases it after each send, the receiver acquires it after each
 * receive. The object is named by the connection's two endpoints, so only
 * the two ends of one connection (and rare hash collisions) are ordered.
 * The release comes before send(), and the kernel's copy out of the
 * buffer inside send() is not recorded as a read of this thread (it would
 * come after the release, and the receiver may act on the bytes before the
 * sender's thread runs again): a buffer changed while its send is in flight
 * is therefore not reported -- the engine's byte checks catch that.
 * In every other build these are empty inline functions.
 */
#ifndef TPX_COMMON_TSAN_H
#define TPX_COMMON_TSAN_H

#if defined(__SANITIZE_THREAD__)
#define TPX_TSAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TPX_TSAN_BUILD 1
#endif
#endif

#ifdef TPX_TSAN_BUILD
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
void AnnotateBenignRaceSized(const char *file, int line, const volatile void *addr, long size,
                             const char *desc);

/* Concurrent writes to [p, p + n) are expected (bytes thrown away, or the
 * same bytes written twice): not reported. */
#define tpx__tsan_benign(p, n) AnnotateBenignRaceSized(__FILE__, __LINE__, (p), (long)(n), "tpx")

/* One byte per (hashed) connection direction: only its address matters. */
extern char tpx__tsan_sync[4096];

static inline uint64_t tpx__tsan_addr_hash(const struct sockaddr_storage *a, socklen_t n,
                                           uint64_t h)
{
    const unsigned char *p = (const unsigned char *)a;
    for (socklen_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The sync object of the direction from -> to of fd's connection;
 * sending: from = this end. NULL if fd is not a connected socket. */
static inline void *tpx__tsan_sock_obj(int fd, int sending)
{
    struct sockaddr_storage l, r;
    socklen_t ln = sizeof(l), rn = sizeof(r);
    memset(&l, 0, sizeof(l));
    memset(&r, 0, sizeof(r));
    if (getsockname(fd, (struct sockaddr *)&l, &ln) != 0 ||
        getpeername(fd, (struct sockaddr *)&r, &rn) != 0)
        return NULL;
    uint64_t h = 14695981039346656037ull;
    h = sending ? tpx__tsan_addr_hash(&l, ln, h) : tpx__tsan_addr_hash(&r, rn, h);
    h = sending ? tpx__tsan_addr_hash(&r, rn, h) : tpx__tsan_addr_hash(&l, ln, h);
    return &tpx__tsan_sync[h % sizeof(tpx__tsan_sync)];
}

/* Just before send() on fd; tpx__tsan_send_end() right after it. */
static inline void tpx__tsan_send_begin(int fd)
{
    void *o = tpx__tsan_sock_obj(fd, 1);
    if (o != NULL)
        __tsan_release(o);
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
}

static inline void tpx__tsan_send_end(void) { AnnotateIgnoreReadsEnd(__FILE__, __LINE__); }

/* After bytes arrived through fd. */
static inline void tpx__tsan_sock_received(int fd)
{
    void *o = tpx__tsan_sock_obj(fd, 0);
    if (o != NULL)
        __tsan_acquire(o);
}
#else
static inline void tpx__tsan_send_begin(int fd) { (void)fd; }
#define tpx__tsan_benign(p, n) ((void)(p), (void)(n))
static inline void tpx__tsan_send_end(void) {}
static inline void tpx__tsan_sock_received(int fd) { (void)fd; }
#endif

#endif
