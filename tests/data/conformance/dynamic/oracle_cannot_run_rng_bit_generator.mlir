// A dynamic case the reference interpreter cannot run: rng_bit_generator's
// bits are implementation-defined (spec), so it has no kernel for it.
// RUN: stablehlo-translate --serialize --target=current %s | stablehlo-translate --deserialize | stablehlo-opt > %t.0
// RUN: stablehlo-opt %s > %t.1
// RUN: diff %t.0 %t.1

module @jit_rng_bit_generator {
  func.func public @main(%arg0: tensor<i64>, %arg1: tensor<?x4xf32> {mhlo.sharding = ""}, %arg2: tensor<2xui64> {mhlo.sharding = ""}) -> (tensor<?x4xf32>, tensor<4xui32>) {
    %1, %0 = stablehlo.rng_bit_generator %arg2, algorithm = THREE_FRY : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui32>)
    return %arg1, %0 : tensor<?x4xf32>, tensor<4xui32>
  }
}
