"""A small config for the checkpoints with their own code; ``style`` picks the variants."""

from __future__ import annotations

from transformers import PretrainedConfig


class TinyConfig(PretrainedConfig):
    """Decoder and encoder sizes; ``attention`` is ``"matmul"`` (softmax over a masked matmul) or
    ``"sdpa"`` (``F.scaled_dot_product_attention``)."""

    model_type = "tiny_remote"

    def __init__(
        self,
        vocab_size: int = 128,
        hidden_size: int = 64,
        intermediate_size: int = 96,
        num_hidden_layers: int = 2,
        num_attention_heads: int = 4,
        num_key_value_heads: int = 2,
        max_position_embeddings: int = 64,
        rms_norm_eps: float = 1e-6,
        rope_theta: float = 10000.0,
        attention: str = "matmul",
        use_cache: bool = True,
        **kwargs,
    ) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        self.attention = attention
        self.use_cache = use_cache
        super().__init__(**kwargs)
