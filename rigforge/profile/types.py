"""Value types of the rig profile: each says what is allowed in one kind of setting.

They keep anything that ends up in a command, a unit file or a config line free of characters that would
break out of it (newlines, shell metacharacters), so templates never have to guess.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

#: Characters that would break out of a config line, a unit file or a command.
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def _no_control_chars(value: str) -> str:
    if _CONTROL_CHARS.search(value):
        raise ValueError("must not contain newlines or other control characters")
    return value


SafeText = Annotated[str, AfterValidator(_no_control_chars)]
Name = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$")]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


def _no_parent_dirs(value: str) -> str:
    if ".." in value.split("/"):
        raise ValueError("must not contain '..'")
    return value


AbsPath = Annotated[
    str, StringConstraints(pattern=r"^/[A-Za-z0-9._/+-]*$"), AfterValidator(_no_parent_dirs)
]
HttpUrl = Annotated[str, StringConstraints(pattern=r"^https?://[A-Za-z0-9._~:/?#@!&'()*+,;=%{}-]+$")]
DriverVersion = Annotated[str, StringConstraints(pattern=r"^\d{3}\.\d{2,3}\.\d{2,3}$")]
CudaVersion = Annotated[str, StringConstraints(pattern=r"^\d{2}\.\d{1,2}$")]
KernelParam = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+(=[A-Za-z0-9_.,:/+-]+)?$")]
ModuleName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_]+$")]
SysctlKey = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_]+(\.[a-z0-9_-]+)+$")]
ImageRef = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9_.-]{1,128})?(@sha256:[a-f0-9]{64})?$"),
]
RepoId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[a-f0-9]{64}$")]
CliFlag = Annotated[str, StringConstraints(pattern=r"^--[a-z0-9][a-z0-9-]*$")]
Port = Annotated[int, Field(ge=1, le=65535)]
PositiveInt = Annotated[int, Field(gt=0)]
Size = Annotated[str, StringConstraints(pattern=r"^\d+[kmg]$")]
_DWORD = r"[A-Za-z0-9_]+=[0-9A-Fa-fx]+"
RegistryDwords = Annotated[str, StringConstraints(pattern=rf"^{_DWORD}(;{_DWORD})*$")]


class StrictModel(BaseModel):
    """Base for every profile section: unknown keys are errors, objects are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class FieldError(ValueError):
    """A check across sections that names the one setting to change: the loader reports it at ``loc``.

    + message: what is wrong and what is allowed
    + loc: the setting's path (``("engine", "flags", "--tensor-parallel-size")``)

    Raised inside a model validator, pydantic reports it at the model's own level; ``loader.explain`` reads
    ``loc`` so the line names the file that set that value and the field, as for any other bad value.
    """

    def __init__(self, message: str, loc: tuple[str, ...]) -> None:
        super().__init__(message)
        self.loc = loc
