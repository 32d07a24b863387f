"""Runs a matrix's cells in long-lived child processes, split by job as pytest-xdist splits its
own (``remote.py`` in the worker, ``workermanage.py``/``dsession.py`` in the controller):

- ``child``: the cell process's side. Creates the lane once, runs cells as they arrive, and
  owns everything about a cell the lane does not: its stage bookkeeping, its timing, and the
  exception that escapes it. With ``warm``, the only modules here a cell process imports.
- ``warm``: the warm parent of one runner: imports the lane's preload once (its contract says
  what) and forks that runner's cell processes, so none of them imports vLLM again.
- ``supervisor``: the parent's side of one cell process at a time (``CellRunner``): starts it,
  hands it cells, and turns a death into a ``crash`` and silence into a ``timeout``.
- ``session``: one matrix run in one process (``MatrixSession``): plans the cells, runs them
  through a supervisor, judges each against its expectation and journals it. Shared by
  ``run_matrix`` (planted-fault tests, scripts) and the pytest plugin.

Why a child process: a kernel can segfault, abort, device-assert or hang. The process that
owns the journal must survive all of that, so every cell runs in a child that stays warm across
cells, forked from a warm parent that paid the imports once. This works the same with and
without pytest-xdist.
"""
