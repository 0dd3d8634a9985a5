"""The spec's judge: fuzz StableHLO against another backend, shrink each disagreement, rule on it.

    pjrt-ref fuzz --against cpu|PLUGIN.so [--seconds N] [--seed S] [--ops PATTERN]
                  [--save DIR] [--out DIR]
    pjrt-ref fuzz --replay DIR --against cpu|PLUGIN.so

    opset       the ops it writes and the element types the spec allows each
    structural  the ops that move, gather or combine elements (transpose ... while):
                their attributes, their text and their results by the spec's formulas
    values      inputs drawn to hit edge values
    programs    random valid programs, kept as data (FuzzProgram)
    oracle      the spec's answer for one element, recomputed without pjrt-ref's kernels
    ruling      which side the spec supports (with StableHLO's reference interpreter)
    shrink      a disagreement cut down to its fewest ops and one element
    campaign    the loop: generate, run both sides, compare, shrink, rule, tally
    corpus      programs and reproducers on disk, replayable against any backend
    command     `pjrt-ref fuzz`
"""
