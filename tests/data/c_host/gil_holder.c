/* The deadlock's shape, as PyTorch/XLA makes it: a framework thread holds
 * Python's GIL while it waits, in C++, for a result that another of its
 * threads computes through the plugin. A Python host calls
 * run_add_program_on_a_thread through ctypes.PyDLL, which keeps the GIL for
 * the whole call; the program runs on a new thread meanwhile.
 *
 * A plugin that runs Python in the host's interpreter cannot answer that
 * thread: its entry points wait for the GIL the caller holds. pjrt-ref's
 * isolated runtime can (tests/capi/test_c_host.py).
 *
 *   cc -shared -fPIC -I<dir with pjrt_ref_api.h> gil_holder.c add_program.c -ldl -lpthread
 */
#include <pthread.h>
#include <stdint.h>

#include "add_program.h"

static void* run_on_this_thread(void* plugin_path) {
  return (void*)(intptr_t)run_add_program((const char*)plugin_path);
}

/* Runs add_program.c on a new thread and waits for it without releasing
 * whatever the caller holds. Returns the program's status. */
int run_add_program_on_a_thread(const char* plugin_path) {
  pthread_t thread;
  if (pthread_create(&thread, NULL, run_on_this_thread, (void*)plugin_path) != 0) return -1;
  void* status = NULL;
  pthread_join(thread, &status);
  return (int)(intptr_t)status;
}
