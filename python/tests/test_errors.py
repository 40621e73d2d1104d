"""Bad input: each a clear Python exception of its kind, and nothing captured before it is lost."""

from __future__ import annotations

import ctypes
import os
import threading
import time

import numpy as np
import pytest
import torch

import capstore
import capstore._ffi as ffi


def test_exceptions_are_the_builtin_kinds():
    assert issubclass(capstore.ConfigError, ValueError)
    assert issubclass(capstore.InvalidArgument, ValueError)
    assert issubclass(capstore.FlushTimeout, TimeoutError)
    assert issubclass(capstore.CapstoreIOError, OSError)
    assert issubclass(capstore.LimitExceeded, capstore.Refused)
    assert issubclass(capstore.PacksRejected, capstore.CapstoreError)
    e = capstore.errors.error_for(-2, "spool_dir: is required")
    assert isinstance(e, capstore.ConfigError) and e.kind == "CS_E_CONFIG" and e.code == -2


def test_config_refusals_name_the_key(tmp_path):
    with pytest.raises(capstore.ConfigError) as e:
        capstore.Config.embedded(tmp_path, service__lease_ttl="30")
    assert "service.lease_ttl" in str(e.value) and "unit" in str(e.value)
    assert e.value.key == "service.lease_ttl"
    with pytest.raises(ValueError, match="no_such_key"):
        capstore.Config.embedded(tmp_path, no_such_key="1")
    with pytest.raises(capstore.ConfigError, match="capture.staging"):
        capstore.Config.embedded(tmp_path, capture__staging="lots")
    with pytest.raises(capstore.ConfigError, match="list"):
        capstore.Config.embedded(tmp_path, capture__staging=[1])
    with pytest.raises(capstore.ConfigError, match="spool_dir"):
        capstore.Config({"store.dir": str(tmp_path / "b"), "catalog.sqlite": str(tmp_path / "c.db")})
    with pytest.raises(capstore.ConfigError, match="exactly one|both|store"):
        capstore.Config.embedded(tmp_path, store__s3__endpoint="https://example.invalid", store__s3__bucket="b")
    with pytest.raises(TypeError):
        capstore.Config(42)
    bad = tmp_path / "bad.json"
    bad.write_text('{"spool_dir": "s",\n "capture": {"linger": 5}}\n')
    with pytest.raises(capstore.ConfigError, match="capture.linger"):
        capstore.Config(bad)
    with pytest.raises(capstore.CapstoreIOError, match="missing.json"):
        capstore.Config(tmp_path / "missing.json")
    cfg = capstore.Config.embedded(tmp_path)
    with pytest.raises(capstore.ConfigError):
        cfg.set("capture.linger", "soon")
    assert cfg.to_dict()["spool_dir"].endswith("spool")  # the refused set left it as it was
    good = tmp_path / "good.json"
    good.write_text('# a comment line\n{"spool_dir": "%s", "store": {"dir": "%s"}, "catalog": {"sqlite": "%s"}}\n'
                    % (tmp_path / "s2", tmp_path / "b2", tmp_path / "c2.db"))
    assert capstore.Config(good).to_dict()["catalog"]["sqlite"].endswith("c2.db")


def test_capture_refusals_lose_nothing(embedded):
    cfg = embedded.config()
    with capstore.Storage(cfg, run_id="bad") as st:
        st.capture(torch.arange(10.0), capture_id="before")
        with pytest.raises(TypeError, match="torch.Tensor or a numpy.ndarray"):
            st.capture("not a tensor")
        with pytest.raises(TypeError, match="torch.Tensor or a numpy.ndarray"):
            st.capture([1.0, 2.0])
        with pytest.raises(TypeError, match="complex64"):
            st.capture(torch.zeros(3, dtype=torch.complex64))
        with pytest.raises(TypeError, match="uint16"):
            st.capture(np.zeros(3, np.uint16))
        with pytest.raises(TypeError, match="object"):
            st.capture(np.array(["a", None], dtype=object))
        with pytest.raises(TypeError, match="unknown metadata key 'layr'"):
            st.capture(torch.zeros(1), layr=3)
        with pytest.raises(TypeError, match="layer must be an int"):
            st.capture(torch.zeros(1), layer="3")
        with pytest.raises(capstore.InvalidArgument, match="layer is -2"):
            st.capture(torch.zeros(1), layer=-2)
        with pytest.raises(capstore.InvalidArgument, match="token_end"):
            st.capture(torch.zeros(1), token_start=5, token_end=4)
        with pytest.raises(capstore.InvalidArgument, match="capture_id"):
            st.capture(torch.zeros(1), capture_id="")
        with pytest.raises(capstore.InvalidArgument, match="hook_name"):
            st.capture(torch.zeros(1), hook_name="x" * 513)
        with pytest.raises(capstore.InvalidArgument, match="tenant"):
            st.capture(torch.zeros(1), tenant_id="another tenant")  # fixed per Storage
        with pytest.raises(ValueError, match="2-byte items"):
            st.capture(np.zeros(3, np.float32), dtype="bfloat16")
        with pytest.raises(capstore.TooLarge, match="record_bytes_max"):
            st.capture(torch.zeros(9 << 20))  # 36 MiB, over the default record_max of 32 MiB
        st.capture(torch.arange(5, dtype=torch.int64), capture_id="after")
        st.flush(timeout=60)
    with capstore.Reader(cfg) as r:
        res = r.read(r.search_all(run_id="bad"))
        got = {rec.descriptor.capture_id: rec.tensor() for rec in res}
    assert set(got) == {"before", "after"}
    assert torch.equal(got["before"], torch.arange(10.0)) and torch.equal(got["after"], torch.arange(5))


