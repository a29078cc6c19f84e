"""Serving: how the engine is launched on a rig (``engines``: its argv, one flag per line, quoted for systemd)
and how its API key is kept and handed to the engine and to rigforge's own clients (``api_key``).

Pure functions of the profile: nothing here reads a fact or runs a command. The image a unit names comes from
its build plan (``rigforge.images.plans``) and, during a deploy, from the commits the rig's image is built from,
which ``rigforge.fleet`` hands down (``engines.read_rig_commits_with``): it reads facts and sits above this.

May import: images, render, remote, profile.
"""
