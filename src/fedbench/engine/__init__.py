"""Simulation engine: round loop, client runners, evaluation."""
