//! Real agent transcripts (τ-bench airline, MIT; read from `../shared/data`, never copied into
//! the repository) imported through the host's OpenAI-format reader and assembled by the loaded
//! `sliding-window` library under small budgets, through the guarded boundary. Checks what a
//! user would notice: no tool result without its call, no call without its results, kept
//! messages in order, a window that starts on a user turn, an honest token estimate, and the
//! transcript itself untouched.

use std::collections::HashSet;

use pincer_host::config::PincerHome;
use pincer_host::session::Transcript;
use pincer_host::{Runtime, RuntimeOptions};
use pincer_plugin_api::abi::ROption;
use pincer_plugin_api::tokens::estimate_message_tokens;
use pincer_plugin_api::Role;
use pincer_tests::*;
use serde_json::json;

#[test]
fn tau_bench_transcripts_keep_tool_pairs_and_budgets_through_the_loaded_engine() {
    let Some(data) = tau_bench_transcripts() else {
        return;
    };
    let tasks = data.as_array().expect("a list of tasks");
    assert!(tasks.len() >= 100, "the shared subset has 150 tasks");
    let home = TempDir::new().unwrap();
    std::fs::write(
        home.path().join("pincer.json"),
        json!({ "plugins": { "slots": { "contextEngine": "sliding-window" } } }).to_string(),
    )
    .unwrap();
    let mut options = RuntimeOptions::new(PincerHome::new(home.path().to_owned()));
    options.extra_plugin_dirs = vec![staged_plugins_dir()];
    let runtime = Runtime::open(options).unwrap();
    let resolved = runtime.resolve().unwrap();
    assert_eq!(resolved.resolution.resolved, "sliding-window");

    let mut windows = 0;
    let mut trimmed = 0;
    for task in tasks {
        let traj = &task["traj"];
        let transcript = Transcript::from_json(traj.clone()).expect("τ-bench transcripts import");
        let input = transcript.messages();
        assert_eq!(
            input.len(),
            traj.as_array().unwrap().len(),
            "every message imported"
        );
        let before = serde_json::to_string(input).unwrap();
        for budget in [200u64, 600, 2_000] {
            let view = transcript
                .assemble(&resolved.engine, "tau", Some(budget))
                .expect("assembled");
            assert_eq!(view.answer.answered_by, "sliding-window", "no fallback");
            let origins = view.origins();
            let kept: Vec<usize> = origins
                .iter()
                .map(|o| o.expect("references only"))
                .collect();
            assert!(kept.windows(2).all(|w| w[0] < w[1]), "in order");
            let tokens: u64 = kept
                .iter()
                .map(|&i| estimate_message_tokens(&input[i]))
                .sum();
            assert_eq!(
                view.result.estimated_tokens,
                ROption::RSome(tokens),
                "honest estimate"
            );
            // Tool pairing: every kept result's call is kept, every kept call's results are kept.
            let kept_set: HashSet<usize> = kept.iter().copied().collect();
            let kept_calls: HashSet<&str> = kept
                .iter()
                .flat_map(|&i| input[i].tool_call_ids())
                .collect();
            let kept_results: HashSet<&str> = kept
                .iter()
                .filter_map(|&i| input[i].tool_result_id())
                .collect();
            for id in &kept_results {
                assert!(kept_calls.contains(id), "a result without its call ({id})");
            }
            for (i, message) in input.iter().enumerate() {
                if kept_set.contains(&i) {
                    continue;
                }
                // A dropped result (a `toolResult` message) must not leave its call kept. Checked where the call id is
                // used once; reused ids are paired by position, which the engine's own tests cover.
                if let Some(id) = message.tool_result_id() {
                    let reused = input
                        .iter()
                        .filter(|m| m.tool_call_ids().any(|c| c == id))
                        .count()
                        > 1;
                    if !reused {
                        assert!(
                            !kept_calls.contains(id),
                            "a call whose result was dropped ({id})"
                        );
                    }
                }
            }
            // The window after the system prompt starts on a user turn when it was trimmed.
            let first_non_system = kept.iter().find(|&&i| input[i].role() != Role::System);
            if kept.len() < input.len() {
                trimmed += 1;
                if let Some(&i) = first_non_system {
                    if kept.iter().any(|&k| input[k].role() == Role::User) {
                        assert_eq!(input[i].role(), Role::User, "window starts on a user turn");
                    }
                }
            }
            windows += 1;
        }
        assert_eq!(
            serde_json::to_string(input).unwrap(),
            before,
            "the transcript is untouched"
        );
    }
    assert!(
        trimmed > windows / 2,
        "small budgets really trim ({trimmed} of {windows})"
    );
    runtime.shutdown();
}
