"""Reader: search the catalog, select records, read their payloads back verified."""

from __future__ import annotations

import ctypes
import operator
import os
import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

from . import _dtypes
from ._config import Config
from ._ffi import (CAPSTORE_PAGE_MAX, CS_SEARCH_LIST_MAX, DescriptorRow, PackMeta, PackRecord, PackText, Payloads,
                   ReadCost as _CReadCost, ReadOptions, SearchFilter, SearchRow, Selection as _CSelection, lib,
                   text_at)
from ._storage import TEXT_FIELDS, _Guard, _finalize, uuid_text
from .errors import InvalidArgument, LimitExceeded, error_for

_MSG = 1024
_META_AT = SearchRow.d.offset + DescriptorRow.record.offset + PackRecord.meta.offset
_TEXT_AT = {name: _META_AT + getattr(PackMeta, name).offset for name in TEXT_FIELDS}


@dataclass(frozen=True)
class Descriptor:
    """One record as the catalog describes it (a search row)."""

    capture_id: str
    tenant_id: str
    experiment_id: str
    run_id: str
    session_id: str
    request_id: str
    sequence_id: str
    model_id: str
    model_revision: str
    adapter_revision: str | None
    capture_policy_version: str
    hook_name: str
    layer: int
    producer_rank: int
    step: int
    token_start: int
    token_end: int
    batch_position: int
    dtype: str
    shape: tuple[int, ...]
    captured_at_ns: int
    pack_id: str
    key: str
    offset: int
    stored_length: int
    decoded_length: int
    crc32: int
    version: int

    @property
    def nbytes(self) -> int:
        return self.decoded_length


def _descriptor(rows: Any, i: int) -> Descriptor:
    row = rows[i]
    base = ctypes.addressof(row)
    texts = {name: text_at(base + off) for name, off in _TEXT_AT.items()}
    rec = row.d.record
    m = rec.meta
    return Descriptor(**texts, layer=m.layer_number, producer_rank=m.producer_rank, step=m.step_number,
                      token_start=m.token_start, token_end=m.token_end, batch_position=m.batch_position,
                      dtype=_dtypes.DTYPE_NAMES[m.dtype], shape=tuple(m.shape[:m.rank]),
                      captured_at_ns=m.captured_at_ns, pack_id=uuid_text(row.d.pack_id),
                      key=row.d.key.decode("utf-8", errors="replace"), offset=rec.offset,
                      stored_length=rec.stored_length, decoded_length=rec.decoded_length, crc32=rec.crc32,
                      version=row.d.version)


def _free_selection(sel: _CSelection) -> None:
    lib.capstore_selection_free(ctypes.byref(sel))


class Selection(Sequence[Descriptor]):
    """Records of the catalog visible at one watermark (a search page, a select, or pages joined).

    A sequence of :class:`Descriptor`; ``watermark`` is the catalog version it was read at and
    ``cursor`` the next page's ("" when this was the last)."""

    def __init__(self) -> None:
        self._c = _CSelection()
        self._cache: list[Descriptor | None] = []
        # Held while the C selection is read or changed (a read, an extend, a descriptor built from a row).
        self._lock = threading.RLock()
        self._finalizer = weakref.finalize(self, _free_selection, self._c)

    @property
    def watermark(self) -> int:
        return self._c.watermark

    @property
    def cursor(self) -> str:
        return self._c.cursor.decode()

    def __len__(self) -> int:
        return self._c.count

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        i = operator.index(i)
        if i < 0:
            i += n
        with self._lock:
            if not 0 <= i < self._c.count:
                raise IndexError("selection index out of range")
            if len(self._cache) != self._c.count:
                self._cache = [None] * self._c.count
            d = self._cache[i]
            if d is None:
                d = self._cache[i] = _descriptor(self._c.rows, i)
            return d

    def extend(self, other: "Selection") -> None:
        """Moves other's rows (a later page at the same watermark) to the end of this one, leaving other
        empty; this selection's cursor becomes other's."""
        if not isinstance(other, Selection):
            raise TypeError(f"extend takes a Selection, not {type(other).__name__}")
        if other is self:
            raise ValueError("a selection cannot be extended with itself")
        first, second = sorted((self, other), key=id)  # one lock order for every pair
        with first._lock, second._lock:
            rc = lib.capstore_selection_take(ctypes.byref(self._c), ctypes.byref(other._c))
            if rc != 0:
                raise error_for(rc, "pages of different watermarks cannot be joined" if rc == -8 else "")
            self._cache = []
            other._cache = []

    def __repr__(self) -> str:
        return f"<capstore.Selection of {len(self)} records at watermark {self.watermark}>"


