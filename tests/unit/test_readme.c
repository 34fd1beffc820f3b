/* The README's configuration table is the one the library prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tpx/tpx.h"

#define BEGIN "<!-- config-table:begin -->\n"
#define END "<!-- config-table:end -->"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_readme README.md\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    CHECK(f != NULL);
    if (f == NULL)
        CHECK_DONE();
    static char readme[1 << 20];
    size_t n = fread(readme, 1, sizeof(readme) - 1, f);
    fclose(f);
    readme[n] = '\0';
    char *b = strstr(readme, BEGIN), *e = b ? strstr(b, END) : NULL;
    CHECK(b != NULL && e != NULL);
    if (b == NULL || e == NULL)
        CHECK_DONE();
    b += strlen(BEGIN);
    *e = '\0';

    char *want = NULL;
    size_t wlen = 0;
    FILE *m = open_memstream(&want, &wlen);
    tpx_config_print(m, 1);
    fclose(m);
    if (strcmp(b, want) != 0) {
        fprintf(stderr, "README.md's configuration table is out of date. Replace the lines "
                        "between the config-table markers with:\n%s", want);
        check_failures++;
    }
    free(want);
    CHECK_DONE();
}
