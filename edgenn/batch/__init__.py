"""Batch scoring on a distributed engine (optional extras): dask.py for Dask."""
