//! A training job as the command line starts it: a new run's model config from its token
//! sets, or a resumed run's saved configs with the sets they name, then the training itself
//! and a summary of it.

use crate::gpt::{self as train, TrainConfig, TrainState};
use imgseq_core::run::RunDir;
use imgseq_core::{Error, Result};
use imgseq_gpt::config::{GptConfig, SeqLayout};
use imgseq_gpt::data::{self, TokenSet};
use std::path::{Path, PathBuf};

/// A run ready to train: the model config, the recipe and the token sets.
pub struct Job {
    pub cfg: GptConfig,
    pub tc: TrainConfig,
    pub train_set: TokenSet,
    pub val_set: Option<TokenSet>,
}

/// The model of a new run besides what its token sets say.
#[derive(Debug, Clone, Default)]
pub struct ModelSpec {
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    /// Codebook size, when the inputs do not say (.npy token files).
    pub n_codes: Option<usize>,
    /// Class names, when the sets carry labels without names.
    pub class_names: Vec<String>,
    /// The VQ the tokens were made with (default: the manifest's).
    pub vq: Option<String>,
}

fn paths(p: &[String]) -> Vec<PathBuf> {
    p.iter().map(PathBuf::from).collect()
}

fn load_val(val: &[PathBuf]) -> Result<Option<TokenSet>> {
    (!val.is_empty()).then(|| data::load(val)).transpose()
}

/// The run in `out` to continue, on `tokens`/`val` when given, else on the inputs its
/// recipe records.
pub fn resume(out: &Path, tokens: &[PathBuf], val: &[PathBuf]) -> Result<Job> {
    RunDir::new(out).check_start(true)?;
    let Some((cfg, tc)) = train::load_run(out)? else {
        return Err(Error::format(out, "no training.json to resume"));
    };
    let tokens = if tokens.is_empty() {
        paths(&tc.tokens)
    } else {
        tokens.to_vec()
    };
    let val = if val.is_empty() {
        paths(&tc.val)
    } else {
        val.to_vec()
    };
    let train_set = data::load(&tokens)?;
    let val_set = load_val(&val)?;
    Ok(Job {
        cfg,
        tc,
        train_set,
        val_set,
    })
}

/// A new run of the recipe `tc` (checked before any data is read) on the token inputs
/// `tokens` and `val` (those `tc` records), with the model `spec` sized to the sets' grid,
/// codebook and classes.
pub fn new_run(
    tc: TrainConfig,
    tokens: &[PathBuf],
    val: &[PathBuf],
    spec: &ModelSpec,
) -> Result<Job> {
    tc.validate()?;
    let train_set = data::load(tokens)?;
    let val_set = load_val(val)?;
    let n_codes = match (train_set.n_codes, spec.n_codes) {
        (Some(m), Some(g)) if m != g => {
            return Err(Error::invalid(format!(
                "--n-codes {g} differs from the tokenizer's {m} codes in the manifest"
            )))
        }
        (Some(m), _) => m,
        (None, Some(g)) => g,
        (None, None) => {
            return Err(Error::invalid(
                "the inputs do not say the codebook size (no manifest.json): give --n-codes",
            ))
        }
    };
    let layout = SeqLayout {
        n_codes,
        class_names: class_names(&train_set, &spec.class_names)?,
        h: train_set.h,
        w: train_set.w,
    };
    let vq = spec.vq.clone().or(train_set.vq.clone());
    let cfg = GptConfig::new_imgseq(&layout, spec.n_embd, spec.n_layer, spec.n_head, vq);
    cfg.validate()?;
    Ok(Job {
        cfg,
        tc,
        train_set,
        val_set,
    })
}

/// The class names of a model trained on `set`: the names the samples carry, else `given`,
/// else the label numbers.
fn class_names(set: &TokenSet, given: &[String]) -> Result<Vec<String>> {
    let k = set.n_classes();
    if !given.is_empty() {
        if given.len() < k {
            return Err(Error::invalid(format!(
                "--class-names gives {} names but the labels go up to {}",
                given.len(),
                k - 1
            )));
        }
        return Ok(given.to_vec());
    }
    Ok((0..k)
        .map(|c| {
            set.class_names
                .get(&c)
                .cloned()
                .unwrap_or_else(|| c.to_string())
        })
        .collect())
}

impl Job {
    /// One line on the sets: sizes, labels, classes, grid and codes.
    pub fn describe(&self) -> Result<String> {
        let layout = self.cfg.layout()?;
        let set = &self.train_set;
        Ok(format!(
            "{} training sequences ({} labelled, {} classes: {}), grid {}x{}, {} codes{}",
            set.len(),
            set.labels.iter().filter(|l| l.is_some()).count(),
            layout.n_classes(),
            layout.class_names.join(", "),
            layout.h,
            layout.w,
            layout.n_codes,
            match &self.val_set {
                Some(v) => format!("; {} held-out", v.len()),
                None => String::new(),
            }
        ))
    }

    /// Trains into `out` ([`train::train`]).
    pub fn run(&self, out: &Path, resume: bool, stop_at: Option<usize>) -> Result<TrainState> {
        let val = self.val_set.as_ref();
        train::train(
            &self.cfg,
            &self.tc,
            &self.train_set,
            val,
            out,
            resume,
            stop_at,
        )
    }
}

/// The closing line of a run: steps, time, throughput and the last held-out figure.
pub fn summary(state: &TrainState) -> String {
    let tps = state.tokens_seen as f64 / state.seconds.max(1e-9);
    format!(
        "done: step {} in {:.0} s ({:.0} tokens/s){}",
        state.step,
        state.seconds,
        tps,
        match state.history.last().and_then(|p| p.val_bits_per_token) {
            Some(b) => format!(", held-out {b:.4} bits/token"),
            None => String::new(),
        }
    )
}
