"""Third-party progress bars kept off a command's output: lmshards prints its own progress lines.

Hugging Face libraries draw tqdm bars on stderr while they load weights, list files or map datasets;
in a log or a CI transcript each one is dozens of carriage-return lines with no information.
"""

from __future__ import annotations

import os
import sys

# Read when each library is imported: huggingface_hub (and transformers through it) and datasets.
PROGRESS_ENVIRONMENT = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
}


def hide_third_party_progress_bars() -> None:
    """Turns off the progress bars of huggingface_hub, transformers and datasets in this process.

    Libraries imported later read the environment; those imported already are told directly.
    """
    os.environ.update(PROGRESS_ENVIRONMENT)
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    if "datasets" in sys.modules:
        from datasets.utils.tqdm import disable_progress_bars as disable_datasets_bars

        disable_datasets_bars()
