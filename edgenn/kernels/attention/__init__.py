"""Attention over a key / value cache: GroupQueryAttention's decode and prefill in C
(_gqa.h's rows)."""
