//! Vision Transformer with HF `ViTModel` weight names.
