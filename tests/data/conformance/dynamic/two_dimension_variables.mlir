// Shape-polymorphic in the style of JAX's exports: dimension variables a and
// b come first, then arrays of shape (a, b) and (a,) in several element types.
// RUN: stablehlo-translate --serialize --target=current %s | stablehlo-translate --deserialize | stablehlo-opt > %t.0
// RUN: stablehlo-opt %s > %t.1
// RUN: diff %t.0 %t.1

module @jit_poly {
  func.func public @main(%arg0: tensor<i64>, %arg1: tensor<i64>, %arg2: tensor<?x?xf32> {mhlo.sharding = ""}, %arg3: tensor<?xbf16> {mhlo.sharding = ""}, %arg4: tensor<?xi1> {mhlo.sharding = ""}, %arg5: tensor<?xui64> {mhlo.sharding = ""}, %arg6: tensor<?xcomplex<f32>> {mhlo.sharding = ""}) -> (tensor<?x?xf32>, tensor<?xbf16>, tensor<?xi1>, tensor<?xui64>, tensor<?xcomplex<f32>>, tensor<?xf32>) {
    %c1 = stablehlo.constant dense<1> : tensor<i64>
    %ok = stablehlo.compare  GE, %arg0, %c1,  SIGNED : (tensor<i64>, tensor<i64>) -> tensor<i1>
    stablehlo.custom_call @shape_assertion(%ok, %arg0) {api_version = 2 : i32, error_message = "Expected value >= 1 for dimension variable 'a', got {0}", has_side_effect = true} : (tensor<i1>, tensor<i64>) -> ()
    %0 = call @square_plus_row(%arg0, %arg1, %arg2) : (tensor<i64>, tensor<i64>, tensor<?x?xf32>) -> tensor<?x?xf32>
    %1 = stablehlo.exponential %arg3 : tensor<?xbf16>
    %2 = stablehlo.not %arg4 : tensor<?xi1>
    %big = stablehlo.constant dense<18446744073709551613> : tensor<ui64>
    %3 = stablehlo.convert %arg0 : (tensor<i64>) -> tensor<i32>
    %4 = stablehlo.reshape %3 : (tensor<i32>) -> tensor<1xi32>
    %5 = stablehlo.dynamic_broadcast_in_dim %big, %4, dims = [] : (tensor<ui64>, tensor<1xi32>) -> tensor<?xui64>
    %6 = stablehlo.add %arg5, %5 : tensor<?xui64>
    %7 = stablehlo.multiply %arg6, %arg6 : tensor<?xcomplex<f32>>
    %8 = stablehlo.dynamic_iota %4, dim = 0 : (tensor<1xi32>) -> tensor<?xf32>
    return %0, %1, %2, %6, %7, %8 : tensor<?x?xf32>, tensor<?xbf16>, tensor<?xi1>, tensor<?xui64>, tensor<?xcomplex<f32>>, tensor<?xf32>
  }
  func.func private @square_plus_row(%arg0: tensor<i64>, %arg1: tensor<i64>, %arg2: tensor<?x?xf32>) -> tensor<?x?xf32> {
    %0 = stablehlo.multiply %arg2, %arg2 : tensor<?x?xf32>
    %1 = stablehlo.get_dimension_size %arg2, dim = 1 : (tensor<?x?xf32>) -> tensor<i32>
    %2 = stablehlo.constant dense<0> : tensor<i32>
    %4 = stablehlo.reshape %1 : (tensor<i32>) -> tensor<1xi32>
    %8 = stablehlo.convert %arg0 : (tensor<i64>) -> tensor<i32>
    %9 = stablehlo.reshape %8 : (tensor<i32>) -> tensor<1xi32>
    %10 = stablehlo.concatenate %9, %4, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %11 = stablehlo.dynamic_slice %arg2, %2, %2, sizes = [1, 1] : (tensor<?x?xf32>, tensor<i32>, tensor<i32>) -> tensor<1x1xf32>
    %12 = stablehlo.dynamic_broadcast_in_dim %11, %10, dims = [0, 1] : (tensor<1x1xf32>, tensor<2xi32>) -> tensor<?x?xf32>
    %13 = stablehlo.add %0, %12 : tensor<?x?xf32>
    return %13 : tensor<?x?xf32>
  }
}
