"""Round trips: what is captured from Python reads back byte-exact, with its descriptor."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest
import torch

import capstore

TORCH_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                torch.bfloat16, torch.float32, torch.float64]
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def random_tensor(dtype: torch.dtype, shape: tuple, gen: torch.Generator) -> torch.Tensor:
    """Every bit pattern (NaNs, infinities, subnormals and negative zero among them), bools as 0/1."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    size = torch.empty((), dtype=dtype).element_size()
    bits = torch.randint(-2**(8 * size - 1) if size < 8 else -2**62, 2**(8 * size - 1) if size < 8 else 2**62,
                         shape, generator=gen, dtype=torch.int64).to(BITS[size])
    return bits.view(dtype)


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Byte-exact equality (torch.equal would call NaN unequal to itself)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == torch.bool:
        return torch.equal(a, b)
    size = a.element_size()
    return torch.equal(a.contiguous().view(BITS[size]), b.contiguous().view(BITS[size]))


def read_all(cfg, **filters):
    with capstore.Reader(cfg) as r:
        sel = r.search_all(**filters)
        return sel, r.read(sel)


SHAPES = [(), (0,), (0, 4), (7,), (3, 5), (2, 3, 4), (1, 1, 1, 1, 2)]


def test_every_dtype_and_shape(backend):
    cfg = backend.config()
    gen = torch.Generator().manual_seed(1)
    sent = {}
    with capstore.Storage(cfg, run_id="dtypes") as st:
        for dtype in TORCH_DTYPES:
            for shape in SHAPES:
                t = random_tensor(dtype, shape, gen)
                cid = st.capture(t, hook_name=f"h.{dtype}", layer=len(shape), step=3)
                sent[cid] = t
        report = st.flush(timeout=120)
        assert report.drained and report.stage == "" and report.rejected == []
    sel, res = read_all(cfg, run_id="dtypes")
    assert len(res) == len(sent) == len(TORCH_DTYPES) * len(SHAPES)
    for rec in res:
        want = sent.pop(rec.descriptor.capture_id)
        got = rec.tensor()
        assert same_bytes(got, want), rec
        assert rec.descriptor.shape == tuple(want.shape)
        assert rec.descriptor.dtype == str(want.dtype).replace("torch.", "")
        assert rec.nbytes == want.numel() * want.element_size()
    assert not sent


def test_non_contiguous_tensors_are_made_contiguous(backend):
    cfg = backend.config()
    base = torch.arange(6 * 8 * 4, dtype=torch.float32).reshape(6, 8, 4)
    views = {"transposed": base.transpose(0, 2), "strided": base[::2, 1::3], "expanded": torch.ones(3, 1).expand(3, 5),
             "negated": (-torch.ones(2, 2, dtype=torch.float32)), "channels_last":
             torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)}
    ids = {}
    with capstore.Storage(cfg, run_id="views") as st:
        for name, v in views.items():
            ids[st.capture(v, hook_name=name)] = v
        st.flush(timeout=60)
    _, res = read_all(cfg, run_id="views")
    assert len(res) == len(views)
    for rec in res:
        want = ids[rec.descriptor.capture_id]
        assert torch.equal(rec.tensor(), want), rec.descriptor.hook_name
        assert rec.descriptor.shape == tuple(want.shape)


def test_large_tensor(backend):
    # Records over capture.record_max (32 MiB by default) are refused: raise it (and the staging area, at
    # least 4 records' worth) for one of 128 MiB.
    cfg = backend.config(capture__record_max="128MiB", capture__staging="512MiB")
    big = torch.randn(32, 1024, 1024)  # 128 MiB
    with capstore.Storage(cfg, run_id="large") as st:
        st.capture(big, hook_name="big")
        st.flush(timeout=300)
    sel, res = read_all(cfg, run_id="large")
    assert len(res) == 1
    assert torch.equal(res[0].tensor(), big)
    assert res[0].nbytes == 128 << 20


