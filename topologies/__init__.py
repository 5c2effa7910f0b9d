"""Graphs, mixing matrices and spectral gaps for gossip (built in the gossip issue)."""
