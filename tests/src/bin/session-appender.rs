//! A test helper: appends messages to a session file with `entry` durability, printing each
//! entry's id once its append has returned (is acknowledged), until killed. The crash test
//! kills it with SIGKILL mid-write, again and again.
//!
//! Usage: `session-appender FILE`.

use std::io::Write as _;

use pincer_host::session::{Durability, SessionWriter};
use pincer_plugin_api::Message;

fn main() {
    let path = std::path::PathBuf::from(
        std::env::args()
            .nth(1)
            .expect("usage: session-appender FILE"),
    );
    let mut writer = if path.exists() {
        SessionWriter::open(&path, Durability::Entry).expect("open")
    } else {
        SessionWriter::create(&path, "/tmp", Durability::Entry).expect("create")
    };
    let stdout = std::io::stdout();
    let body = "x".repeat(4096); // long lines, so that a kill often lands mid-line
    for i in 0.. {
        let id = writer
            .append_message(&Message::user(format!("{i} {body}")))
            .expect("append");
        let mut out = stdout.lock();
        writeln!(out, "{id}").expect("stdout");
        out.flush().expect("stdout");
    }
}
