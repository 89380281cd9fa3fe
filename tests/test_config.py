"""Job config loading and validation (bigkernel.jobs.config): pure, no Dask, no data.

The bad inputs of issue 5 (unknown keys, numbers read as text, out-of-range α/γ/D, unknown
kernels, duplicate keys, Python tags, outputs over inputs, a missing file) are in
tests/test_bad_inputs.py, through the loader and the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from bigkernel.errors import ConfigError
from bigkernel.jobs.config import (
    BootstrapConfig,
    ClusterConfig,
    JobConfig,
    LocalClusterConfig,
    ModelConfig,
    PredictConfig,
    SourceConfig,
    TrainSourceConfig,
    config_from_dict,
    load_config,
)
from bigkernel.jobs.config.estimators import signature_defaults
from bigkernel.models.random_features import RandomFeatureRidge
from tests._yaml import MINIMAL, error_of, with_bootstrap, with_model, write

# --------------------------------------------------------------------------------------------
# Valid configs
# --------------------------------------------------------------------------------------------


def test_minimal_config_gets_documented_defaults(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, MINIMAL))
    assert cfg.name == "job"  # the file stem
    assert cfg.seed == 0 and cfg.overwrite is False
    # the estimator's signature defaults, but for the job's own (D=1024, alpha gcv, the seed)
    assert cfg.model == ModelConfig(
        estimator="RandomFeatureRidge",
        params=dict(signature_defaults(RandomFeatureRidge), n_components=1024, alpha="gcv", random_state=0),
    )
    assert (
        cfg.model.params["alpha"] == "gcv"
        and cfg.model.params["kernel"] == "rbf"
        and cfg.model.solver == "random_features"
    )
    assert cfg.data.train == TrainSourceConfig(path=str(tmp_path / "data" / "train.zarr"))
    assert cfg.data.train.missing == "error" and cfg.data.train.categorical == "auto"
    assert cfg.data.make is None and cfg.data.chunk_rows == "auto"
    assert cfg.cluster == ClusterConfig(local=LocalClusterConfig())
    assert cfg.cluster.local is not None and cfg.cluster.local.host == "127.0.0.1"
    assert cfg.predict is None and cfg.bootstrap is None
    assert cfg.source == str(tmp_path / "job.yaml")


def test_relative_paths_resolve_against_config_directory(tmp_path: Path, monkeypatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    path = write(
        tmp_path,
        """\
        output: ../runs/job
        data:
          train: {path: data/x.npy, y_path: data/y.npy}
        predict:
          path: /abs/new.zarr
          output: preds.zarr
        bootstrap:
          store: /abs/store.zarr
        """,
        name="configs/job.yaml",
    )
    cfg = load_config(os.path.relpath(path))  # a relative config path, from another cwd
    configs = tmp_path / "configs"
    assert cfg.output == str(tmp_path / "runs" / "job")
    assert cfg.data.train is not None
    assert cfg.data.train.path == str(configs / "data" / "x.npy")
    assert cfg.data.train.y_path == str(configs / "data" / "y.npy")
    assert cfg.predict is not None and cfg.predict.path == "/abs/new.zarr"
    assert cfg.predict.output == str(tmp_path / "runs" / "job" / "preds.zarr")  # in output folder
    assert cfg.bootstrap is not None and cfg.bootstrap.store == "/abs/store.zarr"
    assert cfg.base_dir == str(configs)


def test_urls_are_kept_as_written(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        output: runs/job
        data:
          train: {path: "s3://bucket/train.zarr"}
        """,
    )
    cfg = load_config(path)
    assert cfg.data.train is not None and cfg.data.train.path == "s3://bucket/train.zarr"


def test_seeds_fall_back_to_top_level_seed(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        output: runs/job
        seed: 7
        data:
          make: {path: data/syn.zarr, kind: sine}
        """,
    )
    cfg = load_config(path)
    assert cfg.model.params["random_state"] == 7
    assert cfg.data.make is not None and cfg.data.make.seed == 7
    assert cfg.data.make.n_features == 1  # the sine default


def test_explicit_zero_seed_is_not_replaced(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        output: runs/job
        seed: 7
        data:
          make: {path: data/syn.zarr, seed: 0}
        model: {random_state: 0}
        """,
    )
    cfg = load_config(path)
    assert cfg.model.params["random_state"] == 0 and cfg.data.make is not None and cfg.data.make.seed == 0


