"""Models in and out of the Hugging Face form: `lmshards export`, and the weights a run starts from (--init_from)."""
