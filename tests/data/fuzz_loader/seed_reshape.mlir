module @jit__lambda attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<2x3xf32>) -> (tensor<6xi32> {jax.result_info = "result"}) {
    %0 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
    %1 = stablehlo.reshape %0 : (tensor<3x2xf32>) -> tensor<6xf32>
    %2 = stablehlo.convert %1 : (tensor<6xf32>) -> tensor<6xi32>
    return %2 : tensor<6xi32>
  }
}
