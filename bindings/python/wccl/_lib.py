"""The C layer: loads libwccl, declares every exported symbol, and turns result codes into
exceptions.

The library is found through, in order: the ``WCCL_LIBRARY`` environment variable (a path to
``libwccl.so``), then the path Meson wrote into ``_build.py`` when it configured this package (the
build tree's library for the copy under ``build/bindings/python``, the installed one for the copy
``meson install`` puts into site-packages, the one inside this package, named relative to it, for a
wheel's copy (``pip install .``)). A library whose major version differs from the one these
bindings were built with is refused: the ABI changes only with the major version.
"""

from __future__ import annotations

import builtins
import ctypes
import os
from ctypes import POINTER, c_char_p, c_double, c_int, c_int32, c_int64, c_size_t, c_uint64, c_void_p
from typing import Any

from . import _build

# --- errors --------------------------------------------------------------------------------------


class WcclError(Exception):
    """A wccl call failed. ``code`` is the wccl_result_t value, ``name`` its enumerator
    (``"WCCL_ERR_PEER_LOST"``), ``detail`` the library's wccl_last_error() text, which names the
    cause (and begins with the name); str() gives both. ``stats``: for an operation that failed
    (Request.wait), what it cost before it did (an OpStats: a failed attempt's bytes count too);
    None for other calls."""

    code: int = -1
    name: str = ""
    detail: str = ""
    stats: Any = None


class InvalidArgumentError(WcclError, ValueError):
    """WCCL_ERR_INVALID_ARGUMENT: an argument was rejected before anything ran."""


class InvalidUsageError(WcclError):
    """WCCL_ERR_INVALID_USAGE: the call is not allowed in this state."""


class NoMemoryError(WcclError, MemoryError):
    """WCCL_ERR_NO_MEMORY."""


class IoError(WcclError):
    """WCCL_ERR_IO: a connection failed or was closed by the peer."""


class TimeoutError(WcclError, builtins.TimeoutError):  # noqa: A001 (also caught as the builtin)
    """WCCL_ERR_TIMEOUT: the operation or call ran past its timeout."""


class PeerLostError(WcclError):
    """WCCL_ERR_PEER_LOST: a member of this epoch was lost. The operation's buffers hold what they
    held before the call: call ``Communicator.update()`` and retry."""


class TooFewPeersError(WcclError):
    """WCCL_ERR_TOO_FEW_PEERS."""


class CoordinatorUnreachableError(WcclError):
    """WCCL_ERR_COORDINATOR_UNREACHABLE: the coordinator cannot be reached."""


class AuthError(WcclError):
    """WCCL_ERR_AUTH: TLS authentication failed (certificate, key or CA)."""


class ProtocolError(WcclError):
    """WCCL_ERR_PROTOCOL: a peer sent something this library rejects."""


class AbortedError(WcclError):
    """WCCL_ERR_ABORTED: the communicator was aborted."""


class UnsupportedError(WcclError):
    """WCCL_ERR_UNSUPPORTED: the feature is not compiled into (or not yet in) this library."""


class CudaError(WcclError):
    """WCCL_ERR_CUDA."""


class NcclError(WcclError):
    """WCCL_ERR_NCCL."""


class InProgressError(WcclError):
    """WCCL_ERR_IN_PROGRESS."""


class InternalError(WcclError):
    """WCCL_ERR_INTERNAL: a bug in wccl."""


class MismatchError(WcclError):
    """WCCL_ERR_MISMATCH: the members' calls of one operation differ (collective, dtype, count,
    reduce op, root, wire, algorithm, compression or chunk size); ``detail`` names the members and
    what differs. Every member gets it, its buffers as they were; the epoch is revoked, so the next
    call needs an ``update()`` first."""


# Keyed by enumerator name, so the table cannot drift from the header's numbering: the codes are
# looked up through wccl_result_name() once the library is loaded.
_ERROR_CLASSES = {
    "WCCL_ERR_INVALID_ARGUMENT": InvalidArgumentError,
    "WCCL_ERR_INVALID_USAGE": InvalidUsageError,
    "WCCL_ERR_NO_MEMORY": NoMemoryError,
    "WCCL_ERR_IO": IoError,
    "WCCL_ERR_TIMEOUT": TimeoutError,
    "WCCL_ERR_PEER_LOST": PeerLostError,
    "WCCL_ERR_TOO_FEW_PEERS": TooFewPeersError,
    "WCCL_ERR_COORDINATOR_UNREACHABLE": CoordinatorUnreachableError,
    "WCCL_ERR_AUTH": AuthError,
    "WCCL_ERR_PROTOCOL": ProtocolError,
    "WCCL_ERR_ABORTED": AbortedError,
    "WCCL_ERR_UNSUPPORTED": UnsupportedError,
    "WCCL_ERR_CUDA": CudaError,
    "WCCL_ERR_NCCL": NcclError,
    "WCCL_ERR_IN_PROGRESS": InProgressError,
    "WCCL_ERR_INTERNAL": InternalError,
    "WCCL_ERR_MISMATCH": MismatchError,
}

