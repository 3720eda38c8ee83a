//! Tests of `imgseq serve` over loopback HTTP: the API against the libraries' own results,
//! batching, and hostile requests (each bounded in time; servers stop when their test ends).

mod api;
mod common;
mod hostile;
mod viewer_data;
