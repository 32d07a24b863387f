"""Every member of vLLM's AttentionBackendEnum and what kind of backend it is."""

from __future__ import annotations

from typing import Any

# Enum members that are no decoder backend at all (ViT-only tag, third-party placeholder).
NOT_DECODER_BACKENDS = ("TORCH_SDPA", "CUSTOM")
# Kinds a DFlash draft is never served by, so a matrix need not list them.
NOT_FOR_A_DRAFT = ("mla", "sparse", "not a decoder backend")


def census(enum: Any) -> dict[str, str]:
    """Every AttentionBackendEnum member and what it is: decoder, mla, sparse, or why unknown."""
    census: dict[str, str] = {}
    if enum is None:
        return census
    for member in enum:
        if member.name in NOT_DECODER_BACKENDS:
            census[member.name] = "not a decoder backend"
            continue
        try:
            backend = member.get_class()
        except Exception as error:
            # Some modules query the real device while importing. Their class path still
            # says whether they are MLA/sparse; anything else must be in the matrix.
            path = str(member.value).lower()
            kind = "mla" if "mla" in path else "sparse" if "sparse" in path else "unknown"
            census[member.name] = kind if kind != "unknown" else f"unknown ({type(error).__name__} on import)"
            continue
        if backend.is_mla():
            census[member.name] = "mla"
        elif backend.is_sparse():
            census[member.name] = "sparse"
        else:
            census[member.name] = "decoder"
    return census


def not_in_matrix(kinds: dict[str, str], matrix_backends: frozenset[str]) -> tuple[str, ...]:
    """Decoder backends (or ones whose kind cannot be told) the matrix never asks for: a hole in
    the grid, named on every cell instead of passed over."""
    holes = (name for name, kind in kinds.items() if kind not in NOT_FOR_A_DRAFT and name not in matrix_backends)
    return tuple(sorted(holes))