# --- structures (include/wccl/wccl.h) ------------------------------------------------------------


class Opts(ctypes.Structure):
    """wccl_opts_t."""

    _fields_ = [
        ("size", c_size_t),
        ("wire", c_int32),
        ("algo", c_int32),
        ("compress", c_int32),
        ("topk_keep", c_int32),
        ("cuda_stream", c_void_p),
        ("timeout_ms", c_int64),
        ("max_link_rate", c_int64),
    ]


class OpStatsStruct(ctypes.Structure):
    """wccl_op_stats_t."""

    _fields_ = [
        ("size", c_size_t),
        ("bytes_sent", c_uint64),
        ("bytes_received", c_uint64),
        ("time_us", c_double),
        ("epoch", c_uint64),
        ("world_size", c_int32),
        ("algo", c_int32),
    ]


class CommStatsStruct(ctypes.Structure):
    """wccl_comm_stats_t."""

    _fields_ = [
        ("size", c_size_t),
        ("ops_committed", c_uint64),
        ("ops_failed", c_uint64),
        ("ops_peer_lost", c_uint64),
        ("bytes_sent", c_uint64),
        ("bytes_received", c_uint64),
        ("epochs", c_uint64),
        ("updates", c_uint64),
    ]


class LinkStatsStruct(ctypes.Structure):
    """wccl_link_stats_t."""

    _fields_ = [("rank", c_int32), ("rtt_us", ctypes.c_uint32), ("bytes_per_s", c_uint64)]


class Tensor(ctypes.Structure):
    """wccl_tensor_t."""

    _fields_ = [("name", c_char_p), ("data", c_void_p), ("count", c_size_t), ("dtype", c_int32), ("device", c_int32)]


class SyncStatsStruct(ctypes.Structure):
    """wccl_sync_stats_t."""

    _fields_ = [
        ("size", c_size_t),
        ("bytes_sent", c_uint64),
        ("bytes_received", c_uint64),
        ("sources", ctypes.c_uint32),
        ("tensors_received", ctypes.c_uint32),
        ("time_us", c_double),
        ("epoch", c_uint64),
        ("world_size", c_int32),
        ("reserved", c_int32),
    ]


# --- loading -------------------------------------------------------------------------------------


def _library_path() -> str:
    env = os.environ.get("WCCL_LIBRARY")
    if env:
        return env
    # A wheel's _build.py names the library relative to this package (in .wccl.mesonpy.libs, which
    # pip puts into platlib: where purelib differs from it, it is looked for there); os.path.join
    # keeps the absolute path of the build tree's or meson install's _build.py as it is.
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), _build.LIBRARY)
    if not os.path.isabs(_build.LIBRARY) and not os.path.exists(path):
        import sysconfig
        beside = os.path.join(sysconfig.get_paths()["platlib"], "wccl", _build.LIBRARY)
        if os.path.exists(beside):
            return os.path.normpath(beside)
    return os.path.normpath(path)


def _major(version: str) -> str:
    return version.split(".", 1)[0]


def _load() -> ctypes.CDLL:
    path = _library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(f"wccl: cannot load libwccl from {path!r} (set WCCL_LIBRARY to its path): {e}") from e
    lib.wccl_version.argtypes = []
    lib.wccl_version.restype = c_char_p
    found = lib.wccl_version().decode()
    if _major(found) != _major(_build.VERSION):
        raise ImportError(
            f"wccl: {path} is libwccl {found}, but these bindings were built for major version "
            f"{_major(_build.VERSION)} ({_build.VERSION}); use the bindings of that library or set WCCL_LIBRARY")
    return lib


lib = _load()
LIBRARY_PATH = _library_path()

