"""Storage: the capture side (capstore_open, capstore_write, flush, close)."""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import sys
import threading
import time
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Any

from . import _dtypes
from ._config import Config
from ._ffi import (CS_PACK_RANK_MAX, FlushReport as _CFlushReport, PackMeta, PackText, Uuid, lib)
from .errors import CapstoreError, ClosedError, FlushTimeout, InvalidArgument, PacksRejected, error_for

_MSG = 512
_NS = 1_000_000_000
_U64 = 2**64 - 1
_DIM_MAX = 2**31 - 1
_GOT_REQUEST, _GOT_SEQUENCE = 1, 2  # _prepare's flags: which ids the metadata named

# capture()'s metadata keys: the text fields of a descriptor.
TEXT_FIELDS = ("capture_id", "tenant_id", "experiment_id", "run_id", "session_id", "request_id", "sequence_id",
               "model_id", "model_revision", "adapter_revision", "capture_policy_version", "hook_name")
# Fields fixed for one Storage: the sink takes them from its first record and refuses others.
_PER_STORAGE = ("tenant_id", "session_id", "producer_rank")


def uuid_text(u: Uuid) -> str:
    return str(uuid.UUID(bytes=bytes(u.bytes)))


@dataclass
class FlushReport:
    """What a flush found (capstore_flush_report)."""

    drained: bool
    stage: str = ""            # the stage that did not finish: "sink", "upload", "catalog" ("" when drained)
    missing_packs: int = 0     # sealed before the call, not yet in the catalog
    owed_packs: int = 0        # of them, uploaded and owed to the catalog
    rejected_count: int = 0    # packs set aside since the last report
    rejected: list[str] = field(default_factory=list)  # their ids (at most 8 named)
    seconds: float = 0.0       # how long the flush took


_CLOSE_MAX_NS = 2**62  # a close budget "as long as it takes" (the C side adds it to the clock)


def _timeout_ns(timeout: float | None) -> int:
    """Seconds (None or inf: forever) as nanoseconds; a negative or NaN timeout is a ValueError."""
    if timeout is None:
        return _U64
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be seconds (a number) or None, not {type(timeout).__name__}")
    if not timeout >= 0:
        raise ValueError(f"timeout must be >= 0 seconds, not {timeout}")
    return _U64 if timeout == float("inf") else min(_U64, int(timeout * _NS))


def _report(c: _CFlushReport, seconds: float) -> FlushReport:
    return FlushReport(drained=bool(c.drained), stage=(c.stage or b"").decode(), missing_packs=c.missing_packs,
                       owed_packs=c.owed_packs, rejected_count=c.rejected_count,
                       rejected=[uuid_text(c.rejected[i]) for i in range(min(c.rejected_named, len(c.rejected)))],
                       seconds=seconds)


class _Guard:
    """Calls in flight on a C handle, so that the handle is freed only once none is running.

    shutdown() is the one way a handle ends, from close() or from the finalizer (garbage collection, or
    interpreter exit with the object still open, capture threads perhaps still running): new calls are
    refused (ClosedError), the C close runs (which wakes calls blocked inside the library), the calls still
    in flight are waited for, then the handle is freed. A second shutdown waits for the first to finish."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)
        self.active = 0
        self.closing = False
        self.done = threading.Event()
        self.error: BaseException | None = None

    def enter(self) -> None:
        with self.lock:
            if self.closing:
                raise ClosedError(f"the {self.what} is closed", -7)
            self.active += 1

    def exit(self) -> None:
        with self.lock:
            self.active -= 1
            if self.active == 0 and self.closing:
                self.idle.notify_all()

    def shutdown(self, handle: ctypes.c_void_p, close_fn: Any, free_fn: Any, budget_ns: int) -> None:
        """Ends handle (see the class); raises the first shutdown's error, in every caller."""
        with self.lock:
            first = not self.closing
            self.closing = True
        if not first:
            self.done.wait()
        else:
            try:
                rc, text = 0, ""
                if handle.value and close_fn is not None:
                    msg = ctypes.create_string_buffer(_MSG)
                    rc = close_fn(handle, budget_ns, msg, _MSG)
                    text = msg.value.decode(errors="replace")
                with self.lock:
                    while self.active:
                        self.idle.wait()
                if handle.value:
                    free_fn(handle)
                    handle.value = None
                if rc != 0:
                    self.error = error_for(rc, text)
            finally:
                self.done.set()
        if self.error is not None:
            raise self.error


