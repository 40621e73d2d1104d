"""Config: the library's one configuration (docs/configuration.md), in Python."""

from __future__ import annotations

import ctypes
import json
import os
from typing import Any, Iterator, Mapping

from ._ffi import lib
from .errors import ConfigError, error_for

_MSG = 512


def _text(key: str, value: Any) -> str:
    if "\0" in key:
        raise ConfigError(f"{key!r}: a key holds no NUL character", -2)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, bytes):
            text = os.fsdecode(text)
        if "\0" in text:
            raise ConfigError(f"{key}: the value holds a NUL character (a C string would end there)", -2)
        return text
    raise ConfigError(f"{key}: a {type(value).__name__} is not a value here: give text (\"64MiB\", \"250ms\"), "
                      f"a whole number or a bool", -2)


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for k, v in mapping.items():
        if not isinstance(k, str):
            raise ConfigError(f"{prefix}{k!r}: keys are text", -2)
        if isinstance(v, Mapping):
            yield from _flatten(v, f"{prefix}{k}.")
        elif v is not None:
            yield f"{prefix}{k}", v


class _Settings:
    """One capstore_settings object (owned)."""

    def __init__(self) -> None:
        h = ctypes.c_void_p()
        rc = lib.capstore_settings_new(ctypes.byref(h))
        if rc != 0:
            raise error_for(rc, "capstore_settings_new failed")
        self.handle = h

    def __del__(self) -> None:
        if getattr(self, "handle", None) and self.handle.value:
            lib.capstore_settings_free(self.handle)
            self.handle = None

    def apply(self, op: tuple) -> None:
        msg = ctypes.create_string_buffer(_MSG)
        if op[0] == "load":
            if "\0" in op[1]:
                raise ConfigError(f"{op[1]!r}: a file name holds no NUL character", -2)
            rc = lib.capstore_settings_load(self.handle, os.fsencode(op[1]), msg, _MSG)
        else:
            rc = lib.capstore_settings_set(self.handle, op[1].encode(), op[2].encode(), msg, _MSG)
        if rc != 0:
            raise error_for(rc, msg.value.decode(errors="replace"))

    def validate(self) -> None:
        msg = ctypes.create_string_buffer(_MSG)
        rc = lib.capstore_settings_validate(self.handle, msg, _MSG)
        if rc != 0:
            raise error_for(rc, msg.value.decode(errors="replace"))

    def json(self) -> str:
        need = lib.capstore_settings_json(self.handle, None, 0)
        buf = ctypes.create_string_buffer(need + 1)
        lib.capstore_settings_json(self.handle, buf, need + 1)
        return buf.value.decode()

    def config(self) -> int:
        return lib.capstore_settings_config(self.handle)


class Config:
    """A validated configuration, made of the same keys as a ``capstore.json`` file.

    ``Config()`` holds the documented defaults; give a file, a mapping, or keys::

        Config("capstore.json")                                  # a file
        Config({"spool_dir": "cap/spool", "store": {"dir": "cap/bucket"},
                "catalog": {"sqlite": "cap/catalog.db"}})        # nested as in the file
        Config({"store.dir": "cap/bucket"}, spool_dir="cap/spool",
               catalog__sqlite="cap/catalog.db")                 # dotted keys; '__' for '.' in keywords
        Config.embedded("cap")                                   # no server: cap/spool, cap/bucket, cap/catalog.db

    Values are text as in the file ("64MiB", "250ms", "publisher"), whole numbers or bools.
    Every key is checked when set, and the whole configuration when the Config is made
    (``validate=False`` defers that to open): a refused value raises :class:`ConfigError`
    (a ValueError) naming the key and the rule. Secrets never come from here: S3 credentials
    from ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, the ClickHouse password from
    ``CAPSTORE_CLICKHOUSE_PASSWORD``.
    """

    def __init__(self, source: str | os.PathLike | Mapping[str, Any] | None = None, /, *, validate: bool = True,
                 **keys: Any) -> None:
        self._ops: list[tuple] = []
        if isinstance(source, (str, os.PathLike)):
            self._ops.append(("load", os.fspath(source)))
        elif isinstance(source, Mapping):
            for k, v in _flatten(source):
                self._ops.append(("set", k, _text(k, v)))
        elif source is not None:
            raise TypeError(f"Config source must be a path or a mapping, not {type(source).__name__}")
        for k, v in keys.items():
            key = k.replace("__", ".")
            if v is not None:
                self._ops.append(("set", key, _text(key, v)))
        self._check(validate)

    @classmethod
    def embedded(cls, directory: str | os.PathLike, **keys: Any) -> "Config":
        """The embedded defaults under one directory (no server): the spool in ``spool/``, a directory as
        the object store in ``bucket/``, SQLite as the catalog in ``catalog.db``; keys as in Config()."""
        d = os.fspath(directory)
        base = {"spool_dir": os.path.join(d, "spool"), "store.dir": os.path.join(d, "bucket"),
                "catalog.sqlite": os.path.join(d, "catalog.db")}
        return cls(base, **keys)

    def set(self, key: str, value: Any) -> "Config":
        """Sets one key ("capture.linger", "service.lease_ttl"); returns self."""
        self._ops.append(("set", key, _text(key, value)))
        try:
            self._check(False)
        except Exception:
            self._ops.pop()
            raise
        return self

    def _check(self, validate: bool) -> None:
        s = self._settings()
        if validate:
            s.validate()

    def _settings(self) -> _Settings:
        """A fresh settings object holding this configuration (each runtime and reader owns its own)."""
        s = _Settings()
        for op in self._ops:
            s.apply(op)
        return s

    def validate(self) -> None:
        """Checks everything open would check (credentials from the environment included)."""
        self._settings().validate()

    def to_dict(self) -> dict[str, Any]:
        """The effective configuration in the file's form (every key, defaults included; no secret)."""
        return json.loads(self._settings().json())

    def __repr__(self) -> str:
        return f"Config({self.to_dict()!r})"
