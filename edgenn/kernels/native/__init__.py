"""The machine layer every kernel family builds on: the one CPU probe (_cpu.h: CPUID, HWCAP,
EDGENN_MAX_ISA), the SIMD layer (_simd.h), vector math, the one activation list
(_epilogue.h / epilogue.py), the family tables' Python face (tables.py) and the thread-
count cost hints."""
