"""Turns the caller's arrays into (pointer, element count, dtype) without copying them.

numpy arrays and any other object with the buffer protocol are exported through
PyObject_GetBuffer, which pins them (a bytearray cannot be resized, a numpy array cannot be
reshaped in place) until the operation that uses them is over. torch tensors, CPU or CUDA, are
passed by ``data_ptr()``. torch is never imported here: a tensor is recognised by its type.
"""

from __future__ import annotations

import ctypes
import sys
from ctypes import POINTER, c_char_p, c_int, c_ssize_t, c_void_p
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Optional


class DType(IntEnum):
    """wccl_dtype_t."""

    F32 = 0
    F64 = 1
    F16 = 2
    BF16 = 3
    I8 = 4
    U8 = 5
    I32 = 6
    I64 = 7


_ITEMSIZE = {DType.F32: 4, DType.F64: 8, DType.F16: 2, DType.BF16: 2, DType.I8: 1, DType.U8: 1,
             DType.I32: 4, DType.I64: 8}

# struct-module format codes (PEP 3118) by (code, itemsize).
_FORMATS = {("f", 4): DType.F32, ("d", 8): DType.F64, ("e", 2): DType.F16, ("B", 1): DType.U8}
for _code in "bhilqn":
    _FORMATS[(_code, 1)] = DType.I8
    _FORMATS[(_code, 4)] = DType.I32
    _FORMATS[(_code, 8)] = DType.I64

_TORCH_DTYPES = {"torch.float32": DType.F32, "torch.float64": DType.F64, "torch.float16": DType.F16,
                 "torch.bfloat16": DType.BF16, "torch.int8": DType.I8, "torch.uint8": DType.U8,
                 "torch.int32": DType.I32, "torch.int64": DType.I64}


class _PyBuffer(ctypes.Structure):
    """CPython's Py_buffer (stable ABI since 3.11, unchanged since 3.0)."""

    _fields_ = [("buf", c_void_p), ("obj", c_void_p), ("len", c_ssize_t), ("itemsize", c_ssize_t),
                ("readonly", c_int), ("ndim", c_int), ("format", c_char_p), ("shape", POINTER(c_ssize_t)),
                ("strides", POINTER(c_ssize_t)), ("suboffsets", POINTER(c_ssize_t)), ("internal", c_void_p)]


_PyObject_GetBuffer = ctypes.pythonapi.PyObject_GetBuffer
_PyObject_GetBuffer.argtypes = [ctypes.py_object, POINTER(_PyBuffer), c_int]
_PyObject_GetBuffer.restype = c_int
_PyBuffer_Release = ctypes.pythonapi.PyBuffer_Release
_PyBuffer_Release.argtypes = [POINTER(_PyBuffer)]
_PyBuffer_Release.restype = None
_PyBuffer_IsContiguous = ctypes.pythonapi.PyBuffer_IsContiguous
_PyBuffer_IsContiguous.argtypes = [POINTER(_PyBuffer), ctypes.c_char]
_PyBuffer_IsContiguous.restype = c_int

_PyBUF_WRITABLE = 0x0001
_PyBUF_FORMAT = 0x0004
_PyBUF_STRIDES = 0x0010 | 0x0008


@dataclass
class Buffer:
    """A caller's array as the C API sees it. ``owner`` keeps the array (and its export) alive while
    an operation may touch it; ``release()`` ends the export."""

    ptr: int
    count: int
    dtype: DType
    cuda: bool
    owner: Any
    _view: Optional[_PyBuffer] = None

    @property
    def nbytes(self) -> int:
        return self.count * _ITEMSIZE[self.dtype]

    def release(self) -> None:
        if self._view is not None:
            _PyBuffer_Release(ctypes.byref(self._view))
            self._view = None

    def __del__(self) -> None:
        self.release()


def _is_torch_tensor(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr") and hasattr(obj, "is_contiguous")


def _from_torch(t: Any, what: str) -> Buffer:
    dtype = _TORCH_DTYPES.get(str(t.dtype))
    if dtype is None:
        raise TypeError(f"wccl: {what} has dtype {t.dtype}, which wccl does not carry "
                        f"(supported: {', '.join(sorted(_TORCH_DTYPES))})")
    if not t.is_contiguous():
        raise ValueError(f"wccl: {what} is not contiguous; pass tensor.contiguous()")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"wccl: {what} is on device {t.device}; wccl takes CPU and CUDA tensors")
    return Buffer(ptr=t.data_ptr(), count=t.numel(), dtype=dtype, cuda=t.device.type == "cuda", owner=t)


def _format_dtype(fmt: str, itemsize: int, what: str) -> DType:
    code = fmt
    if code[:1] in ("@", "="):
        code = code[1:]
    elif code[:1] in ("<", ">", "!"):
        if (code[0] == "<") != (sys.byteorder == "little"):
            raise ValueError(f"wccl: {what} has byte order {code[0]!r}, not this machine's")
        code = code[1:]
    dtype = _FORMATS.get((code, itemsize))
    if dtype is None:
        raise TypeError(f"wccl: {what} has element format {fmt!r} of {itemsize} bytes, which wccl does not carry "
                        "(float32, float64, float16, int8, uint8, int32, int64)")
    return dtype


def _from_buffer(obj: Any, writable: bool, what: str) -> Buffer:
    view = _PyBuffer()
    flags = _PyBUF_STRIDES | _PyBUF_FORMAT | (_PyBUF_WRITABLE if writable else 0)
    try:
        _PyObject_GetBuffer(obj, ctypes.byref(view), flags)
    except (BufferError, ValueError) as e:  # numpy says ValueError for a read-only array
        raise ValueError(f"wccl: {what} cannot be {'written' if writable else 'read'} as a buffer: {e}") from e
    except TypeError as e:
        raise TypeError(f"wccl: {what} is a {type(obj).__name__}, not a numpy array, torch tensor or buffer") from e
    try:
        if not _PyBuffer_IsContiguous(ctypes.byref(view), b"A"):
            raise ValueError(f"wccl: {what} is not contiguous; pass a contiguous copy (numpy.ascontiguousarray)")
        fmt = view.format.decode() if view.format else "B"
        dtype = _format_dtype(fmt, view.itemsize, what)
    except BaseException:
        _PyBuffer_Release(ctypes.byref(view))
        raise
    return Buffer(ptr=view.buf or 0, count=view.len // view.itemsize, dtype=dtype, cuda=False, owner=obj,
                  _view=view)


def export(obj: Any, writable: bool, what: str) -> Buffer:
    """The array ``obj`` as a Buffer; ``writable`` for one the operation writes. ``what`` names it in
    errors ("recvbuf"). Raises ValueError for a non-contiguous or read-only array and TypeError for
    an unsupported type or dtype."""
    if _is_torch_tensor(obj):
        return _from_torch(obj, what)
    return _from_buffer(obj, writable, what)


def synchronize_cuda(buffers: "list[Buffer]") -> None:
    """Waits for the work queued on the current stream of each CUDA tensor's device among buffers:
    for the calls whose library work runs on streams of its own."""
    for b in buffers:
        if b.cuda:
            import torch  # only reached with a CUDA tensor in hand
            torch.cuda.current_stream(b.owner.device).synchronize()


def cuda_stream_of(buffers: "list[Buffer]") -> Optional[int]:
    """The current CUDA stream of the device of the first CUDA tensor among buffers, or None."""
    for b in buffers:
        if b.cuda:
            import torch  # only reached with a CUDA tensor in hand
            return torch.cuda.current_stream(b.owner.device).cuda_stream
    return None
