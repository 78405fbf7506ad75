"""The adaptive search (`search: adaptive`): which variant to launch next, which levels
of a variant cannot matter, and the fitted model of speculative decoding that predicts
the variants not yet measured. Plain Python, no Prefect; see docs/search.md.

    model     SpecModel: baseline step time, draft and verify cost, acceptance per draft
              position per topk, fitted on one run's measurements; predictions with
              95% intervals (never written into the measured levels)
    planner   the next launch (seeds, then the highest upper bound against the best
              measured), the stop rule, the budget, and why each variant was not launched
    pruning   the level-skip rule (a variant trailing the best and the baseline, falling)
    informative  whether the model's intervals are narrow enough to rule anything out
"""
