//! The model work of each request kind, run by a model's batching worker: requests of one
//! kind that arrive together are run as one batch (one forward pass), through the libraries'
//! own paths (the [`Tokenizer`] trait, [`imgseq_core::metrics`]' scoring, the ViT's top-k,
//! the GPT's sampler).

use crate::models::Engine;
use crate::stream::RowSink;
use image::RgbImage;
use imgseq_core::tokenizer::{admit, Embeddings, Encoded, Latents, Tokenizer, Work};
use imgseq_core::tokens::TokenGrid;
use imgseq_core::{Error, Result};
use imgseq_gpt::sample::{generate, Request, SampleOptions};

/// One request's work. Pictures are already brought to the model's input (decoded, checked,
/// cropped) by the handler.
#[derive(Debug, Clone)]
pub enum Task {
    /// VQ: picture → tokens (a vision tower opened as a tokenizer: → embeddings).
    Encode(RgbImage),
    /// VQ: picture → tokens → picture, scored.
    Roundtrip(RgbImage),
    /// VQ: one image's (h, w) tokens → picture.
    Decode(TokenGrid),
    /// ViT: picture → CLS + patch embeddings.
    Embed(RgbImage),
    /// ViT: picture → the k most probable classes.
    Classify(RgbImage, usize),
    /// GPT: `n` images of `class`, decoded by the GPT's VQ.
    Sample {
        class: usize,
        n: usize,
        options: SampleOptions,
        /// Stream each completed row here ([`crate::stream`]).
        stream: Option<RowSink>,
    },
    /// Panics inside the worker (tests of panic isolation only).
    #[cfg(feature = "test-hooks")]
    Panic,
    /// Holds the worker this long (tests of full queues and deadlines only).
    #[cfg(feature = "test-hooks")]
    Hold(std::time::Duration),
}

impl Task {
    /// Tasks run together in one forward pass when their keys are equal.
    fn batch_key(&self) -> Option<(u8, usize, usize)> {
        match self {
            Task::Encode(_) => Some((0, 0, 0)),
            Task::Roundtrip(_) => Some((1, 0, 0)),
            Task::Decode(g) => Some((2, g.h, g.w)),
            Task::Embed(_) => Some((3, 0, 0)),
            Task::Classify(..) => Some((4, 0, 0)),
            Task::Sample { .. } => None,
            #[cfg(feature = "test-hooks")]
            Task::Panic | Task::Hold(_) => None,
        }
    }
}

/// What a task gives back.
#[derive(Debug, Clone)]
pub enum Output {
    Tokens(TokenGrid),
    Roundtrip {
        tokens: TokenGrid,
        reconstruction: RgbImage,
        psnr: f64,
        ssim: f64,
    },
    Image(RgbImage),
    Embedding(Embeddings),
    /// One picture's continuous latent map (a VAE), as its tokenizer gives it: (C, h, w).
    Latents(Latents),
    TopK(Vec<(usize, f32)>),
    Samples {
        tokens: TokenGrid,
        images: Vec<RgbImage>,
    },
}

/// Pixels of the model input of `task` on `engine`, what a batch bound counts (0: a task that
/// runs alone).
pub fn task_pixels(engine: &Engine, task: &Task) -> u64 {
    match (engine, task) {
        (Engine::Vq(_), Task::Encode(p) | Task::Roundtrip(p)) => {
            p.width() as u64 * p.height() as u64
        }
        (Engine::Vq(t), Task::Decode(g)) => {
            let f = crate::models::downsample_factor(t) as u64;
            (g.h * g.w) as u64 * f * f
        }
        (Engine::Vit(m), Task::Embed(_) | Task::Classify(..)) => {
            (m.cfg.image_size * m.cfg.image_size) as u64
        }
        _ => 0,
    }
}

/// Splits `tasks` into runs of consecutive tasks that share a batch key (keyless tasks alone).
pub fn groups(tasks: &[Task]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < tasks.len() {
        let key = tasks[start].batch_key();
        let mut end = start + 1;
        while key.is_some() && end < tasks.len() && tasks[end].batch_key() == key {
            end += 1;
        }
        out.push(start..end);
        start = end;
    }
    out
}

/// Runs tasks that share a batch key (or one keyless task) as one batch: one result per task.
pub fn run_group(engine: &Engine, tasks: &[Task]) -> Result<Vec<Output>> {
    match (engine, &tasks[0]) {
        (Engine::Vq(t), Task::Encode(_)) => encode(t, &pictures(tasks)),
        (Engine::Vq(t), Task::Roundtrip(_)) => roundtrip(t, &pictures(tasks)),
        (Engine::Vq(t), Task::Decode(_)) => decode(t, tasks),
        (Engine::Vit(m), Task::Embed(_)) => embed(m, &pictures(tasks)),
        (Engine::Vit(m), Task::Classify(..)) => classify(m, tasks),
        (
            Engine::Gpt { model, layout, vq },
            Task::Sample {
                class,
                n,
                options,
                stream: Some(sink),
            },
        ) => {
            let (tokens, images) =
                crate::stream::sample_rows(model, layout, vq, *class, *n, options, sink)?;
            Ok(vec![Output::Samples { tokens, images }])
        }
        (
            Engine::Gpt { model, layout, vq },
            Task::Sample {
                class, n, options, ..
            },
        ) => {
            let reqs = vec![
                Request {
                    class: Some(*class),
                    prefix: vec![],
                };
                *n
            ];
            let seqs = generate(model, layout, &reqs, options, false)?;
            let tokens = layout.grid(&seqs);
            let images = vq.decode(&tokens)?;
            Ok(vec![Output::Samples { tokens, images }])
        }
        #[cfg(feature = "test-hooks")]
        (_, Task::Panic) => panic!("a request asked the worker to panic"),
        #[cfg(feature = "test-hooks")]
        (_, Task::Hold(d)) => {
            std::thread::sleep(*d);
            Ok(vec![Output::Tokens(TokenGrid {
                n: 1,
                h: 0,
                w: 0,
                batched: false,
                data: vec![],
            })])
        }
        _ => Err(Error::invalid("this model does not do that")),
    }
}

