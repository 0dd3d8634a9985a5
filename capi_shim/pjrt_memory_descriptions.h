/* pjrt-ref's declaration of the PJRT MemoryDescriptions extension (type 6).
 *
 * Written for pjrt-ref from the facts of OpenXLA's
 * xla/pjrt/c/pjrt_c_api_memory_descriptions_extension.h (names, field order,
 * types; extension version 1).
 *
 * Why a host wants it: a device description with no client behind it (the
 * devices of a topology, for ahead-of-time compiles:
 * `jax.experimental.topologies`) has no PJRT_Memory to list; jaxlib asks
 * this extension for the kinds of memory such a device has, and which one is
 * the default (pjrt_ref/capi/memory_descriptions_extension.py).
 *
 * Read twice like pjrt_c_api.h: by the C compiler and, without preprocessor
 * lines, by cffi's cdef parser.
 */
#ifndef PJRT_REF_PJRT_MEMORY_DESCRIPTIONS_H_
#define PJRT_REF_PJRT_MEMORY_DESCRIPTIONS_H_

typedef struct PJRT_MemoryDescription PJRT_MemoryDescription;

typedef struct PJRT_DeviceDescription_MemoryDescriptions_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  const PJRT_MemoryDescription* const* memory_descriptions;  /* out */
  size_t num_memory_descriptions;                            /* out */
  size_t default_memory_index;                               /* out; -1: no default */
} PJRT_DeviceDescription_MemoryDescriptions_Args;

typedef struct PJRT_MemoryDescription_Kind_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_MemoryDescription* memory_description;
  const char* kind;   /* out, as long as the description lives */
  size_t kind_size;   /* out */
  int kind_id;        /* out */
} PJRT_MemoryDescription_Kind_Args;

typedef struct PJRT_MemoryDescriptions_Extension {
  PJRT_Extension_Base base;
  PJRT_Error* (*PJRT_DeviceDescription_MemoryDescriptions)(
      PJRT_DeviceDescription_MemoryDescriptions_Args* args);
  PJRT_Error* (*PJRT_MemoryDescription_Kind)(PJRT_MemoryDescription_Kind_Args* args);
} PJRT_MemoryDescriptions_Extension;

#endif  /* PJRT_REF_PJRT_MEMORY_DESCRIPTIONS_H_ */
