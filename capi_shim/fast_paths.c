/* C fast paths: the few PJRT entry points a framework calls on every
 * execution, answered in C without entering Python.
 *
 * Why: JAX makes ~17 PJRT calls per jitted call. Entering Python for each
 * (GIL, cffi callback, Args view, handle lookup) costs microseconds, so a
 * call of `x + y` on scalars would spend more time in trivial queries ("how
 * many replicas?", "which device is this buffer on?", "is this just-born
 * event ready?") than in running the program. These answers are facts fixed when a handle is
 * made, so Python hands them to C once (pjrt_ref/capi/fast_paths.py) and the
 * slot wrapper answers from this table.
 *
 * The Python entry points stay the readable reference for every semantic
 * here; each fast path names its Python twin, and
 * tests/capi/test_capi_fast_paths.py checks that both give the same answers and
 * the same errors. A fast path only ever answers the easy, valid case: it
 * returns 0 ("not mine") for anything else (a handle not in this table, a
 * struct_size too small for a field, a NULL callback), and the call goes on
 * to Python, which validates and reports errors exactly as before. So a
 * stale, foreign or wrong-kind pointer still becomes the same PJRT error,
 * and no handle is ever dereferenced here: the table is keyed by address.
 *
 * The table holds:
 *  - facts about handles owned by Python (an executable's counts, a
 *    buffer's device, memory and deleted flag, a memory's kind): an entry
 *    exists exactly while Python's handle table (pjrt_ref/model/handles.py) has
 *    the handle, so a miss here is a miss there;
 *  - C-only ready events: a PJRT_Event* for work that is already complete
 *    without error (pjrt-ref computes synchronously, so that is every event
 *    Execute and the transfers hand out). Python creates them through
 *    `pjrt_ref_ready_event_new` and recognises them in its own handle
 *    lookups (they behave like `pjrt_ref.model.event.COMPLETE`); a destroyed one
 *    is quarantined like Python's handles, so a double destroy is an error
 *    rather than a hit on a recycled address;
 *  - buffers destroyed in C (PJRT_Buffer_Destroy): gone from the table at
 *    once, queued until Python's next entry drops its side (see
 *    `pjrt_ref_fast_PJRT_Buffer_Destroy`).
 *
 * Off (every call goes to Python) when PJRT_REF_LOG_API or PJRT_REF_STRICT
 * is set, so the API log and strict mode see every call, or with
 * PJRT_REF_FAST_PATHS=0.
 *
 * Included by the C source that build_shim.py generates (after
 * pjrt_c_api.h and the PJRT_Api declarations).
 */

enum pjrt_ref_fact_kind {
    PJRT_REF_FACT_NONE = 0,
    PJRT_REF_FACT_EXECUTABLE = 1,    /* PJRT_Executable* */
    PJRT_REF_FACT_BUFFER = 2,        /* PJRT_Buffer* */
    PJRT_REF_FACT_MEMORY = 3,        /* PJRT_Memory* */
    PJRT_REF_FACT_READY_EVENT = 4,   /* C-only PJRT_Event*, complete without error */
};

typedef struct pjrt_ref_fact {
    uintptr_t key;                   /* the handle's address; 0 empty, 1 deleted slot */
    int kind;
    union {
        struct { size_t num_replicas, num_partitions, num_outputs; } executable;
        struct { PJRT_Device* device; PJRT_Memory* memory; bool is_deleted, is_ready; } buffer;
        struct { const char* kind; size_t kind_size; } memory;   /* text owned by the Python Memory */
    };
} pjrt_ref_fact;

#define PJRT_REF_SLOT_EMPTY ((uintptr_t)0)
#define PJRT_REF_SLOT_DELETED ((uintptr_t)1)

static atomic_int pjrt_ref_fast_enabled;           /* pjrt_ref_fast_set_enabled */
static pthread_mutex_t pjrt_ref_facts_lock = PTHREAD_MUTEX_INITIALIZER;
static pjrt_ref_fact* pjrt_ref_facts;              /* open addressing, linear probing */
static size_t pjrt_ref_facts_capacity;             /* a power of two (or 0) */
static size_t pjrt_ref_facts_used;                 /* live + deleted slots */
static size_t pjrt_ref_ready_events;               /* live C-only events */

/* Freed C-only events stay allocated for this many more frees (as in
 * pjrt_ref/model/handles.py QUARANTINE), so their addresses are not reused soon. */
