"""Canonical-subgraph patterns (one file each) that claim FX regions and emit components."""
