"""The shared library, its structs and its functions, through ctypes.

Loading order for libcapstore.so:

1. ``$CAPSTORE_LIBRARY`` (a path to the file), for a build tree or a test;
2. the copy ``pip install ./python`` bundled into the package (``_lib/``);
3. the system's loader (``cmake --install`` into a directory it searches).

Every struct mirrored here is compared, field by field, with the library's own
``capstore_abi_layout()`` at import: a library of another layout is refused
with ImportError instead of being read at wrong offsets.

ctypes releases the GIL around every foreign call, so every call here that can
block (capture into a full staging area, flush, close, search, read) lets other
Python threads run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import json
import os
from ctypes import (POINTER, Structure, c_bool, c_char, c_char_p, c_int, c_int32, c_int64, c_size_t, c_uint8,
                    c_uint32, c_uint64, c_void_p)

__all__ = ["lib", "LIBRARY_PATH", "CS_KEY_MAX", "CS_PACK_RANK_MAX", "CS_SEARCH_LIST_MAX", "CS_FLUSH_REJECTED_MAX",
           "CAPSTORE_PAGE_MAX", "CAPSTORE_CURSOR_MAX", "PackText", "PackMeta", "PackRecord", "Uuid", "DescriptorRow",
           "SearchRow", "SearchFilter", "Selection", "ReadOptions", "ReadCost", "Payloads", "FlushReport"]

# The constants of include/capstore/*.h this module mirrors.
CS_KEY_MAX = 1024
CS_PACK_RANK_MAX = 32
CS_SEARCH_LIST_MAX = 256
CS_FLUSH_REJECTED_MAX = 8
CAPSTORE_PAGE_MAX = 10000
CAPSTORE_CURSOR_MAX = 8192
# The library's MAJOR.MINOR this package is written for (its SONAME until 1.0).
ABI_VERSION = "0.1"


class PackText(Structure):
    # c_char_p so that a bytes object can be assigned (its buffer is pointed at, not copied, and kept alive by
    # the struct); text the library returns is read by address (text_at), never through this field, because
    # U+0000 is a valid character of a text field.
    _fields_ = [("bytes", c_char_p), ("len", c_size_t)]


class PackMeta(Structure):
    _fields_ = [(name, PackText) for name in (
        "capture_id", "tenant_id", "experiment_id", "run_id", "session_id", "request_id", "sequence_id",
        "model_id", "model_revision", "adapter_revision", "capture_policy_version", "hook_name")] + [
        ("layer_number", c_int32), ("producer_rank", c_uint32), ("step_number", c_uint64),
        ("token_start", c_uint64), ("token_end", c_uint64), ("batch_position", c_uint32), ("dtype", c_int),
        ("rank", c_uint32), ("shape", c_uint32 * CS_PACK_RANK_MAX), ("captured_at_ns", c_uint64)]


class PackRecord(Structure):
    _fields_ = [("meta", PackMeta), ("offset", c_uint64), ("stored_length", c_uint64),
                ("decoded_length", c_uint64), ("crc32", c_uint32)]


class Uuid(Structure):
    _fields_ = [("bytes", c_uint8 * 16)]


class DescriptorRow(Structure):
    _fields_ = [("pack_id", Uuid), ("key", c_char * CS_KEY_MAX), ("record", PackRecord), ("version", c_uint64)]


class SearchRow(Structure):
    _fields_ = [("d", DescriptorRow), ("pack_size_bytes", c_uint64), ("pack_sha256", c_uint8 * 32),
                ("footer_offset", c_uint64)]


class SearchFilter(Structure):
    _fields_ = [(name, PackText) for name in (
        "tenant_id", "experiment_id", "run_id", "session_id", "request_id", "sequence_id", "model_id",
        "model_revision")] + [
        ("hook_names", POINTER(PackText)), ("hook_name_count", c_uint32),
        ("capture_ids", POINTER(PackText)), ("capture_id_count", c_uint32),
        ("has_layer", c_bool), ("layer_min", c_int32), ("layer_max", c_int32),
        ("has_step", c_bool), ("step_min", c_uint64), ("step_max", c_uint64),
        ("has_tokens", c_bool), ("token_min", c_uint64), ("token_max", c_uint64),
        ("has_captured_at", c_bool), ("captured_min_ns", c_uint64), ("captured_max_ns", c_uint64),
        ("has_dtype", c_bool), ("dtype", c_int)]


class Selection(Structure):
    _fields_ = [("watermark", c_uint64), ("count", c_uint32), ("rows", POINTER(SearchRow)),
                ("cursor", c_char * CAPSTORE_CURSOR_MAX), ("storage_", c_void_p)]


class ReadOptions(Structure):
    _fields_ = [("byte_limit", c_int64), ("request_limit", c_int64), ("gap_bytes_max", c_uint64),
                ("span_bytes_max", c_uint64), ("inflight_max", c_uint32), ("retry_max", c_uint32),
                ("verify_sha256", c_bool)]


class ReadCost(Structure):
    _fields_ = [("planned_requests", c_uint64), ("planned_bytes", c_uint64), ("payload_bytes", c_uint64),
                ("packs", c_uint32), ("requests", c_uint64), ("bytes", c_uint64), ("retries", c_uint64)]


class Payloads(Structure):
    _fields_ = [("count", c_uint32), ("bytes", POINTER(c_void_p)), ("length", POINTER(c_uint64)),
                ("cost", ReadCost), ("storage_", c_void_p)]


class FlushReport(Structure):
    _fields_ = [("drained", c_bool), ("stage", c_char_p), ("missing_packs", c_uint32), ("owed_packs", c_uint32),
                ("rejected_count", c_uint32), ("rejected_named", c_uint32),
                ("rejected", Uuid * CS_FLUSH_REJECTED_MAX)]


_MIRRORED = {
    "cs_pack_text": PackText, "cs_pack_meta": PackMeta, "cs_pack_record": PackRecord,
    "cs_descriptor_row": DescriptorRow, "cs_search_row": SearchRow, "cs_search_filter": SearchFilter,
    "capstore_selection": Selection, "capstore_read_options": ReadOptions, "capstore_read_cost": ReadCost,
    "capstore_payloads": Payloads, "capstore_flush_report": FlushReport,
}


def _candidates() -> list[str]:
    env = os.environ.get("CAPSTORE_LIBRARY")
    if env:
        return [env]  # named on purpose: nothing else is tried
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib")
    found = sorted(glob.glob(os.path.join(here, "libcapstore.so*")))
    found.append("libcapstore.so." + ABI_VERSION)
    system = ctypes.util.find_library("capstore")
    if system:
        found.append(system)
    return found


def _load() -> tuple[ctypes.CDLL, str]:
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError("capstore: cannot load libcapstore.so (" + "; ".join(errors) + "). Build it (./dev.sh demo "
                      "builds build/lib/libcapstore.so), then pip install ./python, or set CAPSTORE_LIBRARY to it")


lib, LIBRARY_PATH = _load()


def _proto(name: str, restype, *argtypes) -> None:
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)


_msg = c_char_p  # a caller's message buffer (create_string_buffer)
_p = c_void_p    # an opaque handle

_proto("capstore_version", c_char_p)
_proto("capstore_abi_layout", c_size_t, c_void_p, c_size_t)
_proto("cs_strerror", c_char_p, c_int)
_proto("cs_dtype_name", c_char_p, c_int)
_proto("capstore_clock_ns", c_uint64)
_proto("capstore_settings_new", c_int, POINTER(c_void_p))
_proto("capstore_settings_free", None, _p)
_proto("capstore_settings_load", c_int, _p, c_char_p, _msg, c_size_t)
_proto("capstore_settings_parse", c_int, _p, c_char_p, c_size_t, c_char_p, _msg, c_size_t)
_proto("capstore_settings_set", c_int, _p, c_char_p, c_char_p, _msg, c_size_t)
_proto("capstore_settings_validate", c_int, _p, _msg, c_size_t)
_proto("capstore_settings_config", c_void_p, _p)
_proto("capstore_settings_json", c_size_t, _p, c_void_p, c_size_t)
_proto("capstore_open", c_int, c_void_p, POINTER(c_void_p), _msg, c_size_t)
_proto("capstore_write", c_int, _p, POINTER(PackMeta), c_void_p, c_size_t, _msg, c_size_t)
_proto("capstore_write_device", c_int, _p, POINTER(PackMeta), c_void_p, c_size_t, c_void_p, _msg, c_size_t)
_proto("capstore_flush", c_int, _p, c_uint64, POINTER(FlushReport), _msg, c_size_t)
_proto("capstore_close", c_int, _p, c_uint64, _msg, c_size_t)
_proto("capstore_free", None, _p)
_proto("capstore_stats_json", c_size_t, _p, c_void_p, c_size_t)
_proto("capstore_stats_prometheus", c_size_t, _p, c_void_p, c_size_t)
_proto("capstore_reader_open", c_int, c_void_p, POINTER(c_void_p), _msg, c_size_t)
_proto("capstore_reader_free", None, _p)
_proto("capstore_selection_free", None, POINTER(Selection))
_proto("capstore_selection_take", c_int, POINTER(Selection), POINTER(Selection))
_proto("capstore_search", c_int, _p, POINTER(SearchFilter), c_char_p, c_uint32, POINTER(Selection), _msg, c_size_t)
_proto("capstore_select", c_int, _p, c_uint64, POINTER(PackText), c_uint32, POINTER(Selection), _msg, c_size_t)
_proto("capstore_read_options_default", None, POINTER(ReadOptions))
_proto("capstore_payloads_free", None, POINTER(Payloads))
_proto("capstore_read", c_int, _p, POINTER(Selection), POINTER(ReadOptions), POINTER(Payloads), _msg, c_size_t)
_proto("capstore_read_estimate", c_int, _p, POINTER(Selection), POINTER(ReadOptions), POINTER(ReadCost), _msg,
       c_size_t)


def _check_layout() -> None:
    need = lib.capstore_abi_layout(None, 0)
    buf = ctypes.create_string_buffer(need + 1)
    lib.capstore_abi_layout(buf, need + 1)
    theirs = json.loads(buf.value.decode())
    for cname, ours in _MIRRORED.items():
        want = theirs.get(cname)
        if want is None:
            raise ImportError(f"capstore: {LIBRARY_PATH} does not describe struct {cname}")
        problems = []
        if ctypes.sizeof(ours) != want["size"]:
            problems.append(f"size {ctypes.sizeof(ours)} here, {want['size']} in the library")
        names = [f[0] for f in ours._fields_]
        if sorted(names) != sorted(want["fields"]):
            problems.append(f"fields {names} here, {list(want['fields'])} in the library")
        else:
            for name in names:
                if getattr(ours, name).offset != want["fields"][name]:
                    problems.append(f"{name} at {getattr(ours, name).offset} here, {want['fields'][name]} there")
        if problems:
            raise ImportError(f"capstore: {LIBRARY_PATH} is not the library this package mirrors: struct {cname}: "
                              + "; ".join(problems))


_PTR = c_void_p
_SIZE = c_size_t


def text_at(address: int) -> str | None:
    """The cs_pack_text at address, decoded (None for the absent value)."""
    ptr = _PTR.from_address(address).value
    if ptr is None:
        return None
    return ctypes.string_at(ptr, _SIZE.from_address(address + ctypes.sizeof(c_void_p)).value).decode("utf-8")


def library_version() -> str:
    return lib.capstore_version().decode()


if not library_version().startswith(ABI_VERSION + "."):
    raise ImportError(f"capstore: {LIBRARY_PATH} is version {library_version()}; this package needs {ABI_VERSION}.x")
_check_layout()

DTYPE_NAMES = [lib.cs_dtype_name(i).decode() for i in range(10)]
