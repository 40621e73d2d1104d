"""The pack format's ten dtypes and their numpy and torch counterparts.

bfloat16 has no numpy dtype: ``Record.numpy()`` gives its raw bits as uint16
(``Record.tensor()`` gives torch.bfloat16), and ``capture(array_of_uint16,
dtype="bfloat16")`` captures such bits as bfloat16.
"""

from __future__ import annotations

import sys
from typing import Any

from ._ffi import DTYPE_NAMES

CODE = {name: i for i, name in enumerate(DTYPE_NAMES)}
ITEM_SIZE = {"bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "float16": 2, "bfloat16": 2,
             "float32": 4, "float64": 8}
# numpy's name for each dtype's storage (bfloat16: its bits).
NUMPY_NAME = {"bool": "bool", "uint8": "uint8", "int8": "int8", "int16": "int16", "int32": "int32",
              "int64": "int64", "float16": "float16", "bfloat16": "uint16", "float32": "float32",
              "float64": "float64"}
SUPPORTED = ", ".join(DTYPE_NAMES)

_torch_codes: dict[Any, int] | None = None


def torch_codes() -> dict[Any, int]:
    """torch.dtype -> format code (built on first use, so that numpy-only callers never import torch)."""
    global _torch_codes
    if _torch_codes is None:
        import torch
        _torch_codes = {getattr(torch, name): CODE[name] for name in DTYPE_NAMES}
    return _torch_codes


def torch_dtype(name: str) -> Any:
    import torch
    return getattr(torch, name)


_numpy_codes: dict[str, int] = {NUMPY_NAME[n]: CODE[n] for n in DTYPE_NAMES if n != "bfloat16"}


def numpy_code(dtype: Any) -> int | None:
    """The format code of a numpy dtype (native or little-endian byte order), or None."""
    return _numpy_codes.get(dtype.name) if dtype.kind in "biuf" else None


def code_of(dtype: Any) -> int:
    """The format code of a dtype given as a name, a numpy dtype or a torch.dtype; ValueError names it otherwise."""
    if isinstance(dtype, str):
        if dtype in CODE:
            return CODE[dtype]
        raise ValueError(f"dtype {dtype!r} is not one the format knows ({SUPPORTED})")
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        code = torch_codes().get(dtype)
        if code is None:
            raise ValueError(f"torch dtype {dtype} is not one the format knows ({SUPPORTED})")
        return code
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            nd = np.dtype(dtype)
        except TypeError:
            nd = None
        if nd is not None:
            code = numpy_code(nd)
            if code is None:
                raise ValueError(f"numpy dtype {nd} is not one the format knows ({SUPPORTED})")
            return code
    raise TypeError(f"dtype must be a name ({SUPPORTED}), a numpy dtype or a torch.dtype, not {type(dtype).__name__}")
