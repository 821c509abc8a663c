"""The side-by-side scripts' timing loop (edgenn.bench.interleave): every runner timed once
per round, in an order shuffled per round, so no runner always follows the same one."""
from edgenn.bench import Runner, interleave


def test_rounds_are_shuffled_so_each_runner_follows_the_others():
    log = []
    runners = [Runner(name, (lambda feeds, n=name: log.append(n)), 0.0) for name in "abcd"]
    interleave(runners, {}, rounds=40, warmup=2)
    timed = log[2 * len(runners):]                      # after the warm-up runs
    assert all(len(r.times) == 40 for r in runners)
    rounds = [timed[i:i + 4] for i in range(0, len(timed), 4)]
    assert all(sorted(r) == list("abcd") for r in rounds)   # each once per round
    before = {}
    for prev, cur in zip(timed, timed[1:]):
        before.setdefault(cur, set()).add(prev)
    assert all(before[n] >= set("abcd") - {n} for n in "abcd"), before   # each other one too
    log.clear()
    again = [Runner(name, (lambda feeds, n=name: log.append(n)), 0.0) for name in "abcd"]
    interleave(again, {}, rounds=40, warmup=2)
    assert log[8:] == timed                             # seeded: runs are repeatable
