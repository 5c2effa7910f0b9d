"""numpy layers, the MLP and CNN, losses, optimizers, flat parameter buffers and large-model profiles."""