@dataclass(frozen=True)
class ReadCost:
    """What a read cost (or, for a refused or estimated read, what it would): the plan and what it did."""

    planned_requests: int
    planned_bytes: int
    payload_bytes: int
    packs: int
    requests: int
    bytes: int
    retries: int


def _cost(c: _CReadCost) -> ReadCost:
    return ReadCost(c.planned_requests, c.planned_bytes, c.payload_bytes, c.packs, c.requests, c.bytes, c.retries)


def _free_payloads(p: Payloads) -> None:
    lib.capstore_payloads_free(ctypes.byref(p))


class _Arena:
    """Owns one read's payload memory; freed when the last record, array or tensor over it is gone."""

    def __init__(self, payloads: Payloads) -> None:
        self.payloads = payloads
        weakref.finalize(self, _free_payloads, payloads)


class Record:
    """A record read back: its descriptor and its verified payload bytes (zero-copy views)."""

    __slots__ = ("descriptor", "_buffer")

    def __init__(self, descriptor: Descriptor, buffer: Any) -> None:
        self.descriptor = descriptor
        self._buffer = buffer

    @property
    def nbytes(self) -> int:
        return len(self._buffer)

    def memoryview(self) -> memoryview:
        """The payload bytes (no copy; valid while anything holds the record or a view of it)."""
        return memoryview(self._buffer).cast("B")

    def bytes(self) -> bytes:
        """A copy of the payload bytes."""
        return bytes(self._buffer)

    def numpy(self) -> Any:
        """The payload as a numpy array of the descriptor's shape, without a copy (bfloat16 as its raw bits,
        uint16: ``record.tensor()`` gives torch.bfloat16)."""
        import numpy as np
        d = self.descriptor
        dt = np.dtype(_dtypes.NUMPY_NAME[d.dtype]).newbyteorder("<")
        return np.frombuffer(self._buffer, dtype=dt).reshape(d.shape)

    def tensor(self) -> Any:
        """The payload as a torch.Tensor of the descriptor's dtype and shape, without a copy."""
        import torch
        d = self.descriptor
        dt = _dtypes.torch_dtype(d.dtype)
        if len(self._buffer) == 0:
            return torch.empty(d.shape, dtype=dt)
        return torch.frombuffer(self._buffer, dtype=dt).reshape(d.shape)

    def __repr__(self) -> str:
        d = self.descriptor
        return f"<capstore.Record {d.capture_id!r} {d.hook_name} {d.dtype}{list(d.shape)}>"


class ReadResult(Sequence[Record]):
    """The records of a read, in the selection's order, and ``cost``."""

    def __init__(self, records: list[Record], cost: ReadCost) -> None:
        self._records = records
        self.cost = cost

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, i: Any) -> Any:
        return self._records[i]


_TEXT_FILTERS = ("tenant_id", "experiment_id", "run_id", "session_id", "request_id", "sequence_id", "model_id",
                 "model_revision")
_FILTER_KEYS = _TEXT_FILTERS + ("hook_name", "capture_id", "layer", "step", "tokens", "captured_at_ns", "dtype")


def _ftext(key: str, v: Any) -> PackText:
    if not isinstance(v, str):
        raise TypeError(f"filter {key} must be str, not {type(v).__name__}")
    b = v.encode("utf-8")
    return PackText(b, len(b))


