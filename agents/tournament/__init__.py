"""agents/tournament"""
