/* add_program.c's one entry point. */
#ifndef PJRT_REF_TEST_ADD_PROGRAM_H
#define PJRT_REF_TEST_ADD_PROGRAM_H

/* Loads the plugin at plugin_path and runs `x + y` through it, printing each
 * step on stdout. Returns 0 when every step succeeded and the values were
 * right; a failed PJRT call prints its error and exits the process. */
int run_add_program(const char* plugin_path);

#endif
