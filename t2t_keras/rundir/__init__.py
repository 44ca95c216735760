"""A run directory: where its files are, what they record, the model they build, its lock."""
