"""Progress bars for the long operations of the CLI (planning and tuning, calibration,
quantization stages, fine-tuning), drawn by tqdm on a terminal; quiet when stderr is not
one (logs and pipes get at most one line per finished stage)."""
from __future__ import annotations

import sys


def _live(stream) -> bool:
    return hasattr(stream, "isatty") and stream.isatty()


def bars(stream=None, after_s: float = 1.0, summary: bool = True):
    """-> progress(stage, done, total): one tqdm bar per stage (a new stage closes the
    previous bar); a bar appears only once its stage has taken `after_s` seconds. Off a
    terminal no bar is drawn; with `summary`, one line per finished stage instead."""
    from tqdm import tqdm
    stream = stream or sys.stderr
    live = _live(stream)
    state = {"stage": None, "bar": None}

    def progress(stage: str, done: int, total: int) -> None:
        if not live:               # a log: no bar, one line when a stage is done
            if done >= total and summary:
                stream.write(f"{stage}: {done}/{total}\n")
                stream.flush()
            return
        if state["stage"] != stage:
            if state["bar"] is not None:
                state["bar"].close()
            state["stage"] = stage
            state["bar"] = tqdm(total=total, desc=stage, file=stream, delay=after_s,
                                leave=True, dynamic_ncols=True)
        bar = state["bar"]
        bar.total = total
        bar.update(done - bar.n)          # update() honours `delay`, refresh() would not
        if done >= total:
            bar.close()
            state["stage"], state["bar"] = None, None
    return progress


def planning_bar(stream=None, after_s: float = 1.0):
    """-> progress(done, total) for InferenceSession(progress=...)."""
    staged = bars(stream, after_s, summary=False)
    return lambda done, total: staged("planning and tuning kernels", done, total)
