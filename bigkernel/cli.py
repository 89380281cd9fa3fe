"""Command line: ``bigkernel run JOB.yaml``, ``bigkernel predict MODEL DATA``, ``bigkernel
update MODEL DATA``, ``bigkernel make-data``. Thin: parse, configure logging, call the library; bigkernel errors become one clear
message and exit code 2."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator

from bigkernel._version import __version__
from bigkernel.data.synthetic import DEFAULT_NOISE
from bigkernel.errors import BigkernelError

logger = logging.getLogger("bigkernel")

EXIT_USER_ERROR = 2

#: Name of the terminal's log handler (``logging.Handler.name``), so a later run finds its own.
CLI_HANDLER = "bigkernel-cli"


def _parser() -> argparse.ArgumentParser:
    """The ``bigkernel`` command's parser: one subcommand each, built by its own function."""
    p = argparse.ArgumentParser(prog="bigkernel", description="Kernel ridge regression for large n on Dask.")
    p.add_argument("--version", action="version", version=f"bigkernel {__version__}")
    _add_verbosity(p, default=False)
    sub = p.add_subparsers(dest="command", required=True)
    _add_run_parser(sub)
    _add_predict_parser(sub)
    _add_update_parser(sub)
    rep = sub.add_parser("report", help="(re)make the figures and report.md of a finished job folder")
    rep.add_argument("output", help="the job's output folder")
    _add_make_data_parser(sub)
    # -v/-q also after the subcommand. SUPPRESS: a subcommand that is not given them leaves the
    # top-level value alone (argparse would otherwise overwrite it with the subparser's default).
    for command in sub.choices.values():
        _add_verbosity(command, default=argparse.SUPPRESS)
    return p


def _add_run_parser(sub) -> None:
    """``bigkernel run JOB.yaml [--dry-run]``."""
    run = sub.add_parser("run", help="run a YAML job: fit, evaluate, save, predict, bootstrap")
    run.add_argument("config", help="path of the job YAML (see configs/)")
    run.add_argument("--dry-run", action="store_true", help="print the resolved config and chunk plan; compute nothing")


def _add_predict_parser(sub) -> None:
    """``bigkernel predict MODEL DATA -o OUTPUT``."""
    pr = sub.add_parser("predict", help="predict a data set with a saved model, into zarr, CSV or Parquet")
    pr.add_argument("model", help="model folder written by a job or by model.save()")
    pr.add_argument(
        "data",
        help="zarr group (local path or fsspec URL), .npy file of X, sparse .npz of X, or a CSV / "
        "Parquet table (file, glob or folder of Parquet parts)",
    )
    pr.add_argument(
        "--output",
        "-o",
        required=True,
        help="where to write, by its suffix: .csv (one file), .parquet (a folder of parts), "
        "or .zarr / a name without suffix (zarr group, array y_pred); columns y_pred "
        "(y_pred_0, y_pred_1, ... for several targets)",
    )
    pr.add_argument(
        "--x",
        default=None,
        help="zarr: name of the X array (default X, or the model's columns when the group holds "
        "them as 1-D arrays); table: comma-separated X columns, e.g. a,b,c (default: the "
        "columns the model was fitted on; another order is refused)",
    )
    pr.add_argument(
        "--id",
        default=None,
        help="a column of the table (or 1-D array of the zarr group), of any dtype, copied to the "
        "output row for row: its first column (an array of that name in a zarr output)",
    )
    pr.add_argument("--chunk-rows", type=_count, default=None, help="rows per chunk (default: auto)")
    pr.add_argument(
        "--address", default=None, help="Dask scheduler to run on, e.g. tcp://10.0.0.5:8786 (default: this machine)"
    )
    pr.add_argument("--overwrite", action="store_true", help="replace an existing --output")


def _add_make_data_parser(sub) -> None:
    """``bigkernel make-data KIND OUTPUT``."""
    mk = sub.add_parser("make-data", help="write a synthetic data set to zarr, CSV or Parquet, chunk by chunk")
    mk.add_argument("kind", choices=list(DEFAULT_NOISE))
    mk.add_argument(
        "output",
        help="zarr group to write (arrays X and y), or by its suffix a .csv file "
        "or .parquet folder (columns x0, x1, ..., y)",
    )
    mk.add_argument("--n-samples", type=_count, default=100_000, help="rows (accepts 1e8)")
    mk.add_argument("--n-features", type=int, default=None, help="friedman1, classes: >= 5 (default 10); sine: 1")
    mk.add_argument(
        "--noise",
        type=float,
        default=None,
        help="noise sd (default: " + ", ".join(f"{kind} {sd}" for kind, sd in DEFAULT_NOISE.items()) + ")",
    )
    mk.add_argument("--seed", type=int, default=0)
    mk.add_argument("--chunk-rows", type=_count, default=131_072)
    mk.add_argument("--overwrite", action="store_true")


