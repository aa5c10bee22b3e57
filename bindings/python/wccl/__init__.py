"""wccl, the WAN Collective Communications Library, from Python (ctypes over libwccl).

    import numpy as np, wccl
    with wccl.Communicator(coordinator="coord.example.net:48148", tls_cert="node.pem",
                           tls_key="node.key", tls_ca="ca.pem") as comm:
        grads = np.ones(1 << 20, dtype=np.float32)
        while True:
            try:
                comm.allreduce(grads, wccl.ReduceOp.AVG, wire=wccl.Wire.INT8)
                break
            except wccl.PeerLostError:   # grads are as they were: take the new epoch and retry
                comm.update()

Arrays are numpy arrays (or any contiguous buffer-protocol object) and torch tensors; numpy and
torch are optional and never imported by this package unless a CUDA tensor is passed.
"""

from ._buffers import DType
from ._core import (MIN_LINK_RATE, TOPK_DEFAULT_KEEP, Algo, CommStats, Communicator, Compress, Coordinator, EpochOrigin, LinkStats,
                    OpStats, ReduceOp, Request, SyncMode, SyncStats, Wire, config_keys, version, wire_roundtrip)
from ._lib import (AbortedError, AuthError, CoordinatorUnreachableError, CudaError, InProgressError, InternalError,
                   InvalidArgumentError, InvalidUsageError, IoError, LIBRARY_PATH, MismatchError, NcclError, NoMemoryError,
                   PeerLostError, ProtocolError, TimeoutError, TooFewPeersError, UnsupportedError, WcclError)

__version__ = version()

__all__ = [
    "AbortedError", "Algo", "AuthError", "CommStats", "Communicator", "Compress", "Coordinator", "CoordinatorUnreachableError",
    "CudaError", "DType", "EpochOrigin", "InProgressError", "InternalError", "InvalidArgumentError", "InvalidUsageError", "IoError",
    "LIBRARY_PATH", "LinkStats", "MIN_LINK_RATE", "MismatchError", "NcclError", "NoMemoryError", "OpStats", "PeerLostError", "ProtocolError", "ReduceOp", "Request",
    "SyncMode", "SyncStats", "TOPK_DEFAULT_KEEP", "TimeoutError", "TooFewPeersError", "UnsupportedError", "WcclError", "Wire", "config_keys", "version",
    "wire_roundtrip",
]
