//! The FID network's parity with pytorch-fid (fixtures by `scripts/make_fid_fixtures.py`) and
//! the evaluation job (resume, job arrays, bad samples) with a small stand-in tokenizer.

mod inception;
mod job;