def test_train_source_comes_from_make(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "output: runs/j\ndata:\n  make: {path: syn.zarr}\n"))
    assert cfg.data.train_source == SourceConfig(path=str(tmp_path / "syn.zarr"), x="X", y="y")


@pytest.mark.parametrize(
    ("yaml_value", "expected"),
    [("1.0e-3", 1e-3), ("0.5", 0.5), ("2", 2.0), ("[1.0e-3, 0.1, 10]", (1e-3, 0.1, 10.0)), ("gcv", "gcv")],
)
def test_alpha_accepts_number_list_or_gcv(tmp_path: Path, yaml_value: str, expected) -> None:
    cfg = load_config(with_model(tmp_path, f"alpha: {yaml_value}\n"))
    assert cfg.model.params["alpha"] == expected


def test_full_config_and_round_trip(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        name: full
        output: runs/full
        overwrite: true
        seed: 3
        data:
          train: {path: data/train.zarr, x: features, y: target}
          holdout_fraction: 0.25
          chunk_rows: 50000
        model:
          solver: random_features
          kernel: matern
          length_scale: [0.5, 1.0, 2.0]
          nu: 2.5
          n_components: 512
          sampler: iid
          form: cossin
          alpha: [1.0e-10, 1.0e-2, 1.0e+5]
          fit_intercept: false
          dtype: float32
        predict: {path: data/new.zarr}
        cluster:
          address: tcp://10.0.0.5:8786
          security: {tls_ca_file: certs/ca.pem, require_encryption: true}
        bootstrap:
          n_bootstraps: 50
          confidence_level: 0.95
          method: poisson
          eval: {path: data/eval.zarr}
          plot: true
        progress: false
        log_level: debug
        """,
    )
    cfg = load_config(path)
    assert cfg.model.params["length_scale"] == (0.5, 1.0, 2.0)
    assert cfg.cluster.local is None
    assert cfg.cluster.security is not None
    assert cfg.cluster.security.tls_ca_file == str(tmp_path / "certs" / "ca.pem")
    assert cfg.log_level == "DEBUG"
    assert isinstance(cfg.predict, PredictConfig) and cfg.predict.y is None
    assert isinstance(cfg.bootstrap, BootstrapConfig) and cfg.bootstrap.eval_grid is None
    plain = cfg.to_dict()
    assert json.loads(json.dumps(plain)) == plain  # plain JSON-able data
    assert config_from_dict(plain) == cfg
    assert config_from_dict(yaml.safe_load(cfg.to_yaml())) == cfg
    again = load_config(write(tmp_path, cfg.to_yaml(), name="elsewhere/dumped.yaml"))
    assert again == cfg


def test_round_trip_of_minimal_and_synthetic_configs(tmp_path: Path) -> None:
    synthetic = "output: o\ndata: {make: {path: s.zarr}}\nbootstrap: {}\npredict: {path: p.npy}\n"
    for text in (MINIMAL, synthetic):
        cfg = load_config(write(tmp_path, text))
        assert config_from_dict(cfg.to_dict()) == cfg
        assert config_from_dict(cfg.to_dict()).to_dict() == cfg.to_dict()


def test_configs_are_frozen(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, MINIMAL))
    with pytest.raises(AttributeError):
        cfg.model.alpha = 1.0  # type: ignore[misc]


def test_yaml_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        output: runs/job
        data:
          train: {path: a.zarr}
        model:
          <<: {n_components: 64, alpha: 1.0}
          alpha: 2.0
        """,
    )
    cfg = load_config(path)
    assert cfg.model.params["alpha"] == 2.0 and cfg.model.params["n_components"] == 64


# --------------------------------------------------------------------------------------------
# Unknown keys, types, numbers YAML reads as text
# --------------------------------------------------------------------------------------------


