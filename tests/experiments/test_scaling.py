from __future__ import annotations

import numpy as np

from decentopt.experiments.scaling import TRANSIENT_EXPONENT, run_scaling, scaling_markdown


def test_quick_scaling_study_is_complete_and_finite():
    rows = run_scaling(seeds=2, quick=True, log=lambda _: None)
    variables = {(r.quantity, r.method, r.variable) for r in rows}
    assert {v for _, _, v in variables} == {"alpha", "zeta^2", "1 - beta", "1 - lambda"}
    assert {m for q, m, _ in variables if q == "heterogeneity transient"} == set(TRANSIENT_EXPONENT)
    for r in rows:
        assert len(r.exponents) == 2 and np.all(np.isfinite(r.exponents))
    # the bias is exactly linear in zeta^2 (a linear fixed-point equation)
    zeta = next(r for r in rows if r.variable == "zeta^2")
    assert abs(zeta.mean - 1.0) < 1e-6
    table = scaling_markdown(rows)
    assert table.count("\n") == len(rows) + 2
