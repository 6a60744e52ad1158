//! The demo's gateway act: `pincer serve` holding sessions while clients call it without
//! pause, a new build of the `faulty` engine dropped into its plugin folder twice (the staged
//! library with a different trailer, so its content hash changes, and its manifest's sha256
//! updated), each picked up by the file watcher and hot-reloaded under traffic — the
//! generation advancing, no call failing, each replaced instance disposed once — then a
//! broken (truncated) build refused while the last good one keeps serving, and SIGTERM.

use std::fs;
use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

/// One call over the socket; the answer, or why there was none.
fn call(socket: &Path, body: &Value) -> Result<Value> {
    let body = body.to_string();
    let mut stream = UnixStream::connect(socket)?;
    write!(
        stream,
        "POST /v1/call HTTP/1.1\r\nHost: pincer\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let (_, body) = text.split_once("\r\n\r\n").context("no HTTP answer")?;
    Ok(serde_json::from_str(body)?)
}

fn generation(socket: &Path) -> Result<u64> {
    let health = call(socket, &json!({"method": "health"}))?;
    health["result"]["engines"]
        .as_array()
        .and_then(|engines| engines.iter().find(|e| e["engineId"] == "faulty"))
        .and_then(|e| e["generation"].as_u64())
        .context("faulty is not in health")
}

/// Drops a new build of the library into `dir` (renamed over the old file).
fn new_build(dir: &Path, original: &[u8], trailer: &str, truncate: bool) -> Result<()> {
    let mut bytes = original.to_vec();
    bytes.extend_from_slice(trailer.as_bytes());
    if truncate {
        bytes.truncate(bytes.len() / 2);
    }
    let tmp = dir.join(".new-build");
    fs::write(&tmp, &bytes)?;
    fs::rename(&tmp, dir.join("libfaulty.so"))?;
    let manifest_path = dir.join("pincer.plugin.json");
    let mut manifest: Value = serde_json::from_str(&fs::read_to_string(&manifest_path)?)?;
    manifest["sha256"] = json!(format!("{:x}", Sha256::digest(&bytes)));
    fs::write(&manifest_path, serde_json::to_string_pretty(&manifest)?)?;
    Ok(())
}

pub(crate) fn run(pincer: &Path, staged_plugins: &Path, target: &Path) -> Result<()> {
    let home = target.join("demo-gateway");
    if home.exists() {
        fs::remove_dir_all(&home)?;
    }
    let plugin = home.join("plugins/faulty");
    fs::create_dir_all(&plugin)?;
    for name in ["pincer.plugin.json", "libfaulty.so"] {
        fs::copy(staged_plugins.join("faulty").join(name), plugin.join(name))
            .with_context(|| format!("copying the staged faulty plugin's {name}"))?;
    }
    let original = fs::read(plugin.join("libfaulty.so"))?;
    let dispose_log = home.join("disposed.log");
    fs::write(
        home.join("pincer.json"),
        json!({"plugins": {
            "slots": {"contextEngine": "faulty"},
            "entries": {"faulty": {"config": {"disposeLog": dispose_log}}},
        }})
        .to_string(),
    )?;
    let socket = home.join("gw.sock");
    let args: Vec<String> = vec![
        "--home".into(),
        home.display().to_string(),
        "serve".into(),
        "--socket".into(),
        socket.display().to_string(),
        "--plugins-dir".into(),
        home.join("plugins").display().to_string(),
    ];
    println!("$ pincer {}", args.join(" "));
    let mut child = Command::new(pincer)
        .args(&args)
        .stdout(Stdio::null())
        .spawn()
        .context("starting pincer serve")?;
    let start = Instant::now();
    while UnixStream::connect(&socket).is_err() {
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            bail!("pincer serve did not start");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..3)
        .map(|c| {
            let socket: PathBuf = socket.clone();
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let (mut ok, mut failed, mut generations) = (0u64, 0u64, Vec::new());
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let body = if n % 2 == 0 {
                        json!({"method": "ingest", "session": format!("demo-{c}"),
                               "params": {"message": {"role": "user", "content": format!("message {n}")}}})
                    } else {
                        json!({"method": "assemble", "session": format!("demo-{c}")})
                    };
                    match call(&socket, &body) {
                        Ok(answer) if answer["ok"] == true => {
                            ok += 1;
                            let g = answer["generation"].as_u64().unwrap_or(0);
                            if generations.last() != Some(&g) {
                                generations.push(g);
                            }
                        }
                        _ => failed += 1,
                    }
                }
                (ok, failed, generations)
            })
        })
        .collect();
    let mut outcome = Ok(());
    println!(
        "3 clients call assemble/ingest without pause; generation {}",
        generation(&socket)?
    );
    for k in 1..=2u64 {
        std::thread::sleep(Duration::from_millis(300));
        println!(
            "-- a new build of faulty is dropped into {} --",
            plugin.display()
        );
        new_build(&plugin, &original, &format!("demo build {k}"), false)?;
        let start = Instant::now();
        while generation(&socket)? != k + 1 {
            if start.elapsed() > Duration::from_secs(30) {
                outcome = Err(anyhow::anyhow!("generation {} never served", k + 1));
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        println!(
            "generation {} serving, {} ms after the files changed",
            k + 1,
            start.elapsed().as_millis()
        );
    }
    println!("-- a broken (truncated) build is dropped in: refused, generation 3 keeps serving --");
    new_build(&plugin, &original, "demo broken build", true)?;
    std::thread::sleep(Duration::from_millis(500));
    println!("generation {} serving", generation(&socket)?);
    stop.store(true, Ordering::Relaxed);
    let (mut ok, mut failed) = (0, 0);
    for (c, client) in clients.into_iter().enumerate() {
        let (o, f, generations) = client.join().expect("a client thread");
        ok += o;
        failed += f;
        println!(
            "client {c}: {o} calls answered, {f} failed, generations in order: {generations:?}"
        );
    }
    let health = call(&socket, &json!({"method": "health"}))?;
    println!("health: {}", health["result"]["engines"]);
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait()?;
    println!("pincer serve stopped ({status}); dispose log (one line per disposed instance):");
    print!("{}", fs::read_to_string(&dispose_log).unwrap_or_default());
    if failed > 0 || ok == 0 {
        bail!("{failed} calls failed during the reloads");
    }
    outcome
}
