"""bigkernel.validation: each constraint accepts and refuses what it says, messages name the
parameter, every allowed form, the value found and the fix; every public estimator declares and
checks a table entry for every parameter; the job config reads the same tables."""

import inspect
import pickle
from numbers import Integral, Real
from typing import get_args

import numpy as np
import pytest
from sklearn.base import BaseEstimator, clone

import bigkernel
from bigkernel.errors import ConfigError, ParameterError
from bigkernel.jobs import config as job_config
from bigkernel.validation import (
    DTypes,
    Interval,
    InvalidParameterError,
    ListOf,
    Options,
    check_int,
    check_param,
    describe,
    is_integer,
    make_constraint,
    validate_params,
)
from tests.conftest import friedman

ESTIMATORS = [
    getattr(bigkernel, name)
    for name in bigkernel.__all__
    if inspect.isclass(getattr(bigkernel, name)) and issubclass(getattr(bigkernel, name), BaseEstimator)
]


def accepts(constraint, value) -> bool:
    return make_constraint(constraint).is_satisfied_by(value)


# --------------------------------------------------------------------------------------------
# Each constraint
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("closed,left_in,right_in", [
    ("both", True, True), ("left", True, False), ("right", False, True), ("neither", False, False),
])  # fmt: skip
def test_interval_bounds(closed, left_in, right_in):
    c = Interval(Real, 0, 1, closed=closed)
    assert accepts(c, 0.5) and accepts(c, np.float32(0.25)) and accepts(c, 1e-300)
    assert accepts(c, 0) is left_in and accepts(c, 0.0) is left_in
    assert accepts(c, 1) is right_in
    assert not accepts(c, -1e-12) and not accepts(c, 1 + 1e-12)


def test_interval_integral_refuses_booleans_floats_and_text():
    c = Interval(Integral, 1, None, closed="left")
    assert accepts(c, 1) and accepts(c, np.int64(7)) and accepts(c, 10**30)
    for bad in (0, -3, True, np.True_, 3.0, np.float64(3.0), "3", None, [3]):
        assert not accepts(c, bad), bad
    assert c.describe() == "an integer >= 1" and c.describe(plural=True) == "integers >= 1"
    assert c.hint(True) == "; booleans are not numbers"
    assert c.hint(3.0) == "; write it without a decimal point" and c.hint(3.5) == ""


def test_interval_real_is_finite_and_never_boolean():
    c = Interval(Real, None, None, closed="neither")
    assert accepts(c, -1e300) and accepts(c, 0) and accepts(c, np.float16(2))
    for bad in (np.nan, np.inf, -np.inf, False, "1.0", None):
        assert not accepts(c, bad), bad
    assert c.describe() == "a number"
    assert c.hint(np.nan) == "; NaN is not allowed" and c.hint(np.inf) == "; the value must be finite"
    assert "text" in c.hint("1e-3") and c.hint("big") == ""
    assert Interval(Real, 0, 1, closed="neither").describe() == "a number > 0 and < 1"


def test_interval_arguments_are_checked():
    with pytest.raises(TypeError):
        Interval(float, 0, 1, closed="both")
    with pytest.raises(ValueError):
        Interval(Real, 0, 1, closed="open")
    with pytest.raises(ValueError):
        Interval(Real, 2, 1, closed="both")


def test_options():
    c = Options(str, ("cos", "cossin"))
    assert accepts(c, "cos") and accepts(c, np.str_("cossin"))
    assert not accepts(c, "sin") and not accepts(c, None) and not accepts(c, 1)
    assert c.describe() == "one of 'cos', 'cossin'" and Options(str, ("gcv",)).describe() == "'gcv'"
    assert c.hint("cossine") == "; did you mean 'cossin'?" and c.hint("xyz") == ""
    nus = Options(Real, (0.5, 1.5, 2.5))
    assert accepts(nus, 1.5) and accepts(nus, np.float64(2.5)) and not accepts(nus, 1.0)
    assert nus.describe() == "one of 0.5, 1.5, 2.5"
    assert not accepts(Options(Integral, (0, 1)), True)  # a boolean is never one of the numbers
    assert Options(str, {"b", "a"}).options == ("a", "b")  # a set is sorted: the message is stable
    # text matches regardless of case and spaces, as kernel names do; the table's spelling back
    assert accepts(c, "COS") and accepts(c, " CosSin ") and c.canonical("COS") == "cos"
    assert c.canonical("sin") is None and Options(Real, (0.5,)).canonical("0.5") is None


