"""GHRM: graph-based hierarchical relevance matching (paper 002, Yu et al., WWW 2021).
Used by the `ghrm` asset group (`word2vec`, `ghrm_runs`).
Start reading at `inputs` (graph-of-words per document), then `model` (GNN blocks, RSAP, k-max
readout, IDF gating, hinge loss) and `protocol` (five folds rotated 60/20/20, validation-chosen epoch);
`word2vec` trains the CBOW vectors the graphs' node features come from.
"""
