/* SPDX-License-Identifier: Apache-2.0 */
/*
 * status.c - status strings and the single errno -> tpx_status_t mapping.
 */
#include <errno.h>
#include <stddef.h>
#include <sys/random.h>

#include "util.h"

const char *tpx_status_string(tpx_status_t status)
{
    switch (status) {
    case TPX_OK: return "success";
    case TPX_INPROGRESS: return "in progress";
    case TPX_ERR_INVALID_ARG: return "invalid argument";
    case TPX_ERR_INVALID_STATE: return "invalid state";
    case TPX_ERR_NO_RESOURCE: return "no resource available (queue full)";
    case TPX_ERR_NO_MEMORY: return "out of memory";
    case TPX_ERR_UNSUPPORTED: return "unsupported";
    case TPX_ERR_CONFIG: return "invalid configuration";
    case TPX_ERR_TIMED_OUT: return "timed out";
    case TPX_ERR_CONN_REFUSED: return "connection refused";
    case TPX_ERR_CONN_RESET: return "connection closed by peer";
    case TPX_ERR_PROTOCOL: return "protocol error (malformed or unexpected data)";
    case TPX_ERR_TRUNCATED: return "message larger than the receive buffer";
    case TPX_ERR_UNREACHABLE: return "peer unreachable";
    case TPX_ERR_ADDR_IN_USE: return "address already in use";
    case TPX_ERR_NO_DEVICE: return "no usable device";
    case TPX_ERR_ACCESS: return "access refused by the peer (outside its exported memory)";
    case TPX_ERR_OVERFLOW: return "a bounded queue overflowed";
    case TPX_ERR_NOT_FOUND: return "not found";
    case TPX_ERR_IO: return "I/O error";
    case TPX_ERR_PLUGIN: return "net plugin error";
    case TPX_ERR_CUDA: return "CUDA error";
    case TPX_ERR_INTERNAL: return "internal error";
    case TPX_ERR_CANCELED: return "canceled";
    }
    return "unknown status";
}

const char *tpx_status_name(tpx_status_t status)
{
    switch (status) {
    case TPX_OK: return "TPX_OK";
    case TPX_INPROGRESS: return "TPX_INPROGRESS";
    case TPX_ERR_INVALID_ARG: return "TPX_ERR_INVALID_ARG";
    case TPX_ERR_INVALID_STATE: return "TPX_ERR_INVALID_STATE";
    case TPX_ERR_NO_RESOURCE: return "TPX_ERR_NO_RESOURCE";
    case TPX_ERR_NO_MEMORY: return "TPX_ERR_NO_MEMORY";
    case TPX_ERR_UNSUPPORTED: return "TPX_ERR_UNSUPPORTED";
    case TPX_ERR_CONFIG: return "TPX_ERR_CONFIG";
    case TPX_ERR_TIMED_OUT: return "TPX_ERR_TIMED_OUT";
    case TPX_ERR_CONN_REFUSED: return "TPX_ERR_CONN_REFUSED";
    case TPX_ERR_CONN_RESET: return "TPX_ERR_CONN_RESET";
    case TPX_ERR_PROTOCOL: return "TPX_ERR_PROTOCOL";
    case TPX_ERR_TRUNCATED: return "TPX_ERR_TRUNCATED";
    case TPX_ERR_UNREACHABLE: return "TPX_ERR_UNREACHABLE";
    case TPX_ERR_ADDR_IN_USE: return "TPX_ERR_ADDR_IN_USE";
    case TPX_ERR_NO_DEVICE: return "TPX_ERR_NO_DEVICE";
    case TPX_ERR_ACCESS: return "TPX_ERR_ACCESS";
    case TPX_ERR_OVERFLOW: return "TPX_ERR_OVERFLOW";
    case TPX_ERR_NOT_FOUND: return "TPX_ERR_NOT_FOUND";
    case TPX_ERR_IO: return "TPX_ERR_IO";
    case TPX_ERR_PLUGIN: return "TPX_ERR_PLUGIN";
    case TPX_ERR_CUDA: return "TPX_ERR_CUDA";
    case TPX_ERR_INTERNAL: return "TPX_ERR_INTERNAL";
    case TPX_ERR_CANCELED: return "TPX_ERR_CANCELED";
    }
    return "TPX_ERR_UNKNOWN";
}

tpx_status_t tpx__status_from_errno(int err)
{
    switch (err) {
    case 0: return TPX_OK;
    case EAGAIN:
#if EWOULDBLOCK != EAGAIN
    case EWOULDBLOCK:
#endif
    case EINPROGRESS:
    case EINTR: return TPX_INPROGRESS;
    case ENOMEM:
    case ENOBUFS: return TPX_ERR_NO_MEMORY;
    case EINVAL:
    case EBADF:
    case EFAULT:
    case EAFNOSUPPORT: return TPX_ERR_INVALID_ARG;
    case ETIMEDOUT: return TPX_ERR_TIMED_OUT;
    case ECONNREFUSED: return TPX_ERR_CONN_REFUSED;
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case ENOTCONN:
    case ESHUTDOWN: return TPX_ERR_CONN_RESET;
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
    case EHOSTDOWN:
    case EADDRNOTAVAIL: return TPX_ERR_UNREACHABLE;
    case EADDRINUSE: return TPX_ERR_ADDR_IN_USE;
    case EMFILE:
    case ENFILE: return TPX_ERR_NO_RESOURCE;
    case ENODEV: return TPX_ERR_NO_DEVICE;
    default: return TPX_ERR_IO;
    }
}

tpx_status_t tpx__random_bytes(void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return TPX_ERR_IO;
        }
        p += n;
        len -= (size_t)n;
    }
    return TPX_OK;
}
