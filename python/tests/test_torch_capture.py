"""capstore.torch.capture_module on the example transformer: every layer, every request, read back equal."""

from __future__ import annotations

import pytest
import torch

import capstore
import capstore.torch as ct
from python_transformer import TinyTransformer


def reference_outputs(model, names):
    """name -> output of the last forward pass, kept by hooks of our own."""
    outs = {}
    modules = dict(model.named_modules())
    handles = [modules[n].register_forward_hook(lambda m, i, o, n=n: outs.__setitem__(n, o)) for n in names]
    return outs, handles


def test_every_layer_every_request(backend):
    torch.manual_seed(0)
    model = TinyTransformer(d_model=64, n_heads=4, n_layers=3, d_ff=128).eval()
    cfg = backend.config()
    batches = [[f"req-{b}-{i}" for i in range(4)] for b in range(3)]
    want = {}
    with capstore.Storage(cfg, run_id="hooks", model_id="tiny") as st:
        cap = ct.capture_module(model, st)
        assert list(cap.layers.items()) == [("layers.0", 0), ("layers.1", 1), ("layers.2", 2)]
        outs, handles = reference_outputs(model, cap.layers)
        with torch.no_grad():
            for step, ids in enumerate(batches):
                with cap.requests(ids, step=step, token_start=[0, 1, 2, 3], token_end=16):
                    model(torch.randint(0, 1024, (4, 16)))
                for name, layer in cap.layers.items():
                    for i, rid in enumerate(ids):
                        want[(rid, layer)] = (outs[name][i].clone(), step, i, name)
        cap.remove()
        for h in handles:
            h.remove()
        assert cap.captured == 3 * 4 * 3
        before = cap.captured
        model(torch.randint(0, 1024, (4, 16)))  # removed: nothing more
        assert cap.captured == before
        st.flush(timeout=120)
    found = 0
    with capstore.Reader(cfg) as r:
        for layer in range(3):
            res = r.read(r.search_all(run_id="hooks", layer=layer))
            assert len(res) == 12
            for rec in res:
                d = rec.descriptor
                t, step, pos, name = want[(d.request_id, d.layer)]
                assert torch.equal(rec.tensor(), t)
                assert (d.step, d.batch_position, d.hook_name, d.shape) == (step, pos, name, (16, 64))
                assert (d.token_start, d.token_end) == (pos, 16)
                found += 1
    assert found == len(want) == 36


def test_patterns_mappings_and_tuple_outputs(embedded):
    torch.manual_seed(1)
    model = TinyTransformer(d_model=32, n_heads=2, n_layers=2, d_ff=64).eval()
    cfg = embedded.config()
    with capstore.Storage(cfg, run_id="patterns") as st:
        with pytest.raises(ValueError, match="no module of the model matches 'nope.*'"):
            ct.capture_module(model, st, hooks=["nope.*"])
        with pytest.raises(ValueError, match="no module 'x'"):
            ct.capture_module(model, st, hooks={"x": 1})
        with pytest.raises(TypeError, match="capstore.Storage"):
            ct.capture_module(model, object())
        with pytest.raises(ValueError, match="on_error"):
            ct.capture_module(model, st, on_error="ignore")
        with pytest.raises(TypeError, match="sets layer itself"):
            ct.capture_module(model, st, layer=3)
        # self_attn returns a tuple (output, weights=None): the tensor is captured as "<name>.0"
        cap = ct.capture_module(model, st, hooks=["layers.*.self_attn", "head"], experiment_id="e1")
        assert cap.layers == {"layers.0.self_attn": 0, "layers.1.self_attn": 1, "head": -1}
        # with grad enabled the layers run their submodules (no fused inference path)
        with cap.requests(["a", "b"], step=7):
            model(torch.randint(0, 1024, (2, 5)))
        model(torch.randint(0, 1024, (3, 5)))  # outside requests(): whole outputs
        assert cap.missed == {}
        # under no_grad in eval mode PyTorch's fused path skips self_attn: named in a warning, counted
        with torch.no_grad(), pytest.warns(RuntimeWarning, match="'layers.0.self_attn' did not run"):
            model(torch.randint(0, 1024, (3, 5)))
        assert cap.missed == {"layers.0.self_attn": 1, "layers.1.self_attn": 1}
        cap.remove()
        cap2 = ct.capture_module(model, st, hooks={"norm": 42}, layer_of=lambda n: 0)
        cap2.enabled = False
        model(torch.randint(0, 1024, (1, 5)))
        assert cap2.captured == 0
        cap2.enabled = True
        with torch.no_grad():
            model(torch.randint(0, 1024, (1, 5)))
        cap2.remove()
        st.flush(timeout=60)
    with capstore.Reader(cfg) as r:
        sel = r.search_all(run_id="patterns")
        got = sorted((d.hook_name, d.layer, d.request_id if d.step == 7 else "-", d.step, d.shape) for d in sel)
    assert ("layers.0.self_attn.0", 0, "a", 7, (5, 32)) in got
    assert ("head", -1, "b", 7, (5, 1024)) in got
    whole = [g for g in got if g[3] == 0]
    assert sorted((g[0], g[4]) for g in whole) == [("head", (3, 5, 1024)), ("head", (3, 5, 1024)),
                                                   ("layers.0.self_attn.0", (3, 5, 32)),
                                                   ("layers.1.self_attn.0", (3, 5, 32)), ("norm", (1, 5, 32))]
    assert {d.experiment_id for d in sel if d.hook_name != "norm"} == {"e1"}
    assert [d.layer for d in sel if d.hook_name == "norm"] == [42]
    assert len(got) == 6 + 3 + 1 + 1  # the no_grad pass captured head only


def test_sequence_first_batch_dim(embedded):
    torch.manual_seed(2)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0).eval()  # (seq, batch, d)
    model = torch.nn.Sequential(layer)
    cfg = embedded.config()
    x = torch.randn(6, 3, 16)
    with capstore.Storage(cfg, run_id="seqfirst") as st:
        with ct.capture_module(model, st, hooks=["0"], batch_dim=1) as cap:
            with torch.no_grad(), cap.requests(["r0", "r1", "r2"]):
                y = model(x)
        st.flush(timeout=60)
    with capstore.Reader(cfg) as r:
        res = r.read(r.search_all(run_id="seqfirst"))
    by = {rec.descriptor.request_id: rec for rec in res}
    assert sorted(by) == ["r0", "r1", "r2"]
    for i in range(3):
        assert torch.equal(by[f"r{i}"].tensor(), y[:, i]) and by[f"r{i}"].descriptor.layer == 0


def test_on_error_count_keeps_the_model_running(embedded):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    cfg = embedded.config()
    with capstore.Storage(cfg) as st:
        cap = ct.capture_module(model, st, hooks=["0", "1"], on_error="count", token_start=9, token_end=3)
        model(torch.randn(2, 4))  # token_end below token_start: every capture refused, the forward pass runs
        assert cap.failed == 2 and cap.captured == 0
        assert isinstance(cap.last_error, capstore.InvalidArgument)
        cap.remove()
        strict = ct.capture_module(model, st, hooks=["0"], token_start=9, token_end=3)
        with pytest.raises(capstore.InvalidArgument):
            model(torch.randn(2, 4))
        strict.remove()
