"""A job against a TLS-only scheduler, with cluster.security naming the certificate files."""

import json

from distributed import LocalCluster
from distributed.security import Security

import bigkernel
from bigkernel.cli import main
from bigkernel.data.synthetic import SyntheticSpec, make_data


def _write(path, text):
    path.write_text(text)
    return path


def test_job_over_tls(tmp_path, caplog):
    sec = Security.temporary()  # self-signed CA and certificates, held in memory
    ca = _write(tmp_path / "ca.pem", sec.tls_ca_file)
    cert = _write(tmp_path / "client.pem", sec.tls_client_cert)
    key = _write(tmp_path / "client.key", sec.tls_client_key)
    data = make_data(SyntheticSpec("friedman1", 20_000, 10, 1.0, 0), tmp_path / "d.zarr", chunk_rows=8192)
    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        protocol="tls",
        host="127.0.0.1",
        security=sec,
        dashboard_address=":0",
    ) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tls://")
        job = tmp_path / "job.yaml"
        base = (
            f"name: tls\noutput: out\ndata:\n  train: {{path: {data}}}\nmodel: {{gamma: 0.5, n_components: 32, alpha: 0.1}}\nplots: false\n"
            f"cluster:\n  address: {address}\n"
        )
        job.write_text(
            base + f"  security: {{tls_ca_file: {ca}, tls_client_cert: {cert}, tls_client_key: {key}, "
            "require_encryption: true}\n"
        )
        assert main(["-q", "run", str(job)]) == 0
        metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
        assert 0.5 < metrics["scores"]["holdout"]["r2"] < 1.0
        model = bigkernel.load(tmp_path / "out" / "model.zarr")
        assert model.coef_.shape == (32,) and model.n_samples_fit_ == metrics["scores"]["train"]["n_samples"]
        # without the certificates the job cannot talk to the scheduler: a clear error, exit code 2
        job.write_text(base.replace("output: out", "output: out2"))
        assert main(["-q", "run", str(job)]) == 2
        assert "ClusterError" in caplog.text and "no credentials were given" in caplog.text
        assert not (tmp_path / "out2" / "metrics.json").exists()
