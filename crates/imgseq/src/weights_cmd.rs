//! `imgseq weights ...` (owned by the VQGAN work).

use clap::Subcommand;

#[derive(Subcommand)]
pub enum WeightsCmd {}

pub fn run(cmd: WeightsCmd) -> anyhow::Result<()> {
    match cmd {}
}