def test_non_text_key_is_an_error(tmp_path: Path) -> None:
    message = error_of(write(tmp_path, MINIMAL + "yes: 1\n"))
    assert "not text" in message and "quote it" in message


@pytest.mark.parametrize(
    ("line", "key", "fragment"),
    [
        ("n_components: many", "model.n_components", "expected an integer > 0, found 'many'"),
        ("n_components: 100.5", "model.n_components", "expected an integer > 0, found 100.5"),
        ("n_components: 128.0", "model.n_components", "without a decimal point"),
        ("fit_intercept: 1", "model.fit_intercept", "expected true or false, found 1"),
        ("fit_intercept: 'yes'", "model.fit_intercept", "expected true or false"),
        ("gamma: {a: 1}", "model.gamma", "or 'cv', found {'a': 1} (mapping)"),
        ("dtype: float16", "model.dtype", "expected one of 'auto', 'float32', 'float64'"),
        ("nu: 1.0", "model.nu", "expected one of 0.5, 1.5, 2.5"),
        ("random_state: -1", "model.random_state", "expected an integer >= 0"),
        ("n_components: null", "model.n_components", "found null"),
    ],
)
def test_wrong_type_names_key_expected_and_found(tmp_path: Path, line: str, key: str, fragment: str) -> None:
    message = error_of(with_model(tmp_path, line + "\n"))
    assert f"{key}: " in message and fragment in message


@pytest.mark.parametrize(("key", "value"), [("n_components", "true"), ("seed", "false")])
def test_booleans_are_not_integers(tmp_path: Path, key: str, value: str) -> None:
    line = f"model: {{{key}: {value}}}" if key == "n_components" else f"{key}: {value}"
    text = MINIMAL + line + "\n"
    message = error_of(write(tmp_path, text))
    assert "booleans are not numbers" in message and key in message


def test_boolean_is_not_a_number_for_alpha(tmp_path: Path) -> None:
    message = error_of(with_model(tmp_path, "alpha: true\n"))
    assert "model.alpha" in message and "booleans are not numbers" in message


# --------------------------------------------------------------------------------------------
# Ranges and choices
# --------------------------------------------------------------------------------------------


def test_unknown_solver_is_an_error(tmp_path: Path) -> None:
    assert "model.solver" in error_of(with_model(tmp_path, "solver: cholesky\n"))


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        ("model: {gamma: 1.0, length_scale: 1.0}", "model.length_scale", "not both"),
        ("model: {sampler: orthogonal, kernel: laplacian}", "model.sampler", "kernel 'rbf' only"),
        ("model: {form: cossin, n_components: 101}", "model.n_components", "must be even"),
        ("data: {holdout_fraction: 1.0}", "data.holdout_fraction", ">= 0 and < 1"),
        ("bootstrap: {confidence_level: 1.0}", "bootstrap.confidence_level", "> 0 and < 1"),
        ("bootstrap: {eval: {path: e.zarr}, eval_grid: {n_points: 3}}", "bootstrap.eval_grid", "not both"),
        ("cluster: {address: tcp://h:1, local: {n_workers: 2}}", "cluster.local", "exclusive"),
        ("cluster: {security: {tls_ca_file: ca.pem}}", "cluster.security", "cluster.address"),
        ("cluster: {address: 'http://h:1'}", "cluster.address", "known schemes"),
        ("cluster: {local: {memory_limit: lots}}", "cluster.local.memory_limit", "'4GiB'"),
        ("log_level: LOUD", "log_level", "'INFO'"),
        ("predict: {output: p.zarr}", "predict.path", "missing"),
        ("predict: [a.zarr]", "predict", "expected a mapping"),
    ],
)
def test_cross_field_and_section_rules(tmp_path: Path, text: str, key: str, fragment: str) -> None:
    if text.startswith("data:"):
        config = "output: runs/job\ndata: {train: {path: t.zarr}, holdout_fraction: 1.0}\n"
    else:
        config = MINIMAL + text + "\n"
    message = error_of(write(tmp_path, config))
    assert f"{key}: " in message and fragment in message


