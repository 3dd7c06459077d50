"""The ``--before`` variants of the loader benchmark and its four data shapes."""

from __future__ import annotations

# benchmarks/ is on the tests' import path (pyproject's pytest ``pythonpath``)
from datagen.loader_data import SHAPES
from harness.runner import System
from harness.variants import before_after, variant_env, with_variants, worker_systems

SYSTEMS = {
    "scan": System("scan", "m:f"),
    "peer": System("peer", "m:g", env="peers"),
}


def test_every_main_row_gets_a_before_variant_and_peers_do_not() -> None:
    assert with_variants(["scan", "peer"], SYSTEMS) == ["scan", "scan@before", "peer"]
    found = worker_systems(SYSTEMS)
    assert found["scan@before"].name == "scan@before"
    assert found["scan@before"].target == "m:f"


def test_a_variant_runs_on_the_earlier_sources_and_the_row_on_ours() -> None:
    assert variant_env("scan@before", "/new/src", "/old/src") == {"PYTHONPATH": "/old/src"}
    assert variant_env("scan", "/new/src", "/old/src") == {"PYTHONPATH": "/new/src"}
    assert variant_env("scan", "/new/src", None) == {}


def test_before_after_pairs_rounds_and_skips_failed_rows() -> None:
    results = {
        "scan": {"rows_per_s": 200.0, "by_round": {"0": 200.0, "1": 90.0}, "loads": [1.0]},
        "scan@before": {"rows_per_s": 100.0, "by_round": {"0": 100.0, "1": 100.0}, "loads": [3.0]},
        "gone": {"error": "boom"},
        "gone@before": {"rows_per_s": 1.0},
    }
    rows = before_after(results)
    assert len(rows) == 1
    name, after, before, medians, paired, runs, load = rows[0]
    assert (name, after, before, medians, paired) == ("scan", "200", "100", "2.00x", "1.45x")
    assert load == "1.0-3.0"


def test_the_four_shapes_read_their_own_columns() -> None:
    assert SHAPES["text"].columns == ["id", "label", "text", "emb"]
    assert SHAPES["emb"].columns == ["id", "label", "emb"]
    assert SHAPES["tokens"].columns == ["id", "label", "tokens"]
    assert SHAPES["images"].columns == ["id", "label", "image"]
    assert SHAPES["images"].rows_for(200_000) == 2_000
    assert SHAPES["text"].rows_for(200_000) == 200_000


def test_the_image_structs_shape_holds_the_images_shapes_bytes_as_structs() -> None:
    import numpy as np
    import pyarrow as pa
    from datagen.loader_data import _rows

    flat, _ = _rows(0, 6, 6, np.random.default_rng(1), SHAPES["images"])
    structs, _ = _rows(0, 6, 6, np.random.default_rng(1), SHAPES["image_structs"])
    assert SHAPES["image_structs"].columns == ["id", "label", "image"]
    image = structs.column("image").combine_chunks()
    assert image.type == pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    assert image.field("bytes").equals(flat.column("image").combine_chunks())
    assert image.field("path").to_pylist() == [f"{i}.jpg" for i in range(6)]


def test_the_heldout_shape_is_the_issues_and_the_older_shapes_draw_as_before() -> None:
    import numpy as np
    from datagen.loader_data import _rows

    held = SHAPES["heldout"]
    assert held.columns == ["id", "label", "text", "emb"]
    assert held.rows_for(1_000_000) == 1_500_000 and not held.writes_tars
    sizes = [held.group_size(np.random.default_rng(s)) for s in range(200)]
    assert min(sizes) >= 20_000 and max(sizes) <= 90_000
    table, emb = _rows(0, 500, 500, np.random.default_rng(2), held)
    lengths = [len(t) for t in table.column("text").to_pylist()]
    assert min(lengths) >= 300 and max(lengths) <= 500 and emb.shape == (500, 32)
    # the older shapes keep their row groups: the draw is the one their data was made with
    old = SHAPES["tokens"]
    want = int(np.random.default_rng(5).integers(5_000, 40_001)) // 20
    assert old.group_size(np.random.default_rng(5)) == want and old.writes_tars is False
    assert SHAPES["text"].writes_tars


def test_the_raw_scan_hands_on_a_sliced_batchs_own_vectors(tmp_path: object) -> None:
    import json
    from pathlib import Path

    import numpy as np
    import pyarrow as pa
    from adapters.pyarrow_scan import _handler

    data = Path(str(tmp_path))
    (data / "meta.json").write_text(json.dumps({"emb_dim": 2, "payload": None}))
    emb = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(12, dtype=np.float32)), 2)
    rb = pa.record_batch({"id": np.arange(6), "label": np.arange(6), "emb": emb}).slice(2, 3)
    got: list[object] = []
    _handler(data, lambda labels, mat, more: got.append(mat))(rb)
    assert np.array_equal(got[0], np.arange(4, 10, dtype=np.float32).reshape(3, 2))
