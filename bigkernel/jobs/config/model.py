"""Parsing the ``model:`` section: the job's keys, checked by the chosen estimator's own
parameter table and turned into its parameters through :mod:`.estimators`; and the rules that
relate the keys (solver and kernel, searches, the SVM loss).

Two forms are read. The job's form (``solver: exact``, ``gamma: [0.1, 1]``, ``alpha: cv``,
any parameter of the class by its name) is what people write; the explicit form
``{estimator: ExactKernelRidgeCV, params: {...}}`` is what ``JobConfig.to_dict()`` writes, so a
resolved config reads back as itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bigkernel.data.tables import is_table
from bigkernel.jobs.config.estimators import (
    JOB_KERNELS,
    JOB_KEYS,
    SEED,
    choose_estimator,
    estimator_class,
    estimator_params,
    estimators,
    model_keys,
    owner_of,
    signature_defaults,
)
from bigkernel.jobs.config.fields import _choice, _estimator_param, _Section
from bigkernel.jobs.config.schema import SOLVER_PATHS, DataConfig, ModelConfig
from bigkernel.kernels.registry import PATH_NEEDS, kernel_spec, kernels_searching, sampler_problem
from bigkernel.models.random_features import RandomFeatureRidge


def parse_model(sec: _Section, data: DataConfig, task: str) -> tuple[ModelConfig, dict[str, Any] | None]:
    """Parse ``model`` into the estimator's class and parameters.

    Parameters
    ----------
    sec : _Section
        The ``model`` section (empty when absent).
    data : DataConfig
        The training data (``standardize: auto`` and the feature count depend on it).
    task : {"regression", "classification"}

    Returns
    -------
    ModelConfig
        The class's name and its whole parameter dict.
    dict or None
        The job's values by key (for the checks that relate the model to the task), or None
        for the explicit form.
    """
    if "estimator" in sec.raw or "params" in sec.raw:
        return _parse_explicit(sec, task), None
    values = {key: _job_value(sec, key) for key in JOB_KEYS}
    cls = choose_estimator(values, task)
    keys = model_keys()
    for key in sec.raw:
        if isinstance(key, str) and key in keys and key not in JOB_KEYS and key not in ("estimator", "params"):
            owner = owner_of(key, cls)
            nullable = any(form is None for form in owner._parameter_constraints[key])
            default = signature_defaults(owner)[key]
            values[key] = sec.value(key, _estimator_param(owner, key), default, nullable=nullable)
    if values["standardize"] == "auto":
        values["standardize"] = auto_standardize(values["kernel"], data)
    _check_model(sec, values, data)
    return ModelConfig(estimator=cls.__name__, params=estimator_params(cls, values)), values


def _job_value(sec: _Section, key: str) -> Any:
    """The value of one of the job's own keys: as given, checked by its rule, or its default."""
    job = JOB_KEYS[key]
    default = job.default_value(sec.ctx.seed)
    value = sec.value(key, job.checker(), default, nullable=job.nullable or job.default is SEED)
    return default if value is None and job.default is SEED else value


def _parse_explicit(sec: _Section, task: str) -> ModelConfig:
    """Parse ``{estimator: <class name>, params: {...}}``: every parameter checked by the class's
    table, the others its signature's defaults (``random_state``: the job's seed)."""
    mixed = [key for key in sec.raw if key not in ("estimator", "params")]
    if mixed:
        sec.report(
            mixed[0], "give the model either as keys (solver, kernel, ...) or as `estimator:` and `params:`, not both"
        )
    name = sec.value("estimator", _choice(tuple(estimators())), "")
    if not name:
        if "estimator" not in sec.raw:
            sec.report("params", f"`params:` needs `estimator:` (one of {', '.join(estimators())})")
        return ModelConfig(estimator="RandomFeatureRidge", params={})
    cls = estimator_class(name)
    defaults = signature_defaults(cls)
    params = dict(defaults, random_state=sec.ctx.seed)
    given = sec.section("params", keys=tuple(defaults))
    for key in given.raw if given is not None else ():
        if key in defaults:
            nullable = any(form is None for form in cls._parameter_constraints.get(key, [None]))
            check = _choice(JOB_KERNELS) if key == "kernel" else _estimator_param(cls, key)
            params[key] = given.value(key, check, defaults[key], nullable=nullable)
    wants = "classification" if "class_weight" in defaults else "regression"
    if sec.clean and wants != task:
        sec.report("estimator", f"{name} is for `task: {wants}`; the job's task is {task}")
    return ModelConfig(estimator=name, params=params)


