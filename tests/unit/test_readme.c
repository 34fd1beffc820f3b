/* The README's configuration table is the one the library prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/tpx_test.h"
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
    EXPECT(f != NULL);
    if (f == NULL)
        TEST_DONE();
    static char readme[1 << 20];
    size_t n = fread(readme, 1, sizeof(readme) - 1, f);
    fclose(f);
    readme[n] = '\0';
    char *b = strstr(readme, BEGIN), *e = b ? strstr(b, END) : NULL;
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
           "README.md's configuration table is out of date. Replace the lines "
           "between the config-table markers with:\n%s",
           want);
    free(want);
    TEST_DONE();
}