def test_numpy_every_dtype_bfloat16_big_endian_fortran(backend):
    cfg = backend.config()
    rng = np.random.default_rng(7)
    arrays = {
        "bool": rng.integers(0, 2, (4, 3)).astype(np.bool_),
        "uint8": rng.integers(0, 255, (4, 3), dtype=np.uint8),
        "int8": rng.integers(-128, 127, (5,), dtype=np.int8),
        "int16": rng.integers(-2**15, 2**15, (2, 2, 2), dtype=np.int16),
        "int32": rng.integers(-2**31, 2**31, (3, 4), dtype=np.int32),
        "int64": rng.integers(-2**63, 2**63, (6,), dtype=np.int64),
        "float16": rng.standard_normal((3, 3)).astype(np.float16),
        "float32": rng.standard_normal((3, 7)).astype(np.float32),
        "float64": rng.standard_normal((1, 9)),
        "big_endian": np.arange(12, dtype=">f4").reshape(3, 4),
        "fortran": np.asfortranarray(rng.standard_normal((5, 6)).astype(np.float32)),
        "scalar": np.float32(2.5),
    }
    bf16_bits = rng.integers(0, 2**16, (4, 4), dtype=np.uint16)
    with capstore.Storage(cfg, run_id="np") as st:
        for name, a in arrays.items():
            st.capture(a, hook_name=name)
        st.capture(bf16_bits, hook_name="bfloat16", dtype="bfloat16")
        st.flush(timeout=60)
    _, res = read_all(cfg, run_id="np")
    got = {r.descriptor.hook_name: r for r in res}
    assert set(got) == set(arrays) | {"bfloat16"}
    for name, a in arrays.items():
        back = got[name].numpy()
        assert back.shape == np.shape(a)
        assert np.array_equal(back, np.asarray(a)), name
        assert back.dtype == np.asarray(a).dtype.newbyteorder("<") or back.dtype == np.asarray(a).dtype
    rec = got["bfloat16"]
    assert rec.descriptor.dtype == "bfloat16"
    assert np.array_equal(rec.numpy(), bf16_bits)  # numpy has no bfloat16: its bits
    assert torch.equal(rec.tensor().view(torch.int16), torch.from_numpy(bf16_bits.view(np.int16)))


def test_descriptor_fields_and_filters(backend):
    cfg = backend.config()
    with capstore.Storage(cfg, run_id="meta", experiment_id="exp", model_id="m", model_revision="rev",
                          tenant_id="tenant-a", producer_rank=3, capture_policy_version="p2") as st:
        for layer in range(4):
            for step in range(3):
                st.capture(torch.full((2,), float(layer * 10 + step)), capture_id=f"c-{layer}-{step}",
                           hook_name=f"layers.{layer}", layer=layer, step=step, request_id=f"req-{step}",
                           sequence_id="seq", token_start=step * 8, token_end=step * 8 + 8, batch_position=layer,
                           captured_at_ns=1_000 + step, adapter_revision="lora-1" if layer == 0 else None)
        st.capture(np.zeros(3, np.int32), capture_id="ints", hook_name="other", request_id="req-x")
        st.flush(timeout=60)
    with capstore.Reader(cfg) as r:
        sel = r.search_all(run_id="meta")
        assert len(sel) == 13
        d = {x.capture_id: x for x in sel}["c-2-1"]
        assert (d.tenant_id, d.experiment_id, d.run_id, d.model_id, d.model_revision) == (
            "tenant-a", "exp", "meta", "m", "rev")
        assert (d.hook_name, d.layer, d.step, d.request_id, d.sequence_id) == ("layers.2", 2, 1, "req-1", "seq")
        assert (d.token_start, d.token_end, d.batch_position, d.captured_at_ns) == (8, 16, 2, 1001)
        assert (d.producer_rank, d.capture_policy_version, d.adapter_revision) == (3, "p2", None)
        assert {x.adapter_revision for x in sel if x.layer == 0} == {"lora-1"}
        assert d.dtype == "float32" and d.shape == (2,) and d.decoded_length == 8

        def ids(**f):
            return sorted(x.capture_id for x in r.search_all(run_id="meta", **f))

        assert ids(layer=1) == ["c-1-0", "c-1-1", "c-1-2"]
        assert ids(layer=(1, 2), step=2) == ["c-1-2", "c-2-2"]
        assert ids(layer=range(0, 2), step=range(1, 3)) == ["c-0-1", "c-0-2", "c-1-1", "c-1-2"]
        assert ids(hook_name=["layers.3", "other"], step=0) == ["c-3-0", "ints"]
        assert ids(tokens=(9, 10)) == ["c-0-1", "c-1-1", "c-2-1", "c-3-1"]
        assert ids(dtype="int32") == ["ints"] and ids(dtype=np.int32) == ["ints"] and ids(dtype=torch.int32) == ["ints"]
        assert ids(request_id="req-x") == ["ints"]
        assert ids(captured_at_ns=(1_000, 1_001), layer=3) == ["c-3-0", "c-3-1"]
        assert ids(experiment_id="nope") == []
        assert ids(capture_id=["c-0-0", "c-3-2"]) == ["c-0-0", "c-3-2"]

        # select by id, at the watermark a search pinned
        s2 = r.select(["c-1-1", "ints", "absent"], watermark=sel.watermark)
        assert sorted(x.capture_id for x in s2) == ["c-1-1", "ints"]
        res = r.read(s2)
        by = {rec.descriptor.capture_id: rec for rec in res}
        assert by["c-1-1"].tensor().tolist() == [11.0, 11.0]

        # paging: every record once, in order, at one watermark
        pages = list(r.search(page_size=5, run_id="meta"))
        assert [len(p) for p in pages] == [5, 5, 3]
        assert len({p.watermark for p in pages}) == 1
        seen = [x.capture_id for p in pages for x in p]
        assert sorted(seen) == sorted(x.capture_id for x in sel) and len(set(seen)) == 13
        assert pages[-1].cursor == "" and pages[0].cursor != ""

        cost = r.estimate(sel)
        res = r.read(sel)
        assert res.cost.planned_requests == cost.planned_requests and res.cost.requests >= cost.planned_requests
        assert res.cost.payload_bytes == 12 * 8 + 12


