"""The ``model:`` section's one table: which estimator class a job builds, and how the job's
keys become that class's parameters.

Every parameter of the chosen class is a ``model:`` key, checked by the class's own
``_parameter_constraints`` and defaulting to its ``__init__`` signature: a parameter added to an
estimator appears in job files with no edit under ``jobs/``. This module holds only what the
job adds to that, in :data:`JOB_KEYS` and :data:`CHOICE`:

* keys that choose the class (``solver``, ``task``, a search written as a list or a word in
  ``gamma`` / ``alpha``) and translate to its parameters (``gamma: [..]`` → ``gammas``,
  ``alpha: cv`` → ``cv=K``, ``gram_dtype`` → the exact solver's ``dtype``,
  ``preconditioner: none`` → None);
* the job's own defaults where they differ from the estimators' (``n_components: 1024``,
  ``alpha: gcv``, ``n_probes: 8``, ``random_state``: the job's ``seed``, ``standardize:
  auto``);
* values the job checks more narrowly than the estimator (kernels of the registry with "did
  you mean", sizes such as '8GB', class weights >= 0).

The parsed section is :class:`~bigkernel.jobs.config.schema.ModelConfig`: the class's name and
its whole parameter dict, built by ``estimator_class(name)(**estimator_arguments(params))``.

The job's own keys
------------------
solver : {"random_features", "exact", "nystroem", "cg", "auto"}, default="random_features"
    ``exact``: CG on the blocked Gram matrix (moderate n); ``nystroem``: Nyström features in
    the one-pass primal path; ``cg``: Nyström by Falkon's preconditioned CG
    (``NystroemRidge(solver="cg")``: one pass per iteration, for more centres than the one-pass
    path holds; ``tol``, ``max_iter``, ``validation_fraction``); ``auto``: ``KernelRidge``
    chooses from n and ``memory_budget`` (the job log says which and why). The chosen class's
    own ``solver`` parameter is set from :data:`CLASS_SOLVER`.
kernel : str, default="rbf"
    A kernel of the README's kernel table (:data:`JOB_KERNELS`); its columns say which solvers
    serve it.
gamma : float, list of float, "cv" or null
    A list is searched together with alpha (by K-fold CV when alpha or gamma is "cv", else by
    GCV); "cv", or gamma unset with alpha "cv", searches 1/d × 10^[-2..1]. Solver
    random_features searches in the same data pass (``RandomFeatureRidgeCV``); solver exact
    forms one Gram matrix and one eigendecomposition per gamma (``ExactKernelRidgeCV``).
    Solvers nystroem and auto take one gamma. Exclusive with ``length_scale``.
length_scale : float, list of float (one per feature) or null
alpha : float, list of float, "gcv", "cv", "loo" or "evidence", default="gcv"
    The mapping::

        solver           alpha: gcv | list        alpha: cv             alpha: loo
        random_features  GCV (one pass)           K-fold (cv: K)        error
        exact            GCV (one gamma: CG;      closed-form LOO       closed-form LOO
                         gamma list/cv: eigh)     (cv: K is an error)
        nystroem, auto   GCV                      error                 error
        cg               a number or a list, α    error                 error
                         by a held-out split
                         (validation_fraction;
                         gcv is an error)

    "evidence" chooses α (and, with a gamma list, γ) by the largest marginal likelihood.
cv : int, default=5
    Folds of the K-fold search (alpha or gamma "cv", solver random_features; a
    classification search always).
dtype : {"auto", "float32", "float64"}
    The features' dtype (solver auto: also the Gram's when ``gram_dtype`` is auto). ``"auto"``
    (the default): random features in float32, checked after the pass and redone in float64
    when float32 could move the model (:class:`~bigkernel.RandomFeatureRidge`); Nyström, the
    random-feature CV search and the classifiers in float64.
gram_dtype : {"auto", "float32", "float64"}
    The exact solver's ``dtype`` (of the Gram tiles).
preconditioner : {"rpcholesky", "nystroem", "none"}
    "none" is the exact solver's None.
standardize : bool or "auto", default="auto"
    See :func:`bigkernel.jobs.config.model.auto_standardize`.
random_state : int >= 0, default=the job's ``seed``
memory_budget : int or a size such as "8GB"
device : {"cpu", "cuda", "cuda:N", "auto"}
class_weight : "balanced" or {label: weight >= 0} (``task: classification``)

Any other key is the parameter of that name of the chosen class (its docstring says what it
does); a key that only another solver's class takes is checked by that class and unused.
``task: classification`` builds the classifier of the same solver (:data:`CHOICE`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bigkernel.jobs.config.fields import (
    _BYTES,
    Check,
    _choice,
    _device,
    _fail,
    _integer,
    _number,
    _param,
    _positive_or_list,
)
from bigkernel.kernels.registry import kernel_names, kernel_spec
from bigkernel.models.exact import ExactKernelRidge
from bigkernel.models.exact_classifier import ExactKernelClassifier, KernelClassifier
from bigkernel.models.exact_cv import ExactKernelRidgeCV
from bigkernel.models.kernel_ridge import KernelRidge
from bigkernel.models.nystroem import NystroemRidge
from bigkernel.models.random_features import RandomFeatureRidge
from bigkernel.models.random_features_classifier import NystroemClassifier, RandomFeatureClassifier
from bigkernel.models.random_features_classifier_cv import RandomFeatureClassifierCV
from bigkernel.models.random_features_cv import RandomFeatureRidgeCV

#: a kernel of the registry (bigkernel/kernels/registry.py) usable on its own
JOB_KERNELS = kernel_names(standalone_only=True)

#: (solver, searched) -> (regressor, classifier): the class a job builds. "searched": gamma is a
#: list or "cv", or alpha is "cv" or "loo" (solvers nystroem and auto have no search: the config
#: reports it; an exact search has no classifier: the config reports that too)
CHOICE: dict[tuple[str, bool], tuple[type, type | None]] = {
    ("random_features", False): (RandomFeatureRidge, RandomFeatureClassifier),
    ("random_features", True): (RandomFeatureRidgeCV, RandomFeatureClassifierCV),
    ("nystroem", False): (NystroemRidge, NystroemClassifier),
    ("exact", False): (ExactKernelRidge, ExactKernelClassifier),
    ("exact", True): (ExactKernelRidgeCV, None),
    ("cg", False): (NystroemRidge, NystroemClassifier),
    ("auto", False): (KernelRidge, KernelClassifier),
}

#: the job's ``solver`` -> the value of the chosen class's own ``solver`` parameter, where the
#: class has one and the job's word is not it (the one Nyström class serves nystroem and cg)
CLASS_SOLVER: dict[str, str] = {"nystroem": "direct", "cg": "cg"}


def estimators() -> dict[str, type]:
    """Return every class a job may build, by name, regressors first.

    Read from :data:`CHOICE` on each call. The order decides which class checks a key the
    chosen class does not take: the first that takes it.

    Returns
    -------
    dict of str to type
    """
    return {cls.__name__: cls for i in (0, 1) for pair in CHOICE.values() if (cls := pair[i]) is not None}


def solver_of(name: str, params: Mapping[str, Any] | None = None) -> str:
    """Return the job's ``solver`` the class called ``name`` (with ``params``) stands for.

    Parameters
    ----------
    name : str
        A class of :func:`estimators`.
    params : mapping, optional
        Its parameters: a class that serves several of the job's solvers (NystroemRidge: nystroem
        and cg) is told apart by its own ``solver`` (:data:`CLASS_SOLVER`).

    Returns
    -------
    str
        random_features, nystroem, cg, exact or auto.
    """
    solvers = [s for (s, _), pair in CHOICE.items() if name in (c.__name__ for c in pair if c is not None)]
    own = (params or {}).get("solver")
    return next((s for s in solvers if CLASS_SOLVER.get(s, s) == own), solvers[0])


#: estimator parameters a job never sets by their own name: set from another key (the search
#: grids and criterion from gamma, length_scale and alpha) or by another section
NOT_KEYS = ("gammas", "length_scales", "alphas", "criterion", "kernel_params", "chunk_rows", "verbose")


class _Signature:
    """Marks a default read from the ``__init__`` signature of the parameter's class."""

    def __repr__(self) -> str:
        return "<the estimator's default>"


