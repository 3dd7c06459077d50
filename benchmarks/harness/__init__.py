"""The benchmarks' shared machinery: measuring, peer environments, running, reporting.

Stdlib only at import time: benchmark workers import it from other virtualenvs.
See ``benchmarks/README.md`` for the API a new benchmark uses.
"""