def test_text_options_are_case_insensitive_in_fit_and_in_jobs(tmp_path):
    """alpha="GCV" (and every text option) fits as the table's spelling, as kernel="RBF"; the
    estimator keeps what the user gave until fit (clone and get_params see it unchanged)."""
    X, y = friedman(300, seed=3)
    kw = dict(n_components=32, random_state=0, gamma=0.2)
    loud = bigkernel.RandomFeatureRidge(alpha="GCV", sampler="Orthogonal", form="COS", dtype="Float64", **kw)
    assert clone(loud).get_params()["alpha"] == "GCV"
    ref = bigkernel.RandomFeatureRidge(alpha="gcv", sampler="orthogonal", form="cos", dtype="float64", **kw)
    np.testing.assert_array_equal(loud.fit(X, y).coef_, ref.fit(X, y).coef_)
    assert (loud.alpha, loud.sampler, loud.form, loud.dtype) == ("gcv", "orthogonal", "cos", "float64")
    assert bigkernel.KernelRidge(solver="Random_Features", n_components=16).fit(X, y).solver_ == "random_features"
    assert check_param("interval", "Prediction", [Options(str, ("confidence", "prediction"))]) == "prediction"
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: t\noutput: out\ndata:\n  make: {kind: Friedman1, n_samples: 500, n_features: 5, path: d.zarr}\n"
        "model: {kernel: RBF, alpha: GCV, sampler: Orthogonal, form: COS, dtype: Float32, solver: Random_Features}\n"
    )
    cfg = job_config.load_config(str(job))
    params = cfg.model.params
    assert (cfg.data.make.kind, params["kernel"], params["alpha"], params["sampler"]) == (
        "friedman1",
        "rbf",
        "gcv",
        "orthogonal",
    )
    assert (params["form"], params["dtype"], cfg.model.solver) == ("cos", "float32", "random_features")
    auto = job_config.config_from_dict({**MINIMAL, "model": {"solver": "Auto"}})
    assert auto.model.solver == "auto" and auto.model.params["solver"] == "auto"


def test_list_of():
    c = ListOf(Interval(Real, 0, None, closed="neither"))
    assert accepts(c, [0.1, 2]) and accepts(c, (1.0,)) and accepts(c, np.array([1.0, 2.0]))
    for bad in ([], [1.0, -2.0], [1.0, np.nan], [[1.0]], np.ones((2, 2)), "1.0", 1.0, {"a": 1.0}):
        assert not accepts(c, bad), bad
    assert c.describe() == "a non-empty list of numbers > 0"
    assert c.hint([]) == "; the list is empty"
    assert c.hint([1.0, -2.0]) == "; item 1 (-2.0) is not a number > 0"
    assert c.hint([True]).endswith("booleans are not numbers")


def test_named_constraints_none_types_and_dtypes():
    assert accepts("boolean", True) and accepts("boolean", np.False_) and not accepts("boolean", 1)
    assert accepts("array-like", [1, 2]) and accepts("array-like", np.ones(3)) and accepts("array-like", ())
    assert not accepts("array-like", np.float64(1.0)) and not accepts("array-like", "ab")
    assert not accepts("array-like", {"a": 1}) and not accepts("array-like", 3)
    rs = make_constraint("random_state")
    for ok in (None, 0, np.int64(5), np.random.RandomState(0)):
        assert rs.is_satisfied_by(ok), ok
    for bad in (-1, True, 1.0, np.random.default_rng(0), "0"):
        assert not rs.is_satisfied_by(bad), bad
    assert "Generator" in rs.hint(np.random.default_rng(0))
    assert accepts(None, None) and not accepts(None, 0)
    assert accepts(dict, {}) and not accepts(dict, [])
    assert not accepts(int, True)  # booleans are not integers, even for a plain type
    d = DTypes(("float32", "float64"))
    assert accepts(d, np.float32) and accepts(d, np.dtype("float64")) and accepts(d, "f4")
    assert not accepts(d, np.float16) and not accepts(d, "float16") and not accepts(d, "nonsense")
    with pytest.raises(TypeError, match="unknown parameter constraint"):
        make_constraint("integer")


