"""`lmshards dataset export`: one text column of a Hugging Face dataset -> Parquet or JSON Lines shards."""
