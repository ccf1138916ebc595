from dagster_ir.neural.backbone import backbone_path, load_encoder, load_tokenizer, make_tiny_backbone


def test_bundled_backbone_loads_offline():
    tokenizer = load_tokenizer()
    assert tokenizer("hyperlink")["input_ids"][0] == tokenizer.cls_token_id
    assert load_encoder().config.hidden_size == 384


def test_tiny_backbone_round_trips_through_plain_transformers(tmp_path):
    from transformers import AutoModel, AutoTokenizer

    folder = make_tiny_backbone(tmp_path / "tiny", hidden_size=16)
    assert backbone_path(str(folder)) == str(folder)
    model = AutoModel.from_pretrained(folder)
    assert model.config.hidden_size == 16
    assert (folder / "model.safetensors").exists()
    assert AutoTokenizer.from_pretrained(folder).vocab_size == load_tokenizer().vocab_size