def _range(key: str, v: Any, lo: int, hi: int, half_open: bool = False) -> tuple[int, int]:
    """An int (that value), a (min, max) pair (inclusive; the tokens' half-open), or a range of step 1."""
    if isinstance(v, range):
        if v.step != 1 or len(v) == 0:
            raise ValueError(f"filter {key}: a range must have step 1 and not be empty")
        pair = (v.start, v.stop if half_open else v.stop - 1)
    elif isinstance(v, tuple) and len(v) == 2:
        pair = v
    elif not half_open and not isinstance(v, bool):
        try:
            x = operator.index(v)
        except TypeError:
            raise TypeError(f"filter {key} must be an int, a (min, max) pair or a range, not "
                            f"{type(v).__name__}") from None
        pair = (x, x)
    else:
        raise TypeError(f"filter {key} must be a (min, max) pair or a range, not {type(v).__name__}")
    out = []
    for x in pair:
        if isinstance(x, bool):
            raise TypeError(f"filter {key}: bounds are ints")
        try:
            x = operator.index(x)
        except TypeError:
            raise TypeError(f"filter {key}: bounds are ints, not {type(x).__name__}") from None
        if not lo <= x <= hi:
            raise ValueError(f"filter {key}: {x} is outside {lo} .. {hi}")
        out.append(x)
    if out[0] > out[1]:
        raise ValueError(f"filter {key}: min {out[0]} is over max {out[1]}")
    return out[0], out[1]


def _list(key: str, v: Any) -> tuple[Any, int]:
    values = [v] if isinstance(v, str) else list(v)
    if not values:
        raise ValueError(f"filter {key}: an empty list selects nothing; leave the filter out to select every value")
    if len(values) > CS_SEARCH_LIST_MAX:
        raise ValueError(f"filter {key}: {len(values)} values; at most {CS_SEARCH_LIST_MAX}")
    arr = (PackText * len(values))(*[_ftext(key, x) for x in values])
    return arr, len(values)


def _filter(filters: dict[str, Any]) -> tuple[SearchFilter, list[Any]]:
    f = SearchFilter()
    keep: list[Any] = []
    u64 = 2**64 - 1
    for key, v in filters.items():
        if v is None:
            continue
        if key in _TEXT_FILTERS:
            setattr(f, key, _ftext(key, v))
        elif key == "hook_name":
            arr, n = _list(key, v)
            keep.append(arr)
            f.hook_names, f.hook_name_count = arr, n
        elif key == "capture_id":
            arr, n = _list(key, v)
            keep.append(arr)
            f.capture_ids, f.capture_id_count = arr, n
        elif key == "layer":
            f.has_layer = True
            f.layer_min, f.layer_max = _range(key, v, -1, 2**31 - 1)
        elif key == "step":
            f.has_step = True
            f.step_min, f.step_max = _range(key, v, 0, u64)
        elif key == "tokens":
            f.has_tokens = True
            f.token_min, f.token_max = _range(key, v, 0, u64, half_open=True)
        elif key == "captured_at_ns":
            f.has_captured_at = True
            f.captured_min_ns, f.captured_max_ns = _range(key, v, 0, u64)
        elif key == "dtype":
            f.has_dtype = True
            f.dtype = _dtypes.code_of(v)
        else:
            raise TypeError(f"unknown filter {key!r} (known: {', '.join(_FILTER_KEYS)})")
    return f, keep


