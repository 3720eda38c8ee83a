//! What a training run tells its user: the progress bar, the history points of `state.json`
//! (running means since the previous point) and, without a terminal, log lines.

use super::checkpoint::{LogPoint, TrainState};
use super::config::TrainConfig;
use super::loss::LossTerms;
use imgseq_core::codes::usage_from_counts;
use indicatif::ProgressBar;
use std::time::Instant;

/// Running figures since the previous history point.
pub(super) struct Window {
    pb: ProgressBar,
    steps: usize,
    n_embed: usize,
    /// A history point every this many steps (and at every tenth of the run).
    log_every: usize,
    /// The user asked for `log_every`: a log line at every point, not only every tenth.
    log_lines: bool,
    tenth: usize,
    t_run: Instant,
    /// The run's training seconds before this process (`TrainState::seconds` at resume).
    secs_base: f64,
    start_step: usize,
    imgs_done: usize,
    counts: Vec<u64>,
    loss_sum: f64,
    psnr_sum: f64,
    n_acc: usize,
    restarted: usize,
    imgs_win: usize,
    t_win: Instant,
    /// Sum of every loss term since the previous point.
    terms: LossTerms,
    /// The run has a discriminator: its terms are printed.
    gan: bool,
}

impl Window {
    pub fn new(tc: &TrainConfig, n_embed: usize, state: &TrainState, progress: bool) -> Self {
        let start_step = state.step;
        let pb = if progress {
            imgseq_core::progress::bar(tc.steps as u64, start_step as u64, "vq train")
        } else {
            ProgressBar::hidden()
        };
        Self {
            pb,
            steps: tc.steps,
            n_embed,
            log_every: if tc.log_every > 0 {
                tc.log_every
            } else {
                (tc.steps / 100).max(1)
            },
            log_lines: tc.log_every > 0,
            tenth: (tc.steps / 10).max(1),
            t_run: Instant::now(),
            secs_base: state.seconds,
            start_step,
            imgs_done: 0,
            counts: vec![0; n_embed],
            loss_sum: 0.0,
            psnr_sum: 0.0,
            n_acc: 0,
            restarted: 0,
            imgs_win: 0,
            t_win: Instant::now(),
            terms: LossTerms::default(),
            gan: tc.gan.enabled(),
        }
    }

    /// One step's loss terms (after [`Window::add`]).
    pub fn add_terms(&mut self, t: &LossTerms) {
        self.terms.add_scaled(t, 1.0);
    }

    /// The terms of a history point, as one line.
    fn terms_line(&self, t: &LossTerms) -> String {
        let mut s = format!("rec {:.4} p {:.4} codebook {:.4}", t.rec, t.p, t.codebook);
        if self.gan {
            s += &format!(
                " | g {:.4} d {:.4} λ {:.3} logits real {:.3} fake {:.3}",
                t.g, t.d, t.lambda, t.logits_real, t.logits_fake
            );
        }
        s
    }

    /// One step's figures: its batch size, loss, batch PSNR, codes used, codes restarted.
    pub fn add(&mut self, batch: usize, loss: f64, psnr: f64, indices: &[u32], restarted: usize) {
        self.imgs_done += batch;
        self.imgs_win += batch;
        for &i in indices {
            self.counts[i as usize] += 1;
        }
        self.loss_sum += loss;
        self.psnr_sum += psnr;
        self.n_acc += 1;
        self.restarted += restarted;
    }

    /// Training seconds since this process started.
    pub fn seconds(&self) -> f64 {
        self.t_run.elapsed().as_secs_f64()
    }

    /// The run's training seconds so far, across resumes (`TrainState::seconds`).
    pub fn run_seconds(&self) -> f64 {
        self.secs_base + self.seconds()
    }

    /// Updates the bar; at a history point, appends it to `state` (and prints a line when
    /// there is no bar) and starts a new window.
    pub fn report(&mut self, state: &mut TrainState, lr: f64) {
        let n = self.n_acc.max(1) as f64;
        let (loss, psnr) = (self.loss_sum / n, self.psnr_sum / n);
        let ips = self.imgs_done as f64 / self.seconds().max(1e-9);
        let (used, ppl) = usage_from_counts(&self.counts);
        self.pb.set_position(state.step as u64);
        self.pb.set_message(format!(
            "loss {loss:.4} PSNR {psnr:.2} codes {used}/{} ppl {ppl:.0} {ips:.1} img/s",
            self.n_embed
        ));
        let tenth_done = state.step.is_multiple_of(self.tenth) || state.step == self.steps;
        if !(state.step.is_multiple_of(self.log_every) || tenth_done) {
            return;
        }
        let p = LogPoint {
            step: state.step,
            loss,
            psnr,
            codes_used: used,
            perplexity: ppl,
            restarted: self.restarted,
            img_per_s: self.imgs_win as f64 / self.t_win.elapsed().as_secs_f64().max(1e-9),
            lr,
            seconds: Some(self.run_seconds()),
            terms: Some({
                let mut t = LossTerms::default();
                t.add_scaled(&self.terms, 1.0 / n);
                t
            }),
        };
        if self.pb.is_hidden() && (tenth_done || self.log_lines) {
            let steps_per_s = (state.step - self.start_step) as f64 / self.seconds().max(1e-9);
            let left = (self.steps - state.step) as f64 / steps_per_s.max(1e-9);
            eprintln!(
                "step {}/{}: loss {:.4} PSNR {:.2} dB, codes used {}/{} (perplexity {:.0}), {} restarted, {:.1} img/s, ETA {:.0} min",
                p.step, self.steps, p.loss, p.psnr, p.codes_used, self.n_embed, p.perplexity,
                state.restarts_total, ips, left / 60.0
            );
            if let Some(t) = &p.terms {
                eprintln!("  {}", self.terms_line(t));
            }
        }
        state.history.push(p);
        self.counts.fill(0);
        (self.loss_sum, self.psnr_sum, self.n_acc) = (0.0, 0.0, 0);
        (self.restarted, self.imgs_win) = (0, 0);
        self.terms = LossTerms::default();
        self.t_win = Instant::now();
    }

    pub fn finish(&self) {
        self.pb.finish_and_clear();
    }
}
