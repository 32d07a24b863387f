"""Real and simulated CUDA, off the data path: the GPU inventory and sticky-error reading
(``devices``), FlashInfer's JIT check (``flashinfer_jit``), the stub libcuda (``stub_driver``,
``libcuda_stub.c``), vLLM's CUDA platform on a simulated generation (``simulated``) and the
host patches that run vLLM's Triton kernels in Triton's interpreter (``interpreted_kernels``).

Imports nothing of the harness: the lanes and plugins that need a GPU, real or simulated, use it.
"""
