"""Lanes: one module (or package) each, all behind ``harness.lanes.protocol.Lane``.

The lane modules import vLLM (lazily) and are imported only by the cell processes
(``harness.runner.child``, through the module each lane's contract names), so that loading a
matrix or a report never imports vLLM. What a lane can run is declared apart, as data the
parent checks matrices against: ``harness.contracts``. No lane imports another.
"""
