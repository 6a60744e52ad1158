//! Verified loading against real files: every bad input of the loader is refused with its own
//! error and a message that says what to do, and the test process (the host) survives each
//! one — a truncated library that reached `dlopen` would kill it with SIGBUS.

use std::path::Path;

use std::sync::Arc;

use pincer_host::testing::engines::services::{HostServices, NoRuntimeCompaction};
use pincer_host::testing::plugins::library::{EngineDirs, LoadError, Loader};
use pincer_host::EngineInstance;
use pincer_plugin_api::abi::latest::{AbortController, AssembleParams, HostParams, Message};
use pincer_plugin_api::abi::{ROption, RSlice, RStr};
use pincer_tests::*;
use serde_json::json;

fn load(
    dir: &Path,
    cache: &Path,
) -> Result<std::sync::Arc<pincer_host::testing::plugins::library::LoadedLibrary>, LoadError> {
    Loader::new(cache.to_owned()).load(dir)
}

fn expect_code(dir: &Path, code: &str) -> String {
    let cache = TempDir::new().unwrap();
    match load(dir, cache.path()) {
        Ok(_) => panic!("{} loaded but should be refused with {code}", dir.display()),
        Err(err) => {
            assert_eq!(err.code(), code, "unexpected error: {err}");
            let message = err.to_string();
            assert!(!message.contains('\n'), "one-line message: {message}");
            message
        }
    }
}

/// A copy of the staged `faulty` plugin in a temp folder, to break in some way.
fn faulty_copy(tmp: &TempDir) -> std::path::PathBuf {
    copy_plugin(&staged_plugin("faulty"), tmp.path(), "faulty")
}

#[test]
fn staged_sliding_window_loads_from_a_private_copy() {
    let cache = TempDir::new().unwrap();
    let lib = load(&staged_plugin("sliding-window"), cache.path()).expect("loads");
    assert_eq!(lib.facts().plugin_id, "sliding-window");
    assert_eq!(lib.facts().engine_ids, ["sliding-window"]);
    assert!(lib.facts().panic_unwind);
    assert!(
        lib.copy_path().starts_with(cache.path()),
        "opened from the cache, not the plugin folder"
    );
    // The staged file can be replaced afterwards without touching what is loaded.
    assert_eq!(
        lib.sha256(),
        read_manifest_json(&staged_plugin("sliding-window"))["sha256"]
    );
}

#[test]
fn missing_library_file() {
    let tmp = TempDir::new().unwrap();
    let dir = faulty_copy(&tmp);
    std::fs::remove_file(library_path(&dir)).unwrap();
    let message = expect_code(&dir, "library_missing");
    assert_eq!(
        message,
        format!(
            "library {} does not exist; build the plugin and package it with `pincer plugins pack`, or check \"library\" in the plugin's pincer.plugin.json",
            library_path(&dir).display()
        )
    );
}

fn replace_library(dir: &Path, bytes: &[u8]) {
    let lib = library_path(dir);
    std::fs::remove_file(&lib).unwrap();
    std::fs::write(&lib, bytes).unwrap();
    let mut manifest = read_manifest_json(dir);
    manifest.as_object_mut().unwrap().remove("sha256");
    write_manifest_json(dir, &manifest);
}

#[test]
fn empty_library_file() {
    let tmp = TempDir::new().unwrap();
    let dir = faulty_copy(&tmp);
    replace_library(&dir, &[]);
    expect_code(&dir, "library_empty");
}