#define PJRT_REF_EVENT_QUARANTINE 8192
static void* pjrt_ref_event_quarantine[PJRT_REF_EVENT_QUARANTINE];
static size_t pjrt_ref_event_quarantine_next;

void pjrt_ref_fast_set_enabled(int on) { atomic_store(&pjrt_ref_fast_enabled, on != 0); }
int pjrt_ref_fast_is_enabled(void) { return atomic_load(&pjrt_ref_fast_enabled); }

/* Whether the caller's struct (of `struct_size` bytes) holds `field`. */
#define PJRT_REF_HAS(args, type, field) \
    ((args)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

/* splitmix64's finalizer: every bit of the address moves every bit of the
 * slot index (handles are 16-byte aligned allocations, often adjacent). */
static size_t pjrt_ref_hash(uintptr_t key) {
    uint64_t h = (uint64_t)key;
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    return (size_t)(h ^ (h >> 31));
}

/* The slot holding `key`, or NULL. Caller holds the lock. */
static pjrt_ref_fact* pjrt_ref_find(uintptr_t key) {
    if (pjrt_ref_facts_capacity == 0 || key <= PJRT_REF_SLOT_DELETED) return NULL;
    size_t mask = pjrt_ref_facts_capacity - 1;
    for (size_t i = pjrt_ref_hash(key) & mask;; i = (i + 1) & mask) {
        if (pjrt_ref_facts[i].key == key) return &pjrt_ref_facts[i];
        if (pjrt_ref_facts[i].key == PJRT_REF_SLOT_EMPTY) return NULL;
    }
}

/* Insert without checks into a table known to have room. Caller holds the lock. */
static pjrt_ref_fact* pjrt_ref_place(const pjrt_ref_fact* fact) {
    size_t mask = pjrt_ref_facts_capacity - 1;
    size_t i = pjrt_ref_hash(fact->key) & mask;
    while (pjrt_ref_facts[i].key > PJRT_REF_SLOT_DELETED) i = (i + 1) & mask;
    if (pjrt_ref_facts[i].key == PJRT_REF_SLOT_EMPTY) pjrt_ref_facts_used++;
    pjrt_ref_facts[i] = *fact;
    return &pjrt_ref_facts[i];
}

/* Keep the table at most half full (deleted slots count); 0 if out of memory. */
static int pjrt_ref_make_room(void) {
    if ((pjrt_ref_facts_used + 1) * 2 <= pjrt_ref_facts_capacity) return 1;
    size_t old_capacity = pjrt_ref_facts_capacity;
    pjrt_ref_fact* old = pjrt_ref_facts;
    size_t capacity = old_capacity ? old_capacity : 256;
    size_t live = 0;
    for (size_t i = 0; i < old_capacity; i++) live += old[i].key > PJRT_REF_SLOT_DELETED;
    while ((live + 1) * 4 > capacity) capacity *= 2;    /* rehash to at most a quarter full */
    pjrt_ref_fact* table = calloc(capacity, sizeof *table);
    if (table == NULL) return 0;
    pjrt_ref_facts = table;
    pjrt_ref_facts_capacity = capacity;
    pjrt_ref_facts_used = 0;
    for (size_t i = 0; i < old_capacity; i++)
        if (old[i].key > PJRT_REF_SLOT_DELETED) pjrt_ref_place(&old[i]);
    free(old);
    return 1;
}

/* Add or replace the entry for fact->key; 0 if out of memory (the fast
 * path then just misses and Python answers). */
static int pjrt_ref_put(const pjrt_ref_fact* fact) {
    pthread_mutex_lock(&pjrt_ref_facts_lock);
    pjrt_ref_fact* slot = pjrt_ref_find(fact->key);
    int ok = 1;
    if (slot != NULL) *slot = *fact;
    else if ((ok = pjrt_ref_make_room())) pjrt_ref_place(fact);
    pthread_mutex_unlock(&pjrt_ref_facts_lock);
    return ok;
}

/* A copy of the entry for `key` if it is of `kind`; 0 if there is none. */
static int pjrt_ref_lookup(const void* handle, int kind, pjrt_ref_fact* out) {
    pthread_mutex_lock(&pjrt_ref_facts_lock);
    pjrt_ref_fact* slot = pjrt_ref_find((uintptr_t)handle);
    int found = slot != NULL && slot->kind == kind;
    if (found) *out = *slot;
    pthread_mutex_unlock(&pjrt_ref_facts_lock);
    return found;
}

/* ---------------------------------------------- called from Python (handles.py) */
int pjrt_ref_fact_executable(uintptr_t key, size_t num_replicas, size_t num_partitions, size_t num_outputs) {
    pjrt_ref_fact fact = {.key = key, .kind = PJRT_REF_FACT_EXECUTABLE,
                          .executable = {num_replicas, num_partitions, num_outputs}};
    return pjrt_ref_put(&fact);
}

int pjrt_ref_fact_buffer(uintptr_t key, PJRT_Device* device, PJRT_Memory* memory, int is_deleted, int is_ready) {
    pjrt_ref_fact fact = {.key = key, .kind = PJRT_REF_FACT_BUFFER,
                          .buffer = {device, memory, is_deleted != 0, is_ready != 0}};
    return pjrt_ref_put(&fact);
}

int pjrt_ref_fact_memory(uintptr_t key, const char* kind, size_t kind_size) {
    pjrt_ref_fact fact = {.key = key, .kind = PJRT_REF_FACT_MEMORY, .memory = {kind, kind_size}};
    return pjrt_ref_put(&fact);
}

/* PJRT_Buffer_Delete and donation: the buffer's `is_deleted` fact changes. */
void pjrt_ref_fact_buffer_deleted(uintptr_t key) {
    pthread_mutex_lock(&pjrt_ref_facts_lock);
    pjrt_ref_fact* slot = pjrt_ref_find(key);
    if (slot != NULL && slot->kind == PJRT_REF_FACT_BUFFER) slot->buffer.is_deleted = true;
    pthread_mutex_unlock(&pjrt_ref_facts_lock);
}

/* PJRT_Buffer_Destroy answered in C (below): the buffer handles Python
 * still has to drop. Python takes them at its next entry (any Python entry
 * point, before it looks at a handle) with `pjrt_ref_take_destroyed`, so no
 * Python code sees such a handle as live. When the list is full, Destroy
 * goes to Python, which empties it first. */
#define PJRT_REF_DESTROYED_MAX 256
static uintptr_t pjrt_ref_destroyed[PJRT_REF_DESTROYED_MAX];
static atomic_size_t pjrt_ref_destroyed_count;     /* written under the lock */

size_t pjrt_ref_destroyed_pending(void) { return atomic_load(&pjrt_ref_destroyed_count); }

/* One destroyed buffer handle for Python to drop, or 0 if there is none. */
uintptr_t pjrt_ref_take_destroyed(void) {
    uintptr_t key = 0;
    pthread_mutex_lock(&pjrt_ref_facts_lock);
    size_t count = atomic_load(&pjrt_ref_destroyed_count);
    if (count > 0) {
        key = pjrt_ref_destroyed[count - 1];
        atomic_store(&pjrt_ref_destroyed_count, count - 1);
    }
    pthread_mutex_unlock(&pjrt_ref_facts_lock);
    return key;
}

/* Python destroyed a handle it owns: forget its facts. */
void pjrt_ref_fact_forget(uintptr_t key) {
    pthread_mutex_lock(&pjrt_ref_facts_lock);
    pjrt_ref_fact* slot = pjrt_ref_find(key);
    if (slot != NULL && slot->kind != PJRT_REF_FACT_READY_EVENT) slot->key = PJRT_REF_SLOT_DELETED;
    pthread_mutex_unlock(&pjrt_ref_facts_lock);
}

/* A new C-only PJRT_Event*, complete without error; NULL if out of memory. */
PJRT_Event* pjrt_ref_ready_event_new(void) {
    void* event = calloc(1, 16);
    if (event == NULL) return NULL;
    pjrt_ref_fact fact = {.key = (uintptr_t)event, .kind = PJRT_REF_FACT_READY_EVENT};
    pthread_mutex_lock(&pjrt_ref_facts_lock);
    int ok = pjrt_ref_make_room();
    if (ok) {
        pjrt_ref_place(&fact);
        pjrt_ref_ready_events++;
    }
    pthread_mutex_unlock(&pjrt_ref_facts_lock);
    if (!ok) {
        free(event);
        return NULL;
    }
    return (PJRT_Event*)event;
}

int pjrt_ref_is_ready_event(uintptr_t key) {
    pjrt_ref_fact fact;
    return pjrt_ref_lookup((const void*)key, PJRT_REF_FACT_READY_EVENT, &fact);
}

/* PJRT_Event_Destroy of a C-only event; 0 if `key` is not one. */
int pjrt_ref_ready_event_destroy(uintptr_t key) {
    void* evicted = NULL;
    pthread_mutex_lock(&pjrt_ref_facts_lock);
    pjrt_ref_fact* slot = pjrt_ref_find(key);
    int mine = slot != NULL && slot->kind == PJRT_REF_FACT_READY_EVENT;
    if (mine) {
        slot->key = PJRT_REF_SLOT_DELETED;
        pjrt_ref_ready_events--;
        size_t at = pjrt_ref_event_quarantine_next++ % PJRT_REF_EVENT_QUARANTINE;
        evicted = pjrt_ref_event_quarantine[at];
        pjrt_ref_event_quarantine[at] = (void*)key;
    }
    pthread_mutex_unlock(&pjrt_ref_facts_lock);
    free(evicted);
    return mine;
}

/* How many C-only events are alive (for handles.count and leak checks). */
size_t pjrt_ref_ready_event_count(void) {
    pthread_mutex_lock(&pjrt_ref_facts_lock);
    size_t n = pjrt_ref_ready_events;
    pthread_mutex_unlock(&pjrt_ref_facts_lock);
    return n;
}

/* ----------------------------------- PJRT_LoadedExecutable_Execute's plain case
 * Python runs every execution (pjrt_ref/capi/executable.py
 * `loaded_executable_execute`). This reads, in one call, what the plain case
 * needs from the caller's Args: one argument list, no `execute_device`, no
 * execute context for FFI handlers, and every array present. Reading those
 * fields through cffi one by one cost more than running `x + y` on scalars.
 * Returns 0 ("not plain") for anything else, and Python reads the struct
 * itself, validating and reporting errors as before. */
#define PJRT_REF_PLAIN_MAX_ARGS 64

typedef struct pjrt_ref_plain_execute {
    uintptr_t executable;                  /* the PJRT_LoadedExecutable* */
    size_t num_args;
    PJRT_Buffer** outputs;                 /* output_lists[0] */
    PJRT_Event** complete_events;          /* device_complete_events, or NULL */
    uintptr_t arguments[PJRT_REF_PLAIN_MAX_ARGS];   /* argument_lists[0] */
} pjrt_ref_plain_execute;

int pjrt_ref_read_plain_execute(const PJRT_LoadedExecutable_Execute_Args* args, pjrt_ref_plain_execute* out) {
    if (args == NULL || !PJRT_REF_HAS(args, PJRT_LoadedExecutable_Execute_Args, device_complete_events)
        || args->num_devices != 1 || args->num_args > PJRT_REF_PLAIN_MAX_ARGS
        || args->argument_lists == NULL || args->output_lists == NULL || args->output_lists[0] == NULL)
        return 0;
    if (PJRT_REF_HAS(args, PJRT_LoadedExecutable_Execute_Args, execute_device) && args->execute_device != NULL)
        return 0;
    const PJRT_ExecuteOptions* options = args->options;
    if (options != NULL && PJRT_REF_HAS(options, PJRT_ExecuteOptions, context) && options->context != NULL)
        return 0;
    PJRT_Buffer* const* row = args->argument_lists[0];
    if (args->num_args > 0 && row == NULL) return 0;
    for (size_t i = 0; i < args->num_args; i++) out->arguments[i] = (uintptr_t)row[i];
    out->executable = (uintptr_t)args->executable;
    out->num_args = args->num_args;
    out->outputs = args->output_lists[0];
    out->complete_events = args->device_complete_events;
    return 1;
}

/* ------------------------------------------------------------ the fast paths
 * Each returns 1 if it answered the call (outputs written, success), 0 to
 * let Python handle it. */

static int pjrt_ref_executable_fact(PJRT_Executable* executable, pjrt_ref_fact* fact) {
    return pjrt_ref_lookup(executable, PJRT_REF_FACT_EXECUTABLE, fact);
}

/* Python twin: pjrt_ref/capi/executable.py `_count_query` (num_replicas). */
static int pjrt_ref_fast_PJRT_Executable_NumReplicas(PJRT_Executable_NumReplicas_Args* args) {
    pjrt_ref_fact fact;
    if (args == NULL || !PJRT_REF_HAS(args, PJRT_Executable_NumReplicas_Args, num_replicas)
        || !pjrt_ref_executable_fact(args->executable, &fact)) return 0;
    args->num_replicas = fact.executable.num_replicas;
    return 1;
}

/* Python twin: pjrt_ref/capi/executable.py `_count_query` (num_partitions). */
static int pjrt_ref_fast_PJRT_Executable_NumPartitions(PJRT_Executable_NumPartitions_Args* args) {
    pjrt_ref_fact fact;
    if (args == NULL || !PJRT_REF_HAS(args, PJRT_Executable_NumPartitions_Args, num_partitions)
        || !pjrt_ref_executable_fact(args->executable, &fact)) return 0;
    args->num_partitions = fact.executable.num_partitions;
    return 1;
}

/* Python twin: pjrt_ref/capi/executable.py `_count_query` (num_outputs). */
static int pjrt_ref_fast_PJRT_Executable_NumOutputs(PJRT_Executable_NumOutputs_Args* args) {
    pjrt_ref_fact fact;
    if (args == NULL || !PJRT_REF_HAS(args, PJRT_Executable_NumOutputs_Args, num_outputs)
        || !pjrt_ref_executable_fact(args->executable, &fact)) return 0;
    args->num_outputs = fact.executable.num_outputs;
    return 1;
}

/* Python twin: pjrt_ref/capi/buffer.py `buffer_device`. */
static int pjrt_ref_fast_PJRT_Buffer_Device(PJRT_Buffer_Device_Args* args) {
    pjrt_ref_fact fact;
    if (args == NULL || !PJRT_REF_HAS(args, PJRT_Buffer_Device_Args, device)
        || !pjrt_ref_lookup(args->buffer, PJRT_REF_FACT_BUFFER, &fact)) return 0;
    args->device = fact.buffer.device;
    return 1;
}

/* Python twin: pjrt_ref/capi/buffer.py `buffer_memory`. */
static int pjrt_ref_fast_PJRT_Buffer_Memory(PJRT_Buffer_Memory_Args* args) {
    pjrt_ref_fact fact;
    if (args == NULL || !PJRT_REF_HAS(args, PJRT_Buffer_Memory_Args, memory)
        || !pjrt_ref_lookup(args->buffer, PJRT_REF_FACT_BUFFER, &fact)) return 0;
    args->memory = fact.buffer.memory;
    return 1;
}

/* Python twin: pjrt_ref/capi/buffer.py `buffer_destroy`. The handle leaves
 * this table now (so every later use of it is a miss here, and goes to
 * Python) and is queued for Python, which drops its own entry and deletes
 * the data at its next entry (pjrt_ref/capi/fast_paths.py
 * `finish_buffer_destroys`). */
static int pjrt_ref_fast_PJRT_Buffer_Destroy(PJRT_Buffer_Destroy_Args* args) {
    if (args == NULL || !PJRT_REF_HAS(args, PJRT_Buffer_Destroy_Args, buffer)) return 0;
    uintptr_t key = (uintptr_t)args->buffer;
    pthread_mutex_lock(&pjrt_ref_facts_lock);
    pjrt_ref_fact* slot = pjrt_ref_find(key);
    size_t count = atomic_load(&pjrt_ref_destroyed_count);
    int answered = slot != NULL && slot->kind == PJRT_REF_FACT_BUFFER && count < PJRT_REF_DESTROYED_MAX;
    if (answered) {
        slot->key = PJRT_REF_SLOT_DELETED;
        pjrt_ref_destroyed[count] = key;
        atomic_store(&pjrt_ref_destroyed_count, count + 1);
    }
    pthread_mutex_unlock(&pjrt_ref_facts_lock);
    return answered;
}

/* Python twin: pjrt_ref/capi/buffer.py `buffer_is_deleted`. */
static int pjrt_ref_fast_PJRT_Buffer_IsDeleted(PJRT_Buffer_IsDeleted_Args* args) {
    pjrt_ref_fact fact;
    if (args == NULL || !PJRT_REF_HAS(args, PJRT_Buffer_IsDeleted_Args, is_deleted)
        || !pjrt_ref_lookup(args->buffer, PJRT_REF_FACT_BUFFER, &fact)) return 0;
    args->is_deleted = fact.buffer.is_deleted;
    return 1;
}

/* Python twin: pjrt_ref/capi/buffer.py `buffer_is_on_cpu`: every pjrt-ref
 * buffer is host memory (jaxlib asks on each np.asarray of a result). */
static int pjrt_ref_fast_PJRT_Buffer_IsOnCpu(PJRT_Buffer_IsOnCpu_Args* args) {
    pjrt_ref_fact fact;
    if (args == NULL || !PJRT_REF_HAS(args, PJRT_Buffer_IsOnCpu_Args, is_on_cpu)
        || !pjrt_ref_lookup(args->buffer, PJRT_REF_FACT_BUFFER, &fact)) return 0;
    args->is_on_cpu = true;
    return 1;
}

/* Python twin: pjrt_ref/capi/buffer.py `buffer_ready_event`, for a buffer
 * born ready (its ready event is complete without error): a new C-only
 * ready event. A pending or failed buffer goes to Python. */
static int pjrt_ref_fast_PJRT_Buffer_ReadyEvent(PJRT_Buffer_ReadyEvent_Args* args) {
    pjrt_ref_fact fact;
    if (args == NULL || !PJRT_REF_HAS(args, PJRT_Buffer_ReadyEvent_Args, event)
        || !pjrt_ref_lookup(args->buffer, PJRT_REF_FACT_BUFFER, &fact) || !fact.buffer.is_ready) return 0;
    PJRT_Event* event = pjrt_ref_ready_event_new();
    if (event == NULL) return 0;
    args->event = event;
    return 1;
}

/* Python twin: the PJRT_Memory_Kind text query in pjrt_ref/capi/memory.py
 * (the same pointer: the text is owned by the Python Memory object). */
static int pjrt_ref_fast_PJRT_Memory_Kind(PJRT_Memory_Kind_Args* args) {
    pjrt_ref_fact fact;
    if (args == NULL || !PJRT_REF_HAS(args, PJRT_Memory_Kind_Args, kind_size)
        || !pjrt_ref_lookup(args->memory, PJRT_REF_FACT_MEMORY, &fact)) return 0;
    args->kind = fact.memory.kind;
    args->kind_size = fact.memory.kind_size;
    return 1;
}

static int pjrt_ref_ready_event(PJRT_Event* event) {
    return pjrt_ref_is_ready_event((uintptr_t)event);
}

/* Python twin: pjrt_ref/capi/event.py `event_destroy`. */
static int pjrt_ref_fast_PJRT_Event_Destroy(PJRT_Event_Destroy_Args* args) {
    if (args == NULL || !PJRT_REF_HAS(args, PJRT_Event_Destroy_Args, event)) return 0;
    return pjrt_ref_ready_event_destroy((uintptr_t)args->event);
}

/* Python twin: pjrt_ref/capi/event.py `event_is_ready`. */
static int pjrt_ref_fast_PJRT_Event_IsReady(PJRT_Event_IsReady_Args* args) {
    if (args == NULL || !PJRT_REF_HAS(args, PJRT_Event_IsReady_Args, is_ready)
        || !pjrt_ref_ready_event(args->event)) return 0;
    args->is_ready = true;
    return 1;
}

/* Python twin: pjrt_ref/capi/event.py `event_error` (no error: NULL). */
static int pjrt_ref_fast_PJRT_Event_Error(PJRT_Event_Error_Args* args) {
    return args != NULL && PJRT_REF_HAS(args, PJRT_Event_Error_Args, event) && pjrt_ref_ready_event(args->event);
}

/* Python twin: pjrt_ref/capi/event.py `event_await` (complete: returns at once). */
static int pjrt_ref_fast_PJRT_Event_Await(PJRT_Event_Await_Args* args) {
    return args != NULL && PJRT_REF_HAS(args, PJRT_Event_Await_Args, event) && pjrt_ref_ready_event(args->event);
}

/* Python twin: pjrt_ref/capi/event.py `event_on_ready`: the event is
 * complete, so the callback runs now, on this thread, with no error. No lock
 * is held while it runs (it may call back into the plugin, e.g. to destroy
 * the event). */
static int pjrt_ref_fast_PJRT_Event_OnReady(PJRT_Event_OnReady_Args* args) {
    if (args == NULL || !PJRT_REF_HAS(args, PJRT_Event_OnReady_Args, user_arg)
        || args->callback == NULL || !pjrt_ref_ready_event(args->event)) return 0;
    args->callback(NULL, args->user_arg);
    return 1;
}

/* Python twin: pjrt_ref/capi/error.py `error_destroy` (NULL is a no-op). */
static int pjrt_ref_fast_PJRT_Error_Destroy(PJRT_Error_Destroy_Args* args) {
    return args != NULL && PJRT_REF_HAS(args, PJRT_Error_Destroy_Args, error) && args->error == NULL;
}
