"""Market data: bar schema and validation, sources, calendar alignment, store, features, MarketData."""
