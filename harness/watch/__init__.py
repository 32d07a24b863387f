"""What ``dflash-matrix watch`` decides, pure and importable without vLLM: which jobs to run
(``plan``), what a release changed (``delta``), how a reviewed patch is recorded (``record``) and
which issue says so (``issues``). The commands install, run and call ``gh``; nothing here does."""
