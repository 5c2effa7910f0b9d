"""The SimPy backend: node programs inside a model of a cluster (built in the simulator issue)."""
