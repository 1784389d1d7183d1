"""Application workflows: typed inputs in, results out, no printing (``app.commands`` render them)."""
