// A dynamic case the reference interpreter cannot run (it has no fft).
// RUN: stablehlo-translate --serialize --target=current %s | stablehlo-translate --deserialize | stablehlo-opt > %t.0
// RUN: stablehlo-opt %s > %t.1
// RUN: diff %t.0 %t.1

module @jit_fft {
  func.func public @main(%arg0: tensor<i64>, %arg1: tensor<?x4xf32> {mhlo.sharding = ""}, %arg2: tensor<4xcomplex<f32>> {mhlo.sharding = ""}) -> (tensor<?x4xf32>, tensor<4xcomplex<f32>>) {
    %0 = stablehlo.fft %arg2, type =  FFT, length = [4] : (tensor<4xcomplex<f32>>) -> tensor<4xcomplex<f32>>
    return %arg1, %0 : tensor<?x4xf32>, tensor<4xcomplex<f32>>
  }
}