def test_is_integer_and_check_int():
    assert is_integer(3) and is_integer(np.int32(3)) and not is_integer(True) and not is_integer(3.0)
    assert check_int("n", np.int64(4), 1) == 4 and type(check_int("n", np.int64(4), 1)) is int
    for bad in (0, True, False, 2.0, "2", None):
        with pytest.raises(ParameterError, match=r"^f: n must be an integer >= 1; found "):
            check_int("n", bad, 1, caller="f")
    with pytest.raises(ParameterError, match=r"found True \(bool\); booleans are not numbers"):
        check_int("batch_size", True, 1)
    with pytest.raises(ParameterError, match=r"Use e\.g\. n_bootstraps=200 \(the default\)\.$"):
        check_int("n_bootstraps", 0, 1, caller="bootstrap", default=200)


# --------------------------------------------------------------------------------------------
# The message
# --------------------------------------------------------------------------------------------
TABLE = {
    "alpha": [
        Interval(Real, 0, None, closed="neither"),
        ListOf(Interval(Real, 0, None, closed="neither")),
        Options(str, ("gcv",)),
    ],
    "n_components": [Interval(Integral, 0, None, closed="neither")],
    "chunk_rows": [Interval(Integral, 0, None, closed="neither"), None],
}


def test_validate_params_message_names_parameter_expected_found_and_fix():
    validate_params(TABLE, {"alpha": [0.1, 1.0], "n_components": 5, "chunk_rows": None}, "Est")
    with pytest.raises(InvalidParameterError) as err:
        validate_params(
            TABLE, {"alpha": 1.0, "n_components": 0, "chunk_rows": None}, "Est", defaults={"n_components": 100}
        )
    assert str(err.value) == (
        "Est: n_components must be an integer > 0; found 0 (int). Use e.g. n_components=100 (the default)."
    )
    assert isinstance(err.value, ParameterError) and isinstance(err.value, ValueError)
    assert (err.value.param, err.value.expected, err.value.hint) == ("n_components", "an integer > 0", "")
    with pytest.raises(ParameterError) as err:
        validate_params(TABLE, {"alpha": float("nan")}, "Est")
    assert str(err.value) == (
        "Est: alpha must be a number > 0, a non-empty list of numbers > 0 or 'gcv'; "
        "found nan (float); NaN is not allowed."
    )
    with pytest.raises(ParameterError, match=r"alpha must be .*found 'gvc' \(str\); did you mean 'gcv'\?$"):
        validate_params(TABLE, {"alpha": "gvc"}, "Est")
    with pytest.raises(ParameterError, match=r"chunk_rows must be an integer > 0 or None; found True \(bool\)"):
        validate_params(TABLE, {"chunk_rows": True}, "Est")
    # a default that the table refuses is not offered as the fix
    with pytest.raises(ParameterError) as err:
        validate_params(TABLE, {"n_components": -1}, "Est", defaults={"n_components": 0})
    assert "Use e.g." not in str(err.value)
    # a long value is shortened
    with pytest.raises(ParameterError, match=r"found \[0, 1, 2, [0-9, ]*\.\.\. \(list\)\.$"):
        validate_params(TABLE, {"n_components": list(range(1000))}, "Est")
    assert describe(TABLE["chunk_rows"]) == "an integer > 0 or None"


def test_check_param_returns_the_value_and_errors_survive_pickling():
    assert check_param("x", 0.5, TABLE["alpha"]) == 0.5
    with pytest.raises(InvalidParameterError) as err:
        check_param("x", -1.0, TABLE["alpha"], caller="f")
    back = pickle.loads(pickle.dumps(err.value))  # dask sends errors between processes
    assert type(back) is InvalidParameterError and str(back) == str(err.value)
    assert back.param == "x" and back.expected == err.value.expected