def test_address_alone_is_fine_and_local_defaults_otherwise(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, MINIMAL + "cluster: {address: 'tcp://127.0.0.1:8786'}\n"))
    assert cfg.cluster.address == "tcp://127.0.0.1:8786" and cfg.cluster.local is None
    cfg = load_config(write(tmp_path, MINIMAL + "cluster: {local: {memory_limit: 4GiB}}\n"))
    assert cfg.cluster.local == LocalClusterConfig(memory_limit="4GiB")


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ("{}", "exactly one of data.train"),
        ("{train: {path: a.zarr}, make: {path: b.zarr}}", "exactly one of data.train"),
        ("{train: {path: x.npy}}", "y_path"),
        ("{train: {path: x.zarr, y_path: y.npy}}", "only for a .npy path"),
        ("{train: {path: x.zarr, y: null}}", "needs targets"),
        ("{make: {path: s.zarr, kind: friedman1, n_features: 3}}", "n_features >= 5"),
        ("{make: {path: s.zarr, kind: sine, n_features: 2}}", "n_features exactly 1"),
        ("{make: {kind: sine}}", "data.make.path: missing"),
        (
            "{train: {path: t.csv, x: [a], mising: drop}}",
            "data.train.mising: unknown key 'mising'; did you mean 'missing'?",
        ),
        ("{train: {path: t.csv, x: [a], missing: dorp}}", "found 'dorp' (string); did you mean 'drop'?"),
        ("{train: {path: t.csv, x: [a], categorical: city}}", "'auto', null or a list of column names"),
        ("{train: {path: t.csv, x: [a], categoricals: [a]}}", "did you mean 'categorical'"),
        ("{train: {path: x.zarr, missing: drop}}", "missing: is for a table (Parquet or CSV) source"),
        ("{train: {path: x.zarr, categorical: [a]}}", "categorical: is for a table"),
        (
            "{train: {path: t.parquet, y: label}}",
            "data.train.x: missing: a Parquet/CSV table needs its feature columns",
        ),
        ("{train: {path: t.csv}}", "beside y: 'y'"),
    ],
)
def test_data_section_rules(tmp_path: Path, data: str, fragment: str) -> None:
    message = error_of(write(tmp_path, f"output: runs/job\ndata: {data}\n"))
    assert fragment in message


def test_missing_and_categorical_on_the_training_table(tmp_path: Path) -> None:
    text = "output: runs/job\ndata: {train: {path: t.parquet, x: [a, city], missing: impute, categorical: [city]}}\n"
    cfg = load_config(write(tmp_path, text))
    assert cfg.data.train.missing == "impute" and cfg.data.train.categorical == ("city",)
    assert config_from_dict(cfg.to_dict(), base_dir=str(tmp_path)) == cfg
    cfg = load_config(write(tmp_path, "output: runs/job\ndata: {train: {path: t.csv, x: [a], categorical: null}}\n"))
    assert cfg.data.train.categorical is None
    # the keys belong to the training data: a predict source has the model's encoding
    message = error_of(write(tmp_path, MINIMAL + "predict: {path: p.csv, missing: drop}\n"))
    assert "predict.missing: unknown key" in message


def test_missing_required_top_level_keys(tmp_path: Path) -> None:
    message = error_of(write(tmp_path, "seed: 1\n"))
    assert "output: missing" in message and "data: missing" in message


def test_all_problems_reported_together_in_file_order(tmp_path: Path) -> None:
    message = error_of(with_model(tmp_path, "alpha: -1\ngamma: 0\nkernel: rbff\n"))
    assert message.startswith(f"3 problems in job config {tmp_path / 'job.yaml'}")
    lines = message.splitlines()[1:]
    assert [line.split(": ")[1] for line in lines] == ["model.alpha", "model.gamma", "model.kernel"]
    assert all(line.strip().startswith(str(tmp_path / "job.yaml")) for line in lines)


