"""Capture a PyTorch model's module outputs with forward hooks.

::

    cap = capstore.torch.capture_module(model, storage, hooks=["layers.*"])
    for step, batch in enumerate(batches):
        with cap.requests(batch.request_ids, step=step):
            model(batch.inputs)            # every hooked module's output, one record per request
    cap.remove()                           # stop capturing (or use capture_module(...) as a context manager)

Each hooked module's output is captured after the module ran, per request: with
``requests(ids)`` active and an output whose batch dimension (``batch_dim``) has
``len(ids)`` rows, row i becomes one record with ``request_id=ids[i]`` and
``batch_position=i``; any other output is captured whole (``batch_position`` 0).
Outside ``requests()`` every output is captured whole. The record's ``hook_name``
is the module's name (a tuple, list or dict output adds ``.0``, ``.1`` or
``.key`` per tensor in it), ``layer`` its layer number, ``step`` and the token
range the context's.

The bytes are copied into capstore's staging area (or, on a CUDA device, a
device-to-host copy is enqueued on the current stream) before the hook returns,
so the model may reuse the output's memory at once.
"""

from __future__ import annotations

import contextlib
import fnmatch
import re
import threading
import warnings
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import torch

from . import _dtypes
from ._ffi import PackMeta
from ._storage import _GOT_REQUEST, _SETTERS, Storage, _host_view, _text
from .errors import InvalidArgument

__all__ = ["capture_module", "ModuleCapture", "layer_number_of"]


def layer_number_of(model: torch.nn.Module, name: str) -> int:
    """The module's block index: its index in the outermost ModuleList on its path ("encoder.layers.3.mlp.2"
    -> 3), or, with no ModuleList on the path, in the outermost Sequential ("0.linear" -> 0); -1 otherwise."""
    in_list = in_sequential = -1
    module = model
    for part in name.split(".") if name else []:
        parent = module
        module = getattr(module, part, None)
        if module is None:
            break
        if part.isdigit():
            if isinstance(parent, torch.nn.ModuleList) and in_list < 0:
                in_list = int(part)
            elif isinstance(parent, torch.nn.Sequential) and in_sequential < 0:
                in_sequential = int(part)
    return in_list if in_list >= 0 else in_sequential


def _matches(name: str, pattern: str) -> bool:
    """A module name against a pattern of dotted segments, each matched with fnmatch ('*' stays within one
    segment: "layers.*" is the blocks, not their descendants; "layers.*.mlp" each block's mlp)."""
    parts, pats = name.split("."), pattern.split(".")
    return len(parts) == len(pats) and all(fnmatch.fnmatchcase(p, q) for p, q in zip(parts, pats))


def _default_hooks(model: torch.nn.Module) -> list[str]:
    """Every element of every ModuleList in the model: its repeated blocks, "every layer"."""
    names = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList):
            names.extend(f"{name}.{i}" if name else str(i) for i in range(len(module)))
    return names


class _Context(threading.local):
    def __init__(self) -> None:
        self.request_ids: Sequence[str] | None = None
        self.request_texts: list | None = None  # the request ids as descriptor texts, made once per context
        self.meta: dict[str, Any] = {}
        self.token_start: Any = None
        self.token_end: Any = None
        self.fired: set[str] | None = None  # hooked modules that ran in this thread's forward pass of the model
        self.depth = 0


