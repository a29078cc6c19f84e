"""Standalone stdlib-only scripts that run on the rig (host python3 >= 3.9) or inside a Docker build.

May import: no other rigforge package (the lowest layer; these run on the rig with the standard library).
"""
