"""CET: coupled relevance and selection models against pooling bias (paper 003, Cai et al., CIKM 2022).
Used by the `cet` asset group (`sparse_qrels`, `false_negative_analysis`, `cet`, `cet_runs`).
Start reading at `model` (the coupled loss with IPW weights), then `baselines` (RocketQA and RANCE
negatives), `lab` (the pooling-bias lab that trains every ranker) and `report` (the Table 1 layout).
"""
