"""Exponential family attention (the EFA paper): synthetic data, MovieLens, Instacart, U.S.
temperatures, and efa's defaults on a known teacher.
"""