# --------------------------------------------------------------------------------------------
# Every public estimator: a table entry for every parameter, checked in fit
# --------------------------------------------------------------------------------------------
def test_there_are_public_estimators():
    assert {e.__name__ for e in ESTIMATORS} >= {
        "RandomFeatureRidge",
        "RandomFeatureRidgeCV",
        "NystroemRidge",
        "ExactKernelRidge",
        "ExactKernelRidgeCV",
        "KernelRidge",
    }


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_every_parameter_has_constraints_and_defaults_satisfy_them(cls):
    params = cls().get_params(deep=False)
    table = cls._parameter_constraints
    assert set(table) == set(params), (
        f"{cls.__name__}: parameters without constraints {set(params) - set(table)}, "
        f"constraints without a parameter {set(table) - set(params)}"
    )
    for name, value in params.items():
        forms = [make_constraint(c) for c in table[name]]  # every entry is a known constraint
        assert any(c.is_satisfied_by(value) for c in forms), f"{cls.__name__}: default {name}={value!r}"


class _BadType:
    pass


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_fit_refuses_a_value_of_no_allowed_form_for_every_parameter(cls):
    X, y = friedman(30)
    for name in cls().get_params(deep=False):
        est = cls().set_params(**{name: _BadType()})
        with pytest.raises(InvalidParameterError, match=rf"^{cls.__name__}: {name} must be .*; found <.*_BadType"):
            est.fit(X, y)


# a transformer of tables (TableEncoder) has no integer parameters
@pytest.mark.parametrize("cls", [c for c in ESTIMATORS if c is not bigkernel.TableEncoder], ids=lambda c: c.__name__)
def test_fit_refuses_booleans_as_integers(cls):
    X, y = friedman(30)
    table = cls._parameter_constraints
    integers = [
        name
        for name, forms in table.items()
        if any(isinstance(c, Interval) and c.type is Integral for c in map(make_constraint, forms))
    ]
    assert integers  # every estimator has integer parameters (n_components, max_iter, max_n, ...)
    for name in integers:
        with pytest.raises(ParameterError, match=rf"{name} must be .*found True \(bool\); booleans are not numbers"):
            cls().set_params(**{name: True}).fit(X, y)


def test_estimator_messages_offer_the_default():
    X, y = friedman(30)
    with pytest.raises(
        ParameterError,
        match=r"^RandomFeatureRidge: n_components must be an integer > 0; "
        r"found 0 \(int\)\. Use e\.g\. n_components=100 \(the default\)\.$",
    ):
        bigkernel.RandomFeatureRidge(n_components=0).fit(X, y)
    with pytest.raises(ParameterError, match=r"^ExactKernelRidge: tol must be a number > 0 and < 1; found 1\.0"):
        bigkernel.ExactKernelRidge(tol=1.0).fit(X, y)


def test_kernel_ridge_reads_its_solvers_tables():
    kr, exact = bigkernel.KernelRidge._parameter_constraints, bigkernel.ExactKernelRidge._parameter_constraints
    for name in ("alpha", "tol", "max_iter", "rank", "n_probes", "memory_budget", "preconditioner", "dtype"):
        assert kr[name] is exact[name]
    for name in ("n_components", "landmarks"):
        assert kr[name] is bigkernel.NystroemRidge._parameter_constraints[name]


def test_feature_dtype_keeps_numpy_dtypes():
    X, y = friedman(60)
    a = bigkernel.RandomFeatureRidge(n_components=16, dtype=np.float32, random_state=0).fit(X, y)
    b = bigkernel.RandomFeatureRidge(n_components=16, dtype="float32", random_state=0).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)


# --------------------------------------------------------------------------------------------
# The job config reads the same tables
# --------------------------------------------------------------------------------------------
MINIMAL = {"output": "out", "data": {"make": {"path": "d.zarr"}}}


def config_error(model: dict) -> str:
    with pytest.raises(ConfigError) as err:
        job_config.config_from_dict({**MINIMAL, "model": model})
    return str(err.value)