SIGNATURE: Any = _Signature()
#: marks a default that is the job's top-level ``seed``
SEED: Any = object()


@dataclass(frozen=True)
class JobKey:
    """A ``model:`` key with a rule of the job's own.

    Parameters
    ----------
    param : tuple of (type, str)
        The estimator parameter the key stands for (its class and name): where its default is
        read (``default`` SIGNATURE) and, without ``check``, what checks its value.
    check : callable or None, default=None
        Makes the job's check of the YAML value, when it differs from the parameter's
        constraints (a keyword, a list that is searched, a narrower rule).
    default : Any, default=SIGNATURE
        The job's default, where it differs from the estimator's.
    """

    param: tuple[type, str]
    check: Callable[[], Check] | None = None
    default: Any = SIGNATURE

    def checker(self) -> Check:
        """Check : The check of the YAML value."""
        return self.check() if self.check is not None else _param(*self.param)

    @property
    def nullable(self) -> bool:
        """bool : Whether null stands for "not set" (the parameter takes None)."""
        owner, name = self.param
        return any(form is None for form in owner._parameter_constraints[name]) and self.default is not SEED

    def default_value(self, seed: int) -> Any:
        """Return the default: the job's, the seed, or the signature's."""
        if self.default is SEED:
            return seed
        if self.default is SIGNATURE:
            return signature_defaults(self.param[0])[self.param[1]]
        return self.default


