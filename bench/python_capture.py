#!/usr/bin/env python3
"""The example transformer's forward pass with every block captured, against capture off (issue 16).

    PYTHONPATH=python CAPSTORE_LIBRARY=build/lib/libcapstore.so.0.1 /usr/bin/python3 bench/python_capture.py \\
        --c-bench build/bench/capstore-bench-capture-records

On the CPU, in eval mode under torch.no_grad, with a fixed seed: --runs rounds, each a run of --iters forward
passes with capture off (no hooks installed) and one with capstore.torch.capture_module hooking every block of
model.layers inside cap.requests(ids) (one record per request per block), in alternating order (off, on; then
on, off ...), after warm-up. The Storage stays open throughout, on the embedded defaults under --dir; after
each capture run a flush drains it (timed apart), so a capture run's background work does not spill into the
next run with capture off. Reported: the medians of the seconds per forward pass off and on and their ratio
(the goal: at most 1.10), the flush after a run, the bytes captured per forward pass, and the capture rate: the
bytes over the time spent inside the hooks' capture calls (each hooked module's _capture_output is timed).

In the same run, after each round, the C program bench/capture_records.c (--c-bench) captures the same
records (the count of one capture run, the same byte size, dtype and shape, the descriptor's text fields set
the same way) through capstore_write into a runtime of its own under --dir; its rate (bytes over the time
inside capstore_write) is the peer of the Python rate. At the end the catalogs are counted: every record the
hooks captured and every record the C program wrote must be there, so dropped records fail the run.

Prints one summary block and one line of key=value pairs. Exit status 0 only when every record was found.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from python_transformer import TinyTransformer  # noqa: E402

import capstore  # noqa: E402
import capstore.torch  # noqa: E402

VOCAB = 1024


def blas_in_use() -> str:
    """The BLAS library torch's matrix products went to (Debian's torch takes whatever libblas.so.3 resolves to:
    the reference netlib BLAS unless OpenBLAS is installed or on LD_LIBRARY_PATH), with its thread count."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "blas" in line.rsplit("/", 1)[-1]}
    name = "openblas" if any("openblas" in p for p in paths) else "netlib" if paths else "none seen"
    if name == "openblas":
        name += f" ({os.environ.get('OPENBLAS_NUM_THREADS', os.cpu_count())} threads)"
    return name


def capstore_cpu() -> dict[str, float]:
    """CPU seconds (user + system) spent so far by this process's capstore threads, by thread name: the runtime
    names them "cs-..." (cs-capture, cs-writer, cs-hasher, cs-sealer, cs-driver, cs-store, ...), so /proc tells
    them from torch's threads."""
    tick = os.sysconf("SC_CLK_TCK")
    by_name: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # the thread ended
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        if name.startswith("cs-"):
            fields = stat[stat.rindex(")") + 2:].split()
            by_name[name] = by_name.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return by_name


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", help="where the embedded stores live (default: a fresh temporary directory, removed)")
    ap.add_argument("--c-bench", help="capstore-bench-capture-records (the C peer); without it no C rate")
    ap.add_argument("--batch", type=int, default=8, help="requests per forward pass (default %(default)s)")
    ap.add_argument("--seq", type=int, default=128, help="tokens per request (default %(default)s)")
    ap.add_argument("--layers", type=int, default=6, help="encoder blocks (default %(default)s)")
    ap.add_argument("--d-model", type=int, default=512, help="model width (default %(default)s; d_ff is 4x)")
    ap.add_argument("--heads", type=int, default=8, help="attention heads (default %(default)s)")
    ap.add_argument("--runs", type=int, default=7, help="runs with capture off and on each (default %(default)s)")
    ap.add_argument("--iters", type=int, default=8, help="forward passes per run (default %(default)s)")
    ap.add_argument("--warmup", type=int, default=2, help="forward passes off and on before (default %(default)s)")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default 0: torch's own)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="tiny and fast (ctest bench.python_capture_smoke)")
    args = ap.parse_args()
    if args.smoke:
        args.batch, args.seq, args.layers, args.d_model, args.heads = 2, 8, 2, 32, 2
        args.runs, args.iters, args.warmup = 2, 2, 1
    for name in ("batch", "seq", "layers", "d_model", "heads", "runs", "iters"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


class Round:
    """One capture run's numbers."""

    def __init__(self) -> None:
        self.forward_s = 0.0   # the run's forward passes, hooks included
        self.hook_s = 0.0      # inside the hooks' capture calls
        self.flush_s = 0.0     # the drain after the run
        self.records = 0
        self.bg_cpu: dict[str, float] = {}  # CPU of capstore's own threads over the run and its flush, by name


def run_off(model: torch.nn.Module, tokens: torch.Tensor, iters: int) -> float:
    t0 = time.perf_counter()
    for _ in range(iters):
        model(tokens)
    return time.perf_counter() - t0


def run_on(model: torch.nn.Module, st: capstore.Storage, tokens: torch.Tensor, iters: int, tag: str) -> Round:
    """iters forward passes with every block captured, then a flush; the hooks' capture calls timed."""
    r = Round()
    batch = tokens.shape[0]
    cpu0 = capstore_cpu()
    with capstore.torch.capture_module(model, st) as cap:
        inner = cap._capture_output  # the hook's capture of one module's output: what the hook costs beyond a no-op

        def timed(name: str, layer: int, output: object) -> None:
            t0 = time.perf_counter()
            inner(name, layer, output)
            r.hook_s += time.perf_counter() - t0

        cap._capture_output = timed
        t0 = time.perf_counter()
        for i in range(iters):
            with cap.requests([f"{tag}-p{i}-r{j}" for j in range(batch)], step=i, token_start=0,
                              token_end=tokens.shape[1]):
                model(tokens)
        r.forward_s = time.perf_counter() - t0
        r.records = cap.captured
        if cap.failed or cap.missed:
            raise RuntimeError(f"capture failed {cap.failed} times ({cap.last_error!r}); missed {cap.missed}")
    if r.records and r.hook_s == 0.0:
        raise RuntimeError("the hooks' capture calls were not timed (capstore.torch changed?)")
    r.flush_s = st.flush(timeout=120).seconds
    r.bg_cpu = {k: v - cpu0.get(k, 0.0) for k, v in capstore_cpu().items()}
    return r


def run_c(exe: str, workdir: str, records: int, record_bytes: int, args: argparse.Namespace, run_id: str) -> dict:
    """The C peer on the same records; its key=value line as a dict."""
    shutil.rmtree(workdir, ignore_errors=True)
    cmd = [exe, workdir, "--records", str(records), "--bytes", str(record_bytes), "--dtype", "float32",
           "--shape", f"{args.seq},{args.d_model}", "--layers", str(args.layers), "--batch", str(args.batch),
           "--run-id", run_id]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}: {out.stderr.strip()}")
    kv = dict(item.split("=", 1) for item in out.stdout.split())
    return {k: float(v) for k, v in kv.items()}