#[test]
fn random_bytes() {
    let tmp = TempDir::new().unwrap();
    let dir = faulty_copy(&tmp);
    let mut state = 0x2545F4914F6CDD1Du64;
    let bytes: Vec<u8> = (0..600_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    replace_library(&dir, &bytes);
    expect_code(&dir, "library_not_a_library");
}

#[test]
fn library_truncated_inside_its_loadable_segments_is_refused_before_dlopen() {
    let original = std::fs::read(library_path(&staged_plugin("faulty"))).unwrap();
    for size in [100, 4_096, 65_536, original.len() / 4, original.len() / 2] {
        let tmp = TempDir::new().unwrap();
        let dir = faulty_copy(&tmp);
        replace_library(&dir, &original[..size]);
        let cache = TempDir::new().unwrap();
        let err = load(&dir, cache.path()).expect_err("truncated library must be refused");
        assert!(
            matches!(err.code(), "library_truncated" | "library_not_a_library"),
            "size {size}: {err}"
        );
    }
}

#[test]
fn a_real_shared_library_that_is_no_plugin() {
    let libm = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/lib64/libm.so.6",
    ]
    .into_iter()
    .map(Path::new)
    .find(|p| p.is_file());
    let Some(libm) = libm else {
        eprintln!("notice: skipping: no libm.so.6 on this machine");
        return;
    };
    let tmp = TempDir::new().unwrap();
    let dir = faulty_copy(&tmp);
    replace_library(&dir, &std::fs::read(libm).unwrap());
    let message = expect_code(&dir, "not_a_plugin");
    assert!(message.contains("export_engine!"), "{message}");
}

#[test]
fn plugin_built_against_another_api_major() {
    let message = expect_code(&staged_variant("future-api"), "api_major_mismatch");
    assert!(
        message.contains("2.0.0") && message.contains("rebuild"),
        "{message}"
    );
}

#[test]
fn panic_abort_build_is_refused_before_any_call() {
    let message = expect_code(&staged_variant("faulty-abort"), "panic_abort");
    assert!(message.contains("panic = \"abort\""), "{message}");
}

#[test]
fn manifest_problems() {
    type Breaker = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, Breaker, &str)> = vec![
        (
            "missing",
            Box::new(|d: &Path| std::fs::remove_file(d.join("pincer.plugin.json")).unwrap()),
            "manifest_missing",
        ),
        (
            "malformed",
            Box::new(|d: &Path| {
                std::fs::write(
                    d.join("pincer.plugin.json"),
                    "{ \"id\": \"faulty\",\n  \"version\": }",
                )
                .unwrap()
            }),
            "manifest_malformed",
        ),
        (
            "no id",
            Box::new(|d: &Path| {
                let mut m = read_manifest_json(d);
                m.as_object_mut().unwrap().remove("id");
                write_manifest_json(d, &m)
            }),
            "manifest_missing_field",
        ),
        (
            "wrong kind",
            Box::new(|d: &Path| {
                let mut m = read_manifest_json(d);
                m["kind"] = json!("memory");
                write_manifest_json(d, &m)
            }),
            "manifest_wrong_kind",
        ),
        (
            "version not semver",
            Box::new(|d: &Path| {
                let mut m = read_manifest_json(d);
                m["version"] = json!("one");
                write_manifest_json(d, &m)
            }),
            "manifest_invalid_version",
        ),
        (
            "id differs from the library's",
            Box::new(|d: &Path| {
                let mut m = read_manifest_json(d);
                m["id"] = json!("faulty-two");
                write_manifest_json(d, &m)
            }),
            "manifest_mismatch",
        ),
        (
            "version differs from the library's",
            Box::new(|d: &Path| {
                let mut m = read_manifest_json(d);
                m["version"] = json!("0.9.0");
                write_manifest_json(d, &m)
            }),
            "manifest_mismatch",
        ),
        (
            "api this host lacks",
            Box::new(|d: &Path| {
                let mut m = read_manifest_json(d);
                m["apiVersion"] = json!("^1.7");
                write_manifest_json(d, &m)
            }),
            "api_requirement",
        ),
    ];
    for (name, break_it, code) in cases {
        let tmp = TempDir::new().unwrap();
        let dir = faulty_copy(&tmp);
        break_it(&dir);
        let cache = TempDir::new().unwrap();
        let err = load(&dir, cache.path()).expect_err(name);
        assert_eq!(err.code(), code, "{name}: {err}");
    }
}

#[test]
fn malformed_manifest_names_line_and_column() {
    let tmp = TempDir::new().unwrap();
    let dir = faulty_copy(&tmp);
    std::fs::write(
        dir.join("pincer.plugin.json"),
        "{ \"id\": \"faulty\",\n  \"version\": }",
    )
    .unwrap();
    let message = expect_code(&dir, "manifest_malformed");
    assert!(
        message.contains("line 2, column 14"),
        "line and column are named: {message}"
    );
}

