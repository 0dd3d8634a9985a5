/* The whole life of a PJRT program, as a host without Python lives it:
 * load a plugin library, run `x + y` on f32[4] through the PJRT C API, check
 * the result and destroy everything. Used by host.c (a C program) and
 * gil_holder.c (a library a Python host calls holding its GIL).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "add_program.h"
#include "pjrt_ref_api.h"   /* capi_shim/pjrt_c_api.h + the generated PJRT_Api */

static const PJRT_Api* api;   /* one plugin per process */

#define INIT_ARGS(type, name)      \
  type name;                       \
  memset(&name, 0, sizeof name);   \
  name.struct_size = sizeof name

static void check(PJRT_Error* error, const char* what) {
  if (error == NULL) return;
  INIT_ARGS(PJRT_Error_Message_Args, message);
  message.error = error;
  api->PJRT_Error_Message(&message);
  INIT_ARGS(PJRT_Error_GetCode_Args, code);
  code.error = error;
  api->PJRT_Error_GetCode(&code);
  fprintf(stderr, "%s failed (code %d): %.*s\n", what, (int)code.code,
          (int)message.message_size, message.message);
  exit(1);
}

static const char kProgram[] =
    "func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {\n"
    "  %0 = stablehlo.add %x, %y : tensor<4xf32>\n"
    "  return %0 : tensor<4xf32>\n"
    "}\n";

static PJRT_Buffer* upload(PJRT_Client* client, PJRT_Device* device, const float* data) {
  static const int64_t dims[1] = {4};
  INIT_ARGS(PJRT_Client_BufferFromHostBuffer_Args, args);
  args.client = client;
  args.data = data;
  args.type = PJRT_Buffer_Type_F32;
  args.dims = dims;
  args.num_dims = 1;
  args.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
  args.device = device;
  check(api->PJRT_Client_BufferFromHostBuffer(&args), "PJRT_Client_BufferFromHostBuffer");
  INIT_ARGS(PJRT_Event_Await_Args, await);
  await.event = args.done_with_host_buffer;
  check(api->PJRT_Event_Await(&await), "PJRT_Event_Await");
  INIT_ARGS(PJRT_Event_Destroy_Args, destroy);
  destroy.event = args.done_with_host_buffer;
  check(api->PJRT_Event_Destroy(&destroy), "PJRT_Event_Destroy");
  return args.buffer;
}

static void destroy_buffer(PJRT_Buffer* buffer) {
  INIT_ARGS(PJRT_Buffer_Destroy_Args, args);
  args.buffer = buffer;
  check(api->PJRT_Buffer_Destroy(&args), "PJRT_Buffer_Destroy");
}

