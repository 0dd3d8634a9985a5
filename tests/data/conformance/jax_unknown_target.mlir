// A custom call pjrt-ref does not know: the case is "unsupported".
module @jit_main {
  func.func public @main() -> tensor<2xf32> {
    %0 = call @inputs() : () -> tensor<2xf32>
    %1 = stablehlo.custom_call @no.such.target(%0) : (tensor<2xf32>) -> tensor<2xf32>
    stablehlo.custom_call @check.expect_close(%1, %0) {has_side_effect = true} : (tensor<2xf32>, tensor<2xf32>) -> ()
    return %1 : tensor<2xf32>
  }
  func.func private @inputs() -> tensor<2xf32> {
    %cst = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf32>
    return %cst : tensor<2xf32>
  }
}