def test_config_from_dict_names_its_source() -> None:
    with pytest.raises(ConfigError, match=r"^<dict>: model\.alpha: expected a number > 0"):
        config_from_dict({"output": "o", "data": {"train": {"path": "t.zarr"}}, "model": {"alpha": 0}})
    with pytest.raises(ConfigError, match="top level of a job config must be a mapping"):
        config_from_dict(["output", "o"])  # type: ignore[arg-type]


def test_config_errors_are_value_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        load_config(with_model(tmp_path, "alpha: 0\n"))


# --------------------------------------------------------------------------------------------
# Outputs must not overwrite inputs
# --------------------------------------------------------------------------------------------


def test_separate_outputs_and_inputs_are_fine(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, MINIMAL + "predict: {path: data/train.zarr}\n"))
    assert cfg.predict is not None and cfg.predict.path == cfg.data.train_source.path


# --------------------------------------------------------------------------------------------
# Reading YAML safely
# --------------------------------------------------------------------------------------------


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "output: runs/job\ndata:\n  train: {path: t.zarr\nmodel:\n  alpha: 1\n")
    message = error_of(path)
    assert message.startswith(f"{path}:4:") and "YAML syntax error" in message


def test_bad_indentation_is_a_syntax_error(tmp_path: Path) -> None:
    message = error_of(write(tmp_path, "output: o\n  data: x\n"))
    assert "job.yaml:2:" in message and "YAML syntax error" in message


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n", "null\n"])
def test_empty_file_is_an_error(tmp_path: Path, text: str) -> None:
    message = error_of(write(tmp_path, text))
    assert "is empty" in message and "job.yaml" in message


def test_non_mapping_top_level_is_an_error(tmp_path: Path) -> None:
    message = error_of(write(tmp_path, "- output\n- data\n"))
    assert "must be a mapping" in message and "job.yaml" in message


def test_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_job_config_type() -> None:
    cfg = config_from_dict({"output": "/tmp/o", "data": {"train": {"path": "/tmp/t.zarr"}}})
    assert isinstance(cfg, JobConfig) and cfg.name == "o" and cfg.source == "<dict>"


def test_string_where_a_source_mapping_belongs_shows_the_fix(tmp_path: Path) -> None:
    message = error_of(write(tmp_path, "output: o\ndata:\n  train: data/train.zarr\n"))
    assert "data.train: expected a mapping" in message
    assert "write `train: {path: data/train.zarr}`" in message
    assert "exactly one" not in message  # no cascade


@pytest.mark.parametrize(
    "text",
    [
        # an invalid kind must not also complain that n_features does not fit the default kind
        "output: o\ndata: {make: {path: s.zarr, kind: sin, n_features: 1}}\n",
        # an invalid gamma must not also trip the checks relating model fields
        MINIMAL + "model: {gamma: -1, length_scale: 2.0, form: cossin, n_components: 9}\n",
        MINIMAL + "model: {gamma: 1.0, length_scale: 2.0}\n",
    ],
)
def test_one_mistake_gives_one_message(tmp_path: Path, text: str) -> None:
    message = error_of(write(tmp_path, text))
    assert len(message.splitlines()) == 1 and "problems in job config" not in message


def test_ard_length_scales_must_match_synthetic_feature_count(tmp_path: Path) -> None:
    text = "output: o\ndata: {make: {path: s.zarr, n_features: 5}}\nmodel: {length_scale: [1.0, 2.0]}\n"
    message = error_of(write(tmp_path, text))
    assert "model.length_scale" in message and "one length scale per feature (5" in message


