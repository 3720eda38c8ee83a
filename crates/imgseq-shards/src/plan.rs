//! Which samples go to which output shard, and which shards a job of a job array writes.
//!
//! Shard `s` holds the samples `s·shard_size .. (s+1)·shard_size` of the source index (the
//! last one fewer); job `I` of `N` writes the shards with `s mod N = I`. The same inputs and
//! settings therefore give the same shards whether one process writes them all or `N`
//! processes on `N` machines each write their part.

use imgseq_core::{Error, Result};
use std::ops::Range;

/// Most jobs of a job array.
pub const MAX_JOBS: usize = 100_000;

/// The split of `n_samples` into shards for one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub n_samples: usize,
    pub shard_size: usize,
    pub num_jobs: usize,
    pub job_index: usize,
}

impl Plan {
    pub fn new(
        n_samples: usize,
        shard_size: usize,
        num_jobs: usize,
        job_index: usize,
    ) -> Result<Self> {
        if shard_size == 0 {
            return Err(Error::setting("shard_size", shard_size, "must be positive"));
        }
        if num_jobs == 0 || num_jobs > MAX_JOBS {
            return Err(Error::setting(
                "num_shards",
                num_jobs,
                format!("must be between 1 and {MAX_JOBS}"),
            ));
        }
        if job_index >= num_jobs {
            return Err(Error::setting(
                "shard_index",
                job_index,
                format!("must be below the number of jobs ({num_jobs})"),
            ));
        }
        Ok(Self {
            n_samples,
            shard_size,
            num_jobs,
            job_index,
        })
    }

    /// Output shards of the whole dataset.
    pub fn num_shards(&self) -> usize {
        self.n_samples.div_ceil(self.shard_size)
    }

    /// The source-index range of shard `s`.
    pub fn samples_of(&self, s: usize) -> Range<usize> {
        let start = s * self.shard_size;
        start..(start + self.shard_size).min(self.n_samples)
    }

    /// The shards this job writes, in order.
    pub fn my_shards(&self) -> impl Iterator<Item = usize> + '_ {
        (self.job_index..self.num_shards()).step_by(self.num_jobs)
    }

    /// Samples this job covers.
    pub fn my_samples(&self) -> usize {
        self.my_shards().map(|s| self.samples_of(s).len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_partition_the_shards_exactly() {
        for n in [0, 1, 9, 10, 11, 95] {
            let mut seen = vec![0; n];
            for i in 0..3 {
                let p = Plan::new(n, 10, 3, i).unwrap();
                for s in p.my_shards() {
                    for k in p.samples_of(s) {
                        seen[k] += 1;
                    }
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "n = {n}: {seen:?}");
        }
        assert!(Plan::new(5, 0, 1, 0).is_err());
        assert!(Plan::new(5, 2, 2, 2).is_err());
    }
}
