//! Prometheus text metrics: requests by route and status, request latency and batch size as
//! histograms, queue depth per model (read at scrape time).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

/// Upper bounds (seconds) of the latency histogram's buckets.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Upper bounds of the batch-size histogram's buckets.
pub const BATCH_BUCKETS: [f64; 9] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

#[derive(Debug, Clone, Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; bounds.len()];
        }
        for (c, &b) in self.counts.iter_mut().zip(bounds) {
            if v <= b {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str, bounds: &[f64]) {
        for (i, b) in bounds.iter().enumerate() {
            let c = self.counts.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b}\"}} {c}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

#[derive(Debug, Default)]
struct Inner {
    requests: BTreeMap<(String, u16), u64>,
    latency: BTreeMap<String, Histogram>,
    batches: BTreeMap<String, Histogram>,
    refused_connections: u64,
    streams_stopped: BTreeMap<String, u64>,
}

/// What is read of each model at scrape time.
#[derive(Debug, Clone)]
pub struct ModelGauges {
    pub model: String,
    /// Tasks waiting for its worker.
    pub queue_depth: usize,
    /// Its batch bound, in pixels and in images of its input.
    pub max_batch_pixels: u64,
    pub max_batch_images: usize,
}

/// The server's counters (shared by handlers and workers).
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        // A poisoned lock still holds usable counters.
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    /// One answered request on `route` (a known route or `other`).
    pub fn observe_request(&self, route: &str, status: u16, seconds: f64) {
        self.with(|m| {
            *m.requests.entry((route.to_string(), status)).or_default() += 1;
            m.latency
                .entry(route.to_string())
                .or_default()
                .observe(&LATENCY_BUCKETS, seconds);
        });
    }

    /// One batch of `size` tasks run by `model`'s worker.
    pub fn observe_batch(&self, model: &str, size: usize) {
        self.with(|m| {
            m.batches
                .entry(model.to_string())
                .or_default()
                .observe(&BATCH_BUCKETS, size as f64)
        });
    }

    /// One streamed sampling stopped early (`reason`: `client_gone`, `deadline`).
    pub fn stream_stopped(&self, reason: &str) {
        self.with(|m| *m.streams_stopped.entry(reason.to_string()).or_default() += 1);
    }

    /// One connection refused for being over the limit.
    pub fn refused_connection(&self) {
        self.with(|m| m.refused_connections += 1);
    }

    /// The Prometheus text exposition, with each model's gauges.
    pub fn render(&self, models: &[ModelGauges]) -> String {
        let mut out = String::new();
        self.with(|m| {
            out.push_str("# HELP imgseq_requests_total Requests answered, by route and status.\n");
            out.push_str("# TYPE imgseq_requests_total counter\n");
            for ((route, status), n) in &m.requests {
                let _ = writeln!(
                    out,
                    "imgseq_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
                );
            }
            out.push_str("# HELP imgseq_request_duration_seconds Time to answer a request.\n");
            out.push_str("# TYPE imgseq_request_duration_seconds histogram\n");
            for (route, h) in &m.latency {
                let labels = format!("route=\"{route}\"");
                h.render(
                    &mut out,
                    "imgseq_request_duration_seconds",
                    &labels,
                    &LATENCY_BUCKETS,
                );
            }
            out.push_str("# HELP imgseq_batch_size Tasks per batch run by a model's worker.\n");
            out.push_str("# TYPE imgseq_batch_size histogram\n");
            for (model, h) in &m.batches {
                let labels = format!("model=\"{model}\"");
                h.render(&mut out, "imgseq_batch_size", &labels, &BATCH_BUCKETS);
            }
            let budget = imgseq_core::budget::memory_limit().unwrap_or(0);
            for (name, help, v) in [
                (
                    "imgseq_memory_budget_bytes",
                    "The process-wide memory budget work is admitted against (IMGSEQ_MAX_MEMORY_GB).",
                    budget,
                ),
                (
                    "imgseq_memory_admitted_bytes",
                    "Estimated bytes of the image decodes and forward passes running now.",
                    imgseq_core::budget::in_use(),
                ),
                (
                    "imgseq_memory_admitted_peak_bytes",
                    "The most estimated bytes admitted at once since the start.",
                    imgseq_core::budget::peak_in_use(),
                ),
            ] {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
            }
            out.push_str(
                "# HELP imgseq_refused_connections_total Connections refused over the limit.\n",
            );
            out.push_str("# TYPE imgseq_refused_connections_total counter\n");
            let _ = writeln!(
                out,
                "imgseq_refused_connections_total {}",
                m.refused_connections
            );
            out.push_str(
                "# HELP imgseq_streams_stopped_total Streamed samplings stopped early, by reason.\n",
            );
            out.push_str("# TYPE imgseq_streams_stopped_total counter\n");
            for (reason, n) in &m.streams_stopped {
                let _ = writeln!(
                    out,
                    "imgseq_streams_stopped_total{{reason=\"{reason}\"}} {n}"
                );
            }
        });
        out.push_str("# HELP imgseq_queue_depth Tasks waiting for a model's worker.\n");
        out.push_str("# TYPE imgseq_queue_depth gauge\n");
        for g in models {
            let _ = writeln!(
                out,
                "imgseq_queue_depth{{model=\"{}\"}} {}",
                g.model, g.queue_depth
            );
        }
        out.push_str("# HELP imgseq_max_batch_pixels Most pixels of model input per batch.\n");
        out.push_str("# TYPE imgseq_max_batch_pixels gauge\n");
        for g in models {
            let _ = writeln!(
                out,
                "imgseq_max_batch_pixels{{model=\"{}\"}} {}",
                g.model, g.max_batch_pixels
            );
        }
        out.push_str(
            "# HELP imgseq_max_batch_images Most images of the model's input per batch.\n",
        );
        out.push_str("# TYPE imgseq_max_batch_images gauge\n");
        for g in models {
            let _ = writeln!(
                out,
                "imgseq_max_batch_images{{model=\"{}\"}} {}",
                g.model, g.max_batch_images
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_text_is_prometheus() {
        let m = Metrics::default();
        m.observe_request("/v1/tokenize", 200, 0.007);
        m.observe_request("/v1/tokenize", 200, 3.0);
        m.observe_request("/v1/tokenize", 400, 0.001);
        m.observe_batch("vq", 3);
        let text = m.render(&[ModelGauges {
            model: "vq".into(),
            queue_depth: 2,
            max_batch_pixels: 65536,
            max_batch_images: 4,
        }]);
        assert!(text.contains("imgseq_requests_total{route=\"/v1/tokenize\",status=\"200\"} 2"));
        assert!(text.contains("imgseq_requests_total{route=\"/v1/tokenize\",status=\"400\"} 1"));
        let b = |le: &str| {
            format!("imgseq_request_duration_seconds_bucket{{route=\"/v1/tokenize\",le=\"{le}\"}}")
        };
        assert!(text.contains(&format!("{} 1\n", b("0.005"))), "{text}");
        assert!(text.contains(&format!("{} 2\n", b("0.01"))), "{text}");
        assert!(text.contains(&format!("{} 3\n", b("5"))), "{text}");
        assert!(text.contains("imgseq_batch_size_bucket{model=\"vq\",le=\"2\"} 0"));
        assert!(text.contains("imgseq_batch_size_bucket{model=\"vq\",le=\"4\"} 1"));
        assert!(text.contains("imgseq_queue_depth{model=\"vq\"} 2"));
        assert!(text.contains("imgseq_max_batch_pixels{model=\"vq\"} 65536"));
        assert!(text.contains("imgseq_max_batch_images{model=\"vq\"} 4"));
    }
}
