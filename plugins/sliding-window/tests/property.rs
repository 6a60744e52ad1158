//! Property-style test: thousands of deterministic pseudo-random transcripts (parallel calls,
//! results before calls, reused and duplicated ids, orphans, calls never answered, system and
//! custom messages mid-transcript), each selected under random budgets and options, must pass
//! every invariant in `common::check_window` and match the naive reference.

mod common;

use common::{calls, check_window, result, text};
use pincer_plugin_api::{Message, Role};
use sliding_window::{select_window, WindowOptions};

/// Knuth's MMIX linear congruential generator: deterministic, no dependency.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

fn transcript(rng: &mut Lcg) -> Vec<Message> {
    let mut messages = Vec::new();
    for _ in 0..rng.below(3) {
        messages.push(text(Role::System, rng.below(120)));
    }
    let events = rng.below(30);
    let mut orphan_ids = 0;
    for _ in 0..events {
        match rng.below(100) {
            0..=29 => messages.push(text(Role::User, rng.below(200))),
            30..=49 => messages.push(text(Role::Assistant, rng.below(200))),
            50..=84 => {
                // A tool round: 1-3 calls from a small id pool, so ids get reused (and now and
                // then duplicated within one message).
                let ids: Vec<String> = (0..1 + rng.below(3))
                    .map(|_| format!("c{}", rng.below(4)))
                    .collect();
                let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
                let mut results: Vec<Message> = Vec::new();
                for id in &ids {
                    // Some calls are never answered.
                    if !rng.chance(10) {
                        results.push(result(id, rng.below(300)));
                    }
                }
                // Shuffle the results.
                for i in (1..results.len()).rev() {
                    results.swap(i, rng.below(i + 1));
                }
                if !results.is_empty() && rng.chance(15) {
                    // A result recorded before its call.
                    messages.push(results.remove(0));
                    if rng.chance(50) {
                        messages.push(text(Role::User, rng.below(50)));
                    }
                }
                messages.push(calls(&id_refs));
                for res in results {
                    if rng.chance(10) {
                        messages.push(text(Role::Assistant, rng.below(50)));
                    }
                    messages.push(res);
                }
            }
            85..=89 => {
                orphan_ids += 1;
                messages.push(result(&format!("gone{orphan_ids}"), rng.below(100)));
            }
            90..=94 => messages.push(text(Role::System, rng.below(60))),
            _ => {
                let body = "x".repeat(rng.below(100));
                let custom = if rng.chance(30) {
                    // A custom message with blocks, one of them not text.
                    Message::from_value(serde_json::json!({
                        "role": "custom", "customType": "note", "display": true,
                        "content": [{"type": "text", "text": body}, {"type": "thinking", "thinking": "hmm"}],
                    }))
                    .expect("a custom message")
                } else {
                    Message::custom("note", body, true)
                };
                messages.push(custom);
            }
        }
    }
    messages
}

#[test]
fn random_transcripts_keep_every_invariant() {
    let mut rng = Lcg(0x5EED_CAFE);
    let mut over_budget = 0;
    let mut trimmed_to_user = 0;
    for case in 0..4000 {
        let messages = transcript(&mut rng);
        let budget = if rng.chance(15) {
            None
        } else {
            Some(rng.below(400) as u64)
        };
        let options = WindowOptions {
            min_messages: rng.below(4),
            keep_system: !rng.chance(20),
        };
        let window = select_window(&messages, budget, &options);
        let label = format!("case {case} (budget {budget:?}, {options:?})");
        check_window(&label, &messages, budget, &options, &window);
        over_budget += usize::from(window.over_budget);
        let first_body = window
            .indices()
            .find(|&i| messages[i].role() != Role::System);
        trimmed_to_user +=
            usize::from(first_body.is_some_and(|i| i > 0 && messages[i].role() == Role::User));
    }
    // The generator exercises the interesting paths.
    assert!(over_budget > 50, "only {over_budget} forced windows");
    assert!(trimmed_to_user > 500, "only {trimmed_to_user} user starts");
}
