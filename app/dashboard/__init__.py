"""app/dashboard"""
