"""chlo.scan against XLA CPU (which compiles it) on hand-written programs:
several inputs and carries, a non-leading dimension, reverse scans."""
from __future__ import annotations

import numpy as np

from test_ops_chlo_oracle import assert_matches_xla

CUMMAX = """func.func @main(%input: tensor<7xi32>, %iota: tensor<7xi32>)
    -> (tensor<7xi32>, tensor<7xi32>, tensor<i32>, tensor<i32>) {
  %val_init = stablehlo.constant dense<-2147483648> : tensor<i32>
  %idx_init = stablehlo.constant dense<0> : tensor<i32>
  %0:4 = chlo.scan(%input, %iota) inits(%val_init, %idx_init) dimension=0 {
  ^bb0(%cur_val: tensor<i32>, %cur_idx: tensor<i32>, %run_val: tensor<i32>, %run_idx: tensor<i32>):
    %new_val = stablehlo.maximum %run_val, %cur_val : tensor<i32>
    %gt = stablehlo.compare GT, %run_val, %cur_val : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %eq = stablehlo.compare EQ, %run_val, %cur_val : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %max_idx = stablehlo.maximum %run_idx, %cur_idx : tensor<i32>
    %tie_or_less = stablehlo.select %eq, %max_idx, %cur_idx : tensor<i1>, tensor<i32>
    %new_idx = stablehlo.select %gt, %run_idx, %tie_or_less : tensor<i1>, tensor<i32>
    stablehlo.return %new_val, %new_idx, %new_val, %new_idx
        : tensor<i32>, tensor<i32>, tensor<i32>, tensor<i32>
  } : (tensor<7xi32>, tensor<7xi32>, tensor<i32>, tensor<i32>)
      -> (tensor<7xi32>, tensor<7xi32>, tensor<i32>, tensor<i32>)
  return %0#0, %0#1, %0#2, %0#3 : tensor<7xi32>, tensor<7xi32>, tensor<i32>, tensor<i32>
}"""


def test_cummax_with_indices():
    values = np.array([3, 1, 4, 1, 5, 5, -2], np.int32)
    assert_matches_xla(CUMMAX, values, np.arange(7, dtype=np.int32))


def scan_program(reverse: bool) -> str:
    attributes = " attributes {is_reverse = true}" if reverse else ""
    return f"""func.func @main(%input: tensor<2x5x3xf32>, %init: tensor<2x3xf32>)
    -> (tensor<2x5x3xf32>, tensor<2x3xf32>) {{
  %0:2 = chlo.scan(%input) inits(%init) dimension=1{attributes} {{
  ^bb0(%a: tensor<2x3xf32>, %c: tensor<2x3xf32>):
    %1 = stablehlo.add %a, %c : tensor<2x3xf32>
    %2 = stablehlo.maximum %1, %a : tensor<2x3xf32>
    stablehlo.return %1, %2 : tensor<2x3xf32>, tensor<2x3xf32>
  }} : (tensor<2x5x3xf32>, tensor<2x3xf32>) -> (tensor<2x5x3xf32>, tensor<2x3xf32>)
  return %0#0, %0#1 : tensor<2x5x3xf32>, tensor<2x3xf32>
}}"""


def test_scan_along_a_middle_dimension_both_directions():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 3)).astype(np.float32)
    init = rng.normal(size=(2, 3)).astype(np.float32)
    for reverse in (False, True):
        assert_matches_xla(scan_program(reverse), x, init)
