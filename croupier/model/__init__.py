"""Storage profiles, performance and cost models, and the selector that chooses P and the exchange."""
