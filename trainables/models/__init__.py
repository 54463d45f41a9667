"""Model registry: `model.name` picks the config schema and the module."""
from trainables.models.one_step import OneStepConfig, OneStepModel
from trainables.models.transformer import Transformer, TransformerConfig

CONFIGS = {"one_step": OneStepConfig, "transformer": TransformerConfig}


def build_model(cfg, vocab_size: int, max_len: int):
    """The module for a model config; both share forward(tokens, query) -> (logits (B, N), [(B, H, T)] per layer)."""
    if cfg.name == "one_step":
        return OneStepModel(vocab_size, max_len)
    return Transformer(cfg, vocab_size, max_len)
