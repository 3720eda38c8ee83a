//! taming-transformers VQGAN.
