"""The job's ``model:`` section is read from the estimator classes: their ``__init__`` signature
(keys and defaults) and ``_parameter_constraints`` (checks), through one table of the job's own
keys (bigkernel/jobs/config/estimators.py)."""

from __future__ import annotations

import inspect
from numbers import Real
from pathlib import Path

import pytest

from bigkernel.jobs.config import config_from_dict, load_config
from bigkernel.jobs.config import estimators as table
from bigkernel.jobs.config.estimators import JOB_KEYS, SEED, SIGNATURE, estimators, signature_defaults
from bigkernel.jobs.runner import build_estimator
from bigkernel.models.random_features import RandomFeatureRidge
from bigkernel.models.random_features_classifier import RandomFeatureClassifier
from bigkernel.validation import Interval
from tests._yaml import MINIMAL, error_of, with_model


class ShrunkRidge(RandomFeatureRidge):
    """RandomFeatureRidge with one more parameter, as a future estimator would have."""

    _parameter_constraints = {
        **RandomFeatureRidge._parameter_constraints,
        "shrink": [Interval(Real, 0, 1, closed="both")],
    }

    def __init__(self, kernel: str = "rbf", *, shrink: float = 0.5, **params) -> None:
        super().__init__(kernel, **params)
        self.shrink = shrink


# its signature as written out in full: the parent's parameters and ``shrink``
_PARENT = inspect.signature(RandomFeatureRidge.__init__)
ShrunkRidge.__init__.__signature__ = _PARENT.replace(  # type: ignore[attr-defined]
    parameters=[*_PARENT.parameters.values(), inspect.Parameter("shrink", inspect.Parameter.KEYWORD_ONLY, default=0.5)]
)


@pytest.fixture
def shrunk(monkeypatch):
    """Solver random_features builds ShrunkRidge: only the class changes, nothing under jobs/."""
    monkeypatch.setitem(table.CHOICE, ("random_features", False), (ShrunkRidge, RandomFeatureClassifier))


def test_a_new_estimator_parameter_is_a_config_key(tmp_path: Path, shrunk) -> None:
    cfg = load_config(with_model(tmp_path, "shrink: 0.25\nn_components: 32\n"))
    assert cfg.model.estimator == "ShrunkRidge" and cfg.model.solver == "random_features"
    assert cfg.model.params["shrink"] == 0.25 and cfg.model.params["n_components"] == 32
    est = build_estimator(cfg)
    assert type(est) is ShrunkRidge and est.shrink == 0.25 and est.n_components == 32
    # its default is the signature's, and its constraint checks the YAML value at its line
    assert load_config(with_model(tmp_path, "alpha: 1.0\n")).model.params["shrink"] == 0.5
    message = error_of(with_model(tmp_path, "alpha: 1.0\nshrink: 2\n"))
    assert "job.yaml:7: model.shrink: expected a number >= 0 and <= 1, found 2 (integer)" in message
    message = error_of(with_model(tmp_path, "alpha: 1.0\nshrnk: 0.2\n"))
    assert "job.yaml:7: model.shrnk: unknown key 'shrnk'; did you mean 'shrink'" in message
    # the resolved config reads back as itself
    assert config_from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("name", list(estimators()))
def test_defaults_are_the_signature_defaults(name: str) -> None:
    """Every parameter a job leaves unset is the class's default, but the job's own few."""
    cls = estimators()[name]
    cfg = config_from_dict(
        {**_data(), "task": "classification" if "class_weight" in signature_defaults(cls) else "regression",
         "model": {"estimator": name}}
    )  # fmt: skip
    assert cfg.model.params == dict(signature_defaults(cls), random_state=0)
    own = {key for key, job in JOB_KEYS.items() if job.default not in (SIGNATURE, SEED)}
    assert own == {"solver", "alpha", "n_components", "n_probes", "standardize"}  # the job's choices, documented


def test_job_keys_default_to_their_parameters_signature() -> None:
    for key, job in JOB_KEYS.items():
        owner, name = job.param
        if job.default is SIGNATURE:
            assert job.default_value(0) == signature_defaults(owner)[name], key


def test_a_typo_gets_did_you_mean_with_its_line(tmp_path: Path) -> None:
    message = error_of(with_model(tmp_path, "solver: exact\nalpha: 1.0\nn_compnents: 64\n"))
    assert "job.yaml:8: model.n_compnents: unknown key 'n_compnents'; did you mean 'n_components'?" in message
    # a grid is set through the job's key, and data chunks in data:
    assert "did you mean 'alpha'?" in error_of(with_model(tmp_path, "alphas: [1.0, 2.0]\n"))
    assert "did you mean 'data.chunk_rows'" in error_of(with_model(tmp_path, "chunk_rows: 100\n"))


def test_the_explicit_form_is_checked_by_the_class(tmp_path: Path) -> None:
    text = MINIMAL + "model:\n  estimator: ExactKernelRidgeCV\n  params: {gammas: [0.1, 1], critrion: loo}\n"
    path = tmp_path / "job.yaml"
    path.write_text(text)
    message = error_of(path)
    assert "job.yaml:7: model.params.critrion: unknown key 'critrion'; did you mean 'criterion'?" in message
    path.write_text(MINIMAL + "model:\n  estimator: ExactKernelRigeCV\n")
    assert "did you mean 'ExactKernelRidgeCV'?" in error_of(path)
    path.write_text(MINIMAL + "model:\n  estimator: ExactKernelRidgeCV\n  params: {gammas: [0.1, 1], max_n: 500}\n")
    cfg = load_config(path)
    assert cfg.model.params["gammas"] == (0.1, 1.0) and cfg.model.params["max_n"] == 500
    assert build_estimator(cfg).gammas == [0.1, 1.0]


def _data() -> dict:
    return {"output": "/tmp/o", "data": {"train": {"path": "/tmp/t.zarr"}}}
