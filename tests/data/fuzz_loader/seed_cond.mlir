module @jit__lambda attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4xi32>) -> (tensor<4xi32> {jax.result_info = "result"}) {
    %0 = stablehlo.slice %arg0 [0:1] : (tensor<4xi32>) -> tensor<1xi32>
    %1 = stablehlo.reshape %0 : (tensor<1xi32>) -> tensor<i32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %2 = stablehlo.compare GT, %1, %c, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %3 = stablehlo.convert %2 : (tensor<i1>) -> tensor<i32>
    %4 = "stablehlo.case"(%3) ({
      %c_0 = stablehlo.constant dense<1> : tensor<i32>
      %5 = stablehlo.broadcast_in_dim %c_0, dims = [] : (tensor<i32>) -> tensor<4xi32>
      %6 = stablehlo.add %arg0, %5 : tensor<4xi32>
      stablehlo.return %6 : tensor<4xi32>
    }, {
      %c_0 = stablehlo.constant dense<1> : tensor<i32>
      %5 = stablehlo.broadcast_in_dim %c_0, dims = [] : (tensor<i32>) -> tensor<4xi32>
      %6 = stablehlo.subtract %arg0, %5 : tensor<4xi32>
      stablehlo.return %6 : tensor<4xi32>
    }) : (tensor<i32>) -> tensor<4xi32>
    return %4 : tensor<4xi32>
  }
}
