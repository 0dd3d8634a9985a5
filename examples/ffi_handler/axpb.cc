// Two XLA FFI handlers, written against the header jaxlib ships
// (jax.ffi.include_dir()/xla/ffi/api/ffi.h), run by pjrt-ref as by XLA CPU.
//
//   Axpb:         y = a * x + b, elementwise, for float32 x; `a` and `b` are
//                 attributes (keyword arguments of jax.ffi.ffi_call).
//   SqrtOrError:  y = sqrt(x), or an error naming the first negative element;
//                 the error reaches Python as an exception with this message.
#include <cmath>
#include <cstddef>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

static ffi::Error AxpbImpl(float a, float b, ffi::Buffer<ffi::F32> x,
                           ffi::ResultBuffer<ffi::F32> y) {
  const float* in = x.typed_data();
  float* out = y->typed_data();
  for (size_t i = 0; i < x.element_count(); ++i) out[i] = a * in[i] + b;
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(Axpb, AxpbImpl,
                              ffi::Ffi::Bind()
                                  .Attr<float>("a")
                                  .Attr<float>("b")
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

static ffi::Error SqrtOrErrorImpl(ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y) {
  for (size_t i = 0; i < x.element_count(); ++i) {
    float value = x.typed_data()[i];
    if (value < 0) {
      return ffi::Error::InvalidArgument("SqrtOrError: element " + std::to_string(i) +
                                         " is negative (" + std::to_string(value) + ")");
    }
    y->typed_data()[i] = std::sqrt(value);
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(SqrtOrError, SqrtOrErrorImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
