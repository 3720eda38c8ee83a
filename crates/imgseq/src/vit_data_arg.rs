//! The dataset flags shared by `vit train`, `vit eval` and `vit teacher`.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use imgseq_vit::data::DataSource;
use std::path::PathBuf;

#[derive(Clone, Copy, ValueEnum)]
pub enum DatasetKind {
    FashionMnist,
    Cifar10,
    Folder,
}

#[derive(Args)]
pub struct DataArgs {
    /// Which dataset.
    #[arg(long, value_enum, default_value = "fashion-mnist")]
    dataset: DatasetKind,
    /// Dataset folder (Fashion-MNIST default: /usr/share/datasets/fashion-mnist); docs/training.md.
    #[arg(long)]
    pub(crate) data: Option<PathBuf>,
    /// Use only the first N images of each split (quick experiments).
    #[arg(long)]
    pub(crate) limit: Option<usize>,
}

impl DataArgs {
    /// The dataset the flags name; `--data` is required where there is no default folder.
    pub(crate) fn source(&self) -> Result<DataSource> {
        Ok(match self.dataset {
            DatasetKind::FashionMnist => DataSource::FashionMnist(self.data.clone()),
            DatasetKind::Cifar10 => DataSource::Cifar10(self.data.clone().context(
                "--data DIR is required for CIFAR-10 (the folder with data_batch_1.bin ...)",
            )?),
            DatasetKind::Folder => DataSource::ImageFolder(
                self.data
                    .clone()
                    .context("--data DIR is required for an image folder")?,
            ),
        })
    }
}
