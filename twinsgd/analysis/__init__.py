"""Reading run folders, comparing simulated and measured runs (built with the simulator)."""
