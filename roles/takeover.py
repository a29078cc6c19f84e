"""What is already there: the table every deploy prints first, and the stop on what it must not touch.

Read before any change (the facts come back in the deploy's one read-ahead command), printed as one
table per host, followed by one line per security trade-off the profile makes (rigforge/checks/tradeoffs.py),
then a host whose table has a blocking row for a layer this deploy changes stops there,
with one line per blocking item; other hosts go on. ``--data skip_preflight=true`` prints the same and
continues.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyinfra import host, logger
from pyinfra.api import deploy

from rigforge.checks.driver_takeover import SWITCH
from rigforge.checks.takeover import LAYERS, Row, blocking_rows, gather_installed, takeover_lines, takeover_rows
from rigforge.checks.tradeoffs import tradeoff_lines
from rigforge.context import current_profile, current_recipe_choice, run_settings
from rigforge.facts.recipes import RigRecipe
from rigforge.recipes.choice import NO_RECIPE_STATE, interrupted_line
from roles import drain, serving
from roles.preflight import stop_on_blocking_checks

LABEL = "already there"
TITLE = "What is already there"
STOP_NAME = "Stop before replacing what the owner installed"


@deploy(TITLE)
def apply_takeover(layers: Sequence[str] = LAYERS, restore: bool = True) -> None:
    """Print what the owner already installed and stop this host on what this deploy would have to replace.

    + layers: the layers this deploy changes (``host``, ``container``, ``serving``): only their blocking
      rows stop it; an empty tuple only reports
    + restore: a recipe experiment found cut short is undone here, before anything else (deploys whose own
      serving layer puts the rig's recipe back, and the read-only ones, pass False)
    """
    profile = current_profile()
    settings = run_settings()
    switches = frozenset({SWITCH} if settings.replace_driver else ())
    recipe = ((host.get_fact(RigRecipe) or NO_RECIPE_STATE, current_recipe_choice())
              if profile.engine.recipes else None)
    rows = takeover_rows(profile, gather_installed(host.get_fact, profile, switches, recipe))
    _log_table(rows)
    for line in tradeoff_lines(profile):  # said before anything is made so, in a dry run too
        host.log(line, log_func=logger.warning)
    blocking = blocking_rows(rows, layers)
    stop_on_blocking_checks(name=STOP_NAME,
                            blocking=list(dict.fromkeys(row.component for row in blocking)),
                            skip=settings.skip_preflight, label=LABEL,
                            details=[row.describe() for row in blocking])
    if recipe is not None and recipe[0].experiment is not None:
        host.log(interrupted_line(recipe[0].experiment, recipe[1]), logger.warning)
        if restore:
            serving.apply_serving(profile)
            drain.put_back(profile, "its recipe is back, healthy")  # drained by the restart, if it served


def _log_table(rows: list[Row]) -> None:
    host.log("what is already there:", log_func=logger.info)
    for line in takeover_lines(rows):
        logger.info(f"{host.print_prefix}{line}")