def _finalize(guard: _Guard, handle: ctypes.c_void_p, close_fn: Any, free_fn: Any, budget_ns: int) -> None:
    try:
        guard.shutdown(handle, close_fn, free_fn, budget_ns)
    except CapstoreError:
        pass  # nobody left to tell: what was not drained stays in the spool for the next open


def _text(value: Any, key: str) -> PackText:
    if not isinstance(value, str):
        raise TypeError(f"metadata {key} must be str, not {type(value).__name__}")
    b = value.encode("utf-8")
    return PackText(b, len(b))


def _host_view(data: Any, dtype: Any) -> tuple[Any, int, int, int, tuple, bool]:
    """(keep-alive object, data pointer, byte length, format dtype code, shape, on the device)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(data, torch.Tensor):
        if data.layout != torch.strided:
            raise TypeError(f"capture takes dense tensors, not {data.layout}")
        kind = data.device.type
        if kind not in ("cpu", "cuda"):
            raise TypeError(f"capture takes CPU or CUDA tensors, not {kind} tensors")
        code = _dtypes.torch_codes().get(data.dtype)
        if code is None and dtype is None:
            raise TypeError(f"torch dtype {data.dtype} is not one the format knows ({_dtypes.SUPPORTED})")
        if not data.is_contiguous():
            data = data.contiguous()  # one copy, documented: the record holds the tensor's logical order
        if data.is_neg():
            data = data.resolve_neg()  # a lazily negated view: its memory holds the other sign
        code = _pick(code, data.element_size(), str(data.dtype), dtype)
        return data, data.data_ptr(), data.numel() * data.element_size(), code, tuple(data.shape), kind == "cuda"
    np = sys.modules.get("numpy")
    if np is not None and isinstance(data, (np.ndarray, np.generic)):
        a = np.asarray(data)
        if a.dtype.kind not in "biuf":
            raise TypeError(f"numpy dtype {a.dtype} is not one the format knows ({_dtypes.SUPPORTED})")
        code = _dtypes.numpy_code(a.dtype)
        if code is None and dtype is None:
            raise TypeError(f"numpy dtype {a.dtype} is not one the format knows ({_dtypes.SUPPORTED}; bfloat16 "
                            f"bits go as uint16 with dtype='bfloat16')")
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))  # the format is little-endian
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        code = _pick(code, a.dtype.itemsize, str(a.dtype), dtype)
        return a, a.ctypes.data, a.nbytes, code, a.shape, False
    raise TypeError(f"capture takes a torch.Tensor or a numpy.ndarray, not {type(data).__module__}."
                    f"{type(data).__name__}")


def _pick(code: int | None, item_size: int, have: str, dtype: Any) -> int:
    """The data's own code, or dtype's when given: it reinterprets items of the same size."""
    if dtype is None:
        assert code is not None
        return code
    want = _dtypes.code_of(dtype)
    wname = _dtypes.DTYPE_NAMES[want]
    if _dtypes.ITEM_SIZE[wname] != item_size:
        raise ValueError(f"dtype={wname!r} has {_dtypes.ITEM_SIZE[wname]}-byte items; the data's {have} has "
                         f"{item_size}")
    return want


class Storage:
    """A capture process's runtime: capture -> spool -> object store -> catalog.

    ::

        with capstore.Storage(capstore.Config.embedded("cap"), run_id="run-1", model_id="tiny") as st:
            st.capture(tensor, hook_name="layers.0", layer=0, request_id="r1", step=0)
            st.flush(timeout=60)   # returns once every record captured before it is queryable

    ``defaults`` are descriptor fields every capture gets unless it names its own (``run_id``,
    ``model_id``, ``tenant_id`` ...; see :meth:`capture`). ``tenant_id``, ``session_id`` and
    ``producer_rank`` are fixed for one Storage. Opening validates the configuration, opens
    the store and the catalog, recovers the spool and starts the service (``capstore_open``);
    another process on the same spool raises :class:`BusyError`.

    Every method may be called from several threads; every call that can block releases the GIL.
    """

    def __init__(self, config: Config | str | os.PathLike | dict, **defaults: Any) -> None:
        if not isinstance(config, Config):
            config = Config(config)
        self._settings = config._settings()
        self._settings.validate()  # reads the secrets from the environment (CAPSTORE_CLICKHOUSE_PASSWORD ...)
        self._handle = ctypes.c_void_p()
        self._guard = _Guard("storage")
        self._local = threading.local()
        self._base = PackMeta()
        self._keep: list[Any] = []
        for k in defaults:
            if k not in TEXT_FIELDS and k not in _NUMBER_FIELDS:
                raise TypeError(f"Storage() got an unknown metadata default {k!r} (known: "
                                f"{', '.join(TEXT_FIELDS + tuple(_NUMBER_FIELDS))})")
            if k == "capture_id":
                raise TypeError("capture_id cannot be a default: each capture's is its own")
        session = defaults.pop("session_id", None)
        if session is None:
            session = str(uuid.uuid4())
        fixed = {"tenant_id": "default", "experiment_id": "default", "run_id": session, "session_id": session,
                 "model_id": "unknown", "model_revision": "unknown", "capture_policy_version": "1",
                 "hook_name": "tensor", "adapter_revision": None}
        fixed.update({k: v for k, v in defaults.items() if k in TEXT_FIELDS})
        for k, v in fixed.items():
            if v is None and k == "adapter_revision":
                continue  # null
            t = _text(v, k)
            if not 1 <= t.len <= 512:
                raise InvalidArgument(f"{k} is {t.len} bytes; text fields hold 1..512 bytes of UTF-8", -1)
            self._keep.append(t)
            setattr(self._base, k, t)
        self._base.layer_number = -1
        for k, v in defaults.items():
            if k in _NUMBER_FIELDS:
                _NUMBER_FIELDS[k](self._base, v)
        self.session_id = fixed["session_id"]
        self._id_prefix = f"{self.session_id}-"
        self._ids = itertools.count()
        msg = ctypes.create_string_buffer(_MSG)
        rc = lib.capstore_open(self._settings.config(), ctypes.byref(self._handle), msg, _MSG)
        if rc != 0:
            raise error_for(rc, msg.value.decode(errors="replace"))
        # Garbage collection, or interpreter exit with the Storage open: closed as close() would, 30 s budget.
        self._finalizer = weakref.finalize(self, _finalize, self._guard, self._handle, lib.capstore_close,
                                           lib.capstore_free, 30 * _NS)

    # -- capture ---------------------------------------------------------------------------------------------

    def capture(self, data: Any, *, dtype: Any = None, **metadata: Any) -> str:
        """Captures one tensor (torch.Tensor on the CPU or a CUDA device, or numpy.ndarray) with its
        descriptor; returns its capture id.

        The bytes are handed to the C call by pointer, with no copy on the Python side, and are in the
        staging area (or, for a CUDA tensor, their device-to-host copy is enqueued on the tensor's current
        stream) when this returns: the caller may reuse or free the tensor at once. A non-contiguous
        tensor or array is made contiguous first (one copy: the record holds its logical row-major order);
        a big-endian array is byte-swapped (the format is little-endian). ``dtype`` reinterprets items of
        the same size (``dtype="bfloat16"`` for bfloat16 bits held in a uint16 array).

        Metadata (each optional; the Storage's defaults fill the rest): ``capture_id`` (unique within a
        pack; default ``<session>-<n>``), ``request_id`` (default: the capture id), ``sequence_id``
        (default: the request id), ``hook_name``, ``layer`` (-1 when none), ``step``, ``token_start``,
        ``token_end`` (default: token_start), ``batch_position``, ``captured_at_ns`` (default: now,
        time.time_ns()), ``experiment_id``, ``run_id``, ``model_id``, ``model_revision``,
        ``adapter_revision`` (None: null), ``capture_policy_version``.

        Raises TypeError (not a tensor, a dtype the format lacks, an unknown key), InvalidArgument (a
        descriptor the format refuses; the message names the field), SpoolFull / StagingFull / TooLarge
        (refused for room or size: nothing was captured), ClosedError, Unsupported (a CUDA tensor without
        device capture).
        """
        keep, ptr, nbytes, code, shape, on_device = _host_view(data, dtype)
        return self._write(keep, ptr, nbytes, code, shape, on_device, metadata)

    def _write(self, keep: Any, ptr: int, nbytes: int, code: int, shape: tuple, on_device: bool,
               metadata: dict) -> str:
        """capture() after the data was resolved to memory: nbytes at ptr, which keep holds alive."""
        capture_id = metadata.pop("capture_id", None)
        m, flags = self._prepare(metadata)
        return self._send(m, flags, keep, ptr, nbytes, code, shape, on_device, capture_id)

    def _prepare(self, metadata: dict) -> tuple[PackMeta, int]:
        """The Storage's defaults with metadata applied (captured_at_ns now unless given), and which of the
        request and sequence ids metadata set: the start of one record's descriptor, or of many (the hooks
        prepare once per module output and send one record per request from it)."""
        m = PackMeta.from_buffer_copy(self._base)
        for k, v in metadata.items():
            setter = _SETTERS.get(k)
            if setter is None:
                raise TypeError(f"capture() got an unknown metadata key {k!r} (known: "
                                f"{', '.join(sorted(_SETTERS))}, capture_id, dtype)")
            setter(m, v)
        flags = (_GOT_REQUEST if "request_id" in metadata else 0) | (
            _GOT_SEQUENCE if "sequence_id" in metadata else 0)
        if "token_end" not in metadata and "token_start" in metadata:
            m.token_end = m.token_start
        if "captured_at_ns" not in metadata:
            m.captured_at_ns = time.time_ns()
        return m, flags

    def _send(self, m: PackMeta, flags: int, keep: Any, ptr: int, nbytes: int, code: int, shape: tuple,
              on_device: bool, capture_id: str | None = None, request: PackText | None = None) -> str:
        """Completes m (prepared; changed here) with the capture id, the default request and sequence ids,
        dtype and shape, and captures nbytes at ptr. The bytes m's texts point at must live through the call:
        m, the prepared descriptor it was copied from, or request hold them."""
        if len(shape) > CS_PACK_RANK_MAX:
            raise InvalidArgument(f"shape has rank {len(shape)}; at most {CS_PACK_RANK_MAX} dimensions", -1)
        if shape and max(shape) > _DIM_MAX:
            raise InvalidArgument(f"shape {tuple(shape)} has a dimension over 2^31-1, the format's bound", -1)
        if capture_id is None:
            capture_id = f"{self._id_prefix}{next(self._ids)}"
        m.capture_id = _text(capture_id, "capture_id")
        if request is not None:
            m.request_id = request
        elif not flags & _GOT_REQUEST:
            m.request_id = m.capture_id
        if not flags & _GOT_SEQUENCE:
            m.sequence_id = m.request_id
        m.dtype = code
        m.rank = len(shape)
        if shape:
            m.shape[:len(shape)] = shape
        msg = self._msg()
        self._guard.enter()
        try:
            if on_device:
                torch = sys.modules["torch"]
                stream = torch.cuda.current_stream(keep.device).cuda_stream
                rc = lib.capstore_write_device(self._handle, ctypes.byref(m), ptr, nbytes, stream, msg, _MSG)
            else:
                rc = lib.capstore_write(self._handle, ctypes.byref(m), ptr, nbytes, msg, _MSG)
        finally:
            self._guard.exit()
        if rc != 0:
            raise error_for(rc, msg.value.decode(errors="replace"))
        return capture_id

    def _msg(self) -> Any:
        buf = getattr(self._local, "msg", None)
        if buf is None:
            buf = self._local.msg = ctypes.create_string_buffer(_MSG)
        return buf

    # -- flush, close ------------------------------------------------------------------------------------------

    def flush(self, timeout: float | None = 60.0) -> FlushReport:
        """Seals the open pack and waits until every record captured before the call is queryable in
        the catalog, at most ``timeout`` seconds (None: as long as it takes). Returns the report when drained.

        Raises :class:`FlushTimeout` (not drained by then; ``.report.stage`` says where it stopped;
        nothing is lost, a later flush covers it), :class:`PacksRejected` (drained, but packs were set
        aside: ``.rejected`` names them), ClosedError, or the sink's first seal error since the last
        flush (a record the pack writer refused, an I/O error).
        """
        wait_ns = _timeout_ns(timeout)
        report = _CFlushReport()
        msg = ctypes.create_string_buffer(_MSG)
        t0 = time.monotonic()
        self._guard.enter()
        try:
            deadline = min(_U64, lib.capstore_clock_ns() + wait_ns)
            rc = lib.capstore_flush(self._handle, deadline, ctypes.byref(report), msg, _MSG)
        finally:
            self._guard.exit()
        out = _report(report, time.monotonic() - t0)
        text = msg.value.decode(errors="replace")
        if rc == -9:
            raise FlushTimeout(text or f"flush did not drain within {timeout} s (stage {out.stage})", rc, out)
        if rc == -15:
            raise PacksRejected(text, rc, out)
        if rc != 0:
            raise error_for(rc, text)
        return out

    flush_and_wait = flush

    def close(self, timeout: float | None = 30.0) -> None:
        """Seals what is open, drains within ``timeout`` seconds, stops the service, releases the lease
        and the spool, and frees everything. What was not drained stays in the spool and ships at the
        next open. Captures racing it from other threads get ClosedError; close waits for the calls already
        inside the library before it frees. Raises the first failed step's error (after everything was still
        freed); closing again waits for the first close and raises its error again."""
        budget_ns = min(_timeout_ns(timeout), _CLOSE_MAX_NS)
        self._finalizer.detach()
        self._guard.shutdown(self._handle, lib.capstore_close, lib.capstore_free, budget_ns)

    @property
    def closed(self) -> bool:
        return self._guard.closing

    def __enter__(self) -> "Storage":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.close()
        except Exception:
            if exc_type is None:
                raise

    # -- what it holds ---------------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """The snapshot: per-stage counts of the service, the sink and the runtime (capstore_stats_json)."""
        return json.loads(self._text(lib.capstore_stats_json))

    snapshot = stats

    def metrics(self) -> str:
        """The same counts as Prometheus text (capstore_* metrics)."""
        return self._text(lib.capstore_stats_prometheus)

    def _text(self, fn: Any) -> str:
        """fn's text, sized by a first call; counters may grow between the calls, so it asks again then."""
        self._guard.enter()
        try:
            size = fn(self._handle, None, 0) + 256
            while True:
                buf = ctypes.create_string_buffer(size)
                need = fn(self._handle, buf, size)
                if need < size:
                    return buf.value.decode()
                size = need + 256
        finally:
            self._guard.exit()


