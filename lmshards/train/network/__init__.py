"""The network: a family's keras-hub masked LM built from a ModelConfig, and its weights named the transformers way."""
