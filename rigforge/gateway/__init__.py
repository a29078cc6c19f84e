"""The fleet's gateway: HAProxy's configuration rendered from the profiles of an inventory's rigs (``haproxy``: one
route per model, every rig whose ``engine.served_model_name`` names it).

May import: render, profile.
"""
