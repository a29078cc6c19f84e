"""The smallest a checkpoint can be: its parameter count at its quantisation's bits per parameter.

A checkpoint's declared size feeds the disk checks before a download and before a tournament; one declared
below what its parameters can take passes a disk that cannot hold it. The bound counts only the quantised
values and their scales: layers kept in BF16 (attention, shared experts, embeddings, MTP heads) make the real
checkpoint larger still, never smaller.

Example::

    lower_bound_gb(397e9, "nvfp4")     # 223.3: 397e9 x 4.5 bits / 8
"""

from __future__ import annotations

from typing import Literal

Quantisation = Literal["nvfp4", "fp8", "bf16", "q4_k_m", "q4_1"]

#: Bits each parameter takes at least, and why.
BITS_PER_PARAMETER: dict[str, tuple[float, str]] = {
    # NVFP4: a 4-bit E2M1 value plus one FP8 (E4M3) scale per block of 16 values: 4 + 8/16 = 4.5.
    "nvfp4": (4.5, "4-bit values + one FP8 scale per 16 values"),
    "fp8": (8.0, "one byte per value"),
    "bf16": (16.0, "two bytes per value"),
    # llama.cpp's Q4_K: 4-bit values in super-blocks of 256 with 6-bit scales and mins, 4.5 bits per weight
    # (ggml-quants Q4_K); Q4_K_M keeps some tensors at Q6_K, so 4.5 is its floor.
    "q4_k_m": (4.5, "llama.cpp Q4_K: 4-bit values + 6-bit scales and mins per 32, 4.5 bits per weight"),
    # llama.cpp's Q4_1: blocks of 32 4-bit values with an FP16 scale and an FP16 min (ggml-common.h block_q4_1):
    # (32 x 4 + 2 x 16) / 32 = 5 bits per weight.
    "q4_1": (5.0, "llama.cpp Q4_1: 4-bit values + an FP16 scale and min per 32, 5 bits per weight"),
}


def lower_bound_gb(parameters: float, quantisation: str) -> float:
    """The fewest GB (10^9 bytes) ``parameters`` take at ``quantisation`` (pure).

    + parameters: the model's total parameter count (397e9)
    + quantisation: one of ``BITS_PER_PARAMETER``

    >>> round(lower_bound_gb(397e9, "nvfp4"), 1)
    223.3
    """
    bits, _ = BITS_PER_PARAMETER[quantisation]
    return parameters * bits / 8 / 1e9


def size_problem(size_gb: float, parameters: float | None, quantisation: str | None) -> str | None:
    """Why ``size_gb`` cannot be the checkpoint's size, with the arithmetic; None when it can (or is not judged).

    >>> size_problem(200, 397e9, "nvfp4").split(": ")[1]  # doctest: +ELLIPSIS
    "397e9 parameters x 4.5 bits (4-bit values + one FP8 scale per 16 values) / 8 = 223.3 GB, before ..."
    >>> size_problem(233, 397e9, "nvfp4") is None
    True
    """
    if parameters is None or quantisation is None:
        return None
    bound = lower_bound_gb(parameters, quantisation)
    if size_gb >= bound:
        return None
    bits, why = BITS_PER_PARAMETER[quantisation]
    count = f"{parameters / 1e9:g}e9"
    return (f"size_gb {size_gb:g} is below the smallest a {quantisation} checkpoint of {count} parameters can "
            f"be: {count} parameters x {bits:g} bits ({why}) / 8 = {bound:.1f} GB, before any layer kept "
            "at higher precision; declare the size its source publishes (or the hub's file list)")
