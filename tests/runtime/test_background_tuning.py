"""tune="background" (the default): a session is ready on a first plan that timed nothing,
the background tuner times what it guessed on a free core and swaps the tuned plan in
between calls; every result is some complete plan's, bit for bit, with 8 callers running
through the swap; the tuned choices are cached, so the next session starts tuned."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import edgenn
from edgenn.runtime import session as session_module


def _conv_net(channels=(3, 24, 32, 32), hw=40, seed=0) -> bytes:
    """3x3 convs with Relu (several kernels apply to each: the tuner has work)."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i, (c_in, c_out) in enumerate(zip(channels, channels[1:])):
        w = (rng.standard_normal((c_out, c_in, 3, 3)) / np.sqrt(9 * c_in)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(c_out).astype(np.float32),
                                          f"b{i}")]
        nodes += [helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], f"conv{i}",
                                   pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], f"relu{i}")]
        prev = f"r{i}"
    g = helper.make_graph(nodes, "net",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [1, channels[0], hw, hw])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGENN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("EDGENN_TUNE")
    return tmp_path / "cache"


def _plan_output(sess, plan, x):
    return session_module._run(plan, sess.threads, [x], [v.name for v in sess.graph.outputs])[0]


def test_first_plan_at_once_then_the_tuned_plan_is_swapped_in(empty_cache):
    model = _conv_net()
    x = np.random.default_rng(1).standard_normal((1, 3, 40, 40)).astype(np.float32)
    sess = edgenn.InferenceSession(model)          # the default mode
    assert sess.tune == "background"
    first = sess.plan
    assert first.untimed > 0
    assert all(s.choice.reason.startswith("first plan") or s.choice.kernel in
               ("reference", "empty") or "only capable" in s.choice.reason
               for s in first.steps)
    y_first = sess.run(None, {"x": x})[0]
    assert sess.wait_tuned(120), "the background tuner did not finish in 120 s"
    assert not sess._background.errors
    tuned = sess.plan
    assert tuned is not first and tuned.untimed == 0
    assert any(s.choice.times for s in tuned.steps)      # timed, not guessed
    y_tuned = sess.run(None, {"x": x})[0]
    want = edgenn.InferenceSession(model, reference=True).run(None, {"x": x})[0]
    for y in (y_first, y_tuned):
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    # the timings were cached: the next session starts on the tuned choices, no tuner
    again = edgenn.InferenceSession(model)
    assert again.plan.untimed == 0
    assert [s.choice.kernel for s in again.plan.steps] == \
        [s.choice.kernel for s in tuned.steps]
    assert again.wait_tuned(0)


@pytest.mark.parametrize("mode", ["off", "cached", "full"])
def test_other_modes_start_no_tuner(empty_cache, mode):
    sess = edgenn.InferenceSession(_conv_net(), tune=mode)
    assert sess.plan.untimed == 0
    assert sess._background._thread is None and sess.wait_tuned(0)


def test_eight_callers_through_the_swap_get_complete_plans_results(empty_cache):
    """8 threads call while the tuner works and swaps: each result is bit for bit the
    first plan's or the tuned plan's (never a mix of the two), and calls ran on both."""
    model = _conv_net((3, 32, 32, 32, 32), hw=48)
    x = np.random.default_rng(2).standard_normal((1, 3, 48, 48)).astype(np.float32)
    sess = edgenn.InferenceSession(model)
    first = sess.plan
    assert first.untimed > 0
    results, errors, stop = [], [], threading.Event()

    def caller():
        try:
            while not stop.is_set():
                plan_before = sess._plans[next(iter(sess._plans))]
                y = sess.run(None, {"x": x})[0]
                results.append((plan_before is first, y))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=caller) for _ in range(8)]
    for t in threads:
        t.start()
    # the tuner times on a free core: with 8 callers there is none, so they pause now and
    # then (as an app's calls come and go) and the tuner gets its turns
    done = False
    for _ in range(400):
        stop.set()
        for t in threads:
            t.join()
        done = sess.wait_tuned(0.25)
        stop.clear()
        threads = [threading.Thread(target=caller) for _ in range(8)]
        for t in threads:
            t.start()
        if done:
            break
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
    assert done and sess.plan is not first
    want = {_plan_output(sess, first, x).tobytes(), _plan_output(sess, sess.plan, x).tobytes()}
    assert all(y.tobytes() in want for _, y in results)
    kinds = {on_first for on_first, _ in results}
    assert kinds == {True, False}, "the calls did not run on both plans"


def test_a_process_exits_while_its_tuner_works(tmp_path):
    """A short-lived process (a CLI, a test) ends cleanly with its tuner mid-way."""
    path = tmp_path / "net.onnx"
    path.write_bytes(_conv_net((3, 32, 32, 32, 32, 32), hw=56))
    code = (f"import numpy as np, edgenn\n"
            f"s = edgenn.InferenceSession({str(path)!r})\n"
            f"print(s.run(None, {{'x': np.ones((1, 3, 56, 56), np.float32)}})[0].shape)\n"
            f"assert s._background._thread is not None\n")
    env = {**os.environ, "EDGENN_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("EDGENN_TUNE", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "(1, 32, 56, 56)"


def test_bad_tune_mode_is_refused():
    with pytest.raises(ValueError, match="background"):
        edgenn.InferenceSession(_conv_net(), tune="sometimes")



def test_tune_ahead_then_ship_the_cache(tmp_path, monkeypatch, capsys):
    """`edgenn tune MODEL --export` on one machine, `edgenn tune --import` on another of
    the same CPU: sessions there start on the tuned plan (nothing left to time)."""
    from edgenn.cli import EXIT_OK, EXIT_REJECTED, main
    model = tmp_path / "net.onnx"
    model.write_bytes(_conv_net())
    monkeypatch.delenv("EDGENN_TUNE")
    monkeypatch.setenv("EDGENN_CACHE_DIR", str(tmp_path / "build-machine"))
    bundle = tmp_path / "tuning.json"
    assert main(["tune", str(model), "--export", str(bundle)]) == EXIT_OK
    tuned = [s.choice.kernel for s in edgenn.InferenceSession(str(model)).plan.steps]
    monkeypatch.setenv("EDGENN_CACHE_DIR", str(tmp_path / "device"))
    capsys.readouterr()
    assert main(["tune", "--import", str(bundle)]) == EXIT_OK
    added = int(capsys.readouterr().out.split()[0])
    assert added >= 3                  # the three convs' timings, at least
    sess = edgenn.InferenceSession(str(model))
    assert sess.plan.untimed == 0
    assert [s.choice.kernel for s in sess.plan.steps] == tuned
    # a bundle from another CPU or build is refused, not merged
    data = bundle.read_text().replace('"cpu": "', '"cpu": "other-')
    (tmp_path / "other.json").write_text(data)
    assert main(["tune", "--import", str(tmp_path / "other.json")]) == EXIT_REJECTED
