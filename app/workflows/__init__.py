"""Application workflows: typed inputs in, results out, no printing (the CLI's commands render them)."""