def count_records(directory: str, run_id: str) -> int:
    with capstore.Reader(capstore.Config.embedded(directory)) as reader:
        return len(reader.search_all(run_id=run_id))


def measure(args: argparse.Namespace, root: str) -> dict:
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = TinyTransformer(vocab=VOCAB, d_model=args.d_model, n_heads=args.heads, n_layers=args.layers,
                            d_ff=4 * args.d_model).eval()
    tokens = torch.randint(0, VOCAB, (args.batch, args.seq))
    record_bytes = args.seq * args.d_model * 4  # one request's rows of a block's float32 output
    per_forward = args.layers * args.batch
    run_id = f"pybench-{uuid.uuid4().hex[:12]}"
    cfg = capstore.Config.embedded(os.path.join(root, "py"))
    off: list[float] = []
    on: list[Round] = []
    c: list[dict] = []
    c_runs: list[tuple[str, str, int]] = []
    captured = 0
    with torch.no_grad(), capstore.Storage(cfg, run_id=run_id, model_id="tiny-transformer",
                                           model_revision=f"seed{args.seed}") as st:
        run_off(model, tokens, args.warmup)
        captured += run_on(model, st, tokens, args.warmup, "warmup").records
        for n in range(args.runs):
            for mode in (("off", "on") if n % 2 == 0 else ("on", "off")):
                if mode == "off":
                    off.append(run_off(model, tokens, args.iters))
                    continue
                r = run_on(model, st, tokens, args.iters, f"run{n}")
                if r.records != args.iters * per_forward:
                    raise RuntimeError(f"run {n}: {r.records} records captured, not {args.iters * per_forward}")
                captured += r.records
                on.append(r)
            if args.c_bench:
                c_id = f"{run_id}-c{n}"
                c_dir = os.path.join(root, f"c{n}")
                c.append(run_c(args.c_bench, c_dir, args.iters * per_forward, record_bytes, args, c_id))
                c_runs.append((c_dir, c_id, args.iters * per_forward))
        st.flush(timeout=120)
    found = count_records(os.path.join(root, "py"), run_id)
    c_found = sum(count_records(d, i) for d, i, _ in c_runs)
    return {"off": off, "on": on, "c": c, "captured": captured, "found": found,
            "c_written": sum(n for _, _, n in c_runs), "c_found": c_found,
            "record_bytes": record_bytes, "per_forward": per_forward}


