"""The real backend: node programs executed in this process or under MPI, timed on the wall clock."""