class ModuleCapture:
    """The hooks capture_module installed: ``requests()`` names the batch's requests, ``enabled`` pauses
    capture, ``remove()`` stops it. ``captured`` counts records; with ``on_error="count"``, ``failed`` counts
    the captures that raised and ``last_error`` keeps the latest exception. ``missed`` counts, per hooked
    module, the model's forward passes it did not run in (the first one of each is also a RuntimeWarning)."""

    def __init__(self, model: torch.nn.Module, storage: Storage, names: Mapping[str, int], batch_dim: int,
                 on_error: str, metadata: dict[str, Any]) -> None:
        self.storage = storage
        self.batch_dim = batch_dim
        self.on_error = on_error
        self.metadata = metadata
        self.enabled = True
        self.captured = 0
        self.failed = 0
        self._count_lock = threading.Lock()  # the model may run in several threads at once
        self.last_error: BaseException | None = None
        self.layers = dict(names)
        self.missed: dict[str, int] = {}  # hooked module -> forward passes of the model it did not run in
        self._ctx = _Context()
        self._handles = []
        modules = dict(model.named_modules())
        for name, layer in self.layers.items():
            self._handles.append(modules[name].register_forward_hook(self._hook(name, layer)))
        # A hooked module that does not run in a forward pass of the model is named once in a warning:
        # PyTorch's fused inference path of nn.TransformerEncoderLayer (eval mode, no grad) skips the hooks
        # of its submodules (self_attn, linear1 ...), which would otherwise go silently uncaptured.
        self._handles.append(model.register_forward_pre_hook(self._model_starts))
        self._handles.append(model.register_forward_hook(self._model_ends))

    @contextlib.contextmanager
    def requests(self, request_ids: Sequence[str] | None = None, *, step: int = 0,
                 token_start: int | Sequence[int] | None = None, token_end: int | Sequence[int] | None = None,
                 **metadata: Any) -> Iterator["ModuleCapture"]:
        """The forward passes inside capture for these requests (one per batch row) at this step; token_start
        and token_end are one int for the whole batch or one per request; metadata adds capture() fields
        (sequence_id, experiment_id ...). Contexts are per thread and nest (the inner one wins)."""
        c = self._ctx
        saved = (c.request_ids, c.request_texts, c.meta, c.token_start, c.token_end)
        if request_ids is not None:
            request_ids = [str(r) for r in request_ids]
            for name, v in (("token_start", token_start), ("token_end", token_end)):
                if isinstance(v, (list, tuple)) and len(v) != len(request_ids):
                    raise ValueError(f"{name} has {len(v)} values for {len(request_ids)} requests")
        c.request_ids = request_ids
        c.request_texts = [_text(r, "request_id") for r in request_ids] if request_ids is not None else None
        c.meta = {**self.metadata, **metadata, "step": step}
        c.token_start, c.token_end = token_start, token_end
        try:
            yield self
        finally:
            c.request_ids, c.request_texts, c.meta, c.token_start, c.token_end = saved

    def _hook(self, name: str, layer: int) -> Callable:
        def hook(module: torch.nn.Module, inputs: Any, output: Any) -> None:
            fired = self._ctx.fired
            if fired is None:
                return  # not inside a forward pass of the model (a recompute during backward, a direct call)
            fired.add(name)
            if self.enabled:
                self._capture_output(name, layer, output)
        return hook

    def _model_starts(self, module: torch.nn.Module, inputs: Any) -> None:
        c = self._ctx
        c.depth += 1
        if c.depth == 1:
            c.fired = set()

    def _model_ends(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        c = self._ctx
        c.depth -= 1
        if c.depth > 0:
            return  # the model called itself: the outermost pass decides
        fired, c.fired = c.fired, None
        if fired is None or not self.enabled:
            return
        for name in self.layers:
            if name not in fired:
                with self._count_lock:
                    self.missed[name] = self.missed.get(name, 0) + 1
                    first = self.missed[name] == 1
                if first:
                    warnings.warn(f"capstore: module {name!r} did not run in a forward pass of the model, so "
                                  f"nothing of it was captured (PyTorch's fused inference path of "
                                  f"TransformerEncoderLayer skips its submodules' hooks; hook the layer itself, "
                                  f"or run with grad enabled)", RuntimeWarning, stacklevel=2)

    def _capture_output(self, name: str, layer: int, output: Any) -> None:
        if isinstance(output, torch.Tensor):
            self._capture_tensor(name, layer, output)
        elif isinstance(output, (tuple, list)):
            for i, item in enumerate(output):
                self._capture_output(f"{name}.{i}", layer, item)
        elif isinstance(output, Mapping):
            for k, item in output.items():
                self._capture_output(f"{name}.{k}", layer, item)

    def _capture_tensor(self, name: str, layer: int, t: torch.Tensor) -> None:
        c = self._ctx
        meta = {**self.metadata, **c.meta} if c.meta else dict(self.metadata)
        meta["hook_name"] = name
        meta["layer"] = layer
        ids = c.request_ids
        st = self.storage
        try:
            keep, ptr, nbytes, code, shape, on_device = _host_view(t.detach(), None)
            bd = self.batch_dim if self.batch_dim >= 0 else len(shape) + self.batch_dim
            if ids is None or not 0 <= bd < len(shape) or shape[bd] != len(ids):
                self._tokens(meta, None)
                st._write(keep, ptr, nbytes, code, shape, on_device, meta)
                self._count(1)
                return
            if bd != 0:
                keep = keep.movedim(bd, 0).contiguous()  # one copy: each request's rows made contiguous
                ptr = keep.data_ptr()
            row_shape = tuple(keep.shape[1:])
            row_bytes = nbytes // len(ids) if ids else 0
            # One descriptor prepared for the output; each request's record copies it and sets its own ids.
            per_row_tokens = isinstance(c.token_start, (list, tuple)) or isinstance(c.token_end, (list, tuple))
            if not per_row_tokens:
                self._tokens(meta, None)
            base, flags = st._prepare(meta)
            texts = c.request_texts
            for i in range(len(ids)):
                m = PackMeta.from_buffer_copy(base)
                m.batch_position = i
                if per_row_tokens:
                    self._row_tokens(m, i)
                st._send(m, flags | _GOT_REQUEST, keep, ptr + i * row_bytes, row_bytes, code, row_shape,
                         on_device, None, texts[i])
                self._count(1)
        except Exception as e:  # noqa: BLE001 - the policy decides
            if self.on_error == "raise":
                raise
            with self._count_lock:
                self.failed += 1
                self.last_error = e

    def _count(self, n: int) -> None:
        with self._count_lock:
            self.captured += n

    def _row_tokens(self, m: PackMeta, i: int) -> None:
        c = self._ctx
        meta: dict[str, Any] = {}
        self._tokens(meta, i)
        for key, v in meta.items():
            _SETTERS[key](m, v)
        if "token_end" not in meta and "token_start" in meta:
            m.token_end = m.token_start
        if m.token_end < m.token_start:
            raise InvalidArgument(f"request {c.request_ids[i]!r}: token_end {m.token_end} is below token_start "
                                  f"{m.token_start}", -1)

    def _tokens(self, meta: dict, i: int | None) -> None:
        c = self._ctx
        for key, v in (("token_start", c.token_start), ("token_end", c.token_end)):
            if v is None:
                continue
            if isinstance(v, (list, tuple)):
                if i is None:
                    continue  # a whole-batch record has no one token range
                v = v[i]
            meta[key] = v

    def remove(self) -> None:
        """Removes every hook: the model runs as before."""
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __enter__(self) -> "ModuleCapture":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def capture_module(model: torch.nn.Module, storage: Storage, hooks: Iterable[str] | Mapping[str, int] | None = None,
                   *, batch_dim: int = 0, on_error: str = "raise",
                   layer_of: Callable[[str], int] | None = None, **metadata: Any) -> ModuleCapture:
    """Installs forward hooks that capture named modules' outputs into storage.

    hooks: module names or patterns of dotted segments, '*' and '?' matching within one segment ("layers.*"
    is every block, "layers.*.self_attn" each block's attention), or a mapping of name -> layer number; None
    hooks every element of every ModuleList (the model's repeated blocks). A name or pattern that matches no
    module raises ValueError. Layer numbers come from the mapping, from layer_of(name), or from
    layer_number_of (the index in the outermost ModuleList on the module's path; -1 when none).

    Modules are captured while the model itself runs (a forward pass of model): a hooked module called on its
    own, or again by activation checkpointing's recompute during backward, is not captured twice.
    batch_dim: the outputs' batch dimension (1 for sequence-first models).
    on_error: "raise" (a refused capture raises out of the forward pass) or "count" (the forward pass goes
    on; ``failed`` and ``last_error`` record it).
    metadata: capture() fields every record gets (experiment_id, sequence_id ...).
    """
    if not isinstance(storage, Storage):
        raise TypeError(f"storage must be a capstore.Storage, not {type(storage).__name__}")
    if on_error not in ("raise", "count"):
        raise ValueError(f"on_error must be 'raise' or 'count', not {on_error!r}")
    for k in ("hook_name", "layer", "request_id", "batch_position", "capture_id"):
        if k in metadata:
            raise TypeError(f"capture_module sets {k} itself")
    all_names = [n for n, _ in model.named_modules() if n]
    if hooks is None:
        names = _default_hooks(model)
        if not names:
            raise ValueError("the model has no ModuleList: name the modules to capture with hooks=")
        chosen = {n: None for n in names}
    elif isinstance(hooks, Mapping):
        chosen = dict(hooks)
        for n in chosen:
            if n not in all_names:
                raise ValueError(f"the model has no module {n!r} (some it has: {', '.join(all_names[:8])})")
    else:
        if isinstance(hooks, str):
            hooks = [hooks]
        chosen = {}
        for pattern in hooks:
            matched = [n for n in all_names if _matches(n, pattern)]
            if not matched:
                raise ValueError(f"no module of the model matches {pattern!r} (some it has: "
                                 f"{', '.join(all_names[:8])})")
            for n in matched:
                chosen.setdefault(n, None)
    layers = {}
    for n, layer in chosen.items():
        if layer is None:
            layer = layer_of(n) if layer_of is not None else layer_number_of(model, n)
        layers[n] = int(layer)
    return ModuleCapture(model, storage, layers, batch_dim, on_error, metadata)
