"""Standalone stdlib-only scripts that run on the rig (host python3 >= 3.9) or inside a Docker build."""