def test_duplicate_capture_id_is_reported_by_the_next_flush(embedded):
    cfg = embedded.config()
    with capstore.Storage(cfg, run_id="dup") as st:
        st.capture(torch.zeros(2), capture_id="same")
        st.capture(torch.ones(2), capture_id="same")
        with pytest.raises(capstore.InvalidArgument, match="capture_id repeats"):
            st.flush(timeout=60)
        st.flush(timeout=60)  # reported once
    with capstore.Reader(cfg) as r:
        res = r.read(r.search_all(run_id="dup"))
    assert [rec.tensor().tolist() for rec in res] == [[0.0, 0.0]]  # the first kept, the duplicate refused


def test_spool_full_refuses_at_once_and_keeps_what_was_admitted(embedded):
    cfg = embedded.config(capture__spool_bytes_max="4MiB", capture__full_policy="refuse",
                          capture__pack_bytes_max="1MiB", capture__staging="4MiB", capture__record_max="1MiB")
    admitted = []
    refused = 0
    with capstore.Storage(cfg, run_id="full") as st:
        for i in range(64):
            try:
                admitted.append(st.capture(torch.full((64 << 10,), float(i)), step=i))  # 256 KiB each
            except capstore.Refused as e:
                assert isinstance(e, (capstore.SpoolFull, capstore.StagingFull)), e
                refused += 1
        st.flush(timeout=120)
    assert refused > 0 and admitted
    with capstore.Reader(cfg) as r:
        res = r.read(r.search_all(run_id="full"))
    assert sorted(rec.descriptor.capture_id for rec in res) == sorted(admitted)
    for rec in res:
        assert bool((rec.tensor() == float(rec.descriptor.step)).all())


def test_closed_objects(embedded):
    cfg = embedded.config()
    st = capstore.Storage(cfg)
    st.capture(torch.zeros(1))
    st.close()
    assert st.closed
    for call in (lambda: st.capture(torch.zeros(1)), lambda: st.flush(), lambda: st.stats()):
        with pytest.raises(capstore.ClosedError):
            call()
    st.close()  # again: nothing
    r = capstore.Reader(cfg)
    sel = r.search_all()
    r.close()
    with pytest.raises(capstore.ClosedError):
        r.search_all()
    with pytest.raises(capstore.ClosedError):
        r.read(sel)
    assert len(sel) == 1  # a selection outlives its reader


def test_second_storage_on_one_spool_is_busy(embedded):
    cfg = embedded.config()
    with capstore.Storage(cfg):
        with pytest.raises(capstore.BusyError):
            capstore.Storage(cfg)
    with capstore.Storage(cfg):  # free again once closed
        pass


def test_close_while_other_threads_capture(embedded):
    cfg = embedded.config()
    st = capstore.Storage(cfg, run_id="race")
    stop = threading.Event()
    # One counter per thread: `+= 1` on a shared one is not atomic across threads.
    ok = [0, 0, 0]
    closed = [0, 0, 0]
    other: list = []

    def work(i: int) -> None:
        while not stop.is_set():
            try:
                st.capture(torch.zeros(1024))
                ok[i] += 1
            except capstore.ClosedError:
                closed[i] += 1
                return
            except Exception as e:  # noqa: BLE001
                other.append(e)
                return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    while sum(ok) < 200 and not other:
        time.sleep(0.001)
    st.close(timeout=30)
    stop.set()
    for t in threads:
        t.join()
    assert other == [] and closed == [1, 1, 1]
    with capstore.Reader(cfg) as r:
        n = len(r.search_all(run_id="race"))
    assert n == sum(ok)  # every admitted capture drained by close


