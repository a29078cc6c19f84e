"""Roles: one pyinfra @deploy per concern, each driven by the typed rig profile."""