_P = c_void_p  # every opaque handle
_R = c_int     # wccl_result_t
_SIGNATURES = {
    "wccl_result_name": ([c_int], c_char_p),
    "wccl_strerror": ([c_int], c_char_p),
    "wccl_last_error": ([], c_char_p),
    "wccl_config_create": ([POINTER(_P)], _R),
    "wccl_config_destroy": ([_P], None),
    "wccl_config_set": ([_P, c_char_p, c_char_p], _R),
    "wccl_config_get": ([_P, c_char_p, c_char_p, c_size_t, POINTER(c_size_t)], _R),
    "wccl_config_keys": ([], c_char_p),
    "wccl_coord_start": ([POINTER(_P), _P], _R),
    "wccl_coord_port": ([_P], c_int),
    "wccl_coord_http_port": ([_P], c_int),
    "wccl_coord_stop": ([_P], None),
    "wccl_comm_join": ([POINTER(_P), _P], _R),
    "wccl_comm_update": ([_P], _R),
    "wccl_comm_leave": ([_P], _R),
    "wccl_comm_abort": ([_P], None),
    "wccl_comm_rank": ([_P], c_int),
    "wccl_comm_size": ([_P], c_int),
    "wccl_comm_epoch": ([_P], c_uint64),
    "wccl_comm_pending": ([_P], c_int),
    "wccl_comm_update_due": ([_P], c_int),
    "wccl_comm_epoch_origin": ([_P], c_int),
    "wccl_comm_stats": ([_P, POINTER(CommStatsStruct)], _R),
    "wccl_comm_links": ([_P, POINTER(LinkStatsStruct), c_size_t, POINTER(c_size_t)], _R),
    "wccl_comm_destroy": ([_P], None),
    "wccl_opts_default": ([], Opts),
    "wccl_opts_check": ([c_int, c_int, c_int, POINTER(Opts)], _R),
    "wccl_opts_for": ([c_int, c_int, c_int, POINTER(Opts), POINTER(Opts)], _R),
    "wccl_min_link_rate": ([], c_int64),
    "wccl_topk_default_keep": ([], c_int32),
    "wccl_wire_roundtrip": ([_P, _P, c_size_t, POINTER(Opts)], _R),
    "wccl_allreduce": ([_P, _P, c_size_t, c_int, c_int, _P, POINTER(Opts)], _R),
    "wccl_broadcast": ([_P, _P, c_size_t, c_int, c_int, _P, POINTER(Opts)], _R),
    "wccl_allgather": ([_P, _P, c_size_t, c_int, _P, POINTER(Opts)], _R),
    "wccl_reduce_scatter": ([_P, _P, c_size_t, c_int, c_int, _P, POINTER(Opts)], _R),
    "wccl_barrier": ([_P, POINTER(Opts)], _R),
    "wccl_iallreduce": ([POINTER(_P), _P, _P, c_size_t, c_int, c_int, _P, POINTER(Opts)], _R),
    "wccl_ibroadcast": ([POINTER(_P), _P, _P, c_size_t, c_int, c_int, _P, POINTER(Opts)], _R),
    "wccl_iallgather": ([POINTER(_P), _P, _P, c_size_t, c_int, _P, POINTER(Opts)], _R),
    "wccl_ireduce_scatter": ([POINTER(_P), _P, _P, c_size_t, c_int, c_int, _P, POINTER(Opts)], _R),
    "wccl_ibarrier": ([POINTER(_P), _P, POINTER(Opts)], _R),
    "wccl_wait": ([_P, POINTER(OpStatsStruct)], _R),
    "wccl_test": ([_P, POINTER(c_int)], _R),
    "wccl_request_free": ([_P], None),
    "wccl_state_sync": ([_P, POINTER(Tensor), c_size_t, POINTER(c_uint64), c_int, POINTER(SyncStatsStruct)], _R),
    # The hierarchical all-reduce, declared for completeness: Python trainers get the same shape
    # from torch (NCCL inside the node) and wccl.torch's ElasticDeviceMesh, so no wrapper uses it.
    "wccl_local_group_threads": ([c_int, POINTER(_P)], _R),
    "wccl_local_group_nccl": ([POINTER(_P), _P], _R),
    "wccl_local_group_rank": ([_P], c_int),
    "wccl_local_group_size": ([_P], c_int),
    "wccl_local_group_destroy": ([_P], None),
    "wccl_hier_allreduce": ([_P, _P, c_size_t, c_int, c_int, _P, _P, POINTER(Opts)], _R),
    "wccl_ihier_allreduce": ([POINTER(_P), _P, _P, c_size_t, c_int, c_int, _P, _P, POINTER(Opts)], _R),
}
for _name, (_args, _res) in _SIGNATURES.items():
    _fn = getattr(lib, _name)
    _fn.argtypes = _args
    _fn.restype = _res
SIGNATURES = frozenset(_SIGNATURES) | {"wccl_version"}


def result_name(code: int) -> str:
    """The enumerator's name for a result code (``"WCCL_ERR_UNKNOWN"`` outside the table)."""
    name: bytes = lib.wccl_result_name(code)
    return name.decode()


def _error_class_by_code() -> "dict[int, type[WcclError]]":
    classes: "dict[int, type[WcclError]]" = {}
    code = 1
    while (name := result_name(code)) != "WCCL_ERR_UNKNOWN":
        classes[code] = _ERROR_CLASSES.get(name, WcclError)
        code += 1
    return classes


ERROR_CLASSES = _error_class_by_code()


CODES = {result_name(code): code for code in ERROR_CLASSES}


def error(name: str, detail: str) -> WcclError:
    """The exception for the result code named ``name`` ("WCCL_ERR_TIMEOUT") with ``detail``."""
    code = CODES[name]
    exc: WcclError = ERROR_CLASSES[code](detail if detail.startswith(name) else f"{name}: {detail}" if detail else name)
    exc.code, exc.name, exc.detail = code, name, detail
    return exc


def check(code: int) -> None:
    """Raises the exception for a wccl_result_t other than WCCL_OK, carrying wccl_last_error()."""
    if code == 0:
        return
    name = result_name(code)
    if name not in CODES:
        exc = WcclError(f"{name} ({code})")
        exc.code, exc.name = code, name
        raise exc
    raise error(name, lib.wccl_last_error().decode(errors="replace"))
