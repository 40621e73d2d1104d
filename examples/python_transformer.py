#!/usr/bin/env python3
"""Capture every layer's output of a small transformer, then read them back as tensors.

A randomly initialised transformer (Debian's python3-torch; no weights are
downloaded) runs a batch of requests with capstore.torch.capture_module
hooking every block; the storage flushes, and a reader searches by layer and
reads every record back, comparing each with the output the model produced.

    python3 examples/python_transformer.py                 # no server: ./capstore-py-demo
    python3 examples/python_transformer.py --config capstore.json   # S3 + ClickHouse, or any config file

Exits 0 only when every record read back equal.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

import torch

import capstore
import capstore.torch


class TinyTransformer(torch.nn.Module):
    """Token embedding, n_layers pre-norm encoder blocks, a final norm and an output head."""

    def __init__(self, vocab: int = 1024, d_model: int = 256, n_heads: int = 4, n_layers: int = 4,
                 d_ff: int = 1024) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d_model)
        self.layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(n_layers))
        self.norm = torch.nn.LayerNorm(d_model)
        self.head = torch.nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="capstore-py-demo", help="where the embedded store lives (default %(default)s)")
    ap.add_argument("--config", help="a capstore.json (instead of the embedded store under --dir)")
    ap.add_argument("--requests", type=int, default=16, help="requests in all (default %(default)s)")
    ap.add_argument("--batch", type=int, default=8, help="requests per forward pass (default %(default)s)")
    ap.add_argument("--seq", type=int, default=64, help="tokens per request (default %(default)s)")
    ap.add_argument("--layers", type=int, default=4, help="encoder blocks (default %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    model = TinyTransformer(n_layers=args.layers).eval()
    cfg = capstore.Config(args.config) if args.config else capstore.Config.embedded(args.dir)
    run_id = f"py-demo-{uuid.uuid4().hex[:12]}"
    request_ids = [f"{run_id}-req{i}" for i in range(args.requests)]
    tokens = torch.randint(0, 1024, (args.requests, args.seq))

    # The reference: what each block produced, per request, kept aside by a hook of our own.
    reference: dict[tuple[str, int], torch.Tensor] = {}

    t0 = time.perf_counter()
    with capstore.Storage(cfg, run_id=run_id, model_id="tiny-transformer", model_revision=f"seed{args.seed}") as st:
        open_s = time.perf_counter() - t0
        with capstore.torch.capture_module(model, st) as cap:  # every block of model.layers
            keep = [model.layers[i].register_forward_hook(
                lambda m, inp, out, i=i: reference.setdefault(("cur", i), out.detach().clone()))
                for i in range(args.layers)]
            t1 = time.perf_counter()
            with torch.no_grad():
                for b in range(0, args.requests, args.batch):
                    ids = request_ids[b:b + args.batch]
                    with cap.requests(ids, step=0, token_start=0, token_end=args.seq):
                        model(tokens[b:b + args.batch])
                    for i in range(args.layers):
                        out = reference.pop(("cur", i))
                        for j, rid in enumerate(ids):
                            reference[(rid, i)] = out[j]
            forward_s = time.perf_counter() - t1
            for h in keep:
                h.remove()
        report = st.flush(timeout=120)
        print(f"captured {cap.captured} records ({len(request_ids)} requests x {args.layers} layers) in "
              f"{forward_s:.2f} s of forward passes; flush {report.seconds:.2f} s, every record queryable "
              f"(open took {open_s:.2f} s)")

    equal = 0
    total = 0
    with capstore.Reader(cfg) as reader:
        for layer in range(args.layers):
            sel = reader.search_all(run_id=run_id, layer=layer)
            result = reader.read(sel)
            for rec in result:
                d = rec.descriptor
                total += 1
                want = reference.get((d.request_id, d.layer))
                if want is not None and d.hook_name == f"layers.{layer}" and torch.equal(rec.tensor(), want):
                    equal += 1
            print(f"  layer {layer}: {len(result)} records, {result.cost.payload_bytes / 2**20:.1f} MiB in "
                  f"{result.cost.requests} ranged reads")
    expected = len(reference)
    ok = equal == expected == total
    print(f"read back {equal:,} of {expected:,} records equal" + ("" if ok else f" ({total} found)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
