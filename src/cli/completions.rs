//! `dagsim completions SHELL`: prints a shell completion script (clap_complete).

use super::exit;
use dagsim::error::Result;

const EXAMPLES: &str = "\
Examples:
  dagsim completions bash > ~/.local/share/bash-completion/completions/dagsim
  dagsim completions zsh > ~/.zfunc/_dagsim      # with `fpath+=~/.zfunc` in ~/.zshrc
  dagsim completions fish > ~/.config/fish/completions/dagsim.fish";

#[derive(Debug, clap::Args)]
#[command(about = "Print a shell completion script", after_help = EXAMPLES)]
pub struct Args {
    /// Shell to generate completions for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

pub fn run(args: Args) -> Result<u8> {
    use clap::CommandFactory;
    let mut cmd = super::Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(args.shell, &mut cmd, "dagsim", &mut out);
    Ok(exit::OK)
}
