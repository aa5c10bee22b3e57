"""torchft over wccl: a reconfigurable process group for torchft's Manager.

    from torchft import Manager
    from wccl.torchft import ProcessGroupWccl

    manager = Manager(pg=ProcessGroupWccl(timeout=timedelta(seconds=60)), ...)

torchft's Manager calls ``configure`` at every new quorum with a store prefix of its own; each call
aborts the previous wccl group and forms a new one over the quorum's replicas (``wccl.torch``'s
ProcessGroup, so collectives, the coordinator, configuration and TLS are as docs/python.md
describes; the wccl group is ``torchft-<quorum id>-<local rank>``). torchft's DDP, LocalSGD and
DiLoCo then run over wccl unchanged. Needs ``torchft`` (0.2; ``pip install torchft==0.2.0``).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Optional

from torch._C._distributed_c10d import Store
from torchft.process_group import ProcessGroupWrapper  # type: ignore[import-untyped]

from ._torch_backend import Options
from ._torch_backend import ProcessGroupWccl as _Group

__all__ = ["ProcessGroupWccl"]


class ProcessGroupWccl(ProcessGroupWrapper):  # type: ignore[misc]  # torchft ships no type information
    """torchft's reconfigurable process group, over wccl. ``options`` (wccl.torch.Options) apply to
    every quorum's group: a wire for the Manager's all-reduces (INT8 for DiLoCo's pseudo-gradients),
    configuration keys such as the coordinator's address."""

    def __init__(self, timeout: timedelta = timedelta(seconds=60), options: Optional[Options] = None) -> None:
        super().__init__(timeout=timeout)
        self._wccl_options = options

    def _create_pg(self, store: Store, rank: int, world_size: int) -> _Group:
        group = f"torchft-{self._quorum_id if self._quorum_id is not None else 0}-{self._group_rank or 0}"
        options = replace(self._wccl_options or Options())
        options.config = dict(options.config)
        if self._replica_id:  # errors name the lost replica, not its rank in one quorum
            options.config.setdefault("name", "".join(self._replica_id.split())[:64])
        return _Group(store, rank, world_size, self._timeout, group_name=group, options=options)

    def shutdown(self) -> None:
        pg = self._pg
        if isinstance(pg, _Group):
            pg.shutdown()
        super().shutdown()

    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return "torchft-wccl"
