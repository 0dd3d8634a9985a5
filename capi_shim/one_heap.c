/* One heap for the whole process, when the shim runs in a link namespace
 * of its own (capi_shim/isolated_runtime.c).
 *
 * dlmopen gives the new namespace its own copy of libc, and so its own
 * malloc. Memory then crosses between the two heaps: numpy arrays that the
 * host reads zero-copy and later frees, and the per-thread key blocks that
 * libc allocates when pjrt-ref's Python marks a host thread and that the
 * host's libc frees when that thread exits. Freeing a block in the wrong
 * heap aborts the process. So, in the namespace, this shim is the first
 * object, and its malloc family (which comes before libc's in the
 * namespace's symbol search, for libc's own calls too: glibc supports
 * replacing malloc) hands every call to the host's allocator.
 *
 * In the host's namespace (the shared runtime) these definitions are
 * inert: libc comes before an RTLD_LOCAL library in the lookup order.
 *
 * Until isolated_runtime.c passes the host's functions in (right after the
 * namespace is loaded, before Python starts), calls are served from a
 * small static arena whose blocks are never freed.
 *
 * Included by the C source build_shim.py generates.
 */

#include "host_heap.h"

static pjrt_ref_heap_functions pjrt_ref_host_heap;

/* The start-up arena: 16-byte aligned blocks, each after a 16-byte header
 * holding its size, so realloc can copy one out. */
static _Alignas(16) unsigned char pjrt_ref_arena[1 << 20];
static atomic_size_t pjrt_ref_arena_used;

static int pjrt_ref_in_arena(const void* p) {
    return (const unsigned char*)p >= pjrt_ref_arena
        && (const unsigned char*)p < pjrt_ref_arena + sizeof pjrt_ref_arena;
}

static void* pjrt_ref_arena_alloc(size_t size) {
    size_t need = 16 + ((size + 15) & ~(size_t)15);
    size_t at = atomic_fetch_add(&pjrt_ref_arena_used, need);
    if (at + need > sizeof pjrt_ref_arena) return NULL;
    *(size_t*)(pjrt_ref_arena + at) = size;
    return pjrt_ref_arena + at + 16;
}

static size_t pjrt_ref_arena_size(const void* p) {
    return *(const size_t*)((const unsigned char*)p - 16);
}

/* Called by isolated_runtime.c with the host libc's functions. */
__attribute__((visibility("default")))
void pjrt_ref_use_host_heap(const pjrt_ref_heap_functions* host) {
    pjrt_ref_host_heap = *host;
}

__attribute__((visibility("default"))) void* malloc(size_t size) {
    return pjrt_ref_host_heap.malloc ? pjrt_ref_host_heap.malloc(size) : pjrt_ref_arena_alloc(size);
}

__attribute__((visibility("default"))) void free(void* p) {
    if (p == NULL || pjrt_ref_in_arena(p)) return;
    pjrt_ref_host_heap.free(p);
}

__attribute__((visibility("default"))) void* calloc(size_t count, size_t size) {
    if (pjrt_ref_host_heap.calloc) return pjrt_ref_host_heap.calloc(count, size);
    if (size && count > SIZE_MAX / size) return NULL;
    return pjrt_ref_arena_alloc(count * size);   /* static storage: already zero */
}

__attribute__((visibility("default"))) void* realloc(void* p, size_t size) {
    if (p == NULL) return malloc(size);
    if (!pjrt_ref_in_arena(p)) return pjrt_ref_host_heap.realloc(p, size);
    void* moved = malloc(size);
    if (moved) {
        size_t old = pjrt_ref_arena_size(p);
        memcpy(moved, p, old < size ? old : size);
    }
    return moved;
}

__attribute__((visibility("default"))) int posix_memalign(void** out, size_t alignment, size_t size) {
    if (pjrt_ref_host_heap.posix_memalign) return pjrt_ref_host_heap.posix_memalign(out, alignment, size);
    if (alignment > 16) return ENOMEM;
    *out = pjrt_ref_arena_alloc(size);
    return *out ? 0 : ENOMEM;
}

__attribute__((visibility("default"))) void* aligned_alloc(size_t alignment, size_t size) {
    if (pjrt_ref_host_heap.aligned_alloc) return pjrt_ref_host_heap.aligned_alloc(alignment, size);
    return alignment <= 16 ? pjrt_ref_arena_alloc(size) : NULL;
}

__attribute__((visibility("default"))) void* memalign(size_t alignment, size_t size) {
    if (pjrt_ref_host_heap.memalign) return pjrt_ref_host_heap.memalign(alignment, size);
    return alignment <= 16 ? pjrt_ref_arena_alloc(size) : NULL;
}

__attribute__((visibility("default"))) void* valloc(size_t size) {
    return memalign((size_t)sysconf(_SC_PAGESIZE), size);
}

__attribute__((visibility("default"))) void* pvalloc(size_t size) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return memalign(page, (size + page - 1) / page * page);
}

__attribute__((visibility("default"))) size_t malloc_usable_size(void* p) {
    if (p == NULL) return 0;
    if (pjrt_ref_in_arena(p)) return pjrt_ref_arena_size(p);
    return pjrt_ref_host_heap.malloc_usable_size(p);
}
