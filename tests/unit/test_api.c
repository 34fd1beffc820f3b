/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_api.c - the library-level API: tpx_status_name() for every status,
 * the host's log callback (lines reach it and never stderr; the level
 * override), and the names kept for one release after a rename.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/tpx_test.h"
#include "all_status.h"
#include "tpx/gpu.h"
#include "tpx/tpx.h"

static int lines, errors;
static char last[1024];

static void on_log(void *arg, tpx_log_level_t level, const char *line)
{
    (void)arg;
    lines++;
    errors += level == TPX_LOG_ERROR;
    snprintf(last, sizeof(last), "%s", line);
}

int main(void)
{
    const tpx_status_t *all = test_all_status;
    for (size_t i = 0; i < TEST_NSTATUS; i++) {
        const char *n = tpx_status_name(all[i]);
        EXPECT(strncmp(n, "TPX_", 4) == 0 && strcmp(n, "TPX_ERR_UNKNOWN") != 0);
        for (size_t j = 0; j < i; j++)
            EXPECT(strcmp(n, tpx_status_name(all[j])) != 0);
    }
    EXPECT(strcmp(tpx_status_name(TPX_ERR_TIMED_OUT), "TPX_ERR_TIMED_OUT") == 0);
    EXPECT(strcmp(tpx_status_name(TPX_OK), "TPX_OK") == 0);
    EXPECT(strcmp(tpx_status_name((tpx_status_t)-999), "TPX_ERR_UNKNOWN") == 0);

    /* Log lines go to the callback, and nothing to stderr. */
    int saved = dup(2), pfd[2];
    EXPECT(saved >= 0 && pipe(pfd) == 0);
    dup2(pfd[1], 2);
    tpx_log_set_callback(on_log, NULL);
    tpx_engine_t *e = NULL;
    tpx_engine_params_t p;
    tpx_engine_params_init(&p);
    p.channels = -1; /* invalid: one ERROR line */
    tpx_status_t st = tpx_engine_create(&p, &e);
    int gpus = -1;
    (void)tpx_gpu_count(&gpus); /* no GPU here is an answer, not a line on stderr */
    int after_cb = lines;
    tpx_log_set_level(TPX_LOG_NONE);
    (void)tpx_engine_create(&p, &e);
    int after_none = lines;
    tpx_log_set_level(TPX_LOG_WARN);
    tpx_log_set_callback(NULL, NULL);
    fflush(stderr);
    dup2(saved, 2);
    close(pfd[1]);
    fcntl(pfd[0], F_SETFL, O_NONBLOCK);
    char buf[512];
    ssize_t n = read(pfd[0], buf, sizeof(buf));
    close(pfd[0]);
    EXPECT_EQ(st, TPX_ERR_INVALID_ARG);
    EXPECT(e == NULL);
    EXPECT(after_cb >= 1 && errors >= 1);
    EXPECT(strstr(last, "ERROR") != NULL && strstr(last, "engine") != NULL && !strchr(last, '\n'));
    EXPECT_EQ(after_none, after_cb); /* TPX_LOG_NONE: not even errors */
    if (n > 0)
        fprintf(stderr, "stderr got: %.*s\n", (int)n, buf);
    EXPECT(n <= 0);

    /* params.auth_token: 255 bytes are taken, 256 refused (never cut) */
    {
        static char tok[257];
        memset(tok, 'k', 256);
        tpx_log_set_level(TPX_LOG_NONE);
        tpx_engine_params_init(&p);
        p.port = TPX_PORT_NONE;
        p.auth_token = tok;
        e = NULL;
        EXPECT_EQ(tpx_engine_create(&p, &e), TPX_ERR_CONFIG);
        EXPECT(e == NULL);
        tok[255] = '\0';
        EXPECT_EQ(tpx_engine_create(&p, &e), TPX_OK);
        tpx_engine_destroy(e);
        tpx_log_set_level(TPX_LOG_WARN);
    }

    tpx_log_set_level(TPX_LOG_NONE); /* the NULL arguments below are logged */
    tpx_remote_t *rm = NULL;
    EXPECT_EQ(tpx_remote_load(NULL, "x", 1, &rm), TPX_ERR_INVALID_ARG);
    EXPECT(rm == NULL);
    TEST_DONE();
}
