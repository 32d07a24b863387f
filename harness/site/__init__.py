"""The compatibility site: static pages over the report model (``dflash-matrix site``).

``pages.py`` is the page model (pure: which pages, which cells each holds, what a form query picks,
what changed between releases); ``render.py`` turns it into files. Like every report view it reads
``harness.reports.model`` and imports no lane, runner or vLLM.
"""