def _add_update_parser(sub) -> None:
    """``bigkernel update MODEL DATA (-o NEW | --in-place)``."""
    up = sub.add_parser(
        "update", help="add new rows to a saved random-feature / Nyström model (no pass over the old rows)"
    )
    up.add_argument("model", help="model folder written by a job or by model.save()")
    up.add_argument(
        "data",
        help="the new rows: zarr group (local path or fsspec URL), .npy file of X (then --y names "
        "the .npy file of y), or a CSV / Parquet table (file, glob or folder of Parquet parts)",
    )
    where = up.add_mutually_exclusive_group()
    where.add_argument("--output", "-o", default=None, help="write the updated model to this new folder")
    where.add_argument(
        "--in-place",
        action="store_true",
        help="replace MODEL (written beside it and renamed into place when complete)",
    )
    up.add_argument(
        "--x",
        default=None,
        help="zarr: name of the X array (default X, or the model's columns when the group holds "
        "them as 1-D arrays); table: comma-separated X columns (default: the columns the model "
        "was fitted on; another order is refused)",
    )
    up.add_argument(
        "--y",
        default=None,
        help="zarr: name of the y array (default y), or 1-D arrays a,b; table: y column(s), comma-separated "
        "(default: the target column(s) the model was fitted on, else y); .npy X: the .npy file of y (required)",
    )
    up.add_argument("--metrics", default=None, help="also write the row counts and new α as JSON here")
    up.add_argument("--chunk-rows", type=_count, default=None, help="rows per chunk (default: auto)")
    up.add_argument(
        "--address", default=None, help="Dask scheduler to run on, e.g. tcp://10.0.0.5:8786 (default: this machine)"
    )
    up.add_argument("--overwrite", action="store_true", help="replace an existing --output")


def _add_verbosity(parser: argparse.ArgumentParser, default) -> None:
    parser.add_argument("-v", "--verbose", action="store_true", default=default, help="debug logging")
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default,
        help="warnings and errors only on the terminal (job.log keeps the full log)",
    )


