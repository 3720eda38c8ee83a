//! 2-D convolution (todo).
