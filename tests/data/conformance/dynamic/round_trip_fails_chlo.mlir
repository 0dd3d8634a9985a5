// A dynamic case whose round trip fails: portable artifacts hold no chlo ops.
// RUN: stablehlo-translate --serialize --target=current %s | stablehlo-translate --deserialize | stablehlo-opt > %t.0
// RUN: stablehlo-opt %s > %t.1
// RUN: diff %t.0 %t.1

module @jit_erf {
  func.func public @main(%arg0: tensor<i64>, %arg1: tensor<?x2xf32> {mhlo.sharding = ""}) -> tensor<?x2xf32> {
    %0 = chlo.erf %arg1 : tensor<?x2xf32> -> tensor<?x2xf32>
    return %0 : tensor<?x2xf32>
  }
}
