"""(being written)"""
OPS: tuple = ()
