/* The `ctrainer` program. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    puts("ctrainer");
    return 0;
}
