"""Rig profiles: the typed schema (``schema``, its measuring settings in ``measuring``), its value types
(``types``) and the loader that merges base file, rig file and per-host overrides and names the file and
field of any bad value (``loader``). ``nccl_layout`` refuses an engine layout the NCCL graph XML breaks.

May import: no other rigforge package (the lowest layer).
"""

from rigforge.profile.measuring import Bench, Floor
from rigforge.profile.schema import (
    AptRepo,
    Boot,
    Container,
    Cuda,
    DockerRun,
    Driver,
    Engine,
    Gpus,
    ImageBuild,
    Model,
    ModelFile,
    Modprobe,
    NativeServer,
    Nccl,
    Patch,
    Profile,
    Tuning,
)

__all__ = [
    "AptRepo",
    "Bench",
    "Boot",
    "Container",
    "Cuda",
    "DockerRun",
    "Driver",
    "Engine",
    "Floor",
    "Gpus",
    "ImageBuild",
    "Model",
    "ModelFile",
    "Modprobe",
    "NativeServer",
    "Nccl",
    "Patch",
    "Profile",
    "Tuning",
]