def auto_standardize(kernel: str, data: DataConfig) -> bool:
    """``standardize: auto`` (the default): true when the training data is a CSV or Parquet
    table, false for arrays (zarr, .npy, sparse .npz).

    A table's columns carry their own units (an income beside a ratio), so one γ suits them only
    on a common scale; arrays are often features prepared already (sparse ones cannot be
    centred), and ``make:`` arrays are uniform on [0, 1], the scale their example γ was set
    for. The Fourier basis is defined on [0, 1] and is never standardised.

    Parameters
    ----------
    kernel : str
        The job's kernel.
    data : DataConfig
        The training data.

    Returns
    -------
    bool
    """
    source = data.train if data.train is not None else data.make
    if source is None or kernel not in JOB_KERNELS or kernel_spec(kernel).name == "fourier":
        return False
    return is_table(source.path)


def check_model_task(report: Any, values: Mapping[str, Any], task: str) -> None:
    """Report what the model's keys cannot do for the task (against the ``task`` key).

    Parameters
    ----------
    report : callable
        ``report(key, message)`` of the top-level section.
    values : mapping
        The job's ``model:`` values (:func:`parse_model`).
    task : {"regression", "classification"}
    """
    loss = values.get("loss", "squared_error")
    if task != "classification":
        if values.get("class_weight") is not None:
            report("task", "model.class_weight is for `task: classification`; remove it or set the task")
        if loss != "squared_error":
            report("task", f"model.loss: {loss} is for `task: classification`; remove it or set the task")
        return
    solver, gamma, alpha = values["solver"], values["gamma"], values["alpha"]
    if loss != "squared_error":
        _check_svm_model(report, values, loss)
    if solver == "exact" and (isinstance(gamma, tuple) or "cv" in (gamma, alpha) or alpha == "loo"):
        report(
            "task",
            "a classification job searches (gamma, alpha) by K-fold accuracy with solver random_features "
            "only; with solver exact give one gamma and alpha: gcv or a list (chosen by GCV)",
        )
    if solver != "random_features" and alpha == "cv":
        report("task", "alpha: cv (K-fold accuracy) needs solver random_features; use alpha: gcv")


def _check_svm_model(report: Any, values: Mapping[str, Any], loss: str) -> None:
    """An SVM loss: the feature solvers only, one penalty and one bandwidth (no α path, no
    accuracy search)."""
    solver, gamma, alpha = values["solver"], values["gamma"], values["alpha"]
    if solver not in ("random_features", "nystroem"):
        report("model", f"loss: {loss} (the primal SVM) needs solver random_features or nystroem, got {solver}")
    if not isinstance(alpha, (int, float)) or isinstance(gamma, tuple) or gamma == "cv":
        report(
            "model",
            f"loss: {loss} needs one number for alpha and one gamma (the SVM has no one-pass path to search); "
            "search with loss: squared_error, or give alpha: 0.01",
        )


