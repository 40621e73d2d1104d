#!/usr/bin/env python3
"""Reference writer for dmi-pack-v1, Python standard library only.

Written from the format description (DESIGN.md section 3), not from the C
code, so that byte-identical output from both is evidence of compatibility.
Where DMI's own writer decides (issue 12), it follows DMI: records may mix
tenants, sessions and ranks, and the object key is named by the first
record, its date that of the first record's captured_at_ns as
datetime.fromtimestamp(ns / 1e9, tz=UTC) gives it.

Usage:
  dmi_pack_ref.py build SPEC OUT [--single-key]
  dmi_pack_ref.py key SPEC [--prefix PREFIX]

SPEC is JSON: {"pack_id": "<uuid>", "created_at_ns": N, "records": [
  {"metadata": {<the 21 fields>}, "payload_hex": "00ff"} or
  {"metadata": {...}, "payload_file": "relative/or/absolute/path"}, ...]}
A relative payload_file is resolved against the directory of SPEC.
"""

import datetime
import hashlib
import json
import os
import struct
import sys
import uuid
import zlib

HEADER_MAGIC = b"DMIPACK\x00"
TRAILER_MAGIC = b"DMIFTR\x00\x00"
MAJOR = 1
MINOR = 0
ALIGN = 64
FOOTER_MAX = 64 * 1024 * 1024
RECORDS_MAX = 1_000_000
TEXT_MAX = 512
U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1
I31_MAX = 2**31 - 1
SEGMENT_MAX = 160
HEX_DIGITS = set("0123456789abcdefABCDEF")
CONTENT_TYPE = "application/vnd.dmi.pack"

ITEM_SIZES = {
    "bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8,
    "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8,
}
TEXT_FIELDS = (
    "capture_id", "tenant_id", "experiment_id", "run_id", "session_id",
    "request_id", "sequence_id", "model_id", "model_revision",
    "capture_policy_version", "hook_name", "dtype",
)
U64_FIELDS = ("step_number", "token_start", "token_end", "captured_at_ns")
U32_FIELDS = ("producer_rank", "batch_position")
ALL_FIELDS = set(TEXT_FIELDS) | set(U64_FIELDS) | set(U32_FIELDS) | {
    "adapter_revision", "layer_number", "shape"}
assert len(ALL_FIELDS) == 21


class SpecError(Exception):
    """The spec asks for something dmi-pack-v1 (or this writer) refuses."""


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def check_text(name, value, nullable=False):
    if value is None and nullable:
        return
    if not isinstance(value, str):
        raise SpecError(f"{name}: not a string")
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SpecError(f"{name}: not valid UTF-8 ({exc})") from exc
    if not 1 <= len(encoded) <= TEXT_MAX:
        raise SpecError(f"{name}: {len(encoded)} bytes, must be 1..{TEXT_MAX}")


def check_int(name, value, low, high):
    if not is_int(value):
        raise SpecError(f"{name}: not an integer")
    if not low <= value <= high:
        raise SpecError(f"{name}: {value} outside {low}..{high}")


def check_metadata(meta, length):
    if not isinstance(meta, dict):
        raise SpecError("metadata: not an object")
    missing = ALL_FIELDS - set(meta)
    unknown = set(meta) - ALL_FIELDS
    if missing or unknown:
        raise SpecError(f"metadata: missing {sorted(missing)} unknown {sorted(unknown)}")
    for name in TEXT_FIELDS:
        check_text(name, meta[name])
    check_text("adapter_revision", meta["adapter_revision"], nullable=True)
    for name in U64_FIELDS:
        check_int(name, meta[name], 0, U64_MAX)
    for name in U32_FIELDS:
        check_int(name, meta[name], 0, U32_MAX)
    check_int("layer_number", meta["layer_number"], -1, I31_MAX)
    if meta["token_end"] < meta["token_start"]:
        raise SpecError("token_end below token_start")
    if meta["dtype"] not in ITEM_SIZES:
        raise SpecError(f"dtype {meta['dtype']!r} unknown")
    shape = meta["shape"]
    if not isinstance(shape, list) or len(shape) > 32:
        raise SpecError("shape: not a list of at most 32 dimensions")
    count = 1
    for dim in shape:
        check_int("shape", dim, 0, I31_MAX)
        count *= dim
    if count * ITEM_SIZES[meta["dtype"]] != length:
        raise SpecError(f"shape x itemsize = {count * ITEM_SIZES[meta['dtype']]}, payload {length}")


def load_payload(record, spec_dir):
    if "payload_hex" in record and "payload_file" not in record:
        text = record["payload_hex"]
        if not isinstance(text, str) or len(text) % 2 or any(c not in HEX_DIGITS for c in text):
            raise SpecError("payload_hex: not an even number of hex digits")
        return bytes.fromhex(text)
    if "payload_file" in record and "payload_hex" not in record:
        path = os.path.join(spec_dir, record["payload_file"])
        with open(path, "rb") as handle:
            return handle.read()
    raise SpecError("record: exactly one of payload_hex, payload_file")


