//! `imgseq vq ...` (owned by the VQGAN work).

use clap::Subcommand;

#[derive(Subcommand)]
pub enum VqCmd {}

pub fn run(cmd: VqCmd) -> anyhow::Result<()> {
    match cmd {}
}
