"""Direct convolution for few input channels (a network's RGB stem): _convdirect.h's rows."""
