"""Device-agnostic pieces shared by the lanes that run real draft attention (cpu, gpu).

- ``checkpoint``: tiny random-weight safetensors checkpoints of the configs
  ``harness.deployment.models`` says (the deployment a cell stands for lives there, pure data).
- ``reference``: an fp32 torch attention reference (sinks, causal or not, sliding window, GQA).
- ``draft``: the VllmConfig for a cell (``EngineArgs(**engine_arguments(...))``, from
  ``harness.deployment.arguments``), the two real draft loaders (v1, v2), and what the draft's
  attention layers and the platform selector report.
- ``paged``: one forward pass of a draft attention layer through its backend impl, on a
  paged KV cache with the context pre-inserted, with metadata from the backend's builder.
- ``cell``: the whole per-cell flow both lanes run (config, claim, loader, layers, forward,
  reference), with the device and the forward strategy as parameters.
- ``graph``: capture and replay of a backend call in a CUDA graph (torch only).

``audit`` imports neither torch nor vLLM; ``checkpoint`` and ``reference`` need torch only.
"""
