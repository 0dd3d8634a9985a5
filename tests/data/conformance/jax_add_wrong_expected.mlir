// A hand-written WRONG expected value: 1e30 + 1e30 is not 2.5e30 (index [1, 2]).
// @main calls @inputs and @expected and checks with @check.* custom calls.
// RUN: stablehlo-opt -inline %s | stablehlo-translate --interpret

module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<2x3xf32> {jax.result_info = ""}) {
    %0:2 = call @inputs() : () -> (tensor<2x3xf32>, tensor<2x3xf32>)
    %1 = call @expected() : () -> tensor<2x3xf32>
    %2 = stablehlo.add %0#0, %0#1 : tensor<2x3xf32>
    stablehlo.custom_call @check.expect_close(%2, %1) {has_side_effect = true} : (tensor<2x3xf32>, tensor<2x3xf32>) -> ()
    %3 = stablehlo.constant dense<[1, -2, 3]> : tensor<3xi32>
    %4 = stablehlo.constant dense<[1, -2, 3]> : tensor<3xi32>
    stablehlo.custom_call @check.expect_eq(%3, %4) {has_side_effect = true} : (tensor<3xi32>, tensor<3xi32>) -> ()
    %5 = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf64>
    %6 = stablehlo.constant dense<[1.0005, 2.0]> : tensor<2xf64>
    stablehlo.custom_call @check.expect_almost_eq(%5, %6) {has_side_effect = true} : (tensor<2xf64>, tensor<2xf64>) -> ()
    return %2 : tensor<2x3xf32>
  }
  func.func private @inputs() -> (tensor<2x3xf32>, tensor<2x3xf32>) {
    %cst = stablehlo.constant dense<[[1.0, 2.5, -3.0], [0.0, 0x7FC00000, 1.0e+30]]> : tensor<2x3xf32>
    %cst_0 = stablehlo.constant dense<[[0.5, 0.5, 3.0], [-0.0, 1.0, 1.0e+30]]> : tensor<2x3xf32>
    return %cst, %cst_0 : tensor<2x3xf32>, tensor<2x3xf32>
  }
  func.func private @expected() -> (tensor<2x3xf32>) {
    %cst = stablehlo.constant dense<[[1.5, 3.0, 0.0], [0.0, 0x7FC00000, 2.5e+30]]> : tensor<2x3xf32>
    return %cst : tensor<2x3xf32>
  }
}
