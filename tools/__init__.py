"""Benchmarks, demo data and the simulator: run from a checkout, not shipped in the package
or the image; ``python -m agent simulate``, ``demo-data`` and ``bench`` import them when asked.
"""
