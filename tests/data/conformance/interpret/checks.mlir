// Hand-written in the shape of StableHLO's interpreter tests.
// RUN: stablehlo-translate --interpret -split-input-file %s

func.func @eq_const_passes() {
  %0 = stablehlo.constant dense<[-2, 0, 2]> : tensor<3xi64>
  %1 = stablehlo.add %0, %0 : tensor<3xi64>
  check.expect_eq_const %1, dense<[-4, 0,
                                   4]> : tensor<3xi64>
  check.expect_eq %0, %0 : tensor<3xi64>
  func.return
}

// -----

func.func @float_checks_pass() {
  %0 = stablehlo.constant dense<[1.0, 0x7FC00000, -0.0]> : tensor<3xf32>
  %1 = stablehlo.constant dense<[1.00001, 0x7FC00000, 0.0]> : tensor<3xf32>
  check.expect_almost_eq %0, %1 : tensor<3xf32>
  check.expect_almost_eq %0, %1, tolerance = 0.1 : tensor<3xf32>
  check.expect_almost_eq_const %0, dense<[1.0, 0x7FC00000, 0.0]> : tensor<3xf32>, tolerance = 0.001
  check.expect_almost_eq_const %0, dense<[1.0, 0x7FC00000, 0.0]> : tensor<3xf32> {tolerance = 0.001 : f64}
  %2 = stablehlo.constant dense<5.000000e+00> : tensor<f16>
  %3 = stablehlo.constant dense<5.007810e+00> : tensor<f16>
  check.expect_close %2, %3, max_ulp_difference = 3 : tensor<f16>, tensor<f16>
  "check.expect_eq_const"(%2) <{value = dense<5.0> : tensor<f16>}> : (tensor<f16>) -> ()
  func.return
}

// -----

func.func @eq_const_fails() {
  %0 = stablehlo.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi32>
  check.expect_eq_const %0, dense<[[1, 2], [3, 5]]> : tensor<2x2xi32>
  func.return
}

// -----

func.func @close_fails_below_min_ulp() {
  %0 = stablehlo.constant dense<1.0> : tensor<f32>
  check.expect_close %0, %0, max_ulp_difference = 3, min_ulp_difference = 1 : tensor<f32>, tensor<f32>
  func.return
}

// -----

func.func @unknown_op_is_unsupported() {
  %0 = stablehlo.constant dense<1.0> : tensor<f32>
  %1 = "mydialect.frobnicate"(%0) : (tensor<f32>) -> tensor<f32>
  check.expect_almost_eq_const %1, dense<1.0> : tensor<f32>
  func.return
}

// -----

module @with_main {
  func.func @double(%x: tensor<2xi8>) -> tensor<2xi8> {
    %0 = stablehlo.add %x, %x : tensor<2xi8>
    func.return %0 : tensor<2xi8>
  }
  func.func @main() {
    %0 = stablehlo.constant dense<[3, -4]> : tensor<2xi8>
    %1 = func.call @double(%0) : (tensor<2xi8>) -> tensor<2xi8>
    check.expect_eq_const %1, dense<[6, -8]> : tensor<2xi8>
    func.return
  }
}
