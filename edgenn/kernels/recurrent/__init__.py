"""LSTM, GRU and RNN: the input projection on the gemm family, the recurrence's GEMV and cell
(_recurrent.h's rows)."""