fn pictures(tasks: &[Task]) -> Vec<RgbImage> {
    tasks
        .iter()
        .filter_map(|t| match t {
            Task::Encode(p) | Task::Roundtrip(p) | Task::Embed(p) | Task::Classify(p, _) => {
                Some(p.clone())
            }
            _ => None,
        })
        .collect()
}

/// One image's grid out of a batch's.
fn nth_grid(g: &TokenGrid, i: usize) -> TokenGrid {
    TokenGrid {
        n: 1,
        h: g.h,
        w: g.w,
        batched: false,
        data: g.image(i).to_vec(),
    }
}

/// Each picture's tokens, or, for a model whose outputs are (tokens, dim) embeddings (a
/// vision tower, a VAE's patch tokens), its embeddings, or for a VAE its latent map.
fn encode(t: &impl Tokenizer, pics: &[RgbImage]) -> Result<Vec<Output>> {
    let g = match t.encode_pictures(pics)? {
        Encoded::Embeddings(e) => return Ok(split_embeddings(&e)),
        Encoded::Latents(l) => {
            let per: usize = l.shape.iter().product();
            return Ok((0..l.n)
                .map(|i| {
                    Output::Latents(Latents {
                        n: 1,
                        shape: l.shape.clone(),
                        data: l.data[i * per..(i + 1) * per].to_vec(),
                    })
                })
                .collect());
        }
        other => other.into_tokens()?,
    };
    Ok((0..pics.len())
        .map(|i| Output::Tokens(nth_grid(&g, i)))
        .collect())
}

/// One [`Output::Embedding`] per image of a batch's embeddings.
fn split_embeddings(e: &Embeddings) -> Vec<Output> {
    let per = e.tokens * e.dim;
    (0..e.n)
        .map(|i| {
            Output::Embedding(Embeddings {
                n: 1,
                tokens: e.tokens,
                dim: e.dim,
                data: e.data[i * per..(i + 1) * per].to_vec(),
            })
        })
        .collect()
}

fn roundtrip(t: &impl Tokenizer, pics: &[RgbImage]) -> Result<Vec<Output>> {
    let g = t.encode_pictures(pics)?.into_tokens()?;
    let recons = t.decode_admitted(&g)?;
    pics.iter()
        .zip(recons)
        .enumerate()
        .map(|(i, (pic, reconstruction))| {
            let (psnr, ssim) = imgseq_core::metrics::score_pictures(pic, &reconstruction)?;
            Ok(Output::Roundtrip {
                tokens: nth_grid(&g, i),
                reconstruction,
                psnr,
                ssim,
            })
        })
        .collect()
}

fn decode(t: &impl Tokenizer, tasks: &[Task]) -> Result<Vec<Output>> {
    let grids: Vec<&TokenGrid> = tasks
        .iter()
        .filter_map(|t| match t {
            Task::Decode(g) => Some(g),
            _ => None,
        })
        .collect();
    let all = TokenGrid {
        n: grids.len(),
        h: grids[0].h,
        w: grids[0].w,
        batched: true,
        data: grids.iter().flat_map(|g| g.data.iter().copied()).collect(),
    };
    Ok(t.decode_admitted(&all)?
        .into_iter()
        .map(Output::Image)
        .collect())
}

fn embed(m: &imgseq_vit::inference::Classifier, pics: &[RgbImage]) -> Result<Vec<Output>> {
    let Encoded::Embeddings(e) = m.encode_pictures(pics)? else {
        return Err(Error::invalid("the ViT gave codebook tokens"));
    };
    Ok(split_embeddings(&e))
}

fn classify(m: &imgseq_vit::inference::Classifier, tasks: &[Task]) -> Result<Vec<Output>> {
    let ks: Vec<usize> = tasks
        .iter()
        .map(|t| match t {
            Task::Classify(_, k) => *k,
            _ => 1,
        })
        .collect();
    let _admitted = admit(m, Work::Encode(tasks.len()))?;
    let x = m.input_tensor(&pictures(tasks))?;
    let k_max = ks.iter().copied().max().unwrap_or(1);
    Ok(m.top_k(&x, k_max)?
        .into_iter()
        .zip(ks)
        .map(|(mut top, k)| {
            top.truncate(k);
            Output::TopK(top)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pic() -> RgbImage {
        RgbImage::new(2, 2)
    }

    #[test]
    fn groups_join_neighbours_of_one_kind_and_shape_only() {
        let g = |h| {
            Task::Decode(TokenGrid {
                n: 1,
                h,
                w: 2,
                batched: false,
                data: vec![0; 2 * h],
            })
        };
        let tasks = vec![
            Task::Encode(pic()),
            Task::Encode(pic()),
            Task::Roundtrip(pic()),
            g(2),
            g(2),
            g(3),
            Task::Panic,
            Task::Panic,
        ];
        assert_eq!(groups(&tasks), vec![0..2, 2..3, 3..5, 5..6, 6..7, 7..8]);
    }
}