def test_payload_memory_outlives_reader_and_result(embedded):
    cfg = embedded.config()
    with capstore.Storage(cfg, run_id="life") as st:
        for i in range(8):
            st.capture(torch.full((1000,), float(i)), hook_name="h", step=i)
        st.flush(timeout=60)
    r = capstore.Reader(cfg)
    res = r.read(r.search_all(run_id="life"))
    arrays = [rec.numpy() for rec in res]
    tensors = [rec.tensor() for rec in res]
    arena = res[0]._buffer._arena
    import weakref
    alive = weakref.ref(arena)
    del res, arena
    r.close()
    gc.collect()
    assert alive() is not None  # views still hold it
    assert sorted(float(a[0]) for a in arrays) == [float(i) for i in range(8)]
    assert sorted(float(t[999]) for t in tensors) == [float(i) for i in range(8)]
    del arrays, tensors
    gc.collect()
    assert alive() is None  # freed with the last view


def test_threads_capture_at_once(backend):
    cfg = backend.config()
    n_threads, per_thread = 4, 200
    errors = []
    with capstore.Storage(cfg, run_id="threads") as st:
        def work(k: int) -> None:
            try:
                for i in range(per_thread):
                    st.capture(torch.full((256,), float(k * per_thread + i)), hook_name=f"t{k}", step=i)
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        st.flush(timeout=120)
        assert st.stats()["records_captured"] == n_threads * per_thread
    assert not errors
    _, res = read_all(cfg, run_id="threads")
    values = sorted(float(rec.tensor()[0]) for rec in res)
    assert values == [float(v) for v in range(n_threads * per_thread)]
    for rec in res:
        assert bool((rec.tensor() == rec.tensor()[0]).all())


def test_stats_and_metrics(embedded):
    with capstore.Storage(embedded.config()) as st:
        st.capture(torch.zeros(4))
        st.flush(timeout=60)
        s = st.stats()
        assert s["records_captured"] == 1
        assert "capstore_" in st.metrics()


def test_gil_is_released_while_flush_waits(embedded):
    """A thread of Python code runs while another thread is inside a blocking C call."""
    cfg = embedded.config()
    with capstore.Storage(cfg) as st:
        for _ in range(32):
            st.capture(torch.randn(1 << 20))  # 128 MiB to seal and ship
        ticks = []
        stop = threading.Event()

        def tick() -> None:
            while not stop.is_set():
                ticks.append(time.monotonic())
                time.sleep(0.001)

        t = threading.Thread(target=tick)
        t.start()
        t0 = time.monotonic()
        st.flush(timeout=120)
        t1 = time.monotonic()
        stop.set()
        t.join()
        inside = [x for x in ticks if t0 < x < t1]
        # ticks every ~1 ms while the flush ran (the flush takes tens of milliseconds at least)
        assert (t1 - t0) < 0.02 or len(inside) >= max(2, int((t1 - t0) / 0.01)), (t1 - t0, len(inside))


def _capstore_threads() -> dict[str, str]:
    """This process's capstore threads: {thread id: name}."""
    import os

    threads = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue  # the thread ended
        if name.startswith("cs-"):
            threads[tid] = name
    return threads


def test_capstore_threads_are_named(embedded):
    """top -H, ps -L and perf tell capstore's threads from the model's: each is named "cs-..."."""
    before = set(_capstore_threads())  # another Storage still open keeps its own threads: not counted
    with capstore.Storage(embedded.config(), run_id="names") as st:
        st.capture(torch.ones(4))
        st.flush(timeout=30)
        started = {tid: name for tid, name in _capstore_threads().items() if tid not in before}
    assert {"cs-capture", "cs-writer", "cs-sealer", "cs-driver", "cs-store", "cs-catalog"} <= set(started.values()), \
        started
    assert not (set(started) & set(_capstore_threads()))  # close joined every thread it started
