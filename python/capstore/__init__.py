"""capstore from Python: capture tensors from a model, read them back as tensors.

::

    import capstore, torch

    cfg = capstore.Config.embedded("cap")              # no server: a directory store, an SQLite catalog
    with capstore.Storage(cfg, run_id="run-1", model_id="tiny") as st:
        st.capture(torch.randn(4, 8), hook_name="layers.0", layer=0, request_id="r1", step=0)
        st.flush(timeout=60)                           # every record captured before it is queryable

    with capstore.Reader(cfg) as r:
        sel = r.search_all(run_id="run-1", layer=0)
        t = r.read(sel)[0].tensor()

A thin layer over libcapstore.so through ctypes (docs/python.md). ``capstore.torch.capture_module``
captures a model's module outputs with forward hooks.
"""

from ._ffi import LIBRARY_PATH, library_version
from ._config import Config
from ._storage import FlushReport, Storage
from ._reader import Descriptor, ReadCost, ReadResult, Reader, Record, Selection
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all
from ._dtypes import CODE as _CODE

__version__ = library_version()
DTYPES = tuple(_CODE)

__all__ = ["Config", "Storage", "FlushReport", "Reader", "Selection", "Descriptor", "Record", "ReadResult",
           "ReadCost", "DTYPES", "LIBRARY_PATH", "library_version", "__version__"] + list(_errors_all)
