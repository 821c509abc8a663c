"""Pictures for `edgenn inspect --plan --plot` and `edgenn bench --plot` (matplotlib, the
optional 'plot' extra; drawn off-screen with the Agg backend, saved as PNG).

- the per-layer time profile of a plan: median time of every step over a few profiled
  runs, the slowest layers as bars labelled op / node / kernel, coloured by kernel;
- the side-by-side comparison: every interleaved round's time per runtime (box and points),
  the median and the ratio to edgenn written on each.
Each title names the CPU, the kernel tier and the thread count.
"""
from __future__ import annotations

import numpy as np

from .extras import require
from .runtime.profile import LayerTime, layer_profile  # noqa: F401 - re-exported


def profile_table(profile: list[LayerTime], top: int = 15) -> str:
    """The slowest steps as text, with their share of the summed step time."""
    total = sum(p.median_s for p in profile) or 1.0
    rows = [f"per-layer profile: {len(profile)} steps, {total * 1e3:.2f} ms summed medians"]
    for p in sorted(profile, key=lambda p: -p.median_s)[:top]:
        rows.append(f"{p.index:4} {p.op:18} {p.node[:36]:36} {p.kernel:28} "
                    f"{p.median_s * 1e3:8.3f} ms {100 * p.median_s / total:5.1f}%")
    return "\n".join(rows)


def _pyplot():
    require("matplotlib", "--plot")
    import matplotlib
    matplotlib.use("Agg")   # no display: files only
    import matplotlib.pyplot as plt
    return plt


def _subtitle(threads: int) -> str:
    from .kernels import isa
    return f"{isa.describe()}, {threads} thread(s)"


def plot_layer_profile(profile: list[LayerTime], path: str, title: str, threads: int,
                       top: int = 25) -> str:
    """Bars of the `top` slowest steps (plan order kept), coloured by kernel -> path (PNG)."""
    plt = _pyplot()
    total = sum(p.median_s for p in profile) or 1.0
    shown = sorted(sorted(profile, key=lambda p: -p.median_s)[:top], key=lambda p: p.index)
    kernels = sorted({p.kernel for p in shown})
    colours = dict(zip(kernels, plt.cm.tab20(np.linspace(0, 1, max(len(kernels), 2)))))
    fig, ax = plt.subplots(figsize=(11, 0.32 * len(shown) + 1.8))
    y = np.arange(len(shown))[::-1]
    ax.barh(y, [p.median_s * 1e3 for p in shown], color=[colours[p.kernel] for p in shown])
    ax.set_yticks(y, [f"#{p.index} {p.op} {_tail(p.node, 30)} [{p.kernel}]" for p in shown],
                  fontsize=7)
    for yi, p in zip(y, shown):
        ax.text(p.median_s * 1e3, yi, f" {100 * p.median_s / total:.1f}%", va="center",
                fontsize=7)
    ax.set_xlabel("median time per run (ms)")
    ax.set_title(f"{title}: {len(shown)} slowest of {len(profile)} steps, "
                 f"{total * 1e3:.2f} ms in all\n{_subtitle(threads)}", fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[k]) for k in kernels]
    ax.legend(handles, kernels, fontsize=7, loc="lower right", title="kernel",
              title_fontsize=7)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _tail(name: str, n: int) -> str:
    """The last n characters of a node name (its distinctive end), marked when cut."""
    return name if len(name) <= n else "\u2026" + name[-(n - 1):]


def plot_bench(runners, path: str, title: str, threads: int) -> str:
    """Per runtime, the time of every interleaved round (box + points), median and ratio
    to the first runner (edgenn) annotated -> path (PNG)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(2.2 * len(runners) + 3, 4.5))
    data = [np.asarray(r.times) * 1e3 for r in runners]
    base = float(np.median(data[0]))
    ax.boxplot(data, showfliers=False)
    ax.set_xticks(range(1, len(runners) + 1), [r.name for r in runners])
    rng = np.random.default_rng(0)
    for i, d in enumerate(data, 1):
        ax.plot(i + rng.uniform(-0.12, 0.12, len(d)), d, ".", alpha=0.5, color="tab:blue")
        med = float(np.median(d))
        ax.annotate(f"{med:.2f} ms\n{med / base:.2f}x", (i, med), xytext=(48, 0),
                    textcoords="offset points", va="center", fontsize=8)
    ax.set_ylabel("time per run (ms)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{title}: {len(data[0])} interleaved rounds\n{_subtitle(threads)}",
                 fontsize=9)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_pareto(search: dict, device: dict, path: str, title: str,
                chosen: dict | None = None, members: list | None = None) -> str:
    """Latency against fidelity of every searched candidate (a family file's "search"
    record, measured on `device`), the Pareto front drawn through its points, the members
    ringed and numbered (their index in `members`, a list of their factors; else by
    latency), the `chosen` member (its factors) starred -> path (PNG)."""
    plt = _pyplot()
    cands = search.get("candidates")
    if not isinstance(cands, list) or not all(isinstance(c, dict) for c in cands):
        raise ValueError("the family file holds no search record to plot")
    fig, ax = plt.subplots(figsize=(7, 4.8))
    lat = np.array([c["latency_ms"] for c in cands])
    fid = np.array([c["fidelity"] for c in cands])
    ax.plot(lat, fid, ".", color="tab:gray", alpha=0.6, label="candidate")
    front = sorted((c for c in cands if c["front"]), key=lambda c: c["latency_ms"])
    ax.step([c["latency_ms"] for c in front], [c["fidelity"] for c in front], "-",
            where="post", color="tab:blue", label="Pareto front")
    ringed = [c for c in cands if c["member"]]
    ax.plot([c["latency_ms"] for c in ringed], [c["fidelity"] for c in ringed], "o",
            mfc="none", ms=11, color="tab:orange", label="member")
    for k, c in enumerate(sorted(ringed, key=lambda c: c["latency_ms"])):
        label = members.index(c["factors"]) if members and c["factors"] in members else k
        ax.annotate(str(label), (c["latency_ms"], c["fidelity"]), xytext=(6, -12),
                    textcoords="offset points", fontsize=8)
        if chosen is not None and c["factors"] == chosen:
            ax.plot([c["latency_ms"]], [c["fidelity"]], "*", ms=16, color="tab:red",
                    label="chosen")
    lo_hi = search.get("latency_range")
    if lo_hi:
        ax.axvspan(lo_hi[0], lo_hi[1], color="tab:green", alpha=0.08, label="target range")
    ax.set_xscale("log")
    from matplotlib.ticker import FormatStrFormatter
    for axis in (ax.xaxis.set_major_formatter, ax.xaxis.set_minor_formatter):
        axis(FormatStrFormatter("%g"))                 # plain ticks: 2, 5, 10, not 10^0
    ax.tick_params(axis="x", which="minor", labelsize=7)
    ax.set_xlabel("latency (ms, log scale; edgenn's tuned plan on the build host)")
    ax.set_ylabel(f"fidelity ({search.get('metric', 'auto')})")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"{title}: {len(cands)} candidates, {len(ringed)} members\n"
                 f"{device.get('cpu', '?')}; kernels {device.get('tier', '?')}, "
                 f"{device.get('threads', '?')} thread(s)", fontsize=9)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