def report(args: argparse.Namespace, m: dict) -> bool:
    med = statistics.median
    iters = args.iters
    off_s = med(m["off"]) / iters
    on_s = med(r.forward_s for r in m["on"]) / iters
    flush_s = med(r.flush_s for r in m["on"])
    records_run = iters * m["per_forward"]
    bytes_run = records_run * m["record_bytes"]
    hook_s = med(r.hook_s for r in m["on"])
    py_mb_s = bytes_run / 1e6 / hook_s
    py_us = hook_s * 1e6 / records_run
    bg_s = med(sum(r.bg_cpu.values()) for r in m["on"])
    names = sorted({k for r in m["on"] for k in r.bg_cpu})
    bg_by = {k: med(r.bg_cpu.get(k, 0.0) for r in m["on"]) for k in names}
    bg_ms_mb = bg_s * 1e3 / (bytes_run / 1e6)
    ok = m["found"] == m["captured"] and m["c_found"] == m["c_written"]
    if blas_in_use().startswith("netlib"):
        print("python_capture: WARNING: torch runs on the reference (netlib) BLAS, many times slower than an "
              "optimised one, so the ratio below understates capture's cost; install libopenblas0-pthread "
              "(./dev.sh deps does) for a figure that means something", file=sys.stderr)
    print(f"python_capture: TinyTransformer d_model {args.d_model}, {args.layers} layers, {args.heads} heads, "
          f"d_ff {4 * args.d_model}; batch {args.batch} x seq {args.seq}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s), BLAS {blas_in_use()}, {os.cpu_count()} CPUs")
    print(f"  {args.runs} runs each of {iters} forward passes, off and on alternating (medians)")
    print(f"  forward pass: off {off_s * 1e3:.2f} ms, on {on_s * 1e3:.2f} ms: ratio {on_s / off_s:.3f} "
          f"(goal <= 1.10: {'met' if on_s / off_s <= 1.10 else 'NOT met'}); flush after a run "
          f"{flush_s * 1e3:.1f} ms ({(on_s * iters + flush_s) / (off_s * iters):.3f} with it)")
    print(f"  captured per forward pass: {m['per_forward']} records of {m['record_bytes']:,} bytes = "
          f"{m['per_forward'] * m['record_bytes'] / 1e6:.2f} MB; in the hooks {hook_s / iters * 1e3:.2f} ms "
          f"per pass, {py_us:.1f} us per record")
    by_thread = ", ".join(f"{k} {v * 1e3 / (bytes_run / 1e6):.2f}"
                          for k, v in sorted(bg_by.items(), key=lambda kv: -kv[1]) if v > 0)
    print(f"  capstore's threads (cs-*): {bg_s / iters * 1e3:.1f} ms CPU per forward pass, {bg_ms_mb:.2f} ms per MB "
          f"(off the model's thread, but on its CPUs)" +
          (f":\n    {by_thread} ms per MB" if by_thread else " (under the clock tick's resolution)"))
    line = (f"python_capture batch={args.batch} seq={args.seq} layers={args.layers} d_model={args.d_model} "
            f"threads={torch.get_num_threads()} blas={blas_in_use().split()[0]} runs={args.runs} iters={iters} "
            f"off_ms={off_s * 1e3:.3f} on_ms={on_s * 1e3:.3f} ratio={on_s / off_s:.4f} flush_ms={flush_s * 1e3:.2f} "
            f"bytes_per_forward={m['per_forward'] * m['record_bytes']} py_record_us={py_us:.2f} "
            f"py_mb_s={py_mb_s:.1f} bg_cpu_ms_per_mb={bg_ms_mb:.3f}")
    if m["c"]:
        c_mb_s = med(r["mb_s"] for r in m["c"])
        c_us = med(r["call_us"] for r in m["c"])
        print(f"  capture rate: Python {py_mb_s:,.0f} MB/s, C {c_mb_s:,.0f} MB/s ({c_us:.1f} us per record) for "
              f"the same {records_run} records: Python / C {py_mb_s / c_mb_s:.3f}; Python's own cost "
              f"{py_us - c_us:.1f} us per record")
        line += f" c_record_us={c_us:.2f} c_mb_s={c_mb_s:.1f} py_over_c={py_mb_s / c_mb_s:.4f}"
    print(f"  catalog: {m['found']} of {m['captured']} captured records found; C: {m['c_found']} of "
          f"{m['c_written']}" + ("" if ok else "  RECORDS LOST"))
    print(line + f" found={m['found']} captured={m['captured']} ok={int(ok)}")
    return ok


def main() -> int:
    args = parse_args()
    root = args.dir or tempfile.mkdtemp(prefix="capstore-pybench-")
    try:
        return 0 if report(args, measure(args, root)) else 1
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
