"""Models: one module per method (cross encoder, PHP, Model 1, GHRM, CET) and a shared training loop."""