def _class_weight() -> Check:
    """'balanced', or a mapping of class label to a weight >= 0."""
    expected = "'balanced' or a mapping {label: weight >= 0}, e.g. {0: 1.0, 1: 5.0}"
    weight = _number(ge=0, expected=expected)

    def check(value: Any) -> str | dict[Any, float]:
        if isinstance(value, str) and value.strip().lower() == "balanced":
            return "balanced"
        if isinstance(value, Mapping) and value:
            return {label: weight(w) for label, w in value.items()}
        return _fail(expected, value, "")

    return check


def _byte_size() -> Check:
    """A number of bytes > 0 or a size such as "8GB"."""
    count = _integer(gt=0)

    def check(value: Any) -> int | str:
        if isinstance(value, str):
            if _BYTES.fullmatch(value.strip()):
                return value
            _fail("a number of bytes > 0 or a size such as '8GB'", value)
        return count(value)

    return check


_GAMMA = "a number > 0, a non-empty list of numbers > 0 (searched), or 'cv'"
_SCALE = "a number > 0 or a non-empty list of numbers > 0 (one per feature)"

#: the job's own rules, by ``model:`` key; every other key is a parameter of the chosen class
JOB_KEYS: dict[str, JobKey] = {
    "solver": JobKey((KernelRidge, "solver"), default="random_features"),
    "kernel": JobKey((RandomFeatureRidge, "kernel"), lambda: _choice(JOB_KERNELS)),
    "gamma": JobKey((RandomFeatureRidge, "gamma"), lambda: _positive_or_list(_GAMMA, word="cv")),
    "length_scale": JobKey((RandomFeatureRidge, "length_scale"), lambda: _positive_or_list(_SCALE)),
    "alpha": JobKey(
        (RandomFeatureRidge, "alpha"),
        lambda: _param(RandomFeatureRidge, "alpha", words=("loo", "gcv", "cv", "evidence")),
        default="gcv",
    ),
    # 'gcv' is alpha's word in a job; cv is the number of folds only
    "cv": JobKey((RandomFeatureRidgeCV, "cv"), lambda: _param(RandomFeatureRidgeCV, "cv", words=())),
    # a whole degree: the estimators take a real one, the random features of the job an int
    "degree": JobKey((RandomFeatureRidge, "degree"), lambda: _integer(gt=0)),
    "n_components": JobKey((RandomFeatureRidge, "n_components"), default=1024),
    "dtype": JobKey((RandomFeatureRidge, "dtype")),  # the features'; the Gram's is gram_dtype
    "gram_dtype": JobKey((ExactKernelRidge, "dtype")),
    "standardize": JobKey(
        (RandomFeatureRidge, "standardize"),
        lambda: _param(RandomFeatureRidge, "standardize", words=("auto",)),
        default="auto",
    ),
    "random_state": JobKey((RandomFeatureRidge, "random_state"), lambda: _integer(ge=0), default=SEED),
    "preconditioner": JobKey(
        (ExactKernelRidge, "preconditioner"), lambda: _param(ExactKernelRidge, "preconditioner", null_word="none")
    ),
    "n_probes": JobKey((ExactKernelRidge, "n_probes"), default=8),
    "memory_budget": JobKey((ExactKernelRidge, "memory_budget"), _byte_size),
    "device": JobKey((RandomFeatureRidge, "device"), lambda: _device),
    "class_weight": JobKey((RandomFeatureClassifier, "class_weight"), _class_weight),
}