def _check_model(sec: _Section, values: Mapping[str, Any], data: DataConfig) -> None:
    """Report model keys that contradict one another or the synthetic data."""
    if not sec.clean:
        return
    kernel, gamma, ls = values["kernel"], values["gamma"], values["length_scale"]
    if gamma is not None and ls is not None:
        sec.report(
            "length_scale",
            "give gamma or length_scale, not both: they set the same bandwidth (gamma = 1 / (2 * length_scale**2))",
        )
    features = signature_defaults(RandomFeatureRidge)
    problem = sampler_problem(kernel, values.get("sampler", features["sampler"]))
    if problem:
        sec.report("sampler", problem)
    form = values.get("form", features["form"])
    if values["n_components"] % 2 and (form == "cossin" or kernel == "fourier"):
        why = "form 'cossin'" if form == "cossin" else "kernel 'fourier'"
        sec.report(
            "n_components",
            f"must be even with {why} (each frequency gives a cos and a sin feature), found {values['n_components']}",
        )
    _check_solver(sec, values)
    if isinstance(ls, tuple) and data.make is not None and not sec.ctx.problems:
        if len(ls) != data.make.n_features:
            sec.report(
                "length_scale",
                f"expected one length scale per feature ({data.make.n_features}, data.make.n_features), "
                f"found {len(ls)}",
            )


def _or(words: Sequence[str]) -> str:
    """``a, b or c``."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _check_solver(sec: _Section, values: Mapping[str, Any]) -> None:
    """Report kernels and searches the chosen solver does not have."""
    solver, kernel, gamma, alpha = values["solver"], values["kernel"], values["gamma"], values["alpha"]
    spec = kernel_spec(kernel)
    lacking = [path for path in SOLVER_PATHS[solver] if not spec.serves(path)]
    if lacking:
        solvers = [s for s, paths in SOLVER_PATHS.items() if all(map(spec.serves, paths))]
        others = [k for k in JOB_KERNELS if all(map(kernel_spec(k).serves, SOLVER_PATHS[solver]))]
        sec.report(
            "kernel",
            f"kernel {kernel!r} has no {PATH_NEEDS[lacking[0]]} for solver "
            f"{solver!r}; use solver {_or(solvers)}, or one of {', '.join(others)}",
        )
    searched = isinstance(gamma, tuple) or "cv" in (gamma, alpha)
    if alpha == "loo" and solver != "exact":
        sec.report(
            "alpha",
            f"alpha 'loo' (closed-form leave-one-out) exists for solver exact only, "
            f"found solver {solver!r}; with random_features use alpha 'cv' (K-fold, "
            "cv: K) or 'gcv'",
        )
    elif solver not in ("random_features", "exact") and searched:
        sec.report(
            "solver",
            f"the (gamma, alpha) search of lists or 'cv' exists for solvers "
            f"random_features and exact only, found solver {solver!r}; give one gamma "
            "and an alpha, a list of alphas or 'gcv'",
        )
    if solver == "exact" and (searched or alpha == "loo"):
        _check_exact_search(sec, values, spec)
    if solver == "cg" and alpha in ("gcv", "evidence"):
        _check_cg_alpha(sec, alpha)


def _check_cg_alpha(sec: _Section, alpha: str) -> None:
    """Solver cg scores α on a held-out split: it has no GCV and no evidence."""
    given = "" if sec.is_set("alpha") else " (the default)"
    sec.report(
        "alpha",
        f"solver cg chooses alpha on a held-out split (validation_fraction of the rows) among the values "
        f"given: give a number or a list of numbers > 0, e.g. [0.1, 1, 10, 100], found {alpha!r}{given}; "
        "GCV and the evidence need solver nystroem",
    )


def _check_exact_search(sec: _Section, values: Mapping[str, Any], spec: Any) -> None:
    """An exact search: no folds, and a gamma searched only for kernels that have one."""
    if sec.is_set("cv"):
        sec.report(
            "cv",
            "solver exact has no K-fold CV: its (gamma, alpha) search scores by "
            "closed-form leave-one-out (alpha 'cv' or 'loo') or GCV; remove cv",
        )
    gamma = values["gamma"]
    if (isinstance(gamma, tuple) or gamma == "cv") and "gamma" not in spec.searchable("exact"):
        sec.report(
            "gamma",
            f"kernel {values['kernel']!r} has no gamma to search; gamma lists and "
            f"'cv' exist for kernels {', '.join(kernels_searching('exact', 'gamma'))} (use alpha 'loo' "
            "to search alpha alone)",
        )
