"""Attention through exchangeability (Zhang et al.): CME attention and its rates; temperatures with
CME attention.
"""
