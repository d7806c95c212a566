"""What each target can run: the op info library, the built-in colours, the one-node probe models."""
