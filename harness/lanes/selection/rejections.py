"""vLLM's words, read: the reasons of a refused backend request, and the host's limits."""

from __future__ import annotations

import ast
import re

# The backend a loader selected (and then refused) for a draft's layers.
SELECTED = re.compile(r"Selected backend AttentionBackendEnum\.(\w+) is not valid")
_REASONS = re.compile(r"Reason: (\[.*\])\s*$", re.DOTALL)
# What vLLM's CUDA code says where it needs a real device: a limit of this host, not a verdict.
NO_DRIVER = "Found no NVIDIA driver"


def rejection_reasons(error: ValueError) -> tuple[str, ...]:
    """The reasons list of vLLM's 'Selected backend X is not valid ... Reason: [...]'."""
    text = str(error)
    found = _REASONS.search(text)
    if found is None:
        return (text,)
    try:
        reasons = ast.literal_eval(found.group(1))
    except (ValueError, SyntaxError):
        return (found.group(1)[1:-1],)  # an import error vLLM formatted without quotes
    return tuple(str(reason) for reason in reasons) if isinstance(reasons, list) else (str(reasons),)
