//! GPT sampling streamed row by row (`POST /v1/sample/stream`, NDJSON): the worker sends one
//! line per completed row of tokens — the rows so far and the picture they decode to, the rows
//! not yet sampled filled with a copy of the last sampled row (and marked by `rows_done`) — and
//! a last line with the finished images (or an error). The sampling stops as soon as the
//! client has gone (the answer's body was dropped) or the request's deadline passed.

use crate::http::png_base64;
use axum::body::Bytes;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use image::RgbImage;
use imgseq_core::tokenizer::Tokenizer;
use imgseq_core::tokens::TokenGrid;
use imgseq_core::{Error, Result};
use imgseq_gpt::config::SeqLayout;
use imgseq_gpt::model::Gpt2LMHeadModel;
use imgseq_gpt::sample::{generate_rows, Request, RowsDone, SampleOptions};
use serde_json::json;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::sync::mpsc;

/// Where a streamed sample's lines go, and what they name.
#[derive(Debug, Clone)]
pub struct RowSink {
    pub tx: mpsc::Sender<Line>,
    pub deadline: Instant,
    pub model: String,
    pub class: String,
    /// Counts streams stopped early.
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
}

/// One NDJSON line; `last` ends the stream.
#[derive(Debug)]
pub struct Line {
    pub text: Bytes,
    pub last: bool,
}

impl Line {
    fn new(v: serde_json::Value, last: bool) -> Self {
        let mut s = v.to_string();
        s.push('\n');
        Self {
            text: Bytes::from(s),
            last,
        }
    }

    /// The last line of a stream that failed.
    pub fn error(msg: &str) -> Self {
        Self::new(json!({ "error": msg }), true)
    }
}

/// Lines a stream carries at most: one per row, the last one and one spare.
pub fn capacity(layout: &SeqLayout) -> usize {
    layout.h + 2
}

/// The `n` sequences (`rows` complete rows each) as a batched grid; rows not yet sampled are
/// a copy of the last sampled one.
pub fn filled_grid(seqs: &[Vec<u32>], rows: usize, layout: &SeqLayout) -> TokenGrid {
    let (h, w) = (layout.h, layout.w);
    let mut data = Vec::with_capacity(seqs.len() * h * w);
    for s in seqs {
        let done = &s[..rows * w];
        data.extend(done.iter().map(|&t| t as i64));
        let last = &done[(rows - 1) * w..];
        for _ in rows..h {
            data.extend(last.iter().map(|&t| t as i64));
        }
    }
    TokenGrid {
        n: seqs.len(),
        h,
        w,
        batched: true,
        data,
    }
}

fn token_rows(g: &TokenGrid, i: usize, rows: usize) -> Vec<&[i64]> {
    g.image(i).chunks(g.w.max(1)).take(rows).collect()
}

fn pngs(images: &[RgbImage]) -> Result<Vec<String>> {
    images
        .iter()
        .map(|im| png_base64(im).map_err(|e| Error::invalid(e.msg)))
        .collect()
}

/// The line of a completed row: tokens so far, and the picture of the filled grid.
fn row_line(vq: &dyn Tokenizer, layout: &SeqLayout, d: &RowsDone, sink: &RowSink) -> Result<Line> {
    let g = filled_grid(d.seqs, d.rows, layout);
    let images = vq.decode(&g)?;
    let tokens: Vec<Vec<&[i64]>> = (0..g.n).map(|i| token_rows(&g, i, d.rows)).collect();
    Ok(Line::new(
        json!({
            "model": sink.model,
            "class": sink.class,
            "rows_done": d.rows,
            "grid": [layout.h, layout.w],
            "tokens": tokens,
            "images_png": pngs(&images)?,
        }),
        false,
    ))
}

