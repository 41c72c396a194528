"""Bidirectional attention as a mixture of CBOW experts (Wibisono & Wang, UAI 2023): word analogies
and tables.
"""