int run_add_program(const char* plugin_path) {
  void* plugin = dlopen(plugin_path, RTLD_LAZY | RTLD_LOCAL);
  if (!plugin) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  const PJRT_Api* (*get_api)(void) = (const PJRT_Api* (*)(void))dlsym(plugin, "GetPjrtApi");
  if (!get_api || !(api = get_api())) {
    fprintf(stderr, "GetPjrtApi missing or returned NULL\n");
    return 1;
  }
  printf("PJRT API %d.%d, struct_size %zu\n", api->pjrt_api_version.major_version,
         api->pjrt_api_version.minor_version, api->struct_size);

  INIT_ARGS(PJRT_Plugin_Initialize_Args, init);
  check(api->PJRT_Plugin_Initialize(&init), "PJRT_Plugin_Initialize");

  INIT_ARGS(PJRT_Client_Create_Args, create);
  check(api->PJRT_Client_Create(&create), "PJRT_Client_Create");
  PJRT_Client* client = create.client;

  INIT_ARGS(PJRT_Client_PlatformName_Args, platform);
  platform.client = client;
  check(api->PJRT_Client_PlatformName(&platform), "PJRT_Client_PlatformName");
  printf("platform %.*s\n", (int)platform.platform_name_size, platform.platform_name);

  INIT_ARGS(PJRT_Client_AddressableDevices_Args, devices);
  devices.client = client;
  check(api->PJRT_Client_AddressableDevices(&devices), "PJRT_Client_AddressableDevices");
  if (devices.num_addressable_devices < 1) {
    fprintf(stderr, "no devices\n");
    return 1;
  }
  PJRT_Device* device = devices.addressable_devices[0];
  printf("%zu device(s)\n", devices.num_addressable_devices);

  PJRT_Program program;
  memset(&program, 0, sizeof program);
  program.struct_size = sizeof program;
  program.code = (char*)kProgram;
  program.code_size = strlen(kProgram);
  program.format = "mlir";
  program.format_size = 4;
  INIT_ARGS(PJRT_Client_Compile_Args, compile);
  compile.client = client;
  compile.program = &program;
  compile.compile_options = "";
  compile.compile_options_size = 0;
  check(api->PJRT_Client_Compile(&compile), "PJRT_Client_Compile");
  PJRT_LoadedExecutable* executable = compile.executable;

  const float x[4] = {1, 2, 3, 4}, y[4] = {10, 20, 30, 40};
  PJRT_Buffer* arguments[2] = {upload(client, device, x), upload(client, device, y)};
  PJRT_Buffer* const* argument_lists[1] = {arguments};
  PJRT_Buffer* outputs[1] = {NULL};
  PJRT_Buffer** output_lists[1] = {outputs};
  PJRT_Event* done[1] = {NULL};

  PJRT_ExecuteOptions options;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  INIT_ARGS(PJRT_LoadedExecutable_Execute_Args, execute);
  execute.executable = executable;
  execute.options = &options;
  execute.argument_lists = argument_lists;
  execute.num_devices = 1;
  execute.num_args = 2;
  execute.output_lists = output_lists;
  execute.device_complete_events = done;
  check(api->PJRT_LoadedExecutable_Execute(&execute), "PJRT_LoadedExecutable_Execute");
  INIT_ARGS(PJRT_Event_Await_Args, await);
  await.event = done[0];
  check(api->PJRT_Event_Await(&await), "PJRT_Event_Await");
  INIT_ARGS(PJRT_Event_Destroy_Args, destroy_event);
  destroy_event.event = done[0];
  check(api->PJRT_Event_Destroy(&destroy_event), "PJRT_Event_Destroy");

  float result[4] = {0};
  INIT_ARGS(PJRT_Buffer_ToHostBuffer_Args, to_host);
  to_host.src = outputs[0];
  to_host.dst = NULL;   /* first ask for the size */
  check(api->PJRT_Buffer_ToHostBuffer(&to_host), "PJRT_Buffer_ToHostBuffer(size)");
  if (to_host.dst_size != sizeof result) {
    fprintf(stderr, "dst_size %zu, expected %zu\n", to_host.dst_size, sizeof result);
    return 1;
  }
  to_host.dst = result;
  check(api->PJRT_Buffer_ToHostBuffer(&to_host), "PJRT_Buffer_ToHostBuffer");
  await.event = to_host.event;
  check(api->PJRT_Event_Await(&await), "PJRT_Event_Await");
  destroy_event.event = to_host.event;
  check(api->PJRT_Event_Destroy(&destroy_event), "PJRT_Event_Destroy");
  for (int i = 0; i < 4; ++i) {
    if (result[i] != x[i] + y[i]) {
      fprintf(stderr, "result[%d] = %g, expected %g\n", i, result[i], x[i] + y[i]);
      return 1;
    }
  }
  printf("result %g %g %g %g\n", result[0], result[1], result[2], result[3]);

  destroy_buffer(outputs[0]);
  destroy_buffer(arguments[0]);
  destroy_buffer(arguments[1]);
  INIT_ARGS(PJRT_LoadedExecutable_Destroy_Args, destroy_executable);
  destroy_executable.executable = executable;
  check(api->PJRT_LoadedExecutable_Destroy(&destroy_executable), "PJRT_LoadedExecutable_Destroy");
  INIT_ARGS(PJRT_Client_Destroy_Args, destroy_client);
  destroy_client.client = client;
  check(api->PJRT_Client_Destroy(&destroy_client), "PJRT_Client_Destroy");
  printf("ok\n");
  fflush(stdout);
  return 0;
}
