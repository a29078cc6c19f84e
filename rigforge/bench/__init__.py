"""Smoke benchmark for an OpenAI-compatible LLM server, run on the rig itself.

Standard library only and Python 3.9-compatible, so it runs with the host's ``python3``
after uploading ``rigforge/__init__.py`` and ``rigforge/bench/``::

    PYTHONPATH=<dir containing rigforge/> python3 -m rigforge.bench --config config.json --out result.json

Token counts come only from the server's ``usage``; streamed chunk counts are recorded beside
them, never used in their place. Failed sanity checks are recorded by name, never as numbers.

May import: no other rigforge package (the lowest layer; it runs on the rig with the standard library).
"""
