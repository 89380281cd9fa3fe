"""
Degrees of freedom along the penalty path
=========================================

The effective degrees of freedom of a ridge fit, ``df(λ) = trace(H_λ)`` where ``H_λ`` maps
the observed y to the fitted values (intercept included), measure how flexible the fit is: n
for interpolation, 1 for the constant. :class:`bigkernel.RandomFeatureRidge` given a list of
penalties computes ``df``, the GCV score and the coefficients for every λ of the list from
*one* pass over the data and one D × D eigendecomposition: ``df_path_`` and ``gcv_`` along
``alphas_``, and ``alpha_`` / ``df_`` at the λ with the smallest GCV.

:class:`bigkernel.ExactKernelRidge` solves the exact kernel system instead; for n ≤ 2000 its
``df_path_`` is exact too (eigenvalues of the centred Gram matrix). A random-feature fit has at
most D + 1 degrees of freedom (D features and the intercept), and its path follows the exact
one where the penalty is large enough to matter: the more features, the further down in λ.
"""

# %%
# Data: the noisy sine of the previous example, 300 points.
import dask
import matplotlib.pyplot as plt
import numpy as np

import bigkernel

dask.config.set(scheduler="sync")

rng = np.random.default_rng(1)
n = 300
X = rng.uniform(0.0, 1.0, size=(n, 1))
y = np.sin(2 * np.pi * X[:, 0]) + 0.3 * rng.standard_normal(n)

# %%
# One fit per model, each scoring the whole λ grid. The kernel is the same rbf kernel
# (length scale σ = 0.05) for the exact solver and for the random features.
sigma = 0.05
lambdas = np.logspace(-6, 3, 28)

exact = bigkernel.ExactKernelRidge(kernel="rbf", length_scale=sigma, alpha=list(lambdas)).fit(X, y)
rff = {
    D: bigkernel.RandomFeatureRidge(
        kernel="rbf",
        length_scale=sigma,
        alpha=list(lambdas),
        n_components=D,
        random_state=0,
    ).fit(X, y)
    for D in (20, 100, 1000)
}
models = {f"random features, D={D}": m for D, m in rff.items()}
models["exact"] = exact
for name, model in models.items():
    print(f"{name}: GCV chooses λ = {model.alpha_:.3g}, df = {model.df_:.1f}")

# %%
# ``df(λ)`` falls monotonically as λ grows, to 1 (the intercept alone) at large penalties. At
# small λ the random-feature paths level off below the exact one, lower for fewer features.
# GCV, ``n·RSS(λ) / (n − df(λ))²``, trades the fit against the degrees of freedom; the dots
# mark each model's choice. GCV is flat near its minimum, so the small-λ differences between the
# models barely change the score there.
fig, (ax_df, ax_gcv) = plt.subplots(1, 2, figsize=(10, 4))
for k, (name, model) in enumerate(models.items()):
    exact_style = {"color": "k", "ls": "--"}
    style = exact_style if name == "exact" else {"color": f"C{k}"}
    best = np.argmin(np.abs(model.alphas_ - model.alpha_))
    ax_df.semilogx(model.alphas_, model.df_path_, label=name, **style)
    ax_gcv.loglog(model.alphas_, model.gcv_, label=name, **style)
    ax_gcv.plot(model.alpha_, model.gcv_[best], "o", color=style["color"])
ax_df.set_xlabel("λ (alpha)")
ax_df.set_ylabel("degrees of freedom df(λ)")
ax_df.legend()
ax_gcv.set_xlabel("λ (alpha)")
ax_gcv.set_ylabel("GCV(λ)")
fig.suptitle(f"rbf kernel, σ = {sigma}, n = {n}: one fit per model")
fig.tight_layout()
plt.show()
