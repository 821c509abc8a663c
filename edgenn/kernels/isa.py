"""ISA tiers: which instruction sets this CPU offers the kernels, and the EDGENN_MAX_ISA cap.

One probe (fast/_cpu.h: CPUID + XGETBV on x86-64, HWCAP on aarch64) serves the C kernels
and this module alike. Tiers, in the order of the EDGENN_MAX_ISA cap (each containing
the ones before it on its architecture, but for avxvnni: below):

    x86-64:  scalar < avx2 (AVX2 + FMA) < avxvnni (AVX-VNNI) < avx512 (F/BW/VL/DQ) < avx512vnni
    aarch64: scalar < neon < neondot (sdot / udot)

avxvnni (the VEX vpdpbusd / vpdpwssd of recent client CPUs without AVX-512, and of some
AVX-512 CPUs) is in that order for the cap only: an AVX-512 CPU may lack it (many do), so
tiers() lists it where the CPU has it. `EDGENN_MAX_ISA=avxvnni` on a CPU that has both
runs as an AVX2 + AVX-VNNI client CPU without AVX-512 does.

`EDGENN_MAX_ISA=avx2` (for example) caps every kernel at that tier for the whole process;
kernel specs name their tier in `KernelSpec.isa` and are offered only where `usable(isa)`.
"""
from __future__ import annotations

import functools
import os
import platform

TIERS = ("scalar", "avx2", "avxvnni", "avx512", "avx512vnni", "neon", "neondot")
_NUMBER = {"scalar": 0, "avx2": 1, "avxvnni": 2, "avx512": 3, "avx512vnni": 4, "neon": 11,
           "neondot": 12}
_NAME = {v: k for k, v in _NUMBER.items()}
_CHAIN = {"x86": ("scalar", "avx2", "avxvnni", "avx512", "avx512vnni"),
          "arm": ("scalar", "neon", "neondot")}


class IsaError(ValueError):
    """EDGENN_MAX_ISA names no tier."""


def _cpu():
    from .native import _cpu
    return _cpu


def _arch(tier: str) -> str:
    return "arm" if tier in ("neon", "neondot") else "x86"


def cap() -> str | None:
    """The EDGENN_MAX_ISA tier, None when unset; a name that is no tier is an error."""
    v = os.environ.get("EDGENN_MAX_ISA", "").strip().lower()
    if not v:
        return None
    if v not in _NUMBER:
        raise IsaError(f"EDGENN_MAX_ISA={v!r} is not a tier; use one of {', '.join(TIERS)}")
    return v


def host_tier() -> str:
    """The best tier this CPU and OS support, cap ignored."""
    return _NAME[_cpu().host_tier()]


def active_tier() -> str:
    """The best tier the kernels use: the host's, capped by EDGENN_MAX_ISA (checked)."""
    cap()
    return _NAME[_cpu().active_tier()]


def tiers() -> tuple[str, ...]:
    """Every tier the kernels may use here, lowest first (always starts with scalar)."""
    return _tiers()


@functools.lru_cache(maxsize=1)
def _tiers() -> tuple[str, ...]:
    """tiers(), computed once: the probe reads EDGENN_MAX_ISA once per process too."""
    top = active_tier()
    chain = _CHAIN[_arch(top)]
    return tuple(t for t in chain[:chain.index(top) + 1]
                 if t != "avxvnni" or _cpu().x86_usable(_NUMBER[t]))


def usable(tier: str) -> bool:
    """True when kernels of `tier` may run here (host has it, cap allows it)."""
    if tier not in _NUMBER:
        raise IsaError(f"unknown tier {tier!r}")
    return tier in tiers()


def features() -> frozenset[str]:
    """The CPU feature names the probe found (avx2, fma, avx512f, ..., avx512vnni, avxvnni)."""
    return _cpu().features()


def describe() -> str:
    """One line for reports: CPU model, the host tier and the tier in force."""
    top, host = active_tier(), host_tier()
    capped = f" (capped by EDGENN_MAX_ISA from {host})" if top != host else ""
    return f"{cpu_model()}; kernels: {top}{capped}"


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one), with its x86 family
    and model numbers (virtual machines often report only a generic brand string)."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break                                  # the first CPU is enough
                key, _, value = line.partition(":")
                fields.setdefault(key.strip().lower(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or fields.get("hardware") or fields.get("cpu model") \
        or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']} model {fields['model']})"
    return name
