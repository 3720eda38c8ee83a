//! `imgseq vit ...`

use clap::Subcommand;

#[derive(Subcommand)]
pub enum VitCmd {}

pub fn run(cmd: VitCmd) -> anyhow::Result<()> {
    match cmd {}
}
