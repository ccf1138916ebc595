"""GHRM model: GNN update, RSAP pooling, k-max readout, scoring, ablations, gradients."""

from __future__ import annotations

import math

import pytest
import torch

from dagster_ir.methods.ghrm.inputs import GraphBatch
from dagster_ir.methods.ghrm.model import (
    GHRM,
    PROFILES,
    GatedGraphLayer,
    ModelConfig,
    RelevanceSignalAttentionPooling,
    hinge_loss,
    kept_counts,
    kmax_readout,
    select_nodes,
    variant_config,
)

M = 3


def _random_batch(sizes: list[int], query_terms: list[int], seed: int = 0) -> GraphBatch:
    """Graphs with `sizes` real nodes (padded to the largest), symmetric normalised-looking adjacency."""
    generator = torch.Generator().manual_seed(seed)
    n = max(sizes)
    node_mask = torch.arange(n).unsqueeze(0) < torch.tensor(sizes).unsqueeze(1)
    query_mask = torch.arange(M).unsqueeze(0) < torch.tensor(query_terms).unsqueeze(1)
    pair = (node_mask.unsqueeze(2) & node_mask.unsqueeze(1)).float()
    raw = torch.rand(len(sizes), n, n, generator=generator)
    adjacency = (raw + raw.transpose(1, 2)) / (2 * n) * pair
    similarity = (
        (torch.rand(len(sizes), n, M, generator=generator) * 2 - 1) * node_mask.unsqueeze(2) * query_mask.unsqueeze(1)
    )
    idf = torch.rand(len(sizes), M, generator=generator) * 5 * query_mask
    return GraphBatch(similarity, adjacency, node_mask, idf, query_mask)


def _model(seed: int = 0, **changes) -> GHRM:
    torch.manual_seed(seed)
    return GHRM(ModelConfig(top_k=4, **changes), query_words=M).eval()


# --- GNN ----------------------------------------------------------------------------------------


def test_gated_graph_layer_follows_equations_4_to_8():
    torch.manual_seed(1)
    layer = GatedGraphLayer(2)
    h = torch.tensor([[[0.5, -1.0], [0.2, 0.3], [1.0, 0.0]]])
    adjacency = torch.tensor([[[0.5, 0.5, 0.0], [0.5, 0.25, 0.25], [0.0, 0.25, 0.75]]])
    w_z, w_r, w_h = layer.w_zrh.weight.split(2)
    b_z, b_r, b_h = layer.w_zrh.bias.split(2)
    u_z, u_r = layer.u_zr.weight.split(2)
    out = layer(h, adjacency)[0]
    for i in range(3):
        a = sum(adjacency[0, i, j] * (layer.w_a.weight @ h[0, j]) for j in range(3))
        z = torch.sigmoid(w_z @ a + u_z @ h[0, i] + b_z)
        r = torch.sigmoid(w_r @ a + u_r @ h[0, i] + b_r)
        candidate = torch.tanh(w_h @ a + layer.u_h.weight @ (r * h[0, i]) + b_h)
        torch.testing.assert_close(out[i], candidate * z + h[0, i] * (1 - z))


# --- readout ------------------------------------------------------------------------------------


def test_kmax_readout_shape_and_values():
    h = torch.tensor([[[0.1, 5.0], [0.9, -1.0], [0.5, 2.0], [99.0, 99.0]]])  # the last node is padding
    node_mask = torch.tensor([[True, True, True, False]])
    values = kmax_readout(h, node_mask, k=2)
    assert values.shape == (1, 2, 2)
    torch.testing.assert_close(values[0], torch.tensor([[0.9, 5.0], [0.5, 2.0]]))
    # more k than real nodes: the rest is 0, padding still never read
    values = kmax_readout(h, node_mask, k=6)
    assert values.shape == (1, 6, 2)
    torch.testing.assert_close(values[0, :, 0], torch.tensor([0.9, 0.5, 0.1, 0.0, 0.0, 0.0]))


# --- pooling ------------------------------------------------------------------------------------


def test_kept_counts_round_up_without_float_noise():
    mask = torch.arange(10).unsqueeze(0) < torch.tensor([[10], [5], [1], [0]])
    assert kept_counts(mask, 0.7).tolist() == [7, 4, 1, 0]  # 0.7 * 10 is 7.000000000000001 in floats
    assert kept_counts(mask, 0.8).tolist() == [8, 4, 1, 0]


def test_select_nodes_keeps_ceil_share_of_real_nodes_and_never_padding():
    sizes = [7, 3, 1, 5]
    node_mask = torch.arange(7).unsqueeze(0) < torch.tensor(sizes).unsqueeze(1)
    scores = torch.randn(4, 7).masked_fill(~node_mask, 100.0)  # padding scores highest of all
    index, kept = select_nodes(scores, node_mask, rate=0.5)
    assert kept.sum(dim=1).tolist() == [math.ceil(m * 0.5) for m in sizes]
    chosen = index[kept]
    rows = torch.arange(4).unsqueeze(1).expand_as(index)[kept]
    assert node_mask[rows, chosen].all()
    # the kept nodes are the top scores among the real ones
    best_of_first = scores[0].topk(4).indices.sort().values
    assert index[0][kept[0]].sort().values.tolist() == best_of_first.tolist()


