//! The bounded queue in front of each model and the worker thread that empties it in batches.
//!
//! A handler [`Queue::submit`]s a task and awaits its answer; when `capacity` tasks already
//! wait, the submit fails at once (the handler answers 503 with `Retry-After`). The worker
//! (one OS thread per model, never the async executor) takes the first waiting task, the tasks
//! already waiting behind it and, for up to `batch_wait` (default 0), more — up to
//! `max_batch` tasks and the model's pixel bound —, drops those whose deadline passed, runs
//! the rest in batches ([`crate::work::groups`]) and answers each. A panic while running a
//! batch is caught: its tasks are run again one by one, so that only the task that panics is
//! answered with an error.

use crate::metrics::Metrics;
use crate::models::Engine;
use crate::work::{groups, run_group, task_pixels, Output, Task};
use imgseq_core::{Error, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Why a task was not run.
#[derive(Debug)]
pub enum Refused {
    /// `capacity` tasks already wait.
    Full,
    /// The worker has stopped (the server is shutting down).
    Closed,
}

/// What a task's submitter awaits.
pub type Answer = oneshot::Receiver<Result<Output>>;

struct Job {
    task: Task,
    deadline: Instant,
    reply: oneshot::Sender<Result<Output>>,
}

/// The queue of one model.
pub struct Queue {
    tx: SyncSender<Job>,
    depth: Arc<AtomicUsize>,
}

/// How a worker forms batches.
#[derive(Debug, Clone, Copy)]
pub struct BatchRule {
    /// Most tasks per batch.
    pub max_batch: usize,
    /// Most pixels of model input per batch ([`task_pixels`]); a task over it alone
    /// still runs, alone.
    pub max_pixels: u64,
    pub wait: Duration,
}

impl BatchRule {
    /// Most images of `input_pixels` each one batch carries under this rule (at least 1).
    pub fn max_images(&self, input_pixels: u64) -> usize {
        let by_pixels = self.max_pixels / input_pixels.max(1);
        (by_pixels.min(self.max_batch as u64) as usize).max(1)
    }
}

impl Queue {
    /// A queue of `capacity` tasks for `engine`, and its worker thread (which ends when the
    /// queue is dropped and the waiting tasks are answered).
    pub fn start(
        name: &str,
        engine: Engine,
        capacity: usize,
        rule: BatchRule,
        metrics: Arc<Metrics>,
    ) -> Result<(Self, JoinHandle<()>)> {
        let (tx, rx) = sync_channel::<Job>(capacity);
        let depth = Arc::new(AtomicUsize::new(0));
        let worker = Worker {
            name: name.to_string(),
            engine,
            rx,
            held: None,
            depth: depth.clone(),
            rule,
            metrics,
        };
        let handle = std::thread::Builder::new()
            .name(format!("imgseq-serve-{name}"))
            .spawn(move || worker.run())
            .map_err(|e| Error::invalid(format!("cannot start the worker of {name}: {e}")))?;
        Ok((Self { tx, depth }, handle))
    }

    /// Tasks waiting now.
    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    /// Queues `task`, to be answered before `deadline` (or dropped with an error after it).
    pub fn submit(&self, task: Task, deadline: Instant) -> std::result::Result<Answer, Refused> {
        let (reply, answer) = oneshot::channel();
        self.depth.fetch_add(1, Ordering::Relaxed);
        let job = Job {
            task,
            deadline,
            reply,
        };
        match self.tx.try_send(job) {
            Ok(()) => Ok(answer),
            Err(e) => {
                self.depth.fetch_sub(1, Ordering::Relaxed);
                Err(match e {
                    TrySendError::Full(_) => Refused::Full,
                    TrySendError::Disconnected(_) => Refused::Closed,
                })
            }
        }
    }
}

struct Worker {
    name: String,
    engine: Engine,
    rx: Receiver<Job>,
    /// A job taken from the queue that did not fit the previous batch's pixel bound.
    held: Option<Job>,
    depth: Arc<AtomicUsize>,
    rule: BatchRule,
    metrics: Arc<Metrics>,
}

impl Worker {
    fn run(mut self) {
        while let Some(jobs) = self.next_batch() {
            let now = Instant::now();
            let (live, late): (Vec<Job>, Vec<Job>) =
                jobs.into_iter().partition(|j| j.deadline > now);
            for j in late {
                let _ = j.reply.send(Err(Error::resource_limit(
                    "the request's deadline passed while it waited in the queue",
                )));
            }
            if live.is_empty() {
                continue;
            }
            self.metrics.observe_batch(&self.name, live.len());
            self.answer(live);
        }
    }

    /// The next batch: the first waiting job, then more until `max_batch` tasks, `max_pixels`
    /// or `wait` passed (a job that would pass `max_pixels` is held for the next batch);
    /// `None` once the queue is closed and empty.
    fn next_batch(&mut self) -> Option<Vec<Job>> {
        let first = match self.held.take() {
            Some(j) => j,
            None => {
                let j = self.rx.recv().ok()?;
                self.depth.fetch_sub(1, Ordering::Relaxed);
                j
            }
        };
        let until = Instant::now() + self.rule.wait;
        let mut pixels = task_pixels(&self.engine, &first.task);
        let mut jobs = vec![first];
        while jobs.len() < self.rule.max_batch && pixels < self.rule.max_pixels {
            let left = until.saturating_duration_since(Instant::now());
            // No wait left (or none asked for): take only what is already waiting.
            let next = if left.is_zero() {
                self.rx.try_recv().ok()
            } else {
                self.rx.recv_timeout(left).ok()
            };
            match next {
                Some(j) => {
                    self.depth.fetch_sub(1, Ordering::Relaxed);
                    let px = task_pixels(&self.engine, &j.task);
                    if pixels + px > self.rule.max_pixels {
                        self.held = Some(j);
                        break;
                    }
                    pixels += px;
                    jobs.push(j);
                }
                None => break,
            }
        }
        Some(jobs)
    }

    fn answer(&self, jobs: Vec<Job>) {
        let (tasks, replies): (Vec<Task>, Vec<_>) =
            jobs.into_iter().map(|j| (j.task, j.reply)).unzip();
        let mut replies: Vec<Option<_>> = replies.into_iter().map(Some).collect();
        for range in groups(&tasks) {
            let group = &tasks[range.clone()];
            let results = match catch_unwind(AssertUnwindSafe(|| run_group(&self.engine, group))) {
                Ok(Ok(outs)) if outs.len() == group.len() => outs.into_iter().map(Ok).collect(),
                Ok(Ok(_)) => group.iter().map(|_| Err(wrong_count())).collect(),
                // One bad request (say a token grid too large) fails the whole batch: run each
                // alone, so that only it gets the error.
                Ok(Err(_)) | Err(_) if group.len() > 1 => {
                    group.iter().map(|t| self.run_alone(t)).collect()
                }
                Ok(Err(e)) => vec![Err(e)],
                Err(_) => vec![Err(panicked())],
            };
            for (i, r) in range.zip(results) {
                if let Some(reply) = replies[i].take() {
                    let _ = reply.send(r);
                }
            }
        }
    }

    fn run_alone(&self, task: &Task) -> Result<Output> {
        let one = std::slice::from_ref(task);
        match catch_unwind(AssertUnwindSafe(|| run_group(&self.engine, one))) {
            Ok(Ok(mut outs)) if outs.len() == 1 => Ok(outs.remove(0)),
            Ok(Ok(_)) => Err(wrong_count()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(panicked()),
        }
    }
}

fn wrong_count() -> Error {
    Error::Candle(candle_core::Error::Msg(
        "a batch gave the wrong number of results".into(),
    ))
}

/// The error a task whose work panicked is answered with (a 500).
pub fn panicked() -> Error {
    Error::Candle(candle_core::Error::Msg(
        "the model's work panicked on this request".into(),
    ))
}
