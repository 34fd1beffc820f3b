/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_replay.c - a main() for the fuzz targets in builds without
 * libFuzzer (gcc, the release and ASan presets): runs every file named on
 * the command line, or found in a named folder, through
 * LLVMFuzzerTestOneInput once. The seed corpus and any crash file saved by
 * libFuzzer replay this way under any compiler:
 *
 *   fuzz_wire_replay build/fuzz/tests/fuzz/artifacts/wire-crash-...
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    for (size_t got; buf != NULL && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            unsigned char *b = realloc(buf, cap *= 2);
            if (b == NULL)
                free(buf);
            buf = b;
        }
    }
    fclose(f);
    if (buf == NULL) {
        fprintf(stderr, "%s: out of memory\n", path);
        return -1;
    }
    /* An exact-size copy, as libFuzzer passes it, so that ASan sees
     * reads past the end. */
    unsigned char *in = malloc(n > 0 ? n : 1);
    if (in == NULL) {
        free(buf);
        return -1;
    }
    if (n > 0)
        memcpy(in, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(in, n);
    free(in);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            bad++;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad += run_file(argv[i]) != 0;
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
            bad += run_file(path) != 0;
            files++;
        }
        if (d != NULL)
            closedir(d);
    }
    printf("%s: %d inputs replayed, %d unreadable\n", argv[0], files, bad);
    return bad == 0 && files > 0 ? 0 : 1;
}
