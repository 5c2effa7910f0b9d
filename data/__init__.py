"""Dataset readers (IDX, CIFAR binary), download with checksums, the bundled MNIST subset, synthetic data, sharding."""
