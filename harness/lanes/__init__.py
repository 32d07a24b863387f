"""Lanes: one module (or package) each, all behind ``harness.lanes.protocol.Lane``.

``contracts`` declares what each lane can run, as data the parent process checks matrices
against; the lane modules themselves import vLLM (lazily) and are imported only by the cell
processes (``harness.runner.child``), so that loading a matrix or a report never imports vLLM.
"""