/// Samples `n` images of `class`, sending a line per completed row and the last line to
/// `sink`; gives the tokens and images (as the plain sample does).
pub fn sample_rows(
    model: &Gpt2LMHeadModel,
    layout: &SeqLayout,
    vq: &dyn Tokenizer,
    class: usize,
    n: usize,
    options: &SampleOptions,
    sink: &RowSink,
) -> Result<(TokenGrid, Vec<RgbImage>)> {
    let r = sample_and_decode(model, layout, vq, class, n, options, sink);
    let line = match &r {
        Ok((g, images)) => pngs(images).map(|p| {
            let tokens: Vec<Vec<&[i64]>> = (0..g.n).map(|i| token_rows(g, i, g.h)).collect();
            Line::new(
                json!({
                    "model": sink.model,
                    "class": sink.class,
                    "rows_done": layout.h,
                    "done": true,
                    "grid": [layout.h, layout.w],
                    "tokens": tokens,
                    "images_png": p,
                }),
                true,
            )
        }),
        Err(e) => Ok(Line::error(&e.to_string())),
    };
    let line = line.unwrap_or_else(|e| Line::error(&e.to_string()));
    // The stream holds a line per row and this one: a full channel means a client that
    // reads nothing, which loses nothing it would see.
    let _ = sink.tx.try_send(line);
    r
}

fn sample_and_decode(
    model: &Gpt2LMHeadModel,
    layout: &SeqLayout,
    vq: &dyn Tokenizer,
    class: usize,
    n: usize,
    options: &SampleOptions,
    sink: &RowSink,
) -> Result<(TokenGrid, Vec<RgbImage>)> {
    let reqs = vec![
        Request {
            class: Some(class),
            prefix: vec![],
        };
        n
    ];
    let mut stopped: Option<Error> = None;
    let mut on_row = |d: &RowsDone| -> bool {
        let why = if sink.tx.is_closed() {
            Some(("client_gone", "the client went away"))
        } else if Instant::now() > sink.deadline {
            Some(("deadline", "the request's deadline passed"))
        } else {
            None
        };
        if let Some((reason, msg)) = why {
            sink.metrics.stream_stopped(reason);
            stopped = Some(Error::resource_limit(format!("sampling stopped: {msg}")));
            return false;
        }
        if d.rows == layout.h {
            return true; // the last line carries the finished images
        }
        match row_line(vq, layout, d, sink) {
            Ok(line) => {
                let _ = sink.tx.try_send(line);
                true
            }
            Err(e) => {
                stopped = Some(e);
                false
            }
        }
    };
    let seqs = match generate_rows(model, layout, &reqs, options, false, &mut on_row) {
        Ok(s) => s,
        Err(e) => return Err(stopped.unwrap_or(e)),
    };
    let tokens = layout.grid(&seqs);
    let images = vq.decode(&tokens)?;
    Ok((tokens, images))
}

/// The answer body of a stream: `first`, then the lines the worker sends, until the last
/// one; a stream whose sender goes away before its last line ends with an error line.
pub struct LineBody {
    pub first: Option<Line>,
    pub rx: mpsc::Receiver<Line>,
    pub done: bool,
}

impl HttpBody for LineBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Self::Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let line = match self.first.take() {
            Some(l) => l,
            None => match self.rx.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(l)) => l,
                Poll::Ready(None) => Line::error("the sampling ended without a result"),
            },
        };
        self.done = line.last;
        Poll::Ready(Some(Ok(Frame::data(line.text))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undecided_rows_repeat_the_last_sampled_row() {
        let layout = SeqLayout {
            n_codes: 8,
            class_names: vec!["a".into()],
            h: 3,
            w: 2,
        };
        let seqs = vec![vec![1, 2, 3, 4], vec![5, 6, 7, 0]];
        let g = filled_grid(&seqs, 2, &layout);
        assert_eq!((g.n, g.h, g.w), (2, 3, 2));
        assert_eq!(g.data, vec![1, 2, 3, 4, 3, 4, 5, 6, 7, 0, 7, 0]);
        assert_eq!(token_rows(&g, 1, 2), vec![&[5, 6][..], &[7, 0][..]]);
    }
}
