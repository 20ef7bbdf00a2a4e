//! placeholder
use clap::Args;
/// x
#[derive(Args)]
pub struct CompareArgs {}
/// x
pub fn run(_a: CompareArgs) -> anyhow::Result<()> {
    Ok(())
}
