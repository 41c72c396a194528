"""The harness every experiment runs on: the job runner and its journal, the results contract,
plots, the README summary, provenance and the command line.
"""
