/* SPDX-License-Identifier: Apache-2.0 */
/* docs/config.md's configuration table is the one the library prints
 * (src/common/config_table.h). `test_config_doc --print` writes the table,
 * markers included, to paste between the markers after a setting changes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/tpx_test.h"
#include "tpx/tpx.h"

#define BEGIN "<!-- config-table:begin -->\n"
#define END "<!-- config-table:end -->"

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--print") == 0) {
        fputs(BEGIN, stdout);
        tpx_config_print(stdout, 1);
        puts(END);
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: test_config_doc docs/config.md | --print\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    EXPECT(f != NULL);
    if (f == NULL)
        TEST_DONE();
    static char doc[1 << 20];
    size_t n = fread(doc, 1, sizeof(doc) - 1, f);
    fclose(f);
    doc[n] = '\0';
    char *b = strstr(doc, BEGIN), *e = b ? strstr(b, END) : NULL;
    EXPECT(b != NULL && e != NULL);
    if (b == NULL || e == NULL)
        TEST_DONE();
    b += strlen(BEGIN);
    *e = '\0';

    char *want = NULL;
    size_t wlen = 0;
    FILE *m = open_memstream(&want, &wlen);
    tpx_config_print(m, 1);
    fclose(m);
    EXPECT(strcmp(b, want) == 0,
           "%s's configuration table is out of date. Replace the lines between the "
           "config-table markers with the output of `test_config_doc --print`:\n%s",
           argv[1], want);
    free(want);
    TEST_DONE();
}
