"""vLLM releases, off the data path: the CUDA envs' installer (``install``, also run as a
script by tox) with the overrides each release needs here (``overrides.toml``, read by it),
which vLLM ran (``provenance``), one env per release (``envs``), the search for the release
that changed a cell (``bisection``), what counts as a release giving no verdict at all
(``environment``), and the child processes a command owns and ends with itself (``processes``).

Imports nothing of the harness outside this package: the commands that use it (``bisect``,
``history``) bring the matrix, the lanes' runs and the reports.
"""
