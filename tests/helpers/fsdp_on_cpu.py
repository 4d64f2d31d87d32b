"""`python -m animegamer ARGS` with Accelerate's FSDP switched on for CPU processes, for the tests.

Accelerate builds its FSDP plugin from the launcher's environment (ACCELERATE_USE_FSDP, FSDP_*) but
uses it only on accelerators; torch's FSDP 2 itself shards over gloo on CPUs. This shim keeps the
plugin on CPU processes, so the training loop's FSDP path (sharded parameters, Accelerate's sharded
checkpoints, gathering for the export, resume) runs under torchrun on a machine without a GPU.
"""
from __future__ import annotations

import sys

from accelerate.state import AcceleratorState, PartialState
from accelerate.utils import DistributedType

from animegamer.cli import main

_init = AcceleratorState.__init__


def _init_keeping_fsdp(self, *args, fsdp_plugin=None, **kwargs) -> None:
    _init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
    if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
        # as Accelerate marks an FSDP run on GPUs: the process-level state too, which its barriers read
        self.distributed_type = PartialState._shared_state["distributed_type"] = DistributedType.FSDP
        self.fsdp_plugin = fsdp_plugin


AcceleratorState.__init__ = _init_keeping_fsdp

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
