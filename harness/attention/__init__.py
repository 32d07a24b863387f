"""Device-agnostic pieces shared by the lanes that run real draft attention (cpu, gpu).

- ``configs``: what each checkpoint says in its config.json (target families, draft family
  members) and the record of what a draft asks for (``DraftTruth``) that the reference and the
  audit read: pure data, so the repro command writes the same configs into its scripts.
- ``checkpoint``: tiny random-weight safetensors checkpoints of those configs.
- ``reference``: an fp32 torch attention reference (sinks, causal or not, sliding window, GQA).
- ``draft``: the VllmConfig for a cell, the two real draft loaders (v1, v2), and what the
  draft's attention layers and the platform selector report.
- ``paged``: one forward pass of a draft attention layer through its backend impl, on a
  paged KV cache with the context pre-inserted, with metadata from the backend's builder.
- ``cell``: the whole per-cell flow both lanes run (config, claim, loader, layers, forward,
  reference), with the device and the forward strategy as parameters.
- ``graph``: capture and replay of a backend call in a CUDA graph (torch only).

``configs`` and ``audit`` import neither torch nor vLLM; ``checkpoint`` and ``reference`` need torch only.
"""