@pytest.mark.parametrize("key,owner,value", [
    ("n_components", bigkernel.RandomFeatureRidge, 0),
    ("tol", bigkernel.ExactKernelRidge, 1.5),
    ("max_iter", bigkernel.ExactKernelRidge, 0),
    ("rank", bigkernel.ExactKernelRidge, -2),
    ("n_probes", bigkernel.ExactKernelRidge, -1),
    ("sampler", bigkernel.RandomFeatureRidge, "sobol"),
    ("landmarks", bigkernel.NystroemRidge, "kmeans"),
    ("solver", bigkernel.KernelRidge, "cholesky"),
])  # fmt: skip
def test_config_error_is_the_estimator_rule_at_the_yaml_key(key, owner, value):
    message = config_error({key: value})
    with pytest.raises(InvalidParameterError):
        validate_params(owner._parameter_constraints, {key: value}, owner.__name__)
    forms = [c for c in owner._parameter_constraints[key] if c is not None]  # null: the key's own rule
    assert f"model.{key}: expected {describe(forms)}, found " in message


def test_config_keyword_forms():
    assert "model.alpha: expected a number > 0, a non-empty list of numbers > 0, 'loo', 'gcv', 'cv' or 'evidence'" in (
        config_error({"alpha": -1.0})
    )
    assert "model.cv: expected an integer >= 2, found 1" in config_error({"cv": 1})
    assert "found 'gcv'" in config_error({"cv": "gcv"})  # in a job, 'gcv' is alpha's
    assert "model.preconditioner: expected one of 'rpcholesky', 'nystroem', 'none'" in config_error(
        {"preconditioner": "ilu"}
    )
    cfg = job_config.config_from_dict(
        {
            **MINIMAL,
            "model": {"solver": "auto", "alpha": [1, 2.5], "preconditioner": "none", "n_components": 64, "tol": 1e-3},
        }
    )
    params = cfg.model.params  # KernelRidge's: preconditioner "none" is its None
    assert params["alpha"] == (1.0, 2.5) and params["preconditioner"] is None
    assert type(params["n_components"]) is int and type(params["tol"]) is float
    assert job_config.config_from_dict({**MINIMAL, "model": {"alpha": "cv", "cv": 3}}).model.params["cv"] == 3


def test_config_choices_name_the_tables_options():
    """The dataclass annotations (documentation) list exactly the values the tables allow."""

    def options(owner, name):
        return {
            o
            for c in map(make_constraint, owner._parameter_constraints[name])
            if isinstance(c, Options)
            for o in c.options
        }

    assert set(get_args(job_config.Solver)) == options(bigkernel.KernelRidge, "solver")
    assert set(get_args(job_config.Sampler)) == options(bigkernel.RandomFeatureRidge, "sampler")
    assert set(get_args(job_config.Form)) == options(bigkernel.RandomFeatureRidge, "form")
    assert set(get_args(job_config.DType)) == options(bigkernel.RandomFeatureRidge, "dtype")
    assert set(get_args(job_config.GramDType)) == options(bigkernel.ExactKernelRidge, "dtype")
    assert set(get_args(job_config.Landmarks)) == options(bigkernel.NystroemRidge, "landmarks")
    assert set(get_args(job_config.Preconditioner)) == options(bigkernel.ExactKernelRidge, "preconditioner") | {"none"}


# --------------------------------------------------------------------------------------------
# One default noise per synthetic kind
# --------------------------------------------------------------------------------------------
def test_one_default_noise_read_by_spec_config_and_cli(tmp_path):
    import json

    import zarr

    from bigkernel.cli import main
    from bigkernel.data.synthetic import DEFAULT_NOISE, SyntheticSpec

    assert DEFAULT_NOISE == {"friedman1": 1.0, "sine": 0.3, "classes": 1.0}
    assert SyntheticSpec("sine", 10, 1).noise == 0.3 and SyntheticSpec("friedman1", 10, 10).noise == 1.0
    assert SyntheticSpec("sine", 10, 1, 0.0).noise == 0.0
    for kind in DEFAULT_NOISE:
        cfg = job_config.config_from_dict({**MINIMAL, "data": {"make": {"kind": kind, "path": "d.zarr"}}})
        assert cfg.data.make.noise == DEFAULT_NOISE[kind]
        assert main(["-q", "make-data", kind, str(tmp_path / f"{kind}.zarr"), "--n-samples", "64"]) == 0
        spec = zarr.open_group(str(tmp_path / f"{kind}.zarr"), mode="r").attrs["spec"]
        assert json.loads(json.dumps(spec))["noise"] == DEFAULT_NOISE[kind]
