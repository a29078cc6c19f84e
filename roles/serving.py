"""The serving layer as one call: the weights, the engine image, the engine and its unit, for one profile.

deploys/serve.py runs it for the recipe the rig gets; the recipes experiment runs it once per recipe it tries;
a deploy that finds a recipe experiment cut short runs it to put the rig's recipe back.
"""

from __future__ import annotations

from rigforge.profile import Profile
from roles import engine, images, service, weights


def apply_serving(profile: Profile | None = None, settled: bool = True) -> None:
    """Weights, engine image, engine install and the unit, healthy (each role skips what is already so).

    + profile: what to serve (default: the current host's profile with the recipe this run gives it)
    + settled: the rig keeps this recipe (False for a recipe experiment's trial; see roles/service.py)
    """
    weights.apply_weights(profile)
    images.apply_images(profile)
    engine.apply_engine(profile)
    service.apply_service(profile, settled=settled)
