"""The real backend: node programs run in this process or under MPI, timed on the wall clock."""
