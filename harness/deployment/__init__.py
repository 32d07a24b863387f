"""The deployment a cell stands for: what it asks of vLLM, as data (issue 37).

- ``models``: what each checkpoint the harness writes says in its config.json (target families,
  draft family members) and the record of what a draft asks for (``DraftTruth``).
- ``settings``: the engine settings a cell asks for (``EngineSettings``) and the cell -> settings
  functions every lane calls (``engine_settings``, ``draft_spec``, ``context_lens``).
- ``arguments``: ``engine_arguments``, the exact keyword arguments of vLLM's ``EngineArgs`` (and
  ``vllm.LLM``) for a deployment. The lanes build ``EngineArgs(**engine_arguments(...))``, the
  finding pages print them and ``repro`` writes them into its scripts as data: the one place the
  keys ``speculative_config`` and ``attention_config`` are spelled (tests/core/test_imports.py).

Imports neither torch nor vLLM, nor any child-side package (attention, lanes, runner, cuda,
releases): the parent, the report commands and a merging machine read it as the lanes do.
"""