def _set_text(name: str):
    def setter(m: PackMeta, v: Any) -> None:
        setattr(m, name, _text(v, name))
    return setter


def _set_nullable_text(name: str):
    def setter(m: PackMeta, v: Any) -> None:
        setattr(m, name, PackText(None, 0) if v is None else _text(v, name))
    return setter


def _set_int(name: str, key: str, lo: int, hi: int):
    def setter(m: PackMeta, v: Any) -> None:
        if isinstance(v, bool) or not isinstance(v, int):
            v = _as_int(v, key)
        if not lo <= v <= hi:
            raise InvalidArgument(f"metadata {key} is {v}; it must be {lo} .. {hi}", -1)
        setattr(m, name, v)
    return setter


def _as_int(v: Any, key: str) -> int:
    try:
        import operator
        if isinstance(v, bool):
            raise TypeError
        return operator.index(v)
    except TypeError:
        raise TypeError(f"metadata {key} must be an int, not {type(v).__name__}") from None


_NUMBER_FIELDS = {
    "layer": _set_int("layer_number", "layer", -1, 2**31 - 1),
    "layer_number": _set_int("layer_number", "layer_number", -1, 2**31 - 1),
    "producer_rank": _set_int("producer_rank", "producer_rank", 0, 2**32 - 1),
    "step": _set_int("step_number", "step", 0, _U64),
    "step_number": _set_int("step_number", "step_number", 0, _U64),
    "token_start": _set_int("token_start", "token_start", 0, _U64),
    "token_end": _set_int("token_end", "token_end", 0, _U64),
    "batch_position": _set_int("batch_position", "batch_position", 0, 2**32 - 1),
    "captured_at_ns": _set_int("captured_at_ns", "captured_at_ns", 0, _U64),
}
_SETTERS = dict(_NUMBER_FIELDS)
for _name in TEXT_FIELDS:
    if _name != "capture_id":
        _SETTERS[_name] = _set_nullable_text(_name) if _name == "adapter_revision" else _set_text(_name)