def test_reader_refusals(embedded):
    cfg = embedded.config()
    with capstore.Storage(cfg, run_id="r") as st:
        for i in range(20):
            st.capture(torch.zeros(1000), step=i)
        st.flush(timeout=60)
    with capstore.Reader(cfg) as r:
        sel = r.search_all(run_id="r")
        with pytest.raises(capstore.LimitExceeded, match="byte") as e:
            r.read(sel, byte_limit=1000)
        assert e.value.cost.planned_bytes > 1000 and e.value.cost.requests == 0
        with pytest.raises(capstore.LimitExceeded):
            r.estimate(sel, byte_limit=10)
        with pytest.raises(ValueError):
            r.read(sel, request_limit=0)
        with pytest.raises(ValueError):
            r.read(sel, byte_limit=-1)
        with pytest.raises(TypeError):
            r.read(sel, byte_limit="lots")
        with pytest.raises(TypeError, match="Selection"):
            r.read([1, 2])
        with pytest.raises(ValueError, match="page_size"):
            r.search_page(page_size=0)
        with pytest.raises(ValueError, match="page_size"):
            r.search_page(page_size=10001)
        with pytest.raises(TypeError, match="unknown filter 'layers'"):
            r.search_all(layers=3)
        with pytest.raises(ValueError, match="over max"):
            r.search_all(step=(5, 2))
        with pytest.raises(ValueError, match="outside"):
            r.search_all(layer=-5)
        with pytest.raises(ValueError, match="empty list"):
            r.search_all(hook_name=[])
        with pytest.raises(ValueError, match="at most 256"):
            r.search_all(capture_id=[str(i) for i in range(257)])
        with pytest.raises(ValueError, match="complex"):
            r.search_all(dtype=torch.complex64)
        with pytest.raises(capstore.ParseError):
            r.search_page(cursor="not-a-cursor")
        page = r.search_page(page_size=5, run_id="r")
        with pytest.raises(capstore.ConflictError):
            r.search_page(cursor=page.cursor, page_size=5, run_id="other")  # a cursor of another filter
        with pytest.raises(capstore.StateError):
            r.select(["x"], watermark=sel.watermark + 1000)
        res = r.read(sel, byte_limit=10**9, request_limit=100)
        assert len(res) == 20


def test_layout_check_refuses_a_library_of_another_layout(monkeypatch):
    ffi._check_layout()  # this library matches

    class Wrong(ctypes.Structure):
        _fields_ = [("watermark", ctypes.c_uint32), ("count", ctypes.c_uint32), ("rows", ctypes.c_void_p),
                    ("cursor", ctypes.c_char * 8192), ("storage_", ctypes.c_void_p)]

    monkeypatch.setitem(ffi._MIRRORED, "capstore_selection", Wrong)
    with pytest.raises(ImportError, match="capstore_selection.*watermark|size"):
        ffi._check_layout()


def test_library_named_by_env_must_load(tmp_path):
    import subprocess
    import sys
    env = dict(os.environ, CAPSTORE_LIBRARY=str(tmp_path / "nope.so"))
    out = subprocess.run([sys.executable, "-c", "import capstore"], env=env, capture_output=True, text=True)
    assert out.returncode != 0 and "nope.so" in out.stderr and "ImportError" in out.stderr


def test_flush_timeout_names_the_stage_and_loses_nothing(embedded):
    import sqlite3
    cfg = embedded.config()
    with capstore.Storage(cfg, run_id="slow") as st:
        st.capture(torch.ones(3), capture_id="first")
        st.flush(timeout=60)
        # Another process holds the catalog's write lock: the index cannot land, the flush stops at "catalog".
        db = sqlite3.connect(str(embedded.tmp_path / "catalog.db"), isolation_level=None, timeout=0)
        db.execute("BEGIN EXCLUSIVE")
        st.capture(torch.full((3,), 2.0), capture_id="second")
        with pytest.raises(capstore.FlushTimeout) as e:
            st.flush(timeout=1.5)
        assert isinstance(e.value, TimeoutError)
        assert e.value.report.drained is False and e.value.report.stage == "catalog"
        assert e.value.report.missing_packs >= 1
        db.execute("ROLLBACK")
        db.close()
        report = st.flush(timeout=60)  # the lock gone, the same records drain
        assert report.drained
    with capstore.Reader(cfg) as r:
        res = r.read(r.search_all(run_id="slow"))
    assert sorted(rec.descriptor.capture_id for rec in res) == ["first", "second"]


def test_timeouts_and_huge_dimensions(embedded):
    with capstore.Storage(embedded.config()) as st:
        st.capture(torch.zeros(2))
        assert st.flush(timeout=None).drained          # as long as it takes
        assert st.flush(timeout=float("inf")).drained
        with pytest.raises(ValueError, match="timeout"):
            st.flush(timeout=-1)
        with pytest.raises(ValueError, match="timeout"):
            st.flush(timeout=float("nan"))
        with pytest.raises(TypeError, match="timeout"):
            st.flush(timeout="10")
        with pytest.raises(capstore.InvalidArgument, match="2\\^31-1"):
            st.capture(np.zeros((2**32, 0), np.float32))  # no bytes, but a dimension the format cannot hold
        with pytest.raises(capstore.InvalidArgument, match="at most 32"):
            st.capture(torch.zeros((1,) * 33))  # numpy stops at 32 dimensions itself; torch does not
