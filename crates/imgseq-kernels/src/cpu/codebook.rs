//! Nearest codebook entry (todo).
