//! A test helper: appends messages to a session file with `entry` durability, printing each
//! entry's id once its append has returned (is acknowledged).
//!
//! Usage:
//! - `session-appender FILE`: appends until killed. The crash test kills it with SIGKILL
//!   mid-write, again and again.
//! - `session-appender FILE COUNT TAG [hold]`: appends COUNT messages whose text starts with
//!   `TAG`, then prints `done`; with `hold`, keeps the session open (and so its lock held) until
//!   its standard input closes. The concurrency test runs two at once.
//!
//! When the session cannot be opened (another process holds it, say), the error is printed on
//! stderr and the exit code is 3.

use std::io::{Read as _, Write as _};

use pincer_host::session::{Durability, SessionWriter};
use pincer_plugin_api::Message;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = std::path::PathBuf::from(
        args.next()
            .expect("usage: session-appender FILE [COUNT TAG [hold]]"),
    );
    let count: Option<u64> = args.next().map(|c| c.parse().expect("COUNT is a number"));
    let tag = args.next().unwrap_or_default();
    let hold = args.next().as_deref() == Some("hold");
    let opened = if path.exists() {
        SessionWriter::open(&path, Durability::Entry)
    } else {
        SessionWriter::create(&path, "/tmp", Durability::Entry)
    };
    let mut writer = match opened {
        Ok(writer) => writer,
        Err(err) => {
            eprintln!("session-appender: {err}");
            std::process::exit(3);
        }
    };
    let stdout = std::io::stdout();
    let body = "x".repeat(4096); // long lines, so that a kill often lands mid-line
    for i in 0..count.unwrap_or(u64::MAX) {
        let id = writer
            .append_message(&Message::user(format!("{tag}{i} {body}")))
            .expect("append");
        let mut out = stdout.lock();
        writeln!(out, "{id}").expect("stdout");
        out.flush().expect("stdout");
    }
    {
        let mut out = stdout.lock();
        writeln!(out, "done").expect("stdout");
        out.flush().expect("stdout");
    }
    if hold {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
    }
    drop(writer);
}
