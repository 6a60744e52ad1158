//! "Did you mean" through the real `pincer` binary on the staged plugins: a mistyped plugin id
//! (`plugins enable|disable|inspect`), engine id (`plugins select`), slot engine (`doctor`) or
//! `--engine` (`check-engine`) is answered with the nearest known id; an id close to none gets
//! no suggestion.

use std::process::Output;

use pincer_tests::*;

fn plugins_arg() -> String {
    staged_plugins_dir().display().to_string()
}

/// Everything the command printed, both streams.
fn printed(out: &Output) -> String {
    format!("{}{}", stdout_text(out), stderr_text(out))
}

#[test]
fn a_mistyped_plugin_id_is_answered_with_the_nearest_one() {
    let home = TempDir::new().unwrap();
    let plugins = plugins_arg();
    for command in ["enable", "disable", "inspect"] {
        let out = run_pincer(
            home.path(),
            &[
                "plugins",
                command,
                "sliding-windw",
                "--plugins-dir",
                &plugins,
            ],
        );
        assert_eq!(out.status.code(), Some(2), "{command}: {}", printed(&out));
        let err = stderr_text(&out);
        assert!(
            err.contains("no plugin \"sliding-windw\"")
                && err.contains("Did you mean \"sliding-window\"?"),
            "{command}: {err}"
        );
    }
    let out = run_pincer(
        home.path(),
        &["plugins", "enable", "nope", "--plugins-dir", &plugins],
    );
    assert_eq!(out.status.code(), Some(2), "{}", printed(&out));
    assert!(
        !stderr_text(&out).contains("Did you mean"),
        "{}",
        stderr_text(&out)
    );
}

#[test]
fn a_mistyped_engine_id_is_answered_with_the_nearest_one() {
    let home = TempDir::new().unwrap();
    let plugins = plugins_arg();
    let out = run_pincer(
        home.path(),
        &["plugins", "select", "fualty", "--plugins-dir", &plugins],
    );
    assert_eq!(out.status.code(), Some(2), "{}", printed(&out));
    let err = stderr_text(&out);
    assert!(
        err.contains("no plugin declares a context engine \"fualty\"")
            && err.contains("Did you mean \"faulty\"?"),
        "{err}"
    );

    let conversation = example_conversation().display().to_string();
    let out = run_pincer(
        home.path(),
        &[
            "check-engine",
            "--plugins-dir",
            &plugins,
            "--engine",
            "loseless",
            "--conversation",
            &conversation,
        ],
    );
    let text = printed(&out);
    assert!(
        text.contains("Context engine \"loseless\" is not registered")
            && text.contains("Did you mean \"lossless\"?"),
        "{text}"
    );
}

#[test]
fn a_mistyped_slot_engine_is_answered_with_the_nearest_one() {
    let home = TempDir::new().unwrap();
    std::fs::write(
        home.path().join("pincer.json"),
        r#"{ plugins: { slots: { contextEngine: "sliding_window" } } }"#,
    )
    .unwrap();
    let out = run_pincer(home.path(), &["doctor", "--plugins-dir", &plugins_arg()]);
    assert_eq!(out.status.code(), Some(1), "{}", printed(&out));
    let text = stdout_text(&out);
    assert!(
        text.contains("selected sliding_window -> legacy")
            && text.contains("Did you mean \"sliding-window\"?"),
        "{text}"
    );
}
