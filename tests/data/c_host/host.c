/* A PJRT host with no Python of its own: loads pjrt-ref's plugin library,
 * runs `x + y` on f32[4] through the PJRT C API and checks the result.
 *
 * Built and run by tests/capi/test_c_host.py:
 *   cc -I<dir with pjrt_ref_api.h> host.c add_program.c -ldl -o host && ./host <plugin.so>
 * Exit status 0 means every step succeeded and the values were right.
 */
#include <stdio.h>

#include "add_program.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <plugin.so>\n", argv[0]);
    return 2;
  }
  return run_add_program(argv[1]);
}
