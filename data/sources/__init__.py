"""Bar sources: CSV files, yfinance, Alpaca (alpaca-py), the shipped real sample.

A fetch goes through ``data.sources.stream.fetch_to_store``: chunk by chunk into the store, resumable.
"""
