/* The host's allocator, as isolated_runtime.c hands it to the shim's
 * malloc family (one_heap.c) in a link namespace of the shim's own. One
 * declaration for both sides: the layout must match exactly. */
#ifndef PJRT_REF_HOST_HEAP_H
#define PJRT_REF_HOST_HEAP_H

#include <stddef.h>

typedef struct {
    void* (*malloc)(size_t);
    void (*free)(void*);
    void* (*calloc)(size_t, size_t);
    void* (*realloc)(void*, size_t);
    int (*posix_memalign)(void**, size_t, size_t);
    void* (*aligned_alloc)(size_t, size_t);
    void* (*memalign)(size_t, size_t);
    size_t (*malloc_usable_size)(void*);
} pjrt_ref_heap_functions;

#endif
