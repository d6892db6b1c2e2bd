"""The command lines of train/: `lmshards train`, `preview`, `export`, `fill-mask` and `env`."""
