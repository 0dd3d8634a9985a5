// XLA FFI handlers for tests/frameworks/test_jax_ffi.py, written against
// jaxlib's xla/ffi/api/ffi.h. Each checks one part of what pjrt-ref hands a
// handler; the test compares their results with numpy.
#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

// ---------------------------------------------------------------- buffers
// sum = x + y and product = x * y for any of several element types: two
// operands, two results, the element type read from the buffers.
template <typename T>
static void AddMulTyped(const ffi::AnyBuffer& x, const ffi::AnyBuffer& y, ffi::AnyBuffer sum,
                        ffi::AnyBuffer product) {
  const T* a = x.typed_data<T>();
  const T* b = y.typed_data<T>();
  for (size_t i = 0; i < x.element_count(); ++i) {
    sum.typed_data<T>()[i] = a[i] + b[i];
    product.typed_data<T>()[i] = a[i] * b[i];
  }
}

static ffi::Error AddMulImpl(ffi::AnyBuffer x, ffi::AnyBuffer y, ffi::Result<ffi::AnyBuffer> sum,
                             ffi::Result<ffi::AnyBuffer> product) {
  if (x.element_type() != y.element_type() || x.element_count() != y.element_count())
    return ffi::Error::InvalidArgument("AddMul: operands differ in type or size");
  switch (x.element_type()) {
    case ffi::DataType::F32: AddMulTyped<float>(x, y, *sum, *product); break;
    case ffi::DataType::F64: AddMulTyped<double>(x, y, *sum, *product); break;
    case ffi::DataType::S8: AddMulTyped<int8_t>(x, y, *sum, *product); break;
    case ffi::DataType::S32: AddMulTyped<int32_t>(x, y, *sum, *product); break;
    case ffi::DataType::S64: AddMulTyped<int64_t>(x, y, *sum, *product); break;
    case ffi::DataType::U8: AddMulTyped<uint8_t>(x, y, *sum, *product); break;
    case ffi::DataType::U32: AddMulTyped<uint32_t>(x, y, *sum, *product); break;
    default: return ffi::Error::InvalidArgument("AddMul: unexpected element type");
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(AddMul, AddMulImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());

// The dimensions a handler sees: out[i] = dims[i] of the operand.
static ffi::Error ShapeOfImpl(ffi::AnyBuffer x, ffi::ResultBuffer<ffi::S64> out) {
  auto dims = x.dimensions();
  for (size_t i = 0; i < dims.size(); ++i) out->typed_data()[i] = dims[i];
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(ShapeOf, ShapeOfImpl,
                              ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().Ret<ffi::Buffer<ffi::S64>>());

// In place: the result aliased to the operand (input_output_aliases) is
// the operand's memory, holding its values; double it there.
static ffi::Error DoubleInPlaceImpl(ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> out) {
  if (x.typed_data() != out->typed_data())
    return ffi::Error::Internal("DoubleInPlace: the aliased result is not the operand's buffer");
  for (size_t i = 0; i < x.element_count(); ++i) out->typed_data()[i] *= 2;
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(DoubleInPlace, DoubleInPlaceImpl,
                              ffi::Ffi::Bind().Arg<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::F32>>());

// ---------------------------------------------------------------- attributes
// Every attribute kind, each decoded by its exact type (a wrong type is an
// error from ffi.h's decoding), written to a float64 result in this order:
//   flag i8 i16 i32 i64 u8 u16 u32 u64 f32 f64 len(name) name[0]
//   sum(dims) sum(weights) len(weights) options.k len(options.label)
static ffi::Error AttributesImpl(bool flag, int8_t i8, int16_t i16, int32_t i32, int64_t i64,
                                 uint8_t u8, uint16_t u16, uint32_t u32, uint64_t u64, float f32,
                                 double f64, std::string_view name, ffi::Span<const int64_t> dims,
                                 ffi::Span<const float> weights, ffi::Dictionary options,
                                 ffi::ResultBuffer<ffi::F64> out) {
  auto k = options.get<int32_t>("k");
  if (k.has_error()) return k.error();
  auto label = options.get<std::string_view>("label");
  if (label.has_error()) return label.error();
  double dims_sum = 0, weights_sum = 0;
  for (int64_t d : dims) dims_sum += d;
  for (float w : weights) weights_sum += w;
  double values[] = {double(flag), double(i8), double(i16), double(i32), double(i64),
                     double(u8), double(u16), double(u32), double(u64), double(f32), f64,
                     double(name.size()), name.empty() ? 0.0 : double(name[0]), dims_sum,
                     weights_sum, double(weights.size()), double(*k), double(label->size())};
  std::memcpy(out->typed_data(), values, sizeof values);
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(Attributes, AttributesImpl,
                              ffi::Ffi::Bind()
                                  .Attr<bool>("flag")
                                  .Attr<int8_t>("i8")
                                  .Attr<int16_t>("i16")
                                  .Attr<int32_t>("i32")
                                  .Attr<int64_t>("i64")
                                  .Attr<uint8_t>("u8")
                                  .Attr<uint16_t>("u16")
                                  .Attr<uint32_t>("u32")
                                  .Attr<uint64_t>("u64")
                                  .Attr<float>("f32")
                                  .Attr<double>("f64")
                                  .Attr<std::string_view>("name")
                                  .Attr<ffi::Span<const int64_t>>("dims")
                                  .Attr<ffi::Span<const float>>("weights")
                                  .Attr<ffi::Dictionary>("options")
                                  .Ret<ffi::Buffer<ffi::F64>>());

// ---------------------------------------------------------------- errors
static ffi::Error FailImpl(ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> out) {
  return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                    "Fail: refused " + std::to_string(x.element_count()) + " elements on purpose");
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(Fail, FailImpl,
                              ffi::Ffi::Bind().Arg<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::F32>>());

// ---------------------------------------------------------------- async
// Returns at once with a future that another thread completes: out = 2 * x,
// or an error for a negative element (the runtime waits for the future).
static ffi::Future AsyncDoubleImpl(ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> out) {
  ffi::Promise promise;
  ffi::Future future(promise);
  std::thread([promise, in = x.typed_data(), result = out->typed_data(),
               n = x.element_count()]() mutable {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (size_t i = 0; i < n; ++i) {
      if (in[i] < 0) {
        promise.SetError(ffi::Error::InvalidArgument("AsyncDouble: negative element"));
        return;
      }
      result[i] = 2 * in[i];
    }
    promise.SetAvailable();
  }).detach();
  return future;
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(AsyncDouble, AsyncDoubleImpl,
                              ffi::Ffi::Bind().Arg<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::F32>>());

// ---------------------------------------------------------------- context
// The execution context's services: a device ordinal, scratch memory from
// the runtime's allocator, and a task on its thread pool; out = [ordinal,
// scratch sum, task ran].
static ffi::Error ContextImpl(int32_t device_ordinal, ffi::ScratchAllocator scratch,
                              ffi::ThreadPool pool, ffi::ResultBuffer<ffi::F64> out) {
  auto memory = scratch.Allocate(4 * sizeof(double), alignof(double));
  if (!memory.has_value()) return ffi::Error::Internal("Context: no scratch memory");
  double* values = static_cast<double*>(*memory);
  for (int i = 0; i < 4; ++i) values[i] = i + 1;
  int ran = 0;
  pool.Schedule([&ran] { ran = 1; });
  out->typed_data()[0] = device_ordinal;
  out->typed_data()[1] = values[0] + values[1] + values[2] + values[3];
  out->typed_data()[2] = ran;
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(Context, ContextImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .Ctx<ffi::ThreadPool>()
                                  .Ret<ffi::Buffer<ffi::F64>>());

// ---------------------------------------------------------------- legacy
// api_version 0: XLA CPU's status-returning custom call (custom_call
// api_version 2), out[i] = in[0][i] + 1 for 4 floats; negative input fails.
// XlaCustomCallStatusSetFailure is the runtime's (pjrt-ref's bridge exports
// it globally); looked up when called, so that this library also loads in a
// process that has no runtime yet.
using SetFailure = void(void* status, const char* message, size_t size);

extern "C" void LegacyAddOne(void* out, const void** in, void* status) {
  const float* x = static_cast<const float*>(in[0]);
  for (int i = 0; i < 4; ++i) {
    if (x[i] < 0) {
      const char message[] = "LegacyAddOne: negative input";
      auto* set_failure =
          reinterpret_cast<SetFailure*>(dlsym(RTLD_DEFAULT, "XlaCustomCallStatusSetFailure"));
      if (set_failure != nullptr) set_failure(status, message, sizeof message - 1);
      return;
    }
    static_cast<float*>(out)[i] = x[i] + 1;
  }
}
