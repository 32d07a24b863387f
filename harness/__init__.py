"""dflash-matrix: a compatibility-matrix harness for vLLM's DFlash drafter.

Data flows one way, and the modules follow it:

    matrix (matrix.py, axes.py) -> cells -> lane (lanes/) -> observation (observation.py)
    -> verdict (verdict.py) + expectation (expectations.py) -> result (result.py)
    -> journal (journal.py) -> reports (reports/)

Nothing in this package imports vLLM or torch except the lane modules and
`harness.attention`, which are imported only by the process that runs cells.
"""

__version__ = "0.1.0"
