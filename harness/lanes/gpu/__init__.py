"""The gpu lane: ``lane`` (``GpuLane``, the cell flow on a CUDA device), ``host`` (the machine
it runs on: the ``Host`` seam and ``CudaHost``), ``graphs`` (the CUDA-graph forward) and
``emulated`` (the host that simulates a GPU generation on the CPU: the gpu_emulated lane).
"""
