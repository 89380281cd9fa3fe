"""
Test error against fit time on the diamonds table
=================================================

Measured figures, not a fit run at build time: this page draws the JSON that
``scripts/bench_nystroem_cg.py --case diamonds`` wrote on the project's 2-core machine (copied to
``docs/examples/data/``). The public diamonds table (plotnine ships it: 53,917 rows after dropping
23 stones with an impossible size, target log(price), 26 features after one-hot encoding),
one fixed 80/20 split, rbf kernel with γ and α chosen by leave-one-out on 4,000 training rows.

- :class:`bigkernel.RandomFeatureRidge`, D = 1,024 … 8,192 features, α by GCV (solid) and α
  fixed at the exact fit's (dashed);
- :class:`bigkernel.NystroemRidge` ``solver="direct"`` (one pass, an M × M system), M = 1,000 …
  8,000 uniform centres, α by GCV (solid) and fixed (dashed);
- :class:`bigkernel.NystroemRidge` ``solver="cg"`` (Falkon's preconditioned CG, one pass per
  iteration), M = 1,000 … 30,000 centres (as far as the machine allowed), α chosen among 7 on a
  held-out 10 % in the same passes;
- :class:`bigkernel.ExactKernelRidge`, every training row a centre: the gold standard.

Points further down reach a lower test RMSE; further left, in less time. A family missing from
the legend was not in the measured file. ``docs/benchmarks.md`` has the table, the command and
the machine.
"""

# %%
# Read every measured diamonds row of the benchmark files.
import glob
import json
import os

import matplotlib.pyplot as plt

here = os.path.dirname(os.path.abspath(__file__)) if "__file__" in globals() else os.getcwd()
rows = {}
for path in sorted(glob.glob(os.path.join(here, "data", "bench_nystroem_cg*.json"))):
    with open(path) as f:
        result = json.load(f)
    for r in result["rows"]:
        if r.get("case") == "diamonds" and "test_rmse" in r and "fit_s" in r:
            rule = r.get("alpha_rule", "gcv") if r["family"] in ("rff", "direct") else "gcv"
            key = (r["family"], r.get("size", 0), rule)
            rows[key] = r  # a later file replaces the same configuration

# %%
# One line per family, each point labelled with its model size; the exact fit as a star with
# a reference line at its RMSE and one 1 % above. A point above 1.3 × the exact RMSE is drawn
# at the top edge with its value.
style = {
    "rff": ("RandomFeatureRidge (D)", "tab:blue", "o"),
    "direct": ("NystroemRidge direct (M)", "tab:orange", "s"),
    "cg": ("NystroemRidge cg (M), α held out", "tab:green", "^"),
}
fig, ax = plt.subplots(figsize=(7.5, 4.8))
exact = [r for (fam, _, _), r in rows.items() if fam == "exact"]
top = 1.3 * exact[0]["test_rmse"] if exact else None  # points above are drawn at the top edge
for (family, rule), (label, color, marker) in (((f, rule), v) for f, v in style.items() for rule in ("gcv", "fixed")):
    pts = sorted(
        (r["size"], r["fit_s"], r["test_rmse"]) for (fam, _, ru), r in rows.items() if (fam, ru) == (family, rule)
    )
    if not pts:
        continue
    dashed = rule == "fixed" and family != "cg"
    shown = [min(rmse, top) if top else rmse for _, _, rmse in pts]
    ax.plot([p[1] for p in pts], shown, marker=marker, color=color, linestyle="--" if dashed else "-",
            label=f"{label}, α = exact's" if dashed else label + ("" if family == "cg" else ", α by GCV"), alpha=0.6 if dashed else 1.0)  # fmt: skip
    for (size, t, rmse), y in zip(pts, shown):
        text = f"{size:,}" if y == rmse else f"{size:,}: {rmse:.2f} ↑"
        ax.annotate(text, (t, y), textcoords="offset points", xytext=(4, 4 if y == rmse else -10), fontsize=7)
for r in exact:
    ax.plot([r["fit_s"]], [r["test_rmse"]], marker="*", markersize=14, color="black", linestyle="none",
            label="ExactKernelRidge")  # fmt: skip
    ax.axhline(r["test_rmse"], color="black", linewidth=0.8, linestyle=":")
    ax.axhline(1.01 * r["test_rmse"], color="grey", linewidth=0.8, linestyle="--", label="exact + 1 %")
if top:
    ax.set_ylim(top=top * 1.01)
ax.set_xscale("log")
ax.set_xlabel("fit time, s (2 cores, log scale)")
ax.set_ylabel("test RMSE of log(price)")
ax.set_title("diamonds: test error against fit time")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
