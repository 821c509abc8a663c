"""The performance pages (docs/performance/) are generated from run records by
tools/perf_pages.py: the committed pages match their records, and a record renders as the
table it holds (the ratio to the best peer, the CPU named, newest run first)."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("perf_pages", ROOT / "tools" / "perf_pages.py")
perf_pages = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(perf_pages)


def _record(date, edgenn_ms, ort_ms, mnn_ms, cpu="AMD EPYC (family 25 model 1); kernels: avx2"):
    return {"cpu": cpu, "machine": "x86_64", "date": date, "threads": 1, "rounds": 15,
            "command": "python bench/compare_models.py --threads 1 mobilenet_v2-op13",
            "versions": {"edgenn": "0.1.0", "onnxruntime": "1.32.0", "MNN": None},
            "models": [{"model": "mobilenet_v2-op13", "shapes": {"input": [1, 3, 224, 224]},
                        "median_ms": {"edgenn": edgenn_ms, "onnxruntime": ort_ms,
                                      "mnn": mnn_ms},
                        "min_ms": {"edgenn": edgenn_ms, "onnxruntime": ort_ms,
                                   "mnn": mnn_ms}}]}


def test_committed_pages_match_their_records():
    assert perf_pages.main(["--check"]) == 0


def test_a_record_renders_its_table_newest_first(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "a.json").write_text(json.dumps(_record("2026-12-01", 9.0, 10.0, 12.0)))
    (runs / "b.json").write_text(json.dumps(_record("2026-12-07", 9.5, 9.0, 8.0)))
    (runs / "c.json").write_text(json.dumps(
        _record("2026-12-02", 5.0, 4.0, 6.0, cpu="Intel Xeon (family 6 model 207); kernels: "
                "avx512vnni")))
    mkdocs = tmp_path / "mkdocs.yml"
    mkdocs.write_text(f"nav:\n  - Home: index.md\n{perf_pages.NAV_BEGIN}\n{perf_pages.NAV_END}\n")
    pages = ["--pages", str(tmp_path), "--mkdocs", str(mkdocs)]
    assert perf_pages.main(pages) == 0
    page = (tmp_path / "amd-epyc-family-25-model-1-avx2.md").read_text()
    assert page.startswith("# AMD EPYC (family 25 model 1); kernels: avx2")
    assert page.index("## 2026-12-07") < page.index("## 2026-12-01")   # newest first
    assert "| 9.50 | 8.00 | 9.00 | 1.19 |" in page       # 9.5 / min(9.0, 8.0)
    assert "| 9.00 | 12.00 | 10.00 | 0.90 |" in page      # peers in name order: mnn, ort
    assert "avx512vnni" not in page
    index = (tmp_path / "index.md").read_text()
    assert "intel-xeon-family-6-model-207-avx512vnni.md" in index
    nav = mkdocs.read_text()      # the pages listed in the nav, titled by their CPU
    assert '    - "AMD EPYC (family 25 model 1); kernels: avx2": ' \
        "performance/amd-epyc-family-25-model-1-avx2.md" in nav
    # an edited record makes the pages stale until they are regenerated
    assert perf_pages.main(["--check", *pages]) == 0
    (runs / "a.json").write_text(json.dumps(_record("2026-12-01", 8.0, 10.0, 12.0)))
    assert perf_pages.main(["--check", *pages]) == 1
