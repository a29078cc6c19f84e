"""Which recipe is fastest on this rig? Try the profile's engine recipes one after the other, measured.

    pyinfra inventory/rig4x.py deploys/recipes.py --dry                                # what each would need
    pyinfra inventory/rig4x.py deploys/recipes.py                                      # all the profile's recipes
    pyinfra inventory/rig4x.py deploys/recipes.py --data recipes=wiki,marlin,k64-published
    pyinfra inventory/rig4x.py deploys/recipes.py --data keep=best     # end on the recipe judged better, if any

The rig's starting recipe is measured first, then each other recipe: image (built once per set of inputs),
checkpoint (kept beside the others), unit, health, sanity probes and the profile's bench cells, recorded in the
bench history under the recipe's name. A recipe that does not come up, gives wrong output or logs a known failure
is disqualified with why. The run ends with one table (recipes x cells, measured beside claimed, each recipe's
verdict against the start), kept as JSON, Markdown and PNG in results/<host>/recipes-<stamp>/, and the rig back on
its starting recipe (see roles/recipes.py). Ctrl-C in the middle: the next deploy puts the starting recipe back.
"""

from rigforge.context import run_settings
from rigforge.operations.lock import release_deploy_lock, take_deploy_lock
from roles import recipes, takeover

# Validate the run's switches before any operation is planned.
settings = run_settings(takes=("recipes", "keep"))

take_deploy_lock()
takeover.apply_takeover(layers=("serving",))
recipes.apply_recipes(settings)
release_deploy_lock()