def test_rsap_output_is_restricted_and_scaled():
    torch.manual_seed(0)
    pool = RelevanceSignalAttentionPooling(M, rate=0.6)
    batch = _random_batch([5, 2], [3, 3])
    h, adjacency, kept = pool(batch.similarity, batch.adjacency, batch.node_mask)
    assert kept.sum(dim=1).tolist() == [3, 2]
    assert h.shape == (2, 3, M) and adjacency.shape == (2, 3, 3)
    assert (h[~kept] == 0).all()
    assert (adjacency[1, 2:, :] == 0).all() and (adjacency[1, :, 2:] == 0).all()
    scores = torch.tanh(pool.gnn(pool.w_p(batch.similarity), batch.adjacency)).squeeze(-1)
    index, _ = select_nodes(scores, batch.node_mask, 0.6)
    first = index[0, 0]
    torch.testing.assert_close(h[0, 0], batch.similarity[0, first] * scores[0, first])
    torch.testing.assert_close(adjacency[0, 0, 1], batch.adjacency[0, first, index[0, 1]])


# --- the whole model ----------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["ghrm", "ghrm-nopool", "ghrm-soft"])
def test_scores_do_not_depend_on_node_order(variant):
    model = GHRM(variant_config(ModelConfig(top_k=4), variant), M).eval()
    batch = _random_batch([6, 4], [3, 2], seed=3)
    permutation = torch.tensor([3, 0, 5, 1, 4, 2])
    shuffled = GraphBatch(
        batch.similarity[:, permutation],
        batch.adjacency[:, permutation][:, :, permutation],
        batch.node_mask[:, permutation],
        batch.query_idf,
        batch.query_mask,
    )
    with torch.no_grad():
        torch.testing.assert_close(model(batch), model(shuffled))


def test_scores_do_not_depend_on_padding():
    model = _model()
    together = _random_batch([6, 3, 2], [3, 1, 2], seed=4)
    with torch.no_grad():
        scores = model(together)
        for i, size in enumerate([6, 3, 2]):
            alone = GraphBatch(
                together.similarity[i : i + 1, :size],
                together.adjacency[i : i + 1, :size, :size],
                together.node_mask[i : i + 1, :size],
                together.query_idf[i : i + 1],
                together.query_mask[i : i + 1],
            )
            torch.testing.assert_close(model(alone), scores[i : i + 1])


def test_signal_has_one_readout_per_block_and_signal_zero_is_the_similarity_top_k():
    model = _model(blocks=2)
    batch = _random_batch([6, 3], [3, 3])
    with torch.no_grad():
        signal = model.signals(batch)
    assert signal.shape == (2, 4 * 3, M)
    torch.testing.assert_close(signal[:, :4], kmax_readout(batch.similarity, batch.node_mask, 4))


def test_score_is_gated_sum_over_real_query_terms():
    model = _model()
    batch = _random_batch([5], [2])
    with torch.no_grad():
        per_term = model.mlp(model.signals(batch).transpose(1, 2)).squeeze(-1)[0, :2]
        gates = torch.softmax(model.idf_scale * batch.query_idf[0, :2], dim=0)
        torch.testing.assert_close(model(batch)[0], (gates * per_term).sum())


def test_query_without_terms_scores_zero():
    with torch.no_grad():
        assert float(_model()(_random_batch([4], [0]))[0]) == 0.0


def test_ablations_change_the_scores():
    batch = _random_batch([8, 5], [3, 2], seed=5)
    full = _model()
    soft, nopool = _model(rate=1.0), _model(pooling=False)
    soft.load_state_dict(full.state_dict())
    nopool.load_state_dict(full.state_dict(), strict=False)  # the same weights minus the RSAP layers
    assert len(nopool.pools) == 0
    with torch.no_grad():
        scores = full(batch)
        assert not torch.allclose(scores, soft(batch))
        assert not torch.allclose(scores, nopool(batch))


@pytest.mark.parametrize("variant", ["ghrm", "ghrm-nopool", "ghrm-soft"])
def test_gradients_reach_every_parameter(variant):
    torch.manual_seed(0)
    model = GHRM(variant_config(ModelConfig(top_k=4), variant), M)
    positive, negative = _random_batch([6, 5, 4], [3, 2, 3], seed=6), _random_batch([5, 6, 3], [3, 2, 3], seed=7)
    hinge_loss(model(positive), model(negative)).backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


def test_hinge_loss_values():
    loss = hinge_loss(torch.tensor([2.0, 0.5, 0.0]), torch.tensor([0.0, 0.0, 0.5]))
    torch.testing.assert_close(loss, torch.tensor((0.0 + 0.5 + 1.5) / 3))


def test_config_validation_and_variants():
    with pytest.raises(ValueError, match="rate"):
        ModelConfig(rate=0.0)
    with pytest.raises(ValueError, match="top_k"):
        ModelConfig(top_k=0)
    with pytest.raises(ValueError, match="unknown GHRM variant"):
        variant_config(ModelConfig(), "ghrm-hard")
    assert variant_config(ModelConfig(), "ghrm-soft").rate == 1.0
    assert variant_config(ModelConfig(), "ghrm-nopool").pooling is False
    assert PROFILES["paper"].model == ModelConfig(blocks=2, rate=0.8, top_k=40)
    assert PROFILES["paper"].training.lr == 1e-3 and PROFILES["paper"].training.pairs_per_batch == 16


def test_model_rejects_batch_with_other_query_length():
    with pytest.raises(ValueError, match="query terms"):
        GHRM(ModelConfig(top_k=4), query_words=5)(_random_batch([3], [2]))
