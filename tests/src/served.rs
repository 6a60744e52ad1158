//! A running `pincer serve` for the black-box tests: start it with its log in a file, wait until
//! its socket accepts connections, call it over the socket, stop it with `SIGTERM`. Dropping a
//! [`Served`] kills the process.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use pincer_host::gateway::client::{self, ClientError};
use pincer_host::gateway::CallRequest;
use serde_json::Value;

use crate::pincer_bin;

/// How long the gateway may take to start or to stop before a test fails.
const PATIENCE: Duration = Duration::from_secs(60);

/// What to start: `pincer --home HOME GLOBAL… serve --socket SOCKET --plugins-dir PLUGINS
/// ARGS…`, its stderr written to `log`.
pub struct Serve<'a> {
    /// The gateway's socket.
    pub socket: PathBuf,
    /// Where its stderr goes.
    pub log: PathBuf,
    /// `--plugins-dir`.
    pub plugins_dir: PathBuf,
    /// Options before `serve` (`--log info`).
    pub global: &'a [&'a str],
    /// Options after `serve` (`--no-watch`, `--engine faulty`).
    pub args: &'a [&'a str],
}

/// A running `pincer serve`.
pub struct Served {
    child: Child,
    /// The gateway's socket.
    pub socket: PathBuf,
    log: PathBuf,
}

impl Served {
    /// Starts the gateway in `home` and waits until its socket accepts a connection; panics
    /// with its log if it exits first or does not start within a minute. A socket file left by
    /// an earlier gateway is removed first.
    pub fn start(home: &Path, serve: Serve<'_>) -> Served {
        let _ = std::fs::remove_file(&serve.socket);
        let child = Command::new(pincer_bin())
            .arg("--home")
            .arg(home)
            .args(serve.global)
            .args(["serve", "--socket"])
            .arg(&serve.socket)
            .arg("--plugins-dir")
            .arg(&serve.plugins_dir)
            .args(serve.args)
            .env_remove("PINCER_HOME")
            .env_remove("PINCER_LOG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&serve.log).unwrap())
            .spawn()
            .expect("pincer serve starts");
        let mut served = Served {
            child,
            socket: serve.socket,
            log: serve.log,
        };
        let start = Instant::now();
        while UnixStream::connect(&served.socket).is_err() {
            if let Some(status) = served.child.try_wait().unwrap() {
                panic!("pincer serve exited ({status}): {}", served.log());
            }
            assert!(
                start.elapsed() < PATIENCE,
                "the gateway did not start: {}",
                served.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        served
    }

    /// Everything the gateway has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (a minute at most) until the log holds `text` at least `count` times; panics with
    /// the log when it does not.
    pub fn wait_for_log(&self, text: &str, count: usize) {
        let seen = crate::wait_for(PATIENCE, || self.log().matches(text).count() >= count);
        assert!(
            seen,
            "the log never said {text:?} {count} time(s): {}",
            self.log()
        );
    }

    /// The file its log goes to.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The gateway's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A call, or the client's error when the gateway does not answer.
    pub fn try_call(
        &self,
        method: &str,
        session: Option<&str>,
        params: Value,
    ) -> Result<(u16, Value), ClientError> {
        try_call(&self.socket, method, session, params)
    }

    /// A call the gateway must answer: its HTTP-style status and answer.
    pub fn call(&self, method: &str, session: Option<&str>, params: Value) -> (u16, Value) {
        self.try_call(method, session, params)
            .expect("the gateway answers")
    }

    /// A call that must succeed; its answer.
    pub fn ok(&self, method: &str, session: &str, params: Value) -> Value {
        let (status, answer) = self.call(method, Some(session), params);
        assert_eq!(status, 200, "{method}: {answer}");
        assert_eq!(answer["ok"], true, "{method}: {answer}");
        answer
    }

    /// Waits at most `limit` for the process to end on its own.
    pub fn wait_for_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Sends `SIGTERM` and waits (a minute at most) for the process: its exit status and log.
    pub fn stop(mut self) -> (ExitStatus, String) {
        signal(self.child.id(), "TERM");
        let status = self.wait_for_exit(PATIENCE);
        let log = self.log();
        let status =
            status.unwrap_or_else(|| panic!("the gateway did not stop after SIGTERM: {log}"));
        (status, log)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends the signal `name` (`TERM`, `INT`) to `pid` with `kill`.
pub fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(status.success());
}

/// A call the gateway at `socket` must answer: its HTTP-style status and answer.
pub fn call(socket: &Path, method: &str, session: Option<&str>, params: Value) -> (u16, Value) {
    try_call(socket, method, session, params).expect("the gateway answers")
}

/// A call to the gateway at `socket`; a null `params` is sent as no params.
pub fn try_call(
    socket: &Path,
    method: &str,
    session: Option<&str>,
    params: Value,
) -> Result<(u16, Value), ClientError> {
    client::call(
        socket,
        &CallRequest {
            method: method.to_owned(),
            session: session.map(str::to_owned),
            params: Some(params).filter(|p| !p.is_null()),
        },
    )
}
