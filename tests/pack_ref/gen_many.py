#!/usr/bin/env python3
"""Writes a deterministic spec with many records (default 5,000) to OUT.

Usage: gen_many.py OUT [COUNT]

The records cycle through every dtype, shapes of rank 0..3 (zero-length ones
included), nullable adapter_revision set and unset, and non-ASCII text, so a
large pack exercises the same paths as the small hand-written specs.
"""

import json
import sys

DTYPES = [("bool", 1), ("uint8", 1), ("int8", 1), ("int16", 2), ("int32", 4),
          ("int64", 8), ("float16", 2), ("bfloat16", 2), ("float32", 4), ("float64", 8)]
SHAPES = [[], [0], [3], [2, 5], [1, 3, 2], [7], [4, 0, 9], [11]]
WORDS = ["alpha", "b\u00eata", "\u05d2\u05d9\u05de\u05dc", "\U0001F9EA-delta", "eps\"ilon\\"]


def record(index):
    dtype, item_size = DTYPES[index % len(DTYPES)]
    shape = SHAPES[(index // len(DTYPES)) % len(SHAPES)]
    count = 1
    for dim in shape:
        count *= dim
    payload = bytes((index * 7 + j * 13) & 0xFF for j in range(count * item_size))
    word = WORDS[index % len(WORDS)]
    metadata = {
        "capture_id": f"cap-{index:06d}-{word}",
        "tenant_id": "tenant-many",
        "experiment_id": f"exp-{index % 3}",
        "run_id": f"run-{index % 11}",
        "session_id": "session-many",
        "request_id": f"req-{index}",
        "sequence_id": f"seq-{index % 17}",
        "model_id": "model-\u00e9",
        "model_revision": "r1",
        "adapter_revision": None if index % 4 else f"adapter-{word}",
        "capture_policy_version": "p1",
        "hook_name": f"layers.{index % 32}.{word}",
        "layer_number": (index % 33) - 1,
        "producer_rank": 3,
        "step_number": index * 1000003,
        "token_start": index,
        "token_end": index + (index % 5),
        "batch_position": index % 64,
        "dtype": dtype,
        "shape": shape,
        "captured_at_ns": 1717000000000000000 + index * 997,
    }
    return {"metadata": metadata, "payload_hex": payload.hex()}


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    count = int(argv[1]) if len(argv) > 1 else 5000
    spec = {
        "pack_id": "0190a1b2-c3d4-7e5f-8a9b-00000000beef",
        "created_at_ns": 1717000000000000000,
        "records": [record(i) for i in range(count)],
    }
    with open(argv[0], "w", encoding="utf-8") as handle:
        json.dump(spec, handle, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
