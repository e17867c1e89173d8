"""The tutorial's ResNet18 DDP training-step loop (configs here are torch-free)."""
