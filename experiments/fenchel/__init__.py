"""Attention as inference via Fenchel duality: the toy picture, the dual gap, each kernel in place
of softmax.
"""
