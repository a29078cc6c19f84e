"""An engine change on a serving rig: which build it runs, which one the run moves it to, and whether the move is
measured like a driver update (``bench.verdicts.starts`` engine starts a side, speed verdict, quality pass).

A build is what the engine unit runs: a container image (its tag; a built one also names the commits of its git
refs) or a native server's package pin. The move is measured when the rig serves now (the unit is active), it
runs a build rigforge recorded, and the run wants another one; a first install has no "before", a recipe switch
is judged by deploys/recipes.py, and a rig already on the wanted build plans nothing (no bench).

Example::

    change = EngineChange(EngineBuild(package="xllamacpp==2026.10.11549"),
                          EngineBuild(package="xllamacpp==2026.10.11549.0"), serving=True)
    change.measured                      # True
    engine_plan_line(profile, change, plan_starts(profile, assumed_spread(profile)))
    # "plan: 3 starts on xllamacpp==2026.10.11549 and 3 on ... = about 4 min ..., resolution: ..."
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rigforge.profile import Profile
from rigforge.updates.sizing import StartsPlan, plan_line


@dataclass(frozen=True)
class EngineBuild:
    """One build of the engine: a container image (tag, and the commits it was built from) or a native package.

    + image: the image the unit runs (None: a native engine)
    + commits: build arg -> commit of a built image's git refs (empty: pinned, published, or not known)
    + package: the native server's pip pin (None: a container engine)
    """

    image: str | None = None
    commits: dict[str, str] = field(default_factory=dict)
    package: str | None = None

    @property
    def identity(self) -> str | None:
        """What tells two builds apart: the image tag (its content hash covers the commits) or the package pin."""
        return self.image or self.package

    def words(self) -> str:
        """``rigforge/llama.cpp:3f9a… (SOURCE_REF 85b3425ca1cb)``, ``xllamacpp==2026.10.11549``.

        >>> EngineBuild(image="rigforge/sglang:3f9a", commits={"SGLANG_REF": "4f1c" * 10}).words()
        'rigforge/sglang:3f9a (SGLANG_REF 4f1c4f1c4f1c)'
        """
        if self.package:
            return self.package
        refs = ", ".join(f"{arg} {commit[:12]}" for arg, commit in sorted(self.commits.items()))
        return f"{self.image}{f' ({refs})' if refs else ''}"


@dataclass(frozen=True)
class EngineChange:
    """The run's view of the engine: what runs (None: no build rigforge recorded), what is wanted, and whether
    the engine serves now.

    + before: the build the unit runs now, None when the rig has none (a first install)
    + after: the build this run wants
    + serving: the engine unit is active
    + recipe_switch: the run moves the rig to another recipe (``--data recipe=``), judged elsewhere
    """

    before: EngineBuild | None
    after: EngineBuild
    serving: bool
    recipe_switch: bool = False

    @property
    def changes(self) -> bool:
        return self.before is None or self.before.identity != self.after.identity

    @property
    def measured(self) -> bool:
        """Measured before and after: a serving rig moving from one recorded build to another, same recipe."""
        return self.changes and self.before is not None and self.serving and not self.recipe_switch

    def reason(self) -> str:
        """Why the run measures the move, or why not (one line for the log)."""
        if not self.changes:
            return f"engine build {self.after.words()} runs already; nothing to measure"
        if self.before is None:
            return f"engine build {self.after.words()}: a first install (no build before it), not measured"
        if not self.serving:
            return (f"engine build {self.before.words()} -> {self.after.words()}: the engine does not serve now, "
                    "so there is no before to measure")
        if self.recipe_switch:
            return (f"engine build {self.before.words()} -> {self.after.words()} comes with a recipe switch: "
                    "deploys/recipes.py judges recipes, this run does not measure it")
        return f"engine build {self.before.words()} -> {self.after.words()}: measured before and after"


def engine_plan_line(profile: Profile, change: EngineChange, sized: StartsPlan) -> str:
    """What a measured engine change costs and resolves: k starts on the old build, k on the new, no reboot.

    + sized: k a side and what it resolves (rigforge.updates.sizing.plan_starts)
    """
    assert change.before is not None
    return plan_line(profile, sized, f"on {change.before.words()}", f"on {change.after.words()}",
                     "the move between them (no reboot)")


def image_repository(ref: str) -> str:
    """An image reference without its tag or digest.

    >>> image_repository("rigforge/llama.cpp:3f9a"), image_repository("localhost:5000/vllm@sha256:ab")
    ('rigforge/llama.cpp', 'localhost:5000/vllm')
    """
    head, _, tail = ref.split("@", 1)[0].rpartition("/")
    return (head + "/" if head else "") + tail.split(":", 1)[0]


def unit_image(unit_text: str, wanted: str) -> str | None:
    """The image a rendered engine unit runs, for a unit that should run ``wanted``: ``wanted`` itself when the
    unit names it, else the word naming the same repository with another tag or digest (None: neither).

    >>> unit_image("ExecStart=/usr/bin/docker run --rm rigforge/llama.cpp:aaaa --port 8080", "rigforge/llama.cpp:bb")
    'rigforge/llama.cpp:aaaa'
    """
    words = [word for word in re.split(r"[\s\\\"=]+", unit_text) if word]
    if wanted in words:
        return wanted
    repository = image_repository(wanted)
    return next((word for word in words if word != repository and image_repository(word) == repository), None)
