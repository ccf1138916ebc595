"""One package per paper, each readable top to bottom beside its paper in ../shared/papers.

php/ (000, hyperlink pre-training), model1/ (001, lexical translation), ghrm/ (002, graph-based
relevance matching), cet/ (003, coupled estimation against pooling bias). What several methods share
lives below them in `dagster_ir.neural`; nothing below `methods` imports it.
"""
