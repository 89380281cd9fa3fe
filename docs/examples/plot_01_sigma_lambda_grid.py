"""
Fits over a grid of bandwidths and penalties
============================================

Kernel ridge regression has two knobs: the kernel's bandwidth σ (here the rbf length scale,
``k(x, x') = exp(-‖x − x'‖² / (2σ²))``) and the ridge penalty λ (``alpha``, in scikit-learn's
scaling: the sum of squared errors plus ``λ‖β‖²``). This example fits
:class:`bigkernel.RandomFeatureRidge` to one noisy sine data set for every pair of a small
σ × λ grid and draws one panel per fit, with the fit's effective degrees of freedom ``df_``.

A narrow kernel (small σ) with little penalty chases the noise: many degrees of freedom. More
penalty (to the right) or a wider kernel (downwards) smooths the fit and lowers ``df_``, until
the widest kernel with the largest penalty is close to a straight line. The next example,
:ref:`sphx_glr_auto_examples_plot_02_degrees_of_freedom.py`, follows ``df_`` along a whole λ path.
"""

# %%
# Data: 200 points of ``sin(2πx)`` plus Gaussian noise of standard deviation 0.3 (the
# ``sine`` kind of :class:`bigkernel.SyntheticSpec`). The examples run dask's synchronous
# scheduler: the data are tiny, and one thread keeps the build fast and quiet.
import dask
import matplotlib.pyplot as plt
import numpy as np

import bigkernel

dask.config.set(scheduler="sync")

rng = np.random.default_rng(0)
n = 200
X = rng.uniform(0.0, 1.0, size=(n, 1))
y = np.sin(2 * np.pi * X[:, 0]) + 0.3 * rng.standard_normal(n)
x_plot = np.linspace(0.0, 1.0, 300)[:, np.newaxis]

# %%
# One fit per (σ, λ). Every fit draws the same random feature map (``random_state=0``) with
# D = 300 features; each reads the data once and solves a D × D system.
sigmas = [0.02, 0.1, 1.0]
lambdas = [1e-6, 1e-2, 10.0]

fig, axes = plt.subplots(len(sigmas), len(lambdas), figsize=(9, 7.5), sharex=True, sharey=True)
for i, sigma in enumerate(sigmas):
    for j, lam in enumerate(lambdas):
        model = bigkernel.RandomFeatureRidge(
            kernel="rbf",
            length_scale=sigma,
            alpha=lam,
            n_components=300,
            random_state=0,
        ).fit(X, y)
        ax = axes[i, j]
        ax.plot(X[:, 0], y, ".", color="0.6", markersize=3)
        ax.plot(x_plot, np.sin(2 * np.pi * x_plot), "k--", lw=0.8)
        ax.plot(x_plot, model.predict(x_plot), color="C0", lw=1.5)
        title = f"σ={sigma:g}, λ={lam:g}: df={model.df_:.1f}"
        ax.set_title(title, fontsize=9)
        ax.set_ylim(-2.0, 2.0)
for ax in axes[-1]:
    ax.set_xlabel("x")
for ax in axes[:, 0]:
    ax.set_ylabel("y")
fig.suptitle("Rows σ, columns λ (dashed: the true function)")
fig.tight_layout()
plt.show()
