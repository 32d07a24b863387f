"""vLLM releases, off the data path: the CUDA envs' installer (``install``, also run as a
script by tox), which vLLM ran (``provenance``), one env per release (``envs``) and the search
for the release that changed a cell (``bisection``).

Imports nothing of the harness outside this package: the commands that use it (``bisect``,
``history``) bring the matrix, the lanes' runs and the reports.
"""
