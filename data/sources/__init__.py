"""data/sources"""