class Reader:
    """Reads back what was captured: no spool, no lease; any number beside the capture processes.

    ::

        with capstore.Reader(capstore.Config.embedded("cap")) as r:
            sel = r.search_all(run_id="run-1", hook_name="layers.0")
            for rec in r.read(sel, byte_limit=1 << 30):
                t = rec.tensor()

    Searches pin the catalog's watermark at their first page, so paging to the end shows each
    record visible then exactly once. Calls on one Reader run one at a time (the GIL is released
    while they run).
    """

    def __init__(self, config: Config | str | os.PathLike | dict) -> None:
        if not isinstance(config, Config):
            config = Config(config)
        self._settings = config._settings()
        self._settings.validate()  # reads the secrets from the environment (CAPSTORE_CLICKHOUSE_PASSWORD ...)
        self._handle = ctypes.c_void_p()
        self._guard = _Guard("reader")
        msg = ctypes.create_string_buffer(_MSG)
        rc = lib.capstore_reader_open(self._settings.config(), ctypes.byref(self._handle), msg, _MSG)
        if rc != 0:
            raise error_for(rc, msg.value.decode(errors="replace"))
        self._finalizer = weakref.finalize(self, _finalize, self._guard, self._handle, None,
                                           lib.capstore_reader_free, 0)

    def close(self) -> None:
        """Frees the reader once the calls in flight returned (later calls raise ClosedError); selections
        and records read stay valid."""
        self._finalizer.detach()
        self._guard.shutdown(self._handle, None, lib.capstore_reader_free, 0)

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, fn: Any, *args: Any) -> None:
        msg = ctypes.create_string_buffer(_MSG)
        self._guard.enter()
        try:
            rc = fn(self._handle, *args, msg, _MSG)
        finally:
            self._guard.exit()
        return rc, msg.value.decode(errors="replace")

    def search_page(self, cursor: str | None = None, page_size: int = 1000, **filters: Any) -> Selection:
        """One page of at most page_size (1 .. 10,000) records the filters select, in (pack, offset,
        capture id) order. cursor None starts a search (pinning the watermark); a page's ``cursor`` goes
        on at the same watermark with the same filters.

        Filters (all optional, ANDed): ``tenant_id``, ``experiment_id``, ``run_id``, ``session_id``,
        ``request_id``, ``sequence_id``, ``model_id``, ``model_revision`` (equal to the text);
        ``hook_name``, ``capture_id`` (a text or a list of up to 256: any of them); ``layer``, ``step``,
        ``captured_at_ns`` (an int, an inclusive (min, max) pair, or a range); ``tokens`` ((min, max)
        half-open: records whose [token_start, token_end) meets it); ``dtype`` (a name, numpy or torch dtype).
        """
        if isinstance(page_size, bool) or not isinstance(page_size, int) or not 1 <= page_size <= CAPSTORE_PAGE_MAX:
            raise ValueError(f"page_size must be 1 .. {CAPSTORE_PAGE_MAX}, not {page_size!r}")
        f, keep = _filter(filters)
        sel = Selection()
        rc, msg = self._call(lib.capstore_search, ctypes.byref(f), (cursor or "").encode(), page_size,
                             ctypes.byref(sel._c))
        del keep
        if rc != 0:
            raise error_for(rc, msg)
        return sel

    def search(self, page_size: int = 1000, **filters: Any) -> Iterator[Selection]:
        """Every record the filters select (search_page's), as an iterator over pages at one watermark."""
        cursor = None
        while True:
            page = self.search_page(cursor, page_size, **filters)
            cursor = page.cursor  # before the caller sees it: search_all's extend() empties the page
            yield page
            if not cursor:
                return

    def search_all(self, page_size: int = 10000, **filters: Any) -> Selection:
        """Every record the filters select, joined into one Selection (read() takes it whole)."""
        pages = self.search(page_size, **filters)
        first = next(pages)
        for page in pages:
            first.extend(page)
        return first

    def select(self, ids: Iterable[str], watermark: int = 0) -> Selection:
        """Every record with one of ids (capture ids, at most 256) visible at watermark (0: now)."""
        arr, n = _list("ids", ids)
        watermark = _int("watermark", watermark, 0, 2**64 - 1)
        sel = Selection()
        rc, msg = self._call(lib.capstore_select, ctypes.c_uint64(watermark), arr, n, ctypes.byref(sel._c))
        if rc != 0:
            raise error_for(rc, msg)
        return sel

    def _options(self, byte_limit: int | None, request_limit: int | None, **opts: Any) -> ReadOptions:
        o = ReadOptions()
        lib.capstore_read_options_default(ctypes.byref(o))
        if byte_limit is not None:
            o.byte_limit = _int("byte_limit", byte_limit, -2**63, 2**63 - 1)
        if request_limit is not None:
            o.request_limit = _int("request_limit", request_limit, -2**63, 2**63 - 1)
        for k, v in opts.items():
            if v is None:
                continue
            if k == "verify_sha256":
                o.verify_sha256 = bool(v)
            elif k in ("gap_bytes_max", "span_bytes_max"):
                setattr(o, k, _int(k, v, 0, 2**64 - 1))
            elif k in ("inflight_max", "retry_max"):
                setattr(o, k, _int(k, v, 0, 2**32 - 1))
            else:
                raise TypeError(f"unknown read option {k!r}")
        return o

    def read(self, selection: Selection, *, byte_limit: int | None = None, request_limit: int | None = None,
             gap_bytes_max: int | None = None, span_bytes_max: int | None = None, inflight_max: int | None = None,
             retry_max: int | None = None, verify_sha256: bool = False) -> ReadResult:
        """Reads every record of selection back, verified (each pack's footer and trailer, every catalog
        field against the footer, each payload's CRC-32; with verify_sha256 each pack whole against its
        SHA-256), with few ranged GETs. A plan over ``byte_limit`` bytes or ``request_limit`` GETs raises
        :class:`LimitExceeded` (its ``cost`` holds the plan) before any GET. Nothing is returned unless
        everything verified: CorruptError, ConflictError (a catalog row that disagrees with its pack),
        CapstoreIOError name the pack or record. The records' arrays and tensors are views of one buffer,
        freed when the last of them is gone."""
        _check_selection(selection, "read")
        o = self._options(byte_limit, request_limit, gap_bytes_max=gap_bytes_max, span_bytes_max=span_bytes_max,
                          inflight_max=inflight_max, retry_max=retry_max, verify_sha256=verify_sha256)
        p = Payloads()
        with selection._lock:  # another thread's extend() cannot move the rows while they are read
            rc, msg = self._call(lib.capstore_read, ctypes.byref(selection._c), ctypes.byref(o), ctypes.byref(p))
            cost = _cost(p.cost)
            if rc != 0:
                lib.capstore_payloads_free(ctypes.byref(p))
                if rc == -12:
                    raise LimitExceeded(msg, rc, cost)
                raise error_for(rc, msg)
            arena = _Arena(p)
            records = []
            for i in range(p.count):
                n = p.length[i]
                buf = (ctypes.c_uint8 * n).from_address(p.bytes[i]) if n else (ctypes.c_uint8 * 0)()
                buf._arena = arena  # the arena lives as long as any view of any record
                records.append(Record(selection[i], buf))
        return ReadResult(records, cost)

    def estimate(self, selection: Selection, *, byte_limit: int | None = None, request_limit: int | None = None,
                 gap_bytes_max: int | None = None, span_bytes_max: int | None = None) -> ReadCost:
        """What read() would cost, without reading (LimitExceeded as read's)."""
        _check_selection(selection, "estimate")
        o = self._options(byte_limit, request_limit, gap_bytes_max=gap_bytes_max, span_bytes_max=span_bytes_max)
        c = _CReadCost()
        with selection._lock:
            rc, msg = self._call(lib.capstore_read_estimate, ctypes.byref(selection._c), ctypes.byref(o),
                                 ctypes.byref(c))
        if rc == -12:
            raise LimitExceeded(msg, rc, _cost(c))
        if rc != 0:
            raise error_for(rc, msg)
        return _cost(c)


def _int(key: str, v: Any, lo: int, hi: int) -> int:
    """v as an int in lo .. hi (ctypes would wrap a value out of its field's range without a word)."""
    if isinstance(v, bool):
        raise TypeError(f"{key} must be an int, not bool")
    try:
        v = operator.index(v)
    except TypeError:
        raise TypeError(f"{key} must be an int, not {type(v).__name__}") from None
    if not lo <= v <= hi:
        raise ValueError(f"{key} is {v}; it must be {lo} .. {hi}")
    return v


def _check_selection(selection: Any, call: str) -> "Selection":
    if not isinstance(selection, Selection):
        raise TypeError(f"{call} takes a Selection (from search_page, search_all or select), not "
                        f"{type(selection).__name__}")
    return selection
