"""The pytest adapters, the only modules that know pytest: ``matrix`` turns a matrix into
test items and journals each verdict (registered as the ``dflash_matrix`` entry point);
``gpu`` is what a lane run on real or emulated GPUs adds (worker pinning, one generation per
run). Nothing in the harness imports them.
"""
