"""The spec's judge: fuzz StableHLO against another backend, shrink each disagreement, rule on it.

    pjrt-ref fuzz --against cpu|PLUGIN.so [--seconds N] [--seed S] [--ops PATTERN]
                  [--save DIR] [--out DIR]
    pjrt-ref fuzz --replay DIR --against cpu|PLUGIN.so

    opset     the ops it writes and the element types the spec allows each
    values    inputs drawn to hit edge values
    programs  random valid programs, kept as data (FuzzProgram)
    oracle    the spec's answer, recomputed independently of pjrt-ref's kernels
    shrink    a disagreement cut down to its fewest ops and one element
    campaign  the loop: generate, run both sides, compare, shrink, rule, report
    corpus    programs and reproducers on disk, replayable against any backend
"""
