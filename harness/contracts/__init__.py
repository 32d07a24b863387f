"""What each lane can run, as data the parent process reads: ``model`` is what a contract is
(axes, limits, typed options with their checks, process keys, preload, the lane's module),
``lanes`` declares one per lane.

Below the matrix on the data path: imports neither vLLM nor torch, and nothing of the lanes,
so loading a matrix never reaches child-side code.
"""
