"""The baselines' names (run names), importable without torch."""

WORD_MODELS = ("drmm", "knrm", "conv-knrm", "matchpyramid", "pacrr", "co-pacrr", "duet")
BERT_MODELS = ("bert-firstp", "bert-maxp", "cedr-knrm")
MODELS = WORD_MODELS + BERT_MODELS
