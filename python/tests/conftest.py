"""Fixtures: a fresh configuration per test, on each backend this run covers.

CAPSTORE_PY_BACKENDS lists the backends ("embedded", "servers"; default
"embedded"). "servers" reads the endpoint files the ctest fixtures write
(CAPSTORE_LIVE_CLICKHOUSE, CAPSTORE_LIVE_S3: tests/cmake/live.cmake) and sets
the credentials in the environment. A test parametrised by backend runs once
per listed backend; none is skipped for a backend that is not listed.
"""

from __future__ import annotations

import os
import sys
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))  # the example model


def _backends() -> list[str]:
    names = [b for b in os.environ.get("CAPSTORE_PY_BACKENDS", "embedded").split(",") if b]
    for b in names:
        if b not in ("embedded", "servers"):
            raise RuntimeError(f"CAPSTORE_PY_BACKENDS: unknown backend {b!r}")
    return names


def _servers(tmp_path, name: str, **keys):
    import capstore
    ch_file = os.environ["CAPSTORE_LIVE_CLICKHOUSE"]
    s3_file = os.environ["CAPSTORE_LIVE_S3"]
    with open(ch_file) as f:
        ch_port, ch_user, ch_password = f.read().split()[:3]
    with open(s3_file) as f:
        s3_endpoint, s3_key, s3_secret, s3_bucket = f.read().split()[:4]
    os.environ.update(CAPSTORE_CLICKHOUSE_PASSWORD=ch_password, AWS_ACCESS_KEY_ID=s3_key,
                      AWS_SECRET_ACCESS_KEY=s3_secret, AWS_REGION="us-east-1")
    return capstore.Config({"name": name, "spool_dir": str(tmp_path / "spool"),
                            "store": {"s3": {"endpoint": s3_endpoint, "bucket": s3_bucket, "allow_insecure": True}},
                            "catalog": {"clickhouse": {"url": f"http://127.0.0.1:{ch_port}/", "user": ch_user,
                                                       "allow_insecure": True}}}, **keys)


class Backend:
    """Makes configurations of one backend; each call a fresh catalog (name) and spool unless told."""

    def __init__(self, kind: str, tmp_path) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.name = "py_" + uuid.uuid4().hex[:16]

    def config(self, spool: str = "spool", **keys):
        import capstore
        d = self.tmp_path
        if self.kind == "embedded":
            return capstore.Config({"name": self.name, "spool_dir": str(d / spool), "store.dir": str(d / "bucket"),
                                    "catalog.sqlite": str(d / "catalog.db")}, **keys)
        cfg = _servers(d, self.name, **keys)
        cfg.set("spool_dir", str(d / spool))
        return cfg


def pytest_configure(config):
    config.addinivalue_line("markers", "asan: runs a script against the AddressSanitizer build of the library "
                                       "($CAPSTORE_ASAN_LIBRARY; ctest python.asan)")


def pytest_generate_tests(metafunc):
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend_kind", _backends())


@pytest.fixture
def backend(backend_kind, tmp_path):
    return Backend(backend_kind, tmp_path)


@pytest.fixture
def embedded(tmp_path):
    return Backend("embedded", tmp_path)