def signature_defaults(cls: type) -> dict[str, Any]:
    """Return the default of each ``__init__`` parameter of ``cls``.

    Parameters
    ----------
    cls : type
        An estimator class.

    Returns
    -------
    dict
        ``{name: default}`` in the signature's order.
    """
    return {
        name: p.default
        for name, p in inspect.signature(cls.__init__).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def model_keys() -> tuple[str, ...]:
    """Return the valid keys of ``model:``: the job's, then every parameter of the job's classes
    (but :data:`NOT_KEYS`), then ``estimator`` and ``params`` (the explicit form).

    Read from the classes' signatures on each call: a new parameter is a new key.

    Returns
    -------
    tuple of str
    """
    keys = dict.fromkeys(JOB_KEYS)
    for cls in estimators().values():
        keys.update(dict.fromkeys(name for name in signature_defaults(cls) if name not in NOT_KEYS))
    return (*keys, "estimator", "params")


def owner_of(key: str, cls: type) -> type:
    """Return the class whose constraints check ``key``: ``cls`` if it takes it, else the
    first job class that does (a key the chosen solver ignores is still checked)."""
    if key in cls._parameter_constraints:
        return cls
    return next(c for c in estimators().values() if key in c._parameter_constraints)


def is_search(values: Mapping[str, Any]) -> bool:
    """Whether the job's gamma / alpha ask for a search (a list of gammas, or "cv"/"loo")."""
    gamma, alpha = values.get("gamma"), values.get("alpha")
    return isinstance(gamma, tuple) or "cv" in (gamma, alpha) or alpha == "loo"


def choose_estimator(values: Mapping[str, Any], task: str) -> type:
    """Return the class a job builds from its solver, search and task.

    Parameters
    ----------
    values : mapping
        The job's ``model:`` values (``solver``, ``gamma``, ``alpha``).
    task : {"regression", "classification"}

    Returns
    -------
    type
        The estimator class (the plain one when the search asked for does not exist: the
        config reports that).
    """
    solver = values["solver"]
    pair = CHOICE.get((solver, is_search(values)), CHOICE[solver, False])
    if task == "classification":
        return pair[1] if pair[1] is not None else CHOICE[solver, False][1]
    return pair[0]


def estimator_params(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """Return every parameter of ``cls`` for the job's ``model:`` values.

    Parameters
    ----------
    cls : type
        The chosen class (:func:`choose_estimator`).
    values : mapping
        The job's values: every key of :data:`JOB_KEYS` (given or its default) and the
        estimator keys given.

    Returns
    -------
    dict
        The signature's defaults, replaced by the values the class takes under their own name
        and by the translations of the job's keys (searches, dtypes, preconditioner "none").
    """
    params = signature_defaults(cls)
    translated = {"solver", "gamma", "length_scale", "alpha", "cv", "dtype", "gram_dtype", "preconditioner"}
    params.update({k: v for k, v in values.items() if k in params and k not in translated})
    if "solver" in params:
        params["solver"] = CLASS_SOLVER.get(values["solver"], values["solver"])
    if "preconditioner" in params:
        params["preconditioner"] = None if values["preconditioner"] == "none" else values["preconditioner"]
    if "dtype" in params:
        params["dtype"] = _dtype(values, cls)
    if "criterion" in params:
        params.update(_exact_search(values))
    elif "gammas" in params:
        params.update(_feature_search(values, classifier="class_weight" in params))
    else:
        params.update(gamma=values["gamma"], length_scale=values["length_scale"], alpha=values["alpha"])
    return {k: v for k, v in params.items() if k in signature_defaults(cls)}


def _dtype(values: Mapping[str, Any], cls: type) -> str:
    """The estimator's ``dtype``: the exact solver's is the Gram's; solver auto takes the Gram's,
    or the approximate solvers' feature dtype when only that is set. The feature dtype
    ``"auto"`` (checked float32) is RandomFeatureRidge's (and KernelRidge's, which routes it
    there); the other feature estimators get float64 for it."""
    solver, dtype, gram = values["solver"], values["dtype"], values["gram_dtype"]
    if solver == "exact":
        return gram
    if dtype == "auto" and cls not in (RandomFeatureRidge, KernelRidge):
        return "float64"
    if solver == "auto":
        return gram if gram != "auto" else ("auto" if dtype == "float64" else dtype)
    return dtype


def _feature_search(values: Mapping[str, Any], *, classifier: bool) -> dict[str, Any]:
    """RandomFeatureRidgeCV's grids: K-fold when "cv" is asked for (a classifier: always), else
    GCV or the evidence."""
    gamma, ls, alpha = values["gamma"], values["length_scale"], values["alpha"]
    if isinstance(gamma, tuple):
        gammas, length_scales = gamma, None
    elif gamma == "cv":
        gammas, length_scales = None, None  # the estimator's default grid around 1/d
    elif gamma is not None:
        gammas, length_scales = (gamma,), None
    else:  # a single (possibly ARD) length scale, or neither
        gammas, length_scales = None, (None if ls is None else (ls,))
    alphas = alpha if isinstance(alpha, tuple) else (alpha,) if isinstance(alpha, float) else None
    if classifier or "cv" in (alpha, gamma):
        cv: int | str = values["cv"]
    else:
        cv = "evidence" if alpha == "evidence" else "gcv"
    return {"gammas": gammas, "length_scales": length_scales, "alphas": alphas, "cv": cv}


def _exact_search(values: Mapping[str, Any]) -> dict[str, Any]:
    """ExactKernelRidgeCV's grids: closed-form LOO when "cv" or "loo" is asked for, else GCV
    or the evidence."""
    gamma, ls, alpha = values["gamma"], values["length_scale"], values["alpha"]
    searchable = kernel_spec(values["kernel"]).searchable("exact")
    gammas = length_scales = kernel_params = None
    if isinstance(gamma, tuple):
        gammas = gamma
    elif gamma not in (None, "cv") and "gamma" in searchable:
        gammas = (gamma,)  # one gamma (ignored, as scikit-learn does, by kernels without one)
    elif gamma is None and ls is not None:
        if isinstance(ls, tuple) or "length_scale" not in searchable:
            kernel_params = {"length_scale": ls}  # ARD scales or periodic: fixed, alpha searched
        else:
            length_scales = (ls,)
    alphas = alpha if isinstance(alpha, tuple) else None if isinstance(alpha, str) else (alpha,)
    if "cv" in (gamma, alpha) or alpha == "loo":
        criterion = "loo"
    else:
        criterion = "evidence" if alpha == "evidence" else "gcv"
    return {
        "gammas": gammas,
        "length_scales": length_scales,
        "alphas": alphas,
        "criterion": criterion,
        "kernel_params": kernel_params,
    }


def estimator_arguments(params: Mapping[str, Any]) -> dict[str, Any]:
    """Return parsed parameters as an estimator's arguments: tuples as lists (recursively).

    Parameters
    ----------
    params : mapping
        ``ModelConfig.params``.

    Returns
    -------
    dict
    """

    def plain(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        return value

    return {name: plain(value) for name, value in params.items()}


def estimator_class(name: str) -> type:
    """Return the job estimator class called ``name`` (``ModelConfig.estimator``).

    Parameters
    ----------
    name : str

    Returns
    -------
    type
    """
    return estimators()[name]