def canonical_json(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True).encode("ascii")


def pad_to(out, alignment):
    out.extend(b"\x00" * (-len(out) % alignment))


def build_pack(spec, spec_dir, single_key=False):
    """Returns the bytes of the pack the spec describes."""
    pack_id = uuid.UUID(spec["pack_id"])
    if str(pack_id) != spec["pack_id"]:
        raise SpecError("pack_id: not canonical lowercase text")
    created_at_ns = spec["created_at_ns"]
    check_int("created_at_ns", created_at_ns, 0, U64_MAX)
    records = spec["records"]
    if len(records) > RECORDS_MAX:
        raise SpecError("too many records")
    out = bytearray()
    out += HEADER_MAGIC + struct.pack("<HHI", MAJOR, MINOR, 64) + pack_id.bytes
    out += struct.pack("<QI", created_at_ns, 0) + b"\x00" * 20
    assert len(out) == 64
    entries = []
    seen_ids = set()
    for record in records:
        payload = load_payload(record, spec_dir)
        meta = record["metadata"]
        check_metadata(meta, len(payload))
        if meta["capture_id"] in seen_ids:
            raise SpecError(f"duplicate capture_id {meta['capture_id']!r}")
        seen_ids.add(meta["capture_id"])
        if single_key and entries:
            first = entries[0]["metadata"]
            for name in ("tenant_id", "session_id", "producer_rank"):
                if meta[name] != first[name]:
                    raise SpecError(f"{name} differs from the first record's")
        pad_to(out, ALIGN)
        entries.append({
            "checksum": format(zlib.crc32(payload) & 0xFFFFFFFF, "08x"),
            "codec": "none",
            "decoded_length": len(payload),
            "metadata": meta,
            "offset": len(out),
            "stored_length": len(payload),
        })
        out += payload
    pad_to(out, ALIGN)
    footer = canonical_json({
        "created_at_ns": created_at_ns,
        "format": "dmi-pack",
        "major_version": MAJOR,
        "minor_version": MINOR,
        "pack_id": str(pack_id),
        "records": entries,
    })
    if len(footer) > FOOTER_MAX:
        raise SpecError("footer too large")
    footer_offset = len(out)
    out += footer
    digest = hashlib.sha256(out).digest()
    out += TRAILER_MAGIC + struct.pack("<HHQQI", MAJOR, MINOR, footer_offset, len(footer),
                                       zlib.crc32(footer) & 0xFFFFFFFF) + digest
    assert len(out) == footer_offset + len(footer) + 64
    return bytes(out)


UNRESERVED = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=")


def key_segment(value):
    raw = value.encode("utf-8")
    encoded = "".join(chr(b) if b in UNRESERVED else "%%%02X" % b for b in raw)
    if len(encoded) > SEGMENT_MAX or encoded.startswith("sha256-"):
        return "sha256-" + hashlib.sha256(raw).hexdigest()
    return encoded


def utc_date(captured_at_ns):
    """DMI's date: through a float number of seconds, rounded to microseconds."""
    moment = datetime.datetime.fromtimestamp(captured_at_ns / 1e9, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d")


def object_key(spec, prefix=""):
    first = spec["records"][0]["metadata"]
    return (f"{prefix}v1/tenant={key_segment(first['tenant_id'])}"
            f"/date={utc_date(first['captured_at_ns'])}"
            f"/session={key_segment(first['session_id'])}"
            f"/rank={key_segment(str(first['producer_rank']))}"
            f"/{spec['pack_id']}.dmi-pack")


def object_metadata(spec, pack_bytes):
    return {
        "dmi-created-at-ns": str(spec["created_at_ns"]),
        "dmi-format": "dmi-pack-v1",
        "dmi-pack-id": spec["pack_id"],
        "dmi-record-count": str(len(spec["records"])),
        "dmi-sha256": hashlib.sha256(pack_bytes).hexdigest(),
    }


def main(argv):
    if len(argv) >= 3 and argv[0] == "build":
        spec_path, out_path = argv[1], argv[2]
        with open(spec_path, "rb") as handle:
            spec = json.load(handle)
        try:
            data = build_pack(spec, os.path.dirname(os.path.abspath(spec_path)),
                              single_key="--single-key" in argv[3:])
        except SpecError as exc:
            print(f"dmi_pack_ref: {spec_path}: {exc}", file=sys.stderr)
            return 1
        with open(out_path, "wb") as handle:
            handle.write(data)
        return 0
    if len(argv) >= 2 and argv[0] == "key":
        spec_path = argv[1]
        prefix = argv[3] if len(argv) >= 4 and argv[2] == "--prefix" else ""
        with open(spec_path, "rb") as handle:
            spec = json.load(handle)
        data = build_pack(spec, os.path.dirname(os.path.abspath(spec_path)))
        print(json.dumps({"content_type": CONTENT_TYPE, "key": object_key(spec, prefix),
                          "metadata": object_metadata(spec, data)}, sort_keys=True))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
