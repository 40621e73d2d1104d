"""The package's exceptions, named by kind.

Every error the library reports is a :class:`CapstoreError` carrying ``code``
(the C library's negative ``cs_err``), ``kind`` (its name, ``"CS_E_CONFIG"``)
and the library's one-sentence message. Each kind is also a subclass of the
built-in exception a Python caller would catch for it:

================================  ============================  ==========================
C error                            class                         also a
================================  ============================  ==========================
CS_E_CONFIG                        ConfigError                   ValueError
CS_E_INVALID_ARGUMENT              InvalidArgument               ValueError
CS_E_PARSE                         ParseError                    ValueError
CS_E_SPOOL_FULL, CS_E_WOULD_BLOCK  SpoolFull                     Refused
CS_E_FULL                          StagingFull                   Refused
CS_E_TOO_LARGE                     TooLarge (LimitExceeded)      Refused
CS_E_TIMEOUT                       CapstoreTimeout (FlushTimeout) TimeoutError
CS_E_CLOSED                        ClosedError
CS_E_STATE                         StateError
CS_E_NOT_FOUND                     NotFound                      LookupError
CS_E_IO                            CapstoreIOError               OSError
CS_E_CONFLICT                      ConflictError
CS_E_CORRUPT                       CorruptError (PacksRejected)
CS_E_BUSY                          BusyError
CS_E_NO_MEMORY                     OutOfMemory                   MemoryError
CS_E_UNSUPPORTED                   Unsupported
CS_E_SLOT_WRITTEN                  SlotWritten
================================  ============================  ==========================
"""

from __future__ import annotations

from typing import Any

__all__ = ["CapstoreError", "ConfigError", "InvalidArgument", "ParseError", "Refused", "SpoolFull", "StagingFull",
           "TooLarge", "LimitExceeded", "CapstoreTimeout", "FlushTimeout", "ClosedError", "StateError", "NotFound",
           "CapstoreIOError", "ConflictError", "CorruptError", "PacksRejected", "BusyError", "OutOfMemory",
           "Unsupported", "SlotWritten", "error_for"]

_KINDS = {0: "CS_E_OK", -1: "CS_E_INVALID_ARGUMENT", -2: "CS_E_CONFIG", -3: "CS_E_NO_MEMORY", -4: "CS_E_FULL",
          -5: "CS_E_SPOOL_FULL", -6: "CS_E_WOULD_BLOCK", -7: "CS_E_CLOSED", -8: "CS_E_STATE", -9: "CS_E_TIMEOUT",
          -10: "CS_E_NOT_FOUND", -11: "CS_E_PARSE", -12: "CS_E_TOO_LARGE", -13: "CS_E_IO", -14: "CS_E_CONFLICT",
          -15: "CS_E_CORRUPT", -16: "CS_E_BUSY", -17: "CS_E_UNSUPPORTED",
          -18: "CS_E_SLOT_WRITTEN"}


class CapstoreError(Exception):
    """An error the library reported: ``code`` (negative), ``kind`` and the message."""

    code: int = 0

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def kind(self) -> str:
        return _KINDS.get(self.code, f"cs_err {self.code}")

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class ConfigError(CapstoreError, ValueError):
    """A configuration value is refused; the message names the key and the rule
    (``key`` holds the key when the message starts with one)."""

    code = -2

    @property
    def key(self) -> str | None:
        head = self.message.split(":", 1)[0]
        return head if head and " " not in head and not head.endswith(".json") else None


class InvalidArgument(CapstoreError, ValueError):
    """A value outside the call's contract (a descriptor the format refuses, a bad filter)."""

    code = -1


class ParseError(CapstoreError, ValueError):
    """Bytes that do not follow their grammar (a damaged or forged cursor, a config file's JSON)."""

    code = -11


class Refused(CapstoreError):
    """The record or request was refused for room or size; nothing was captured or read."""


class SpoolFull(Refused):
    """The spool's quota or its file system refuses the record (``capture.full_policy``)."""

    code = -5


class StagingFull(Refused):
    """The staging area stayed full (the disk is behind)."""

    code = -4


class TooLarge(Refused):
    """A value exceeds its bound (a record over ``capture.record_max``)."""

    code = -12


class LimitExceeded(TooLarge):
    """A read's plan is over its byte or request limit; ``cost`` holds the plan. Nothing was read."""

    def __init__(self, message: str, code: int | None = None, cost: Any = None):
        super().__init__(message, code)
        self.cost = cost


class CapstoreTimeout(CapstoreError, TimeoutError):
    """A deadline passed."""

    code = -9


class FlushTimeout(CapstoreTimeout):
    """flush() did not drain by its deadline; ``report`` says which stage did not finish
    (``report.stage``) and what is still missing. Nothing is lost: a later flush covers it."""

    def __init__(self, message: str, code: int | None = None, report: Any = None):
        super().__init__(message, code)
        self.report = report


class ClosedError(CapstoreError):
    """The object is closed (or closing)."""

    code = -7


class StateError(CapstoreError):
    """The call is not valid now (a cursor ahead of the catalog, a watermark above the head)."""

    code = -8


class NotFound(CapstoreError, LookupError):
    code = -10


class CapstoreIOError(CapstoreError, OSError):
    """An operating-system call, the store or the catalog failed."""

    code = -13


class ConflictError(CapstoreError):
    """The same id names different bytes (a catalog row that disagrees with its pack; a cursor of another filter)."""

    code = -14


class CorruptError(CapstoreError):
    """Stored bytes fail their checksum or format; nothing was returned."""

    code = -15


class PacksRejected(CorruptError):
    """flush() drained, but packs were set aside (poison: the catalog refused them); ``rejected`` names them
    (pack ids) and ``report`` is the whole report. Their records are not queryable; the packs are kept."""

    def __init__(self, message: str, code: int | None = None, report: Any = None):
        super().__init__(message, code)
        self.report = report
        self.rejected = list(report.rejected) if report is not None else []


class BusyError(CapstoreError):
    """Another owner holds the resource (another process's spool; earlier flushes still running)."""

    code = -16


class OutOfMemory(CapstoreError, MemoryError):
    code = -3


class Unsupported(CapstoreError):
    """A feature this build or machine lacks (device capture without CUDA)."""

    code = -17


class SlotWritten(CapstoreError):
    """A capture array's slot was already written; the first write stays."""

    code = -18


_BY_CODE = {-1: InvalidArgument, -2: ConfigError, -3: OutOfMemory, -4: StagingFull, -5: SpoolFull, -6: SpoolFull,
            -7: ClosedError, -8: StateError, -9: CapstoreTimeout, -10: NotFound, -11: ParseError, -12: TooLarge,
            -13: CapstoreIOError, -14: ConflictError, -15: CorruptError, -16: BusyError, -17: Unsupported,
            -18: SlotWritten}


def error_for(code: int, message: str) -> CapstoreError:
    """The exception for a C error code and its message."""
    cls = _BY_CODE.get(code, CapstoreError)
    return cls(message or _KINDS.get(code, f"cs_err {code}"), code)
