"""What comes in: checkpoint kinds, config, headers, key mapping, a checkpoint's own code."""
