"""CUDA tensors captured from Python through the device path, read back byte-exact.

Run as a script: without a CUDA device (torch.cuda.is_available() false, as
with Debian's CPU-only python3-torch) it exits 77, which ctest reports as
skipped (python.cuda); run_gpu_checks.sh runs it where a device must exist
and fails on 77. With a device it runs the tests below under pytest.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

import capstore

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64]


def config(tmp_path):
    return capstore.Config.embedded(tmp_path, capture__device_copies_max=16)


def test_every_dtype_from_device(tmp_path):
    cfg = config(tmp_path)
    dev = torch.device("cuda")
    want = {}
    with capstore.Storage(cfg, run_id="cuda") as st:
        for i, dtype in enumerate(DTYPES):
            x = (torch.randn(33, 17, device=dev) * 100).to(dtype)
            cid = st.capture(x, hook_name=str(dtype))
            want[cid] = x.cpu()
        t = torch.randn(64, 32, device=dev).t()  # non-contiguous: made contiguous on the device
        want[st.capture(t, hook_name="transposed")] = t.cpu()
        st.flush(timeout=120)
        assert st.stats()["records_dropped"] == 0
    with capstore.Reader(cfg) as r:
        res = r.read(r.search_all(run_id="cuda"))
    assert len(res) == len(want)
    for rec in res:
        assert torch.equal(rec.tensor(), want[rec.descriptor.capture_id]), rec


def test_stream_order_captures_before_later_kernels(tmp_path):
    """The copy is enqueued on the current stream: a kernel queued after capture cannot change what is captured."""
    cfg = config(tmp_path)
    dev = torch.device("cuda")
    with capstore.Storage(cfg, run_id="order") as st:
        want = {}
        for i in range(32):
            x = torch.full((1 << 20,), float(i), device=dev)
            want[st.capture(x, step=i)] = float(i)
            x.fill_(-1.0)  # queued after the copy on the same stream
            del x          # and its memory handed back to PyTorch's allocator at once
        st.flush(timeout=120)
    with capstore.Reader(cfg) as r:
        res = r.read(r.search_all(run_id="order"))
    assert len(res) == 32
    for rec in res:
        t = rec.tensor()
        assert bool((t == want[rec.descriptor.capture_id]).all()), rec


if __name__ == "__main__":
    if not torch.cuda.is_available():
        print("skipped: torch.cuda.is_available() is false (no CUDA device, or a CPU-only torch)")
        sys.exit(77)
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", os.path.abspath(__file__)]))
