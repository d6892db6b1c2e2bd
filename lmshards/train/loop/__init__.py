"""The training loop and what it runs with: checks before training, TensorBoard files, SIGTERM/SIGINT."""