#[test]
fn library_escaping_the_plugin_folder() {
    for library in ["../libfaulty.so", "/usr/lib/libfaulty.so"] {
        let tmp = TempDir::new().unwrap();
        let dir = faulty_copy(&tmp);
        let mut m = read_manifest_json(&dir);
        m["library"] = json!(library);
        write_manifest_json(&dir, &m);
        let cache = TempDir::new().unwrap();
        let err = load(&dir, cache.path()).expect_err(library);
        assert_eq!(err.code(), "library_path_invalid", "{library}: {err}");
    }
    // A symlink inside the folder that leads outside it.
    let tmp = TempDir::new().unwrap();
    let dir = faulty_copy(&tmp);
    let lib = library_path(&dir);
    let outside = tmp.path().join("outside.so");
    std::fs::rename(&lib, &outside).unwrap();
    std::os::unix::fs::symlink(&outside, &lib).unwrap();
    expect_code(&dir, "library_outside_plugin_dir");
}

#[test]
fn sha256_mismatch() {
    let tmp = TempDir::new().unwrap();
    let dir = faulty_copy(&tmp);
    let mut m = read_manifest_json(&dir);
    m["sha256"] = json!("0".repeat(64));
    write_manifest_json(&dir, &m);
    let message = expect_code(&dir, "library_sha256_mismatch");
    assert!(message.contains("sha256"), "{message}");
}

#[test]
fn a_library_replaced_on_disk_after_loading_does_not_affect_the_loaded_engine() {
    let tmp = TempDir::new().unwrap();
    let dir = copy_plugin(
        &staged_plugin("sliding-window"),
        tmp.path(),
        "sliding-window",
    );
    let cache = TempDir::new().unwrap();
    let lib = load(&dir, cache.path()).expect("loads");
    // Overwrite the plugin folder's file in place (what would crash a host that mapped it).
    std::fs::write(library_path(&dir), b"garbage").unwrap();
    assert_eq!(std::fs::read(library_path(&dir)).unwrap(), b"garbage");
    // Only now make an engine and call into the library: the code that runs is the private
    // copy's, so the factory, `info` and `assemble` all answer.
    let engine = EngineInstance::from_library(
        &lib,
        "sliding-window",
        &json!({ "tokenBudget": 1_000_000 }),
        &EngineDirs::default(),
        HostServices::new("sliding-window", Arc::new(NoRuntimeCompaction), None).into_abi(),
        &pincer_host::config::ResultLimits::default(),
    )
    .expect("the factory runs from the private copy");
    assert_eq!(engine.descriptor().id, "sliding-window");
    let messages = vec![Message::user("first"), Message::assistant("second")];
    let abort = AbortController::new();
    let result = engine
        .assemble(&AssembleParams {
            session_id: RStr::from_str("s"),
            messages: RSlice::from_slice(&messages),
            entry_ids: RSlice::from_slice(&[]),
            token_budget: ROption::RNone,
            available_tools: RSlice::from_slice(&[]),
            citations_mode: ROption::RNone,
            model: ROption::RNone,
            host: HostParams {
                abort_signal: ROption::RSome(abort.signal()),
                ..HostParams::default()
            },
        })
        .expect("assemble answers from the private copy");
    let kept: Vec<&Message> = result.resolve(&messages);
    assert_eq!(kept, messages.iter().collect::<Vec<_>>());
}

#[test]
fn a_nonexistent_plugin_folder() {
    let cache = TempDir::new().unwrap();
    let err =
        load(Path::new("/nonexistent/pincer-plugin"), cache.path()).expect_err("nothing there");
    assert_eq!(err.code(), "manifest_missing", "{err}");
}

#[test]
fn a_library_with_another_abi_layout_is_refused_with_a_one_line_summary() {
    let message = expect_code(&staged_variant("bad-layout"), "layout_mismatch");
    assert!(
        message.contains("mismatched type: expected PluginModule, found BadLayoutModule"),
        "{message}"
    );
    assert!(
        message.len() < 400,
        "the 20 KB report is summarised: {message}"
    );
}