def _count(text: str) -> int:
    value = float(text)
    if value != int(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return int(value)


def _configure_logging(args) -> None:
    """The terminal's handler: bigkernel's records at -v/-q/INFO; the libraries' (distributed,
    asyncio, dask's warnings) only with -v: job.log keeps them (``jobs.runner._job_logging``)."""
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    root = logging.getLogger()
    for where in (root, logger):  # main() may run several times in one process (tests, notebooks)
        for old in [h for h in where.handlers if h.get_name() == CLI_HANDLER]:
            where.removeHandler(old)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.setLevel(level)  # the terminal's own level: a job may lower the logger's for job.log
    if not args.verbose:
        handler.addFilter(lambda record: record.name == "bigkernel" or record.name.startswith("bigkernel."))
    handler.set_name(CLI_HANDLER)
    root.addHandler(handler)  # on the root: asyncio's records too ("Task exception was never retrieved")
    logger.setLevel(level)


def _set_terminal_level(level: str | int) -> None:
    """A job's ``log_level:`` on the terminal, where neither -q nor -v was given."""
    for h in logging.getLogger().handlers:
        if h.get_name() == CLI_HANDLER:
            h.setLevel(level)
    logger.setLevel(level)


def _nothing(record: logging.LogRecord) -> bool:
    return False


@contextlib.contextmanager
def _library_output_to_log() -> Iterator[None]:
    """distributed's log lines and dask's warnings as records for job.log, off the terminal
    unless ``-v``.

    distributed prints to stderr through its own handler (worker "Compute Failed" tracebacks
    forwarded from the workers, the nanny's "still alive, killing" on Ctrl-C, ...) and warns
    "Sending large graph". Here its handler is silenced and its records reach the root logger:
    job.log's handler keeps them, the terminal's shows them with ``-v`` (in bigkernel's format).
    dask's and distributed's warnings become records too (``py.warnings``); bigkernel's own
    warnings are shown as before.
    """
    import warnings

    import dask
    import distributed  # its logging is configured on import: its stderr handler must exist now

    dist = logging.getLogger("distributed")
    handlers = [h for h in dist.handlers if type(h) is logging.StreamHandler]
    propagate = dist.propagate
    libraries = tuple(os.path.dirname(m.__file__) + os.sep for m in (dask, distributed))
    show = warnings.showwarning

    def to_log(message, category, filename, lineno, file=None, line=None):
        if str(filename).startswith(libraries):
            text = warnings.formatwarning(message, category, filename, lineno, line)
            logging.getLogger("py.warnings").warning("%s", text.rstrip())
        else:
            show(message, category, filename, lineno, file, line)

    for h in handlers:  # a filter: a LocalCluster sets these handlers' levels while it runs
        h.addFilter(_nothing)
    dist.propagate = True
    warnings.showwarning = to_log
    try:
        yield
    finally:
        warnings.showwarning = show
        dist.propagate = propagate
        for h in handlers:
            h.removeFilter(_nothing)


def _cmd_run(args) -> int:
    from bigkernel.jobs.config import load_config
    from bigkernel.jobs.runner import dry_run, run_job, summary_text

    cfg = load_config(args.config)
    if not (args.quiet or args.verbose):
        _set_terminal_level(cfg.log_level)  # the job's level, on the terminal as in job.log
    if args.dry_run:
        import yaml

        sys.stdout.write(yaml.safe_dump(dry_run(cfg), sort_keys=False))
        return 0
    metrics = run_job(cfg, progress=False if args.quiet else None)
    sys.stdout.write(summary_text(metrics))
    return 0


def _cmd_predict(args) -> int:
    import os

    from bigkernel.data.encode import PREDICT_MISSING_HINT, nonfinite_named
    from bigkernel.data.sources import open_source
    from bigkernel.data.tables import is_table
    from bigkernel.errors import OutputExistsError
    from bigkernel.io.model_store import load_estimator
    from bigkernel.io.predictions import predict_to_path
    from bigkernel.jobs.config import path_relation
    from bigkernel.runtime import progress_bars

    model = load_estimator(args.model)  # first: anything that is not a model store is refused unread
    encoder = getattr(model, "table_encoder_", None)  # a job's categories / fill values
    for what, path in (("model", args.model), ("data", args.data)):
        relation = path_relation(args.output, path)
        if relation:
            raise OutputExistsError(
                f"--output {args.output} {relation} the {what} {path}: the predictions would "
                "overwrite an input; choose an output path apart from it"
            )
    if os.path.exists(args.output) and not args.overwrite:  # before reading any data
        raise OutputExistsError(f"prediction output {args.output!r} exists; pass --overwrite to replace it")
    table = is_table(args.data)
    ds = open_source(
        args.data,
        _x_columns(args.x, encoder or model, args.data),
        None,
        chunk_rows=args.chunk_rows,
        row_id=args.id,
        encoder=encoder if table else None,
    )
    ids = None if args.id is None else (args.id, ds.ids)
    hint = PREDICT_MISSING_HINT if ds.columns is not None else None
    with _cluster(args.address), progress_bars(not args.quiet), nonfinite_named(ds.columns, hint):
        path = predict_to_path(model, ds.X, args.output, overwrite=args.overwrite, ids=ids)
    sys.stdout.write(json.dumps({"path": path, "n_samples": int(ds.X.shape[0])}) + "\n")
    return 0


def _cmd_update(args) -> int:
    from bigkernel.data.sources import open_source
    from bigkernel.data.tables import is_table
    from bigkernel.errors import DataError
    from bigkernel.io.model_store import load_estimator
    from bigkernel.jobs.update import check_update_paths, updatable_part, update_model
    from bigkernel.runtime import progress_bars

    model = load_estimator(args.model)  # first: anything that is not a model store is refused unread
    encoder = getattr(model, "table_encoder_", None)  # a job's categories / fill values
    updatable_part(model)  # and a model that cannot take rows, before any data is read
    target = check_update_paths(args.model, args.data, args.output, args.in_place, args.overwrite)
    x = _x_columns(args.x, encoder or model, args.data)  # by name: the model's columns unless --x
    if args.data.endswith(".npy"):
        if not args.y:
            raise DataError(f"{args.data} is a .npy file of X; name the .npy file of y with --y y.npy")
        ds = open_source(args.data, "X", None, y_path=args.y, chunk_rows=args.chunk_rows)
    else:
        # the model's own target column(s) when it was fitted on named ones, as X's columns
        ys = [c.strip() for c in args.y.split(",") if c.strip()] if args.y else _target_columns(model)
        ds = open_source(
            args.data,
            x,
            ys[0] if len(ys) == 1 else ys,
            chunk_rows=args.chunk_rows,
            encoder=encoder if is_table(args.data) else None,
        )
    if ds.y is None:
        raise DataError(f"{args.data} has no y: new rows need their targets to update a model")
    with _cluster(args.address), progress_bars(not args.quiet):
        metrics = update_model(model, args.model, ds, target, metrics_path=args.metrics)
    sys.stdout.write(json.dumps(metrics) + "\n")
    return 0


def _target_columns(model) -> list[str]:
    """The y column(s) a model was fitted on (saved with it), else ``["y"]``."""
    return list(getattr(model, "target_names_in_", None) or ["y"])


def _cluster(address: str | None):
    """A client of the scheduler at ``address``, or nothing (this machine)."""
    import contextlib

    if not address:
        return contextlib.nullcontext()
    from bigkernel.jobs.cluster import client_from_config
    from bigkernel.jobs.config import ClusterConfig

    return client_from_config(ClusterConfig(address=address, local=None))


def _x_columns(x: str | None, model, data: str) -> list[str] | str:
    """What X is for ``predict`` and ``update``: ``--x`` (a table's or a zarr group's columns
    a,b,c, or a zarr array name), else the model's column names for a table or a zarr group of
    column arrays, else the array X; columns given with a named model must agree with its
    names and order, as scikit-learn checks a DataFrame's."""
    from bigkernel.data.columns import default_x, model_columns
    from bigkernel.data.tables import is_table
    from bigkernel.errors import DataError

    names = model_columns(model)
    if x is None:
        return default_x(data, None, names, "--x a,b,c")
    columns = [c.strip() for c in x.split(",") if c.strip()]
    if len(columns) == 1 and not is_table(data):
        return columns[0]  # a zarr array name (2-D X), or one column array
    if names is not None and columns != names:
        raise DataError(
            f"--x names columns {columns}, but the model was fitted on columns {names}: names and "
            "order must match the fit; leave --x out to use the model's columns"
        )
    return columns


def _cmd_report(args) -> int:
    from bigkernel.jobs.report import report_from_folder

    for title, path in report_from_folder(args.output).items():
        sys.stdout.write(f"{title}: {path}\n")
    return 0


def _cmd_make_data(args) -> int:
    from bigkernel.data.synthetic import SyntheticSpec, make_data

    d = args.n_features or (1 if args.kind == "sine" else 10)
    spec = SyntheticSpec(args.kind, args.n_samples, d, args.noise, args.seed)  # None: the kind's default
    path = make_data(spec, args.output, chunk_rows=args.chunk_rows, overwrite=args.overwrite)
    sys.stdout.write(json.dumps({"path": path, "n_samples": spec.n_samples, "n_features": d}) + "\n")
    return 0


#: optional packages and the extra that installs them
_EXTRAS = {"cupy": "gpu", "cupyx": "gpu", "dask_cuda": "gpu"}
#: pip's name for a dependency's module, where it differs (dask.dataframe needs pandas, pyarrow)
_PIP_NAMES = {"dask": '"dask[dataframe]"', "yaml": "PyYAML", "sklearn": "scikit-learn"}


def _missing_package(exc: ImportError) -> str:
    """One line for a package that is not installed: which, and the pip command that fixes it."""
    name = exc.name or ""
    top = name.split(".")[0]
    if top in _EXTRAS:
        return f'{name} is not installed ({exc}): install the extra with pip install "bigkernel[{_EXTRAS[top]}]"'
    if not name:  # e.g. fsspec's "Install s3fs to access S3": its message names the package
        return f"a package is missing: {exc}"
    return (
        f"{name} is not installed ({exc}); it is a dependency of bigkernel: reinstall bigkernel "
        f"(pip install -e . in a clone, or pip install bigkernel) or pip install {_PIP_NAMES.get(top, top)}"
    )


class Terminated(KeyboardInterrupt):
    """SIGTERM (how Slurm, Kubernetes and systemd stop a job), raised where Ctrl-C would be, so
    the job stops the same way: its log and status say so, a bootstrap keeps what it stored."""


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Within: SIGTERM raises :class:`Terminated` in the main thread (elsewhere, or where signals
    cannot be set, nothing changes)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``bigkernel`` command; returns the exit code (130 after Ctrl-C, 143
    after SIGTERM)."""
    args = _parser().parse_args(argv)
    _configure_logging(args)
    try:
        with _sigterm_as_interrupt(), _library_output_to_log():
            return _COMMANDS[args.command](args)
    except BigkernelError as exc:
        logger.error("%s: %s", type(exc).__name__, exc)
        return EXIT_USER_ERROR
    except ImportError as exc:
        if (exc.name or "").startswith("bigkernel"):
            raise  # a bug of ours, not a missing package: the traceback says where
        logger.error("%s", _missing_package(exc))
        return EXIT_USER_ERROR
    except KeyboardInterrupt as exc:
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        if args.command == "run":
            logger.error(
                "%s; job.log has what ran. Rerun the same command to run the job again "
                "(a bootstrap resumes from the replicates it stored)",
                how,
            )
        else:
            logger.error("%s", how)
        return 143 if isinstance(exc, Terminated) else 130


_COMMANDS = {
    "run": _cmd_run,
    "predict": _cmd_predict,
    "update": _cmd_update,
    "report": _cmd_report,
    "make-data": _cmd_make_data,
}

if __name__ == "__main__":
    sys.exit(main())
