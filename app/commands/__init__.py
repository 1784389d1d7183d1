"""One module per CLI command; each owns its options and imports heavy libraries lazily."""
