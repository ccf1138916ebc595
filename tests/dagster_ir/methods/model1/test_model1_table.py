"""Pruning, self-translation and the table formats (Parquet, GIZA-style text)."""

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp

from dagster_ir.methods.model1 import (
    PruneConfig,
    TranslationTable,
    Vocabulary,
    prune,
    read_giza,
    row_sums,
    write_giza,
    write_parquet,
)

VOCAB = Vocabulary("words", ("[UNK]", "a", "b", "c", "d"), unk_id=0)


def em_matrix() -> sp.csr_matrix:
    dense = np.zeros((5, 5))
    dense[1, [1, 2, 3, 4]] = [0.5, 0.3, 0.15, 0.05]  # a
    dense[2, [1, 3]] = [0.999, 0.001]  # b: c falls below the threshold
    dense[3, [3]] = [1.0]  # c translates only into itself
    return sp.csr_matrix(dense)


def test_threshold_cap_and_self_translation():
    pruned = prune(em_matrix(), PruneConfig(min_prob=0.01, max_translations=2, self_prob=0.2)).toarray()
    # a: keep the top 2 (a .5, b .3); self = .2; the others share .8 in proportion: b -> .8 (only one)
    np.testing.assert_allclose(pruned[1], [0, 0.2, 0.8, 0, 0], rtol=1e-6)
    # b: c (0.001) is dropped; a keeps all of 1 - 0.2
    np.testing.assert_allclose(pruned[2], [0, 0.8, 0.2, 0, 0], rtol=1e-6)
    # c: nothing else left, so T(c|c) = 1
    np.testing.assert_allclose(pruned[3], [0, 0, 0, 1, 0])
    assert pruned[4].sum() == 0  # d never was a source: no row


def test_rows_sum_to_one_after_pruning():
    rng = np.random.default_rng(1)
    dense = rng.random((5, 5)) * (rng.random((5, 5)) < 0.7)
    dense[0] = 0
    dense /= np.maximum(dense.sum(axis=1, keepdims=True), 1e-12)
    for config in [
        PruneConfig(min_prob=0.1, max_translations=2, self_prob=0.3),
        PruneConfig(min_prob=0.0, max_translations=10, self_prob=None),
        PruneConfig(min_prob=0.25, max_translations=1, self_prob=0.9),
    ]:
        pruned = prune(sp.csr_matrix(dense), config)
        sums = np.asarray(pruned.sum(axis=1)).ravel()
        np.testing.assert_allclose(sums[1:], 1.0, rtol=1e-6)
        frame = TranslationTable(VOCAB, pruned).to_frame()
        assert row_sums(frame)["total"].to_numpy() == pytest.approx(1.0, rel=1e-6)


def test_each_setting_changes_the_table():
    base = PruneConfig(min_prob=0.01, max_translations=3, self_prob=0.2)
    reference = prune(em_matrix(), base).toarray()
    for changed in [
        PruneConfig(min_prob=0.2, max_translations=3, self_prob=0.2),
        PruneConfig(min_prob=0.01, max_translations=1, self_prob=0.2),
        PruneConfig(min_prob=0.01, max_translations=3, self_prob=0.5),
    ]:
        assert not np.allclose(prune(em_matrix(), changed).toarray(), reference), changed


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError, match="self_prob"):
        PruneConfig(self_prob=0.0)
    with pytest.raises(ValueError, match="max_translations"):
        PruneConfig(max_translations=0)


def test_frame_parquet_and_giza_round_trip(tmp_path):
    table = TranslationTable(VOCAB, prune(em_matrix(), PruneConfig(min_prob=0.01, self_prob=0.2)))
    frame = table.to_frame()
    assert frame.columns == ["src_token", "tgt_token", "prob"]
    # a: b .48, c .24, self .2, d .08
    assert frame.filter(pl.col("src_token") == "a")["tgt_token"].to_list() == ["b", "c", "a", "d"]
    again = TranslationTable.from_frame(pl.read_parquet(write_parquet(table, tmp_path / "t.parquet")), VOCAB)
    np.testing.assert_allclose(again.matrix.toarray(), table.matrix.toarray())
    giza = write_giza(table, tmp_path / "t.giza.txt")
    assert giza.read_text().splitlines()[0].split(" ")[:2] == ["a", "b"]
    np.testing.assert_allclose(
        TranslationTable.from_frame(read_giza(giza), VOCAB).matrix.toarray(), table.matrix.toarray(), rtol=1e-6
    )


def test_unknown_tokens_and_bad_giza_lines_are_named(tmp_path):
    frame = pl.DataFrame(
        {"src_token": ["a"], "tgt_token": ["zebra"], "prob": [1.0]},
        schema={"src_token": pl.String, "tgt_token": pl.String, "prob": pl.Float32},
    )
    with pytest.raises(ValueError, match="zebra"):
        TranslationTable.from_frame(frame, VOCAB)
    bad = tmp_path / "bad.txt"
    bad.write_text("a b 0.5\na b\n")
    with pytest.raises(ValueError, match="bad.txt"):
        read_giza(bad)
