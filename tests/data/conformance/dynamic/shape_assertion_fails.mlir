// The synthesized dimension size (3) breaks the file's shape assertion
// (JAX's check that an array of shape (2*b,) has an even size).
// RUN: stablehlo-translate --serialize --target=current %s | stablehlo-translate --deserialize | stablehlo-opt > %t.0
// RUN: stablehlo-opt %s > %t.1
// RUN: diff %t.0 %t.1

module @jit_even {
  func.func public @main(%arg0: tensor<?xf32> {mhlo.sharding = ""}) -> tensor<?xf32> {
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %c2 = stablehlo.constant dense<2> : tensor<i32>
    %0 = stablehlo.get_dimension_size %arg0, dim = 0 : (tensor<?xf32>) -> tensor<i32>
    %1 = stablehlo.remainder %0, %c2 : tensor<i32>
    %2 = stablehlo.compare  EQ, %1, %c0,  SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.custom_call @shape_assertion(%2, %1, %0) {api_version = 2 : i32, error_message = "Division had remainder {0} when computing the value of 'b' from {1} = 2*b. {placeholder} stays", has_side_effect = true} : (tensor<i1>, tensor<i32>, tensor<i32>) -> ()
    %3 = stablehlo.negate %arg0 : tensor<?xf32>
    return %3 : tensor<?xf32>
  }
}
