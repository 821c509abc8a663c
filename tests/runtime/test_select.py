"""The load-time autotuner: correctness before timing, fastest wins, cached per CPU."""
import time

import numpy as np
import pytest

from edgenn.graph.ir import Node
from edgenn.oplist import load_all
from edgenn.registry import KERNELS, KernelSpec, TensorInfo
from edgenn.runtime import select, tunecache

load_all()


def relu_kernel(delay=0.0, wrong=False, calls=None):
    def prepare(node, ins, outs):
        if calls is not None:
            calls.append(node.name)

        def run(inputs, outputs):
            if delay:
                time.sleep(delay)
            np.maximum(inputs[0], 0, out=outputs[0])
            if wrong:
                outputs[0] += 1
        return run
    return prepare


@pytest.fixture
def fake_relu_kernels(monkeypatch, tmp_path):
    """Replace Relu's kernels with: slow-correct, fast-wrong, fast-correct."""
    monkeypatch.setenv("EDGENN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tunecache, "_loaded", {})
    calls = []
    specs = [KernelSpec("Relu", "slow", relu_kernel(delay=0.002, calls=calls)),
             KernelSpec("Relu", "wrong", relu_kernel(wrong=True, calls=calls)),
             KernelSpec("Relu", "fast", relu_kernel(calls=calls))]
    monkeypatch.setitem(KERNELS, "Relu", specs)
    return calls


def node_and_infos(shape=(4, 64)):
    node = Node("Relu", ["x"], ["y"], {}, "r")
    return node, [TensorInfo("float32", shape)], [TensorInfo("float32", shape)]


def test_wrong_candidate_never_wins_and_fastest_is_bound(fake_relu_kernels):
    node, ins, outs = node_and_infos()
    choice = select.choose(node, ins, outs, tuner=select.Tuner(mode="full"))
    assert choice.kernel == "fast"
    assert set(choice.times) == {"slow", "fast"}       # "wrong" was never timed
    assert "wrong disagrees with the reference" in choice.reason
    x = np.array([[-1.0, 2.0]], np.float32)
    y = np.empty_like(x)
    choice.run([x], [y])
    np.testing.assert_array_equal(y, [[0.0, 2.0]])


def test_cache_hit_does_no_timing_and_survives_reload(fake_relu_kernels, monkeypatch):
    node, ins, outs = node_and_infos()
    tuner = select.Tuner(mode="cached")
    select.choose(node, ins, outs, tuner=tuner)
    tuner.finish()                                      # written to disk
    monkeypatch.setattr(tunecache, "_loaded", {})       # a new process
    fake_relu_kernels.clear()
    choice = select.choose(node, ins, outs, tuner=select.Tuner(mode="cached"))
    assert choice.kernel == "fast" and choice.reason == "cached timing"
    assert fake_relu_kernels == ["r"]                   # only the winner was prepared


def test_modes_off_and_full(fake_relu_kernels):
    node, ins, outs = node_and_infos()
    off = select.choose(node, ins, outs, tuner=select.Tuner(mode="off"))
    assert off.kernel == "slow" and not off.times      # registry order, nothing timed
    select.choose(node, ins, outs, tuner=select.Tuner(mode="cached"))
    fake_relu_kernels.clear()
    full = select.choose(node, ins, outs, tuner=select.Tuner(mode="full"))
    assert full.reason.startswith("fastest measured") and len(fake_relu_kernels) == 3


@pytest.mark.parametrize("approx_delay, winner", [(0.0018, "exact"), (0.0005, "approx")])
def test_an_approximate_kernel_needs_a_margin(monkeypatch, tmp_path, approx_delay, winner):
    """A candidate allowed an output step (lsb_tolerance) is bound only when it beats the
    fastest exact one by APPROX_MARGIN: 2.0 ms exact against 1.8 ms approximate (1.25x
    would be needed) keeps the exact one, against 0.5 ms binds the approximate one."""
    monkeypatch.setenv("EDGENN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tunecache, "_loaded", {})
    monkeypatch.setitem(KERNELS, "Relu", [
        KernelSpec("Relu", "exact", relu_kernel(delay=0.002)),
        KernelSpec("Relu", "approx", relu_kernel(delay=approx_delay), lsb_tolerance=1)])
    assert 0.002 / 0.0018 < select.APPROX_MARGIN < 0.002 / 0.0005
    node, ins, outs = node_and_infos()
    choice = select.choose(node, ins, outs, tuner=select.Tuner(mode="full"))
    assert choice.kernel == winner and set(choice.times) == {"exact", "approx"}
    assert ("fastest exact" in choice.reason) == (winner == "exact")


def test_key_separates_shapes_constness_and_threads(fake_relu_kernels, tmp_path):
    node, ins, _ = node_and_infos()
    k1 = tunecache.node_key(node, ins)
    assert k1 != tunecache.node_key(node, [TensorInfo("float32", (4, 65))])
    assert k1 != tunecache.node_key(node, [TensorInfo("float32", (4, 64),
                                                        np.zeros((4, 64), np.float32))])
    assert tunecache._path(1) != tunecache._path(2)
    assert str(tmp_path) in tunecache._path(1)


def test_a_rebuilt_kernel_module_is_timed_afresh(tmp_path):
    """The cache file is keyed by the compiled modules' names, sizes and times: a rebuild
    under the same version number (a source install between releases) does not inherit
    choices timed on the old build."""
    so = tmp_path / "_sgemm.so"
    so.write_bytes(b"x" * 100)
    other = tmp_path / "_qgemm.so"
    other.write_bytes(b"y" * 50)
    before = tunecache.files_digest([str(so), str(other)])
    assert before == tunecache.files_digest([str(other), str(so)])   # order-free
    so.write_bytes(b"x" * 101)                                       # rebuilt
    assert tunecache.files_digest([str(so), str(other)]) != before
    assert tunecache.files_digest([str(tmp_path / "missing.so")]) == tunecache.files_digest([])
    assert f"-b{tunecache.build_digest()}-" in tunecache._path(1)


def test_corrupt_cache_is_ignored(fake_relu_kernels):
    import os
    path = tunecache._path(1)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("{not json")
    node, ins, outs = node_and_infos()
    assert select.choose(node, ins, outs, tuner=select.Tuner(mode="cached")).kernel == "fast"


def test_cost_model_prunes(monkeypatch, fake_relu_kernels):
    specs = KERNELS["Relu"]
    specs[0].cost = lambda node, ins, outs: 100.0   # "slow": hopeless by the model
    specs[2].cost = lambda node, ins, outs: 1.0
    node, ins, outs = node_and_infos()
    choice = select.choose(node, ins, outs, tuner=select.Tuner(mode="full"))
    assert "slow" not in choice.times


def test_budget_spent_falls_back_without_timing(fake_relu_kernels):
    node, ins, outs = node_and_infos()
    tuner = select.Tuner(mode="full", budget_s=0.0)
    choice = select.choose(node, ins, outs, tuner=tuner)
    # no timing: the cost model's pick, here (fake kernels, no samples) the first capable
    assert choice.reason == "tuning budget spent: untimed, first capable"
    assert not choice.times


def test_bad_mode():
    with pytest.raises(ValueError, match="tune must be one of"):
        select.Tuner.resolve_mode("sometimes")


@pytest.fixture
def pooled_relu_kernels(monkeypatch, tmp_path):
    """Relu kernels of the three pools: a BLAS-pool one, an OpenMP-pool one (slow), a plain one."""
    monkeypatch.setenv("EDGENN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tunecache, "_loaded", {})
    specs = [KernelSpec("Relu", "on_blas", relu_kernel(), pool="blas"),
             KernelSpec("Relu", "on_omp", relu_kernel(delay=0.003), pool="omp"),
             KernelSpec("Relu", "own", relu_kernel(delay=0.001))]
    monkeypatch.setitem(KERNELS, "Relu", specs)


def test_a_plan_never_mixes_the_two_thread_pools(pooled_relu_kernels):
    node, ins, outs = node_and_infos()
    for pool, banned in (("blas", "on_omp"), ("omp", "on_blas")):
        choice = select.choose(node, ins, outs, tuner=select.Tuner(mode="full", pool=pool))
        assert banned not in choice.times and choice.kernel != banned
    # an op whose only kernels are BLAS ones keeps them in an OpenMP plan
    assert select._same_pool([KERNELS["Relu"][0]], "omp") == [KERNELS["Relu"][0]]


def test_two_thread_session_times_both_pools_once(pooled_relu_kernels, monkeypatch):
    from edgenn.graph.ir import Graph, ValueInfo
    from edgenn.runtime import session as session_mod
    g = Graph([Node("Relu", ["x"], ["h"], {}, "r1"), Node("Relu", ["h"], ["y"], {}, "r2")],
              [ValueInfo("x", "float32", (4, 64))], [ValueInfo("y", "float32", (4, 64))], {})
    timed = []
    real = session_mod._time_plans
    monkeypatch.setattr(session_mod, "_time_plans",
                        lambda plans, threads: timed.extend(p.pool for p in plans.values())
                        or real(plans, threads))
    monkeypatch.setattr(select, "cores_free", lambda threads: 1.0)   # cores free
    sess = session_mod.InferenceSession(g, threads=2)
    assert sorted(timed) == ["blas", "omp"]
    plan = sess.plan
    assert plan.variant == min(plan.pool_times, key=plan.pool_times.get)
    kernels = {s.choice.kernel for s in plan.steps}
    assert not {"on_blas", "on_omp"} <= kernels
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0))
    timed.clear()
    monkeypatch.setattr(tunecache, "_loaded", {})              # a new process
    again = session_mod.InferenceSession(g, threads=2)
    assert timed == [] and again.plan.variant == plan.variant  # the decision was cached


def test_a_plan_with_k_splitting_kernels_is_timed_with_them_split(monkeypatch, tmp_path):
    """An OpenMP plan one of whose kernels can split K (conv_sgemm's rows mode:
    run.can_split_k) is timed once more with them split (PlanContext.k_split, the
    "omp-ksplit" variant); the fastest of the three plans is kept and its choice cached."""
    from edgenn.graph.ir import Graph, ValueInfo
    from edgenn.kernels.plan_context import current
    from edgenn.runtime import session as session_mod
    monkeypatch.setenv("EDGENN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tunecache, "_loaded", {})
    prepared = []

    def prepare(node, ins, outs):
        split = current().k_split
        prepared.append(split)

        def run(inputs, outputs):
            time.sleep(0.0005 if split else 0.002)      # splitting K pays here
            np.maximum(inputs[0], 0, out=outputs[0])
        run.can_split_k = True
        return run
    monkeypatch.setitem(KERNELS, "Relu", [KernelSpec("Relu", "splits_k_mt", prepare, pool="omp"),
                                          KernelSpec("Relu", "on_blas", relu_kernel(0.003),
                                                     pool="blas")])
    g = Graph([Node("Relu", ["x"], ["y"], {}, "r1")], [ValueInfo("x", "float32", (4, 64))],
              [ValueInfo("y", "float32", (4, 64))], {})
    timed = []
    real = session_mod._time_plans
    monkeypatch.setattr(session_mod, "_time_plans",
                        lambda plans, threads: timed.append(sorted(plans)) or real(plans, threads))
    monkeypatch.setattr(select, "cores_free", lambda threads: 1.0)
    sess = session_mod.InferenceSession(g, threads=2)
    assert timed == [["blas", "omp", "omp-ksplit"]] and True in prepared
    assert sess.plan.variant == "omp-ksplit" and sess.plan.pool == "omp"
    monkeypatch.setattr(tunecache, "_loaded", {})              # a new process
    prepared.clear()
    again = session_mod.InferenceSession(g, threads=2)
    assert len(timed) == 1 and prepared == [True] and again.plan.variant == "omp-ksplit"


def test_a_plan_whose_layers_can_split_rows_is_timed_with_only_those(monkeypatch, tmp_path):
    """Where a kernel whose threads split the output rows applies (KernelSpec.thread_split),
    the session times one more OpenMP plan, "omp-rows", whose candidates there are only
    such kernels; it is kept where it runs faster whole though its kernel is the slower
    one alone. The fake: the rows kernel is fast only after another rows step, as a
    row-split layer reading rows its own core wrote."""
    from edgenn.graph.ir import Graph, ValueInfo
    from edgenn.runtime import session as session_mod
    monkeypatch.setenv("EDGENN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tunecache, "_loaded", {})
    last = ["none"]

    def kernel_of(kind):
        def prepare(node, ins, outs):
            def run(inputs, outputs):
                time.sleep(0.001 if kind == "channels" else
                           0.0002 if last[0] == "rows" else 0.002)
                last[0] = kind
                np.maximum(inputs[0], 0, out=outputs[0])
            return run
        return prepare
    monkeypatch.setitem(KERNELS, "Relu", [
        KernelSpec("Relu", "channels_mt", kernel_of("channels"), pool="omp"),
        KernelSpec("Relu", "rows_mt", kernel_of("rows"), pool="omp", thread_split="rows"),
        KernelSpec("Relu", "on_blas", relu_kernel(0.003), pool="blas")])
    g = Graph([Node("Relu", [a], [b], {}, b) for a, b in (("x", "h1"), ("h1", "h2"),
                                                          ("h2", "y"))],
              [ValueInfo("x", "float32", (4, 64))], [ValueInfo("y", "float32", (4, 64))], {})
    timed = []
    real = session_mod._time_plans
    monkeypatch.setattr(session_mod, "_time_plans",
                        lambda plans, threads: timed.append(plans) or real(plans, threads))
    monkeypatch.setattr(select, "cores_free", lambda threads: 1.0)
    sess = session_mod.InferenceSession(g, threads=2)
    (plans,) = timed
    assert sorted(plans) == ["blas", "omp", "omp-rows"]
    assert {s.choice.kernel for s in plans["omp"].steps} == {"channels_mt"}   # alone: faster
    assert {s.choice.kernel for s in plans["omp-rows"].steps} == {"rows_mt"}
    assert sess.plan.variant == "omp-rows"
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0))
    monkeypatch.setattr(tunecache, "_loaded", {})              # a new process
    again = session_mod.InferenceSession(g, threads=2)
    assert len(timed) == 1 and again.plan.variant == "omp-rows"
    assert {s.choice.kernel for s in again.plan.steps} == {"rows_mt"}


def test_row_split_kernels_are_marked_so():
    """The depthwise and ExpandDepthwise kernels whose threads split the output rows say
    so in their spec (what the "omp-rows" plan selects by), and no other kernel does."""
    from edgenn.oplist import load_kernels
    load_kernels()
    rows = {s.name for specs in KERNELS.values() for s in specs if s.thread_split == "rows"}
    assert {"depthwise_c8_rowsplit_mt", "expand_depthwise_c8_rowsplit_mt"} <= rows
    assert all("rowsplit" in n and n.endswith("_mt") for n in rows)
    assert not any(s.thread_split for specs in KERNELS.values() for s in specs
                   if "rowsplit" not in s.name)


def test_a_pool_choice_timed_on_shared_cores_is_not_cached(pooled_relu_kernels, monkeypatch):
    """The second vCPU taken while the plans were timed: the choice holds for this session
    only, and a new process times the pools again."""
    from edgenn.graph.ir import Graph, ValueInfo
    from edgenn.runtime import session as session_mod
    g = Graph([Node("Relu", ["x"], ["y"], {}, "r1")], [ValueInfo("x", "float32", (4, 64))],
              [ValueInfo("y", "float32", (4, 64))], {})
    timed = []
    real = session_mod._time_plans
    monkeypatch.setattr(session_mod, "_time_plans",
                        lambda plans, threads: timed.append(threads) or real(plans, threads))
    shared = [True]              # the cores are shared once the pools have been timed
    monkeypatch.setattr(select, "cores_free",
                        lambda threads: 0.5 if shared[0] and timed else 1.0)
    session_mod.InferenceSession(g, threads=2)
    assert timed == [2]
    monkeypatch.setattr(tunecache, "_loaded", {})              # a new process
    shared[0] = False
    session_mod.InferenceSession(g, threads=2)
    assert timed == [2, 2]                                     # timed again, then cached
    monkeypatch.setattr(tunecache, "_loaded", {})
    session_mod.InferenceSession(g, threads=2)
    assert timed == [2, 2]


def test_a_kernel_choice_timed_on_shared_cores_is_not_cached(fake_relu_kernels, monkeypatch):
    """The same for each node's kernel choice at > 1 thread: used for the plan, not kept."""
    node, ins, outs = node_and_infos()
    monkeypatch.setattr(select, "cores_free", lambda threads: 0.5)
    choice = select.choose(node, ins, outs, tuner=select.Tuner(mode="full", threads=2))
    assert choice.times and not tunecache.load(2)
    monkeypatch.setattr(select, "cores_free", lambda threads: 1.0)
    select.choose(node, ins, outs, tuner=select.Tuner(mode="full", threads=2))
    assert len(tunecache.load(2)) == 1


def test_cores_available_is_a_share_of_the_threads():
    from edgenn.kernels.gemm import _sgemm
    assert _sgemm.cores_available(1) == 1.0
    assert 0.0 < _sgemm.cores_available(2, n=20000) <= 1.0


def test_pool_timing_interleaves_the_plans(monkeypatch):
    """The two pools' plans are timed round by round, alternately (a burst of load hits
    both), each sample the second of two runs in a row (the first wakes the pool's
    sleeping workers), never while OpenBLAS's workers spin: after a plan that called BLAS
    the timing waits for them, after one that did not it does not. The cores are probed
    before the first round and after each; the least share is returned."""
    from edgenn.runtime import session as session_mod
    order = []
    monkeypatch.setattr(session_mod, "_run", lambda plan, threads, feeds, names:
                        order.append(plan.pool))
    monkeypatch.setattr(session_mod.thread_control, "wait_blas_idle",
                        lambda: order.append("idle"))

    class FakePlan:
        def __init__(self, pool):
            self.pool, self.input_specs, self.output_refs = pool, [("float32", (2,))], {}
            self.uses_blas = pool == "blas"
    shares = iter([1.0, 0.9, 0.5, 1.0])      # the cores' share at each probe
    monkeypatch.setattr(select, "cores_free",
                        lambda threads: order.append("probe") or next(shares))
    times, free = session_mod._time_plans({"blas": FakePlan("blas"), "omp": FakePlan("omp")},
                                          2, rounds=(3, 3))
    assert order == ["probe"] + ["blas", "blas", "idle", "omp", "omp", "probe"] * 3
    assert set(times) == {"blas", "omp"} and all(t >= 0 for t in times.values())
    assert free == 0.5           # the least share at any probe: one round under load


def test_plans_are_timed_for_more_rounds_while_the_timing_is_short(monkeypatch):
    """At least PLAN_ROUNDS[0] rounds; more, up to PLAN_ROUNDS[1], while the timing has
    taken less than PLAN_TIMING_S (9 rounds picked any of MobileNetV2's three OpenMP
    plans, 1-3% apart)."""
    from edgenn.runtime import session as session_mod

    class FakePlan:
        def __init__(self, pool):
            self.pool, self.input_specs, self.output_refs = pool, [("float32", (2,))], {}
            self.uses_blas = False
    runs = []
    monkeypatch.setattr(session_mod, "_run", lambda plan, *a: runs.append(plan.pool))
    monkeypatch.setattr(select, "cores_free", lambda threads: 1.0)
    session_mod._time_plans({"omp": FakePlan("omp")}, 2, rounds=(2, 7))
    assert len(runs) == 2 * 7                          # quick runs: every round
    runs.clear()
    monkeypatch.setattr(session_mod, "PLAN_TIMING_S", 0.0)
    session_mod._time_plans({"omp": FakePlan("omp")}, 2, rounds=(2, 7))
    assert len(runs) == 2 * 2                          # the time spent: the minimum


def test_candidates_are_timed_in_rounds_not_one_after_another(monkeypatch):
    """Each round runs every candidate once: a burst of load that lasts a few hundred ms
    slows them alike instead of landing on one candidate's samples. With threads > 1 the
    OpenMP workers are woken before each timed run (not by a second, cache-warming run)."""
    from edgenn.kernels.gemm import _sgemm
    order = []
    runs = {name: (lambda inputs, outputs, n=name: order.append(n)) for name in "abc"}
    times = select._time_round_robin(runs, [], [])
    assert set(times) == set("abc")
    rounds = len(order) // 3
    assert select.MIN_REPEATS <= rounds <= select.MAX_REPEATS and len(order) == 3 * rounds
    assert order == ["a", "b", "c"] * rounds
    order.clear()
    monkeypatch.setattr(_sgemm, "wake_threads", lambda n: order.append(f"wake{n}"))
    select._time_round_robin(runs, [], [], threads=2)
    rounds = len(order) // 6
    assert order == ["wake2", "a", "wake2", "b", "wake2", "c"] * rounds and rounds >= 3
    _sgemm.wake_threads(2)      # the real one: an empty region, no error


def test_openmp_plan_is_built_with_blas_at_one_thread(pooled_relu_kernels, monkeypatch):
    """The reference outputs the candidates are checked against call BLAS: at two threads
    its spinning workers would share a core with the OpenMP candidates timed next. The
    OpenMP plan is built first, with OpenBLAS at one thread; the BLAS plan at the
    session's count."""
    from edgenn.graph.ir import Graph, ValueInfo
    from edgenn.runtime import session as session_mod
    g = Graph([Node("Relu", ["x"], ["y"], {}, "r1")],
              [ValueInfo("x", "float32", (4, 64))], [ValueInfo("y", "float32", (4, 64))], {})
    seen = []
    real_build = session_mod.build
    monkeypatch.setattr(session_mod, "build", lambda graph, shapes, tuner, **kw: seen.append(
        (tuner.pool, session_mod.thread_control.current_blas())) or real_build(
            graph, shapes, tuner=tuner, **kw))
    session_mod.InferenceSession(g, threads=2)
    assert seen == [("omp", 1), ("blas", 2)]


WRITER = r"""
import sys
from edgenn.runtime import tunecache
who = sys.argv[1]
for i in range(40):
    tunecache.load(1)[f"{who}-{i}"] = {"kernel": who}
    tunecache.save(1)
"""


def test_cache_writes_from_several_processes_merge_and_never_corrupt(tmp_path):
    """4 processes write 40 entries each into one cache file at once: the file is valid
    JSON at the end and holds all 160 entries (file lock + merge + atomic rename)."""
    import json
    import os
    import subprocess
    import sys
    env = dict(os.environ, EDGENN_CACHE_DIR=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, f"p{k}"], env=env)
             for k in range(4)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    files = [f for f in (tmp_path / "tune").iterdir() if f.suffix == ".json"]
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    assert {f"p{k}-{i}" for k in range(4) for i in range(40)} <= set(data)


def test_blas_idle_wait_only_after_blas_runs(monkeypatch):
    from edgenn.runtime import session as session_mod
    slept = []
    monkeypatch.setattr("time.sleep", slept.append)
    class FakePlan:
        def __init__(self, uses_blas):
            self.uses_blas = uses_blas
    session_mod._let_blas_idle(FakePlan(False))
    session_mod._let_blas_idle(FakePlan(True))
    from edgenn.runtime import threads
    assert slept == [threads.BLAS_SPIN_S] and threads.BLAS_SPIN_S >= 0.1
