"""Progress bars (edgenn/progress.py): drawn on a terminal; logs get one line per stage."""
import io

from edgenn.progress import bars, planning_bar


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_bars_on_a_terminal_and_quiet_elsewhere():
    tty, pipe = Tty(), io.StringIO()
    for stream in (tty, pipe):
        p = bars(stream, after_s=0.0)
        for k in range(1, 6):
            p("calibrating: min/max", k, 5)
        for k in range(1, 4):
            p("calibrating: histograms", k, 3)
    assert "calibrating: min/max" in tty.getvalue() and "5/5" in tty.getvalue()
    assert "calibrating: histograms" in tty.getvalue()
    # a log gets no bar, one line per finished stage
    assert pipe.getvalue() == "calibrating: min/max: 5/5\ncalibrating: histograms: 3/3\n"


def test_planning_bar_waits_until_slow():
    tty = Tty()
    p = planning_bar(tty, after_s=60.0)
    for k in range(1, 4):
        p(k, 3)
    assert tty.getvalue() == ""          # quick planning shows nothing
