//! Output that must never reach the host's own. Read from the engine's
//! config (`plugins.entries.hostile.config`), during `assemble`:
//!
//! - `printStdout: true` — writes text that would break `--json` to descriptor 1 (through its
//!   own `println!` and a raw `write(2)`), and the same to descriptor 2;
//! - `floodStderrMs: N` — writes lines full of escape sequences to stderr in a loop for `N` ms
//!   (and some to stdout), as fast as it can.

use std::io::Write;
use std::time::{Duration, Instant};

/// What this module reads of the engine's config.
#[derive(Debug, Default, Clone, Copy)]
pub struct Output {
    print_stdout: bool,
    flood_stderr_ms: Option<u64>,
}

impl Output {
    /// The behaviours `config_json` asks for.
    pub fn from_config(config_json: &str) -> Self {
        let config: serde_json::Value = serde_json::from_str(config_json).unwrap_or_default();
        Output {
            print_stdout: config["printStdout"].as_bool().unwrap_or(false),
            flood_stderr_ms: config["floodStderrMs"].as_u64(),
        }
    }

    /// At the start of `assemble`.
    pub fn on_assemble(&self) {
        if self.print_stdout {
            println!("}}{{\"answeredBy\":\"hostile-on-stdout\"}} \u{1b}[31mnot json");
            let raw = b"hostile raw write to fd 1\n";
            // SAFETY: a write of a valid buffer.
            unsafe { libc::write(1, raw.as_ptr().cast(), raw.len()) };
            eprintln!("hostile: a line on stderr");
        }
        if let Some(ms) = self.flood_stderr_ms {
            let line = "hostile flood \u{1b}[2J\u{1b}]0;owned\u{7} line\n".repeat(8);
            let end = Instant::now() + Duration::from_millis(ms);
            let mut stderr = std::io::stderr();
            let mut i = 0u64;
            while Instant::now() < end {
                let _ = stderr.write_all(line.as_bytes());
                if i.is_multiple_of(64) {
                    let _ = std::io::stdout().write_all(b"hostile flood on stdout\n");
                }
                i += 1;
            }
        }
    }
}