# --------------------------------------------------------------------------------------------
# bootstrap.eval as points in the YAML, bootstrap.interval
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "points"),
    [
        ("eval: [[0.1], [0.5]]\n", ((0.1,), (0.5,))),
        ("eval: [0.1, 0.5, 2.0]\n", ((0.1,), (0.5,), (2.0,))),  # one feature, one value a point
        ("eval: [[1, 2.5], [-3, 4.0e+2]]\n", ((1.0, 2.5), (-3.0, 400.0))),  # integers are numbers
        ("eval:\n  - [0.1, 2.0, 3.0]\n  - [0.5, 1.0, 0.0]\n", ((0.1, 2.0, 3.0), (0.5, 1.0, 0.0))),
    ],
)
def test_inline_eval_points_are_read_and_round_trip(tmp_path: Path, lines: str, points: tuple) -> None:
    cfg = load_config(with_bootstrap(tmp_path, lines))
    b = cfg.bootstrap
    assert b is not None and b.eval == points and b.eval_grid is None
    assert all(isinstance(v, float) for row in b.eval for v in row)
    assert b.interval == "confidence"  # the default: a band for f-hat(x)
    assert "bootstrap.eval.path" not in cfg.inputs()  # nothing to read
    assert config_from_dict(cfg.to_dict()) == cfg
    assert load_config(write(tmp_path, cfg.to_yaml(), name="again/dumped.yaml")) == cfg


def test_interval_is_read_and_checked(tmp_path: Path) -> None:
    cfg = load_config(with_bootstrap(tmp_path, "interval: prediction\n"))
    assert cfg.bootstrap is not None and cfg.bootstrap.interval == "prediction"
    assert config_from_dict(cfg.to_dict()) == cfg
    message = error_of(with_bootstrap(tmp_path, "interval: predict\n"))
    assert "bootstrap.interval: expected one of 'confidence', 'prediction'" in message
    assert "did you mean 'prediction'?" in message


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("[[0.1, 1.0], [0.2]]", "point 1 has 1 value(s) ([0.2] (list)) but point 0 has 2"),
        ("[[0.1], 0.5]", "point 1 is 0.5 (number) but point 0 is [0.1] (list)"),
        ("[0.5, [0.1]]", "point 1 is [0.1] (list) but point 0 is 0.5 (number)"),
        ("[[0.1, abc]]", "point 0, feature 1: expected a number, found 'abc' (string)"),
        ("[0.1, '2']", "point 1: expected a number, found '2' (string)"),
        ("[1e-3]", "YAML 1.1 reads 1e-3 as text"),
        ("[[true]]", "booleans are not numbers"),
        ("[[.nan]]", "NaN is not allowed"),
        ("[[.inf]]", "must be finite"),
        ("[]", "the list is empty"),
        ("[[], []]", "point 0 is an empty list"),
        ("[{a: 1}]", "point 0: expected a number, found {'a': 1} (mapping)"),
        ("3", "expected a list of points such as [[0.1, 2.0], [0.5, 1.0]]"),
        ("e.zarr", "write `eval: {path: e.zarr}` for a data source"),
    ],
)
def test_bad_inline_eval_points_name_the_point(tmp_path: Path, value: str, fragment: str) -> None:
    path = with_bootstrap(tmp_path, f"n_bootstraps: 10\neval: {value}\n")
    message = error_of(path)
    line = MINIMAL.count("\n") + 3  # the `eval:` line
    assert f"job.yaml:{line}: bootstrap.eval: " in message and fragment in message
    assert len(message.splitlines()) == 1  # one mistake, one message


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (
            "[[0.1, 0.2]]",
            ("expected points of 10 features like the training data (data.make.n_features), found points of 2"),
        ),
        ("[0.1, 0.2]", "a flat list [a, b, ...] means points of one feature"),
    ],
)
def test_inline_eval_points_must_have_the_synthetic_feature_count(tmp_path: Path, value: str, fragment: str) -> None:
    head = "output: o\ndata: {make: {path: s.zarr, kind: friedman1, n_features: 10}}\n"
    message = error_of(with_bootstrap(tmp_path, f"eval: {value}\n", head=head))
    assert "bootstrap.eval: " in message and fragment in message
    ten = "[" + ", ".join(["0.5"] * 10) + "]"
    cfg = load_config(with_bootstrap(tmp_path, f"eval: [{ten}]\n", head=head))
    assert cfg.bootstrap is not None and cfg.bootstrap.eval == ((0.5,) * 10,)


def test_inline_eval_and_eval_grid_are_exclusive(tmp_path: Path) -> None:
    message = error_of(with_bootstrap(tmp_path, "eval: [0.1]\neval_grid: {n_points: 3}\n"))
    assert "bootstrap.eval_grid: " in message and "not both" in message
